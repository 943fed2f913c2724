"""``signoff demo`` is sealed: the ``SIGNOFF_*`` variables of a real machine never reach it.

A production home with a queued event, and every variable an operator exports
pointing at it (on the backend runs, the test's PostgreSQL database and its Redis or
PostgreSQL queue too): the demo runs to its end in a home of its own and leaves the
production home's files, rows and queue exactly as they were.
"""

import json
import subprocess

import pytest

from helpers import child_env, make_event, signoff_cmd, state_tables
from signoff.app import Signoff


def production(home):
    """A home bound as monitor ``reviews`` with one event queued and no worker running."""
    with Signoff.init(home) as rt:
        host = rt.host()
        host.put_record("comment-1", document="doc-demo", text="a real comment")
        host.put_material("doc-demo", "2026-11-01")
        rt.bind("doc-demo", "reviews", window_s=86_400)
        [line] = rt.enqueue_events([make_event(event_id="prod-1")], "reviews")
        assert line.accepted


def snapshot(home, backend):
    """Everything the home holds: its files' bytes, and its server database's rows and
    Redis queue's keys when the test runs on them."""
    files = {p.name: p.read_bytes() for p in sorted(home.iterdir()) if p.is_file()}
    rows = keys = None
    if backend is not None:
        with Signoff(home) as rt:
            rows = state_tables(rt) if backend.database_url else None
        if backend.queue_url and backend.queue_url.startswith("redis"):
            import redis
            client = redis.Redis.from_url(backend.queue_url)
            keys = {k: client.dump(k) for k in client.scan_iter(match=f"*{backend.queue_name}*")}
    return files, rows, keys


# Beside SIGNOFF_HOME and, on the backend runs, the backends' variables (the backend
# fixture exports them): option variables that would give the demo this home as its
# folder, or steer its commands into this home's monitor.
OPTION_VARIABLES = {"SIGNOFF_DEMO_KEEP": "{home}", "SIGNOFF_MONITOR_BIND_MONITOR_ID": "reviews",
                    "SIGNOFF_ENQUEUE_MONITOR_ID": "reviews", "SIGNOFF_WORKER_WORKERS": "1"}


@pytest.mark.parametrize("options", [False, True], ids=["backends", "options-too"])
def test_the_demo_never_reaches_the_configured_home_database_or_queue(home, backend, tmp_path,
                                                                      options):
    production(home)
    before = snapshot(home, backend)
    files, rows, keys = before
    assert "signoff.toml" in files and (rows is None or rows["delivery"])
    assert keys is None or keys  # the event's wake-up, waiting in Redis
    variables = {k: v.format(home=home) for k, v in OPTION_VARIABLES.items()} if options else {}
    env = child_env(SIGNOFF_HOME=str(home), TMPDIR=str(tmp_path), **variables)
    done = subprocess.run(signoff_cmd(home, "demo", "--json"), env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True
    assert not report["home"].startswith(str(home)) and report["home"].startswith(str(tmp_path))

    assert snapshot(home, backend) == before
    with Signoff(home) as rt:
        assert [(e["event_id"], e["status"]) for e in rt.events()] == [("prod-1", "queued")]
        assert [m["id"] for m in rt.monitors()] == ["reviews"]
