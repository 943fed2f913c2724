"""The package keeps its layer map and has no import cycle (pyproject.toml's import-linter
contracts, which CI also runs as ``lint-imports``)."""

import subprocess
import sys

import pytest
from helpers import ROOT

pytestmark = pytest.mark.backend_independent


def test_the_layers_and_the_absence_of_cycles_hold():
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import "
                           "lint_imports_command as lint; sys.exit(lint())"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in done.stdout
