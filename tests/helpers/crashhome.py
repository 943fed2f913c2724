"""A real home on disk for the crash tests: real worker processes, killed and restarted.

Leases are 1 s and backoff is short, so each crash test takes seconds.
"""

import signal
import subprocess
import time

from helpers import child_env, signoff_cmd, read_here
from signoff.app import Signoff
from signoff.models import Task

LEASE = "1"
DRAIN_TIMEOUT = 30


def write_config(home, base_delay_s=0.05, max_delay_s=0.2, lease_ttl_s=1.0,
                 factory="testhosts:RecordingHost", host_options="", read_attempts=5):
    home.mkdir(parents=True, exist_ok=True)
    (home / "signoff.toml").write_text(
        f'[host]\nfactory = "{factory}"\n[host.options]\n{host_options}\n'
        f"[retry]\nbase_delay_s = {base_delay_s}\nmax_delay_s = {max_delay_s}\n"
        f"read_attempts = {read_attempts}\n"
        f"[worker]\nlease_ttl_s = {lease_ttl_s}\nbatch_size = 50\n", encoding="utf-8")


class Home:
    """A real home on disk, opened in this process for setup, approval and checks."""

    def __init__(self, path, records=1, **config):
        write_config(path, **config)
        self.path = path
        self.rt = Signoff.init(path)
        read_here(self.rt)
        self.host = self.rt.host()
        for n in range(records):
            self.host.put_record(f"comment-{n}", document="doc-demo", text="add the date")
        self.host.put_material("doc-demo", "2026-11-01")
        self.rt.bind("doc-demo", window_s=600)
        self.procs = []
        self.logs = []

    def event(self, n=0, event_id=None):
        return {"event_id": event_id or f"evt-{n}", "name": "comment.created",
                "document": "doc-demo", "record_id": f"comment-{n}",
                "occurred": int(time.time()), "text": "never stored"}

    def enqueue(self, events):
        lines = self.rt.enqueue_events(events)
        assert all(line.accepted for line in lines), lines
        return [line.delivery for line in lines]

    def worker(self, *args, lease=LEASE):
        """Start a real worker process; its stderr goes to a file we can read."""
        log = self.path.parent / f"worker-{len(self.procs)}.log"
        out = open(log, "wb")
        proc = subprocess.Popen(signoff_cmd(self.path, "worker", "--lease-ttl", lease, *args),
                                env=child_env(), stdout=subprocess.DEVNULL, stderr=out)
        out.close()
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def drain(self, workers="2"):
        """Run ``worker --drain`` to the end; it must exit 0."""
        proc = self.worker("--drain", "--workers", workers)
        assert proc.wait(timeout=DRAIN_TIMEOUT) == 0, self.stderr()
        return proc

    def drain_through_crashes(self, limit=10):
        """Run ``worker --drain`` again each time it is SIGKILLed; returns the kills."""
        for kills in range(limit):
            code = self.worker("--drain").wait(timeout=DRAIN_TIMEOUT)
            if code == 0:
                return kills
            assert code == -signal.SIGKILL, self.stderr()
        raise AssertionError(f"still dying after {limit} restarts")

    def stderr(self):
        return "\n".join(log.read_text(errors="replace") for log in self.logs)

    def approve_all(self):
        keys = []
        for task in list(Task.select().where(Task.status == "ready")):
            assert self.rt.approve(task.key, task.digest)["status"] == "approved"
            keys.append(task.key)
        return keys

    def close(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=60)
        self.host.close()
        self.rt.close()


def assert_exactly_one_result(h, key):
    task = Task.get_by_id(key)
    assert task.status == "done", (task.status, task.code)
    results = h.host.results()
    assert [r["key"] for r in results] == [key]
    assert results[0]["result"] == task.result
    assert h.host.write_counts() == {key: 1}
    assert "database is locked" not in h.stderr()
    assert "Traceback" not in h.stderr(), h.stderr()
