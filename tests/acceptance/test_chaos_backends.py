"""Chaos on PostgreSQL with a Redis or PostgreSQL queue: three worker processes
killed at random, every database connection terminated twice and the queue's
waiting wake-ups lost once.

Runs only under the backend switch with a PostgreSQL database and a Redis or
PostgreSQL queue: ``SIGNOFF_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test
SIGNOFF_TEST_QUEUE_URL=redis://127.0.0.1:6379/0 pytest -m slow tests/acceptance/test_chaos_backends.py``
(or the PostgreSQL URL for both). The faults are set off by the run's progress,
not by the clock, and each counts only once it hit something, so a loaded machine
gets all of them too. Nothing may be lost and nothing written twice; the figures
are printed in the run's summary.
"""

import contextlib
import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

from helpers import read_here, seed_records, wait_for
from signoff import storage
from signoff.app import Signoff
from signoff.models import Delivery, Task
from signoff.storage.queue import close_queue
from test_chaos import CONFIG, RECORDS, SEED, WAVE, Workers, approve_ready, assert_each_task_ended

PROCESSES = 3
CHAOS_S = 40.0
# Past CHAOS_S the run goes on until every fault has happened, for at most this long.
FAULTS_GRACE_S = 180.0
# The connections are terminated once this share of the tasks is done, then this one.
TERMINATE_AT = (0.2, 0.6)
QUEUE_LOST_AT_WAVE = 4  # the wake-ups of this wave (and any waiting) are lost


class Faults:
    """The engine faults of one run and what each of them hit.

    A fault is due at a point of the run's progress; it counts once it found
    something to hit, and is tried again on the next pass until it does.
    """

    def __init__(self, rt, workers, queue_kind):
        self.rt, self.workers, self.queue_kind = rt, workers, queue_kind
        self.terminate_at = list(TERMINATE_AT)
        self.queue_lost = False
        self.counts = {"terminations": 0, "connections_terminated": 0,
                       "queue_connections_terminated": 0, "queue_losses": 0,
                       "queue_items_deleted": 0}

    def pending(self):
        """The faults still to come, in words (empty once all have happened)."""
        return ([f"terminate at {at:.0%} done" for at in self.terminate_at]
                + ([] if self.queue_lost else [f"lose the queue at wave {QUEUE_LOST_AT_WAVE}"]))

    def after_progress(self, done_share):
        """Terminate the connections when the next share of done tasks is reached.

        Only when there is something to hit: a worker's state connection (and,
        with the queue on PostgreSQL, a worker's queue connection). This
        process's own queue connections are closed first, so what is found and
        counted is the workers'.
        """
        if not self.terminate_at or done_share < self.terminate_at[0]:
            return
        close_queue(self.rt.queue)
        present = self._other_connections("count(*)")
        if not present.get("signoff") or (
                self.queue_kind == "postgresql" and not present.get("signoff-queue")):
            return
        hit = self._other_connections("count(pg_terminate_backend(pid))")
        self.terminate_at.pop(0)
        self.counts["terminations"] += 1
        self.counts["connections_terminated"] += sum(hit.values())
        self.counts["queue_connections_terminated"] += hit.get("signoff-queue", 0)

    def send_wave(self, wave, send):
        """Send wave number ``wave`` (from 1); the queue is lost with the right one."""
        if self.queue_lost or wave < QUEUE_LOST_AT_WAVE:
            send()
            return
        deleted = self._lose_the_queue(send)
        if deleted:
            self.queue_lost = True
            self.counts["queue_losses"] += 1
            self.counts["queue_items_deleted"] += deleted

    def _other_connections(self, aggregate):
        """``{application name: aggregate}`` over every other connection to the test database."""
        return dict(self.rt.database.execute_sql(
            f"SELECT application_name, {aggregate} FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " GROUP BY application_name").fetchall())

    def _blocked_pops(self):
        """The workers' Redis connections blocked in a pop now."""
        ports = local_ports(proc.pid for proc in self.workers.procs)
        return [c for c in self.rt.queue.storage.conn.client_list()
                if "b" in c["flags"] and int(c["addr"].rsplit(":", 1)[1]) in ports]

    def _lose_the_queue(self, send):
        """What a queue server restarted without its data does: the waiting wake-ups are gone.

        The workers are paused while a wave is sent, so its wake-ups are still
        waiting when they are deleted (Redis: every key of the queue;
        PostgreSQL: every message row of the queue); returns how many were.
        """
        for proc in self.workers.procs:
            proc.send_signal(signal.SIGSTOP)
        try:
            if self.queue_kind == "redis":
                # A pop a worker is blocked in would still be served by Redis, and its
                # wake-up handed to the paused worker: wait until each has timed out.
                wait_for(lambda: not self._blocked_pops(), 30, what="blocked pops to time out")
            send()
            queue_storage = self.rt.queue.storage
            if self.queue_kind == "redis":
                client = queue_storage.conn
                keys = list(client.scan_iter(match=f"huey.*.{queue_storage.name}*"))
                return client.delete(*keys) if keys else 0
            with queue_storage.db(commit=True) as cursor:
                cursor.execute(f"DELETE FROM {queue_storage.table_task} WHERE queue = %s",
                               (queue_storage.name,))
                return cursor.rowcount
        finally:
            for proc in self.workers.procs:
                proc.send_signal(signal.SIGCONT)


def local_ports(pids):
    """The local TCP ports of the sockets ``pids`` hold (read from Linux's /proc)."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):  # a descriptor closed meanwhile
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text(encoding="ascii").splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def run_chaos(rt, workers, faults, rng):
    """Waves of events, kills and engine faults for CHAOS_S seconds, and on until every
    fault has happened (for at most FAULTS_GRACE_S more); the counts."""
    counts = {"kills": 0, "approved": 0, "sent": 0, "waves": 0}

    def send_wave():
        first = counts["sent"]
        rt.enqueue_events([{"event_id": f"evt-{n}", "name": "comment.created",
                            "document": "doc-demo", "record_id": f"comment-{n}",
                            "occurred": int(time.time())}
                           for n in range(first, min(first + WAVE, RECORDS))])
        counts["sent"] = min(first + WAVE, RECORDS)

    start = time.monotonic()
    next_kill, next_wave = start + rng.uniform(1.0, 3.0), start
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= CHAOS_S + FAULTS_GRACE_S or elapsed >= CHAOS_S and not faults.pending():
            break
        now = time.monotonic()
        if now >= next_wave and counts["sent"] < RECORDS:
            counts["waves"] += 1
            faults.send_wave(counts["waves"], send_wave)
            next_wave = now + 2.0
            if counts["sent"] >= RECORDS and not faults.queue_lost:
                break  # no wave is left to lose: the assertions say which fault is missing
        if now >= next_kill:
            slot = rng.randrange(PROCESSES)
            workers.kill(slot)
            workers.start(slot)
            counts["kills"] += 1
            next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
        faults.after_progress(Task.select().where(Task.status == "done").count() / RECORDS)
        counts["approved"] += approve_ready(rt)
        time.sleep(0.1)  # pacing of this loop only
    counts["chaos_s"] = round(time.monotonic() - start, 1)
    return counts


def queue_kind_of(backend):
    """``redis`` or ``postgresql`` when this test can run on ``backend``; else why not."""
    if backend is None or not backend.database_url:
        return None, "runs with a PostgreSQL database (test_chaos.py is the SQLite chaos test)"
    if not backend.queue_url:
        return None, "runs with a Redis or PostgreSQL queue, not the SQLite queue file"
    return storage.urls.kind_of(backend.queue_url), None


def drain(rt, workers, counts):
    """Drain workers until nothing is ready, approving what became ready; the rounds."""
    for rounds in range(1, 11):
        drains = [workers.start(slot, "--drain") for slot in range(PROCESSES)]
        assert all(p.wait(timeout=120) == 0 for p in drains), workers.stderr()[-5000:]
        if not Task.select().where(Task.status == "ready").exists():
            return rounds
        counts["approved"] += wait_for(lambda: approve_ready(rt) or None, timeout=30,
                                       what="approvals to go through")
    raise AssertionError("the drain did not settle in 10 rounds")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_chaos_on_postgresql_with_a_server_queue(tmp_path, backend, record_property):
    queue_kind, why_not = queue_kind_of(backend)
    if queue_kind is None:
        pytest.skip(why_not)
    home = tmp_path / "home"
    home.mkdir()
    (home / "signoff.toml").write_text(CONFIG, encoding="utf-8")
    rt = read_here(Signoff.init(home))
    seed_records(rt.host(), RECORDS)
    rt.bind("doc-demo", window_s=3600)
    workers = Workers(home, tmp_path)
    workers.procs = [None] * PROCESSES
    for slot in range(PROCESSES):
        workers.start(slot)
    faults = Faults(rt, workers, queue_kind)
    try:
        counts = run_chaos(rt, workers, faults, random.Random(SEED))
        workers.stop_all()
        counts["drain_rounds"] = drain(rt, workers, counts)
    finally:
        workers.stop_all()
    host = rt.host()
    deliveries, tasks = list(Delivery.select()), {t.key: t for t in Task.select()}
    results = {r["key"]: r["result"] for r in host.results()}
    writes = host.write_counts()
    record_property(f"chaos on postgresql/{queue_kind}", json.dumps(dict(
        counts, **faults.counts, deliveries=len(deliveries), tasks=len(tasks),
        results=len(results), done=sum(t.status == "done" for t in tasks.values()),
        dead=sum(t.status == "dead" for t in tasks.values()))))
    assert not faults.pending(), f"faults that never found anything to hit: {faults.pending()}"
    assert faults.counts["terminations"] == 2 and faults.counts["queue_losses"] == 1
    assert counts["kills"] >= 10
    assert counts["sent"] == RECORDS == len(deliveries)
    assert {d.status for d in deliveries} <= {"done", "dead"}  # nothing lost
    assert_each_task_ended(tasks, results)
    assert set(results) <= set(tasks) and set(writes) == set(results)
    assert all(n == 1 for n in writes.values()), writes  # nothing written twice
    rt.close()
