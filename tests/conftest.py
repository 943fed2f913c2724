"""Shared fixtures: a fresh home per test, with a fake clock and the reference host."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from signoff.app import Signoff
from signoff.clock import FakeClock

T0 = 1_000_000
ROOT = Path(__file__).resolve().parent.parent
PLUGINS = Path(__file__).resolve().parent / "plugins"


def make_event(**changes):
    """A matching event for the default fixture record, at the fake clock's start."""
    event = {"event_id": "evt-1", "name": "comment.created", "document": "doc-demo",
             "record_id": "comment-1", "occurred": T0, "text": "wake only"}
    event.update(changes)
    return event


@pytest.fixture
def clock():
    return FakeClock(T0)


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


@pytest.fixture
def rt(home, clock):
    """An initialised home with one open record, its material and a bound monitor."""
    app = Signoff.init(home, clock=clock)
    host = app.host()
    host.put_record("comment-1", document="doc-demo", text="please add the demo date")
    host.put_material("doc-demo", "2026-11-01")
    app.bind("doc-demo")
    yield app
    app.database.close()


@pytest.fixture
def host(rt):
    return rt.host()


def signoff_cmd(home, *args):
    """The argv that runs the signoff CLI on ``home`` in a child process."""
    return [sys.executable, "-m", "signoff", "--home", str(home), *args]


def child_env(**extra):
    """Environment for child processes: the test plug-ins importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), str(ROOT),
                                                      env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def wait_for(predicate, timeout=20.0, interval=0.05, what="condition"):
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def start_worker(home, *args, env=None):
    """Start ``signoff worker`` as a real child process."""
    return subprocess.Popen(signoff_cmd(home, "worker", *args), env=env or child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
