"""A server URL without its extra installed: ``missing_extra`` naming the extra, every command.

The CLI runs in a child process whose interpreter cannot import ``psycopg`` or
``redis``: a ``sitecustomize`` on its ``PYTHONPATH`` puts an import blocker in
front of every finder, as when the package was installed without the extra.
Nothing here reaches a server: the refusal comes before any connection.
"""

import json
import subprocess

import pytest

from helpers import child_env, signoff_cmd
from signoff.config import DEFAULT_TOML

pytestmark = pytest.mark.backend_independent

BLOCKER = '''
import os
import sys

BLOCKED = set(filter(None, os.environ.get("SIGNOFF_TEST_BLOCKED", "").split(",")))


class Blocker:
    """Refuses the blocked top-level modules, as if they were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Blocker())
'''

POSTGRES = "postgresql://signoff@127.0.0.1:5432/signoff"
REDIS = "redis://127.0.0.1:6379/0"
SETUPS = {  # name: (state url, queue url, modules blocked, the extras to install)
    "postgres-redis": (POSTGRES, REDIS, "psycopg,redis", "signoff[postgres,redis]"),
    "postgres-postgres": (POSTGRES, POSTGRES, "psycopg", "signoff[postgres]"),
    "sqlite-redis": ("", REDIS, "redis", "signoff[redis]"),
    "sqlite-postgres": ("", POSTGRES, "psycopg", "signoff[postgres]"),
}
COMMANDS = {
    "init": ["init"],
    "worker": ["worker", "--drain"],
    "enqueue": ["enqueue", "-"],
    "stats": ["stats"],
    "serve": ["serve", "--port", "0"],
    "monitor-bind": ["monitor", "bind", "--document", "doc-demo"],
    "tasks": ["tasks", "list"],
    "approve": ["approve", "0123456789abcdef", "--digest", "d"],
    "purge": ["purge", "--dry-run"],
}


def run_without_extras(tmp_path, setup, *args):
    state, queue, blocked, _ = SETUPS[setup]
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    home = tmp_path / "home"
    if args[0] != "init":  # a home whose init ran where the extras were installed
        home.mkdir(exist_ok=True)
        (home / "signoff.toml").write_text(DEFAULT_TOML, encoding="utf-8")
    env = child_env(SIGNOFF_DATABASE_URL=state, SIGNOFF_QUEUE_URL=queue,
                    SIGNOFF_TEST_BLOCKED=blocked)
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    return subprocess.run(signoff_cmd(home, *args, "--json"), env=env, input=b"",
                          capture_output=True, timeout=60)


def test_the_blocker_works(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    env = child_env(SIGNOFF_TEST_BLOCKED="redis")
    env["PYTHONPATH"] = f"{site}:{env['PYTHONPATH']}"
    done = subprocess.run(["python", "-c", "import redis"], env=env, capture_output=True,
                          timeout=60)
    assert done.returncode == 1 and b"No module named 'redis'" in done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_names_both_missing_extras(tmp_path, command):
    assert_missing_extra(tmp_path, "postgres-redis", COMMANDS[command])


@pytest.mark.parametrize("setup", ["postgres-postgres", "sqlite-redis", "sqlite-postgres"])
@pytest.mark.parametrize("command", ["init", "worker"])
def test_the_state_and_the_queue_each_name_their_missing_extra(tmp_path, setup, command):
    assert_missing_extra(tmp_path, setup, COMMANDS[command])


def assert_missing_extra(tmp_path, setup, args):
    done = run_without_extras(tmp_path, setup, *args)
    assert done.returncode == 1, (done.stdout, done.stderr)
    answer = json.loads(done.stdout)
    assert answer["error"] == "missing_extra", answer
    assert f"pip install '{SETUPS[setup][3]}'" in answer["message"], answer
    assert b"Traceback" not in done.stderr
