"""Clocks that disagree: a worker whose clock runs 30 s ahead (libfaketime) beside an
honest one, on a server database.

A lease is over when a clock passes its expiry. Judged by each worker's own clock,
the fast worker's reaper found the honest worker's live leases expired and took
them over (218 of 300 in one run, each task then read back as ``uncertain``), and
only the receipt read before writing kept the host from second writes. Judged by
the database's clock (``clock.ServerClock``), no live lease is taken over and
nothing is submitted twice.

Marked ``partition`` (the CI stage of network faults, which installs libfaketime);
runs with a PostgreSQL state database and a Redis or PostgreSQL queue.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import child_env, open_home, seed_records, start_worker, stop_worker, wait_for
from signoff.models import Attempt, Delivery, Task, WorkerBeat

pytestmark = [pytest.mark.partition, pytest.mark.timeout(300)]

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
AHEAD_S = 30
EVENTS = 300
LEASE_S = 10.0  # shorter than the skew: every lease the honest worker holds looks expired
HOST = "seed = 7\nread_timeout_p = 0\nlose_ack_p = 0\nlatency_s = 0.03"


def fast_env():
    """A worker environment whose wall clock runs AHEAD_S seconds ahead (monotonic alone)."""
    return child_env(LD_PRELOAD=str(LIBFAKETIME), FAKETIME=f"+{AHEAD_S}s",
                     FAKETIME_DONT_FAKE_MONOTONIC="1")


def clock_of(env):
    done = subprocess.run([sys.executable, "-c", "import time; print(time.time())"], env=env,
                          capture_output=True, text=True, check=True, timeout=60)
    return float(done.stdout) - time.time()


def approve_all(rt):
    ready = [(t.key, t.digest) for t in Task.select().where(Task.status == "ready")]
    return rt.approve_many(ready) if ready else []


def test_a_worker_30_s_ahead_takes_over_no_live_lease(home, backend, record_property):
    if backend is None or not backend.database_url:
        pytest.skip("leases on a SQLite file are judged by one machine's clock")
    if not LIBFAKETIME.exists():
        pytest.fail(f"{LIBFAKETIME} is missing: apt-get install -y libfaketime (.ci/run does)")
    assert clock_of(fast_env()) > AHEAD_S - 1  # the fast worker's clock is ahead indeed
    rt = open_home(home, "testhosts:ChaosHost", records=0, options=HOST, lease_ttl_s=LEASE_S)
    host = rt.host()
    seed_records(host, EVENTS)
    workers = [start_worker(home, "--workers", "2"), start_worker(home, "--workers", "2",
                                                                  env=fast_env())]
    try:
        # Both at work before any event: each of them gets a share of the leases.
        wait_for(lambda: WorkerBeat.select().count() == len(workers), 60, what="both workers")
        rt.enqueue_events([{"event_id": f"evt-{n}", "name": "comment.created",
                            "document": "doc-demo", "record_id": f"comment-{n}",
                            "occurred": int(time.time())} for n in range(EVENTS)])
        wait_for(lambda: Delivery.select().where(Delivery.status == "done").count() == EVENTS,
                 120, what="every event ingested")
        approve_all(rt)
        wait_for(lambda: Task.select().where(Task.status == "done").count() == EVENTS,
                 120, what="every task submitted")
    finally:
        for proc in workers:
            stop_worker(proc)
    by_worker = {proc.pid: Attempt.select().where(Attempt.worker.contains(f":{proc.pid}:")).count()
                 for proc in workers}
    taken_over = Attempt.select().where(Attempt.code == "lease_expired").count()
    outcomes = [call["outcome"] for call in host.submit_log()]
    record_property("clock 30 s ahead", json.dumps({
        "outcomes_by_honest_worker": by_worker[workers[0].pid],
        "outcomes_by_fast_worker": by_worker[workers[1].pid], "leases_taken_over": taken_over,
        "uncertain": Attempt.select().where(Attempt.kind == "task", Attempt.code != "done").count(),
        "submits": len(outcomes), "redundant_submits": outcomes.count("idempotent")}))
    assert all(by_worker.values()), by_worker  # both workers took work
    assert taken_over == 0
    assert outcomes.count("wrote") == EVENTS and len(outcomes) == EVENTS  # one submit each
    assert set(host.write_counts().values()) == {1}
