"""A ``signoff`` command imports what it runs, not what the other commands need.

Each command's process pays for every module it imports before it does anything
(docs/performance.md, "Start-up"), so these check a real child process's
``sys.modules``: a gain that an eager import would silently undo fails here.
"""

import json
import subprocess
import sys

import pytest

from helpers import AS_CONSOLE_SCRIPT, child_env, signoff_cmd

from signoff.cli import main

# Runs the command, then names the modules it imported.
COMMAND = AS_CONSOLE_SCRIPT + """
print(json.dumps(sorted(sys.modules)))
"""

COMMAND_MODULES = {f"signoff.commands.{name}" for name in (
    "auditing", "events", "monitors", "serving", "setup", "tasks", "watching", "watch")}
# What serve, the worker, signing and tracing need, and a listing does not.
HEAVY = {"cryptography", "starlette", "uvicorn", "opentelemetry.sdk", "smtplib", "rich", "mcp",
         "signoff.chores.notify", "signoff.serve", "signoff.worker"}


def imported(home, *args):
    """The modules a child process running ``signoff --home HOME ARGS`` imported."""
    argv = [sys.executable, "-c", COMMAND, *signoff_cmd(home, *args)[3:]]
    env = {k: v for k, v in child_env().items() if not k.startswith("OTEL_")}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def imported_by(modules):
    """What a child process that imports ``modules`` alone holds in ``sys.modules``."""
    script = f"import json, sys\nimport {', '.join(modules)}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True,
                          text=True, timeout=120, check=True)
    return set(json.loads(done.stdout))


def test_stats_imports_its_own_command_module_and_nothing_heavy(home):
    subprocess.run(signoff_cmd(home, "init"), env=child_env(), check=True, timeout=120,
                   capture_output=True)
    seen = imported(home, "stats", "--json")
    assert "signoff.app" in seen and "signoff.commands.watching" in seen  # it did run
    assert seen & (COMMAND_MODULES - {"signoff.commands.watching"}) == set()
    # A driver the home uses brings what it imports itself (redis: cryptography and
    # OpenTelemetry's SDK); test_drivers.py checks only the home's drivers load.
    drivers = sorted(seen & {"psycopg", "redis"})
    theirs = imported_by(drivers) if drivers else set()
    assert (seen - theirs) & HEAVY == set()


@pytest.mark.backend_independent
def test_help_lists_every_command_and_imports_none(tmp_path):
    seen = imported(tmp_path / "home", "--help")
    assert seen & (COMMAND_MODULES | HEAVY | {"signoff.app", "peewee", "huey"}) == set()
    shown = subprocess.run(signoff_cmd(tmp_path / "home", "--help"), env=child_env(),
                           capture_output=True, text=True, timeout=120, check=True).stdout
    listed = shown.split("Commands:", 1)[1].split()
    assert [name for name in main.lazy_commands if name not in listed] == []


@pytest.mark.backend_independent
def test_the_root_groups_short_help_is_each_commands_own():
    ctx = main.make_context("signoff", ["--help"], resilient_parsing=True)
    for name, (_, short) in main.lazy_commands.items():
        assert main.get_command(ctx, name).get_short_help_str(limit=1000) == short, name
