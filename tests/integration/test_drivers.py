"""The ``signoff`` command imports a server driver only when its home needs one."""

import json
import subprocess
import sys

import pytest

from helpers import AS_CONSOLE_SCRIPT, child_env, signoff_cmd

# Runs the command, then names the drivers it imported and whether Peewee and Huey
# hold them (for a plug-in of the user's).
COMMAND = AS_CONSOLE_SCRIPT + """
imported = sorted(m for m in ("psycopg", "redis") if m in sys.modules)
import peewee, huey.storage
seen = {"imported": imported, "peewee": peewee.psycopg is not None,
        "huey": [huey.storage.psycopg is not None, huey.storage.Redis is not None]}
import psycopg, redis  # nothing stays held back once the libraries are imported
print(json.dumps(seen))
"""


def run_command(home, *args):
    """What the command imported, from a child process running it on ``home``."""
    argv = [sys.executable, "-c", COMMAND, *signoff_cmd(home, *args)[3:]]
    done = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_command_imports_only_the_drivers_its_home_uses(home, backend):
    subprocess.run(signoff_cmd(home, "init"), env=child_env(), check=True, timeout=120,
                   capture_output=True)
    seen = run_command(home, "stats")
    needs = set()
    if backend is not None and backend.database_url:
        needs.add("psycopg")
    if backend is not None and (backend.queue_url or "").startswith("postgresql"):
        needs.add("psycopg")
    if backend is not None and (backend.queue_url or "").startswith("redis"):
        needs.add("redis")
    assert set(seen["imported"]) == needs
    assert seen["peewee"] == ("psycopg" in needs)  # a loaded driver is in Peewee's hands


@pytest.mark.backend_independent
def test_a_foreign_plug_in_finds_both_drivers_in_peewee_and_huey(tmp_path):
    home = tmp_path / "home"
    subprocess.run(signoff_cmd(home, "init"), env=child_env(), check=True, timeout=120,
                   capture_output=True)
    config = home / "signoff.toml"
    config.write_text(config.read_text().replace('"signoff.hosts.reference:ReferenceHost"',
                                                 '"testhosts:RecordingHost"'))
    seen = run_command(home, "monitor", "bind", "--document", "doc-demo")  # asks the host
    assert seen == {"imported": ["psycopg", "redis"], "peewee": True, "huey": [True, True]}


@pytest.mark.backend_independent
def test_a_program_that_runs_the_command_line_itself_keeps_its_imports(tmp_path):
    home = tmp_path / "home"
    subprocess.run(signoff_cmd(home, "init"), env=child_env(), check=True, timeout=120,
                   capture_output=True)
    script = f"""
import sys
from signoff.cli import main
try:
    main(["--home", {str(home)!r}, "stats"])
except SystemExit as exc:
    assert not exc.code, exc.code
import peewee, huey.storage
assert peewee.psycopg is not None and huey.storage.Redis is not None
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr
