"""Chaos on PostgreSQL/Redis: three worker processes killed at random, every
database connection terminated twice and the queue's keys deleted once.

Runs only under the backend switch with a PostgreSQL database and a Redis queue:
``SIGNOFF_TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test
SIGNOFF_TEST_QUEUE_URL=redis://127.0.0.1:6379/0 pytest -m slow tests/test_chaos_backends.py -s``.
Nothing may be lost and nothing written twice; the figures are printed at the end.
"""

import json
import random
import signal
import time

import pytest

from conftest import wait_for
from signoff import storage
from signoff.app import Signoff
from signoff.canonical import canonical
from signoff.models import Delivery, Task
from test_chaos import CONFIG, RECORDS, SEED, WAVE, Workers, approve_ready, assert_each_task_ended

PROCESSES = 3
CHAOS_S = 40.0


def seed_records(rt):
    host = rt.host()
    with host._write():
        for n in range(RECORDS):
            host.conn.execute("INSERT INTO records VALUES (?, ?)", (f"comment-{n}", canonical(
                {"id": f"comment-{n}", "document": "doc-demo", "version": 1, "status": "open",
                 "kind": "review", "tenant": "demo-tenant", "text": "add the date",
                 "source": f"reference://doc-demo/comment-{n}"})))
    host.put_material("doc-demo", "2026-11-01")
    rt.bind("doc-demo", window_s=3600)


def terminate_connections(rt):
    """End every other connection to the test database; returns how many."""
    return rt.database.execute_sql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]


def lose_the_queue(rt, workers, send_wave):
    """What a Redis restart without persistence does: the waiting wake-ups are gone.

    The workers are paused while a wave is sent, so its wake-ups are still in
    Redis when every key of the queue is deleted; returns how many keys were.
    """
    for proc in workers.procs:
        proc.send_signal(signal.SIGSTOP)
    try:
        send_wave()
        client = rt.queue.storage.conn
        keys = list(client.scan_iter(match=f"huey.*.{rt.queue.storage.name}*"))
        return client.delete(*keys) if keys else 0
    finally:
        for proc in workers.procs:
            proc.send_signal(signal.SIGCONT)


def run_chaos(rt, workers, rng):
    """Waves of events, kills and engine faults for CHAOS_S seconds; the fault counts."""
    counts = {"kills": 0, "terminated": 0, "keys_deleted": 0, "approved": 0, "sent": 0}

    def send_wave():
        first = counts["sent"]
        rt.enqueue_events([{"event_id": f"evt-{n}", "name": "comment.created",
                            "document": "doc-demo", "record_id": f"comment-{n}",
                            "occurred": int(time.time())}
                           for n in range(first, min(first + WAVE, RECORDS))])
        counts["sent"] = min(first + WAVE, RECORDS)

    faults = [(CHAOS_S * 0.2, "terminated", lambda: terminate_connections(rt)),
              (CHAOS_S * 0.3, "keys_deleted", lambda: lose_the_queue(rt, workers, send_wave)),
              (CHAOS_S * 0.6, "terminated", lambda: terminate_connections(rt))]
    start = time.monotonic()
    next_kill, next_wave = start + rng.uniform(1.0, 3.0), start
    while time.monotonic() - start < CHAOS_S:
        now = time.monotonic()
        if now >= next_wave and counts["sent"] < RECORDS:
            send_wave()
            next_wave = now + 2.0
        if now >= next_kill:
            slot = rng.randrange(PROCESSES)
            workers.kill(slot)
            workers.start(slot)
            counts["kills"] += 1
            next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
        if faults and now - start >= faults[0][0] and faults[0][2]():
            counts[faults.pop(0)[1]] += 1  # tried again each pass until it hits something
        counts["approved"] += approve_ready(rt)
        time.sleep(0.1)  # pacing of this loop only
    return counts


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chaos_on_postgres_and_redis(tmp_path, backend, capsys):
    if backend is None or not backend.database_url or storage.is_postgres_url(backend.queue_url) \
            or not backend.queue_url:
        pytest.skip("runs with a PostgreSQL database and a Redis queue")
    home = tmp_path / "home"
    home.mkdir()
    (home / "signoff.toml").write_text(CONFIG, encoding="utf-8")
    rt = Signoff.init(home)
    seed_records(rt)
    workers = Workers(home, tmp_path)
    workers.procs = [None] * PROCESSES
    for slot in range(PROCESSES):
        workers.start(slot)
    try:
        counts = run_chaos(rt, workers, random.Random(SEED))
        workers.stop_all()
        for rounds in range(10):
            drains = [workers.start(slot, "--drain") for slot in range(PROCESSES)]
            assert all(p.wait(timeout=120) == 0 for p in drains), workers.stderr()[-5000:]
            if not Task.select().where(Task.status == "ready").exists():
                break
            counts["approved"] += wait_for(lambda: approve_ready(rt) or None, timeout=30,
                                           what="approvals to go through")
    finally:
        workers.stop_all()
    host = rt.host()
    deliveries, tasks = list(Delivery.select()), {t.key: t for t in Task.select()}
    results = {r["key"]: r["result"] for r in host.results()}
    writes = host.write_counts()
    with capsys.disabled():
        print("\nchaos on postgresql/redis: " + json.dumps(dict(
            counts, deliveries=len(deliveries), tasks=len(tasks), results=len(results),
            done=sum(t.status == "done" for t in tasks.values()),
            dead=sum(t.status == "dead" for t in tasks.values()), drain_rounds=rounds + 1)))
    assert counts["kills"] >= 10 and counts["terminated"] == 2 and counts["keys_deleted"] == 1
    assert counts["sent"] == RECORDS == len(deliveries)
    assert {d.status for d in deliveries} <= {"done", "dead"}  # nothing lost
    assert_each_task_ended(tasks, results)
    assert set(results) <= set(tasks) and set(writes) == set(results)
    assert all(n == 1 for n in writes.values()), writes  # nothing written twice
    rt.close()
