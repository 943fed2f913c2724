"""The worker process as an operator runs it: signals, drain, watch, bad plug-ins."""

import json
import os
import select
import signal
import subprocess
import time

import pytest

from helpers import child_env, signoff_cmd, start_worker, wait_for
from signoff.app import Signoff


@pytest.fixture
def live_home(tmp_path):
    """A real home (real clock) with one ready task approved, for worker processes."""
    home = tmp_path / "home"
    rt = Signoff.init(home)
    host = rt.host()
    host.put_record("comment-1", document="doc-demo")
    host.put_material("doc-demo", "2026-11-01")
    rt.bind("doc-demo")
    rt.enqueue_events([{"event_id": "evt-1", "name": "comment.created", "document": "doc-demo",
                        "record_id": "comment-1", "occurred": int(time.time())}])
    rt.run_until_idle()
    yield home, rt
    rt.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_worker_gracefully(live_home, signum):
    home, _ = live_home
    proc = start_worker(home, "--workers", "2")
    try:
        log = _StderrReader(proc)
        wait_for(lambda: b"worker started" in log.read(), what="worker start")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        err = log.seen + err
    finally:
        proc.kill()
    assert proc.returncode == 0, err.decode()
    assert f"stopped ({signal.Signals(signum).name})".encode() in err
    assert b"Traceback" not in err


# The stop lands the moment Huey's consumer has started, after Huey put in its own
# handlers (which only note a signal for Huey's run loop, one the worker does not
# use) and before the worker's first beat: a supervisor stopping a worker it has
# just started.
STOP_AS_THE_CONSUMER_STARTS = """
import os, sys
from huey.consumer import Consumer
from signoff.__main__ import main

started, signum = Consumer.start, int(sys.argv.pop())

def start_then_stop(self):
    started(self)
    os.kill(os.getpid(), signum)

Consumer.start = start_then_stop
main()
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_asked_as_the_consumer_starts_is_not_lost(live_home, signum):
    home, _ = live_home
    argv = signoff_cmd(home, "worker", "--json")
    done = subprocess.run([argv[0], "-c", STOP_AS_THE_CONSUMER_STARTS, *argv[3:], str(signum)],
                          env=child_env(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert json.loads(done.stdout)["stopped"] == signal.Signals(signum).name


def test_drain_is_not_held_by_a_parked_task(live_home):
    home, rt = live_home
    key = rt.tasks()[0]["key"]
    rt.approve(key, rt.task(key)["digest"])
    # The grant loses submit_review: the gate parks the task at submit time.
    rt.host().put_grant(actions=["read", "draft"])
    # A drain held by the parked task would never exit: the timeout would fail the test.
    done = subprocess.run(signoff_cmd(home, "worker", "--drain", "--json"), env=child_env(),
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["stopped"] == "drained"
    task = rt.task(key)
    assert (task["status"], task["parked"]) == ("approved", True)
    assert task["code"] == "scope_changed"
    assert rt.host().results() == []
    # Restoring the grant does not change the monitor's digest back by itself:
    # a retry after the cause is fixed submits it.
    rt.host().put_grant(actions=["read", "draft", "submit_review"])
    rt.retry(key)
    done = subprocess.run(signoff_cmd(home, "worker", "--drain"), env=child_env(),
                          capture_output=True, timeout=30)
    assert done.returncode == 0
    assert rt.task(key)["status"] == "done"
    assert len(rt.host().results()) == 1


def test_a_worker_whose_host_plugin_does_not_import_refuses_to_start(live_home):
    home, _ = live_home
    config = home / "signoff.toml"
    config.write_text(config.read_text().replace(
        "signoff.hosts.reference:ReferenceHost", "no_such_module:Host"))
    done = subprocess.run(signoff_cmd(home, "worker", "--json"), env=child_env(),
                          capture_output=True, timeout=30)
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"] == "plugin_import"
    assert b"Traceback" not in done.stderr


def test_watch_json_prints_snapshots_until_interrupted(live_home):
    home, rt = live_home
    proc = subprocess.Popen(signoff_cmd(home, "watch", "--json", "--interval", "0.2"),
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = json.loads(proc.stdout.readline())
        rt.reject(rt.tasks()[0]["key"])
        # A later snapshot shows the change: watch keeps reading the rows.
        later = first
        while later["tasks"] != {"rejected": 1}:
            line = proc.stdout.readline()
            assert line, "watch stopped printing"
            later = json.loads(line)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert first["tasks"] == {"ready": 1}
    assert set(first) >= {"deliveries", "tasks", "in_flight", "retries_waiting", "uncertain",
                          "dead_letters", "stale_event_gaps"}


class _StderrReader:
    """What a child has written to stderr so far, read without waiting for EOF."""

    def __init__(self, proc):
        self.proc, self.seen = proc, b""

    def read(self):
        ready, _, _ = select.select([self.proc.stderr], [], [], 0)
        if ready:
            self.seen += os.read(self.proc.stderr.fileno(), 65536)
        return self.seen


def test_debug_logs_name_each_statement_but_never_a_stored_value(home):
    text = "record text that belongs to no log line 7f3c"
    with Signoff.init(home) as rt:
        host = rt.host()
        host.put_record("comment-1", document="doc-demo", text=text)
        host.put_material("doc-demo", "2026-11-01")
        rt.bind("doc-demo")
        rt.enqueue_events([{"event_id": "evt-1", "name": "comment.created",
                            "document": "doc-demo", "record_id": "comment-1",
                            "occurred": int(time.time())}])
    logs = []
    for step in ("ingest", "submit"):
        done = subprocess.run(signoff_cmd(home, "--log-level", "debug", "worker", "--drain"),
                              env=child_env(), capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        logs.append(done.stderr.decode(errors="replace"))
        if step == "ingest":
            with Signoff(home) as rt:
                [task] = rt.tasks()
                assert rt.task(task["key"])["record"]["text"] == text  # stored: it was written
                rt.approve(task["key"], task["digest"])
    with Signoff(home) as rt:
        assert [t["status"] for t in rt.tasks()] == ["done"]
    for log in logs:
        assert " peewee DEBUG " in log and ' "task" ' in log  # statements are logged
        assert text not in log
