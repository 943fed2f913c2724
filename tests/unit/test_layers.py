"""The package keeps its layer map and has no import cycle (pyproject.toml's import-linter
contracts, which CI also runs as ``lint-imports``)."""

import pkgutil
import subprocess
import sys
import tomllib

import pytest
from helpers import ROOT

import signoff

pytestmark = pytest.mark.backend_independent


def test_the_layers_and_the_absence_of_cycles_hold():
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import "
                           "lint_imports_command as lint; sys.exit(lint())"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in done.stdout


def test_every_module_of_the_package_has_its_place_in_the_map():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [layers] = [c["layers"] for c in config["tool"]["importlinter"]["contracts"]
                if c["type"] == "layers"]
    placed = {name.strip() for layer in layers for name in layer.split("|")}
    assert {m.name for m in pkgutil.iter_modules(signoff.__path__)} == placed
