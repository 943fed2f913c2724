"""A reaper pass with nothing to do reads and never takes SQLite's write lock.

About SQLite: its one write lock is what the workers' claims and batch writes
queue for, and the reaper runs every second in every worker process.
"""

import sqlite3
import threading

from conftest import make_event


def statements_of(rt):
    seen = []
    rt.database.connection().set_trace_callback(seen.append)
    return seen


def begins(seen):
    return [s for s in seen if s.lstrip().upper().startswith("BEGIN")]


def test_an_idle_pass_opens_no_write_transaction(rt, clock):
    rt.bind("doc-demo", monitor_id="timed", approval_ttl_s=30)
    [line] = rt.enqueue_events([make_event()], "timed")
    rt.run_until_idle()  # one ready task with an approval deadline, nothing due yet
    seen = statements_of(rt)
    assert rt.reap() == {"deliveries_released": 0, "tasks_released": 0, "expired": 0,
                         "parked": 0, "woken": 0}
    assert seen and begins(seen) == []
    clock.advance(31)  # now the deadline has passed: that pass does write
    assert rt.reap()["expired"] == 1
    assert begins(seen) == ["BEGIN IMMEDIATE"]


def test_an_idle_pass_does_not_wait_for_a_writer_holding_the_lock(rt, home):
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    writer = sqlite3.connect(home / "signoff.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process's long batch write
    passes = []
    try:
        reaper = threading.Thread(target=lambda: passes.append(rt.reap()), daemon=True)
        reaper.start()
        # Blocked on the lock, the pass would wait out the 30 s busy timeout.
        reaper.join(timeout=10)
        assert passes and passes[0]["expired"] == 0, "the idle pass waited for the write lock"
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        reaper.join(timeout=40)
