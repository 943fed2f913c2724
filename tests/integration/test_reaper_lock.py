"""A reaper pass with nothing to do reads and never takes a write lock.

About SQLite: its one write lock is what the workers' claims and batch writes
queue for, and the reaper runs every second in every worker process. On a
PostgreSQL state database the same pass must leave every row as it was (no
insert, update, delete or row lock) and must not queue behind a writer.
"""

import sqlite3
import threading

import psycopg
import pytest

from helpers import make_event
from signoff import storage


def _on_postgres(backend):
    return backend is not None and backend.database_url is not None


@pytest.fixture
def sqlite_state(backend):
    if _on_postgres(backend):
        pytest.skip("about SQLite's write lock; the PostgreSQL variant runs instead")


@pytest.fixture
def postgres_state(backend):
    if not _on_postgres(backend):
        pytest.skip("about a PostgreSQL state database; the SQLite variant runs instead")
    return backend.database_url


def statements_of(rt):
    seen = []
    rt.database.connection().set_trace_callback(seen.append)
    return seen


def begins(seen):
    return [s for s in seen if s.lstrip().upper().startswith("BEGIN")]


def timed_ready_task(rt):
    """One ready task with an approval deadline 30 s away: nothing is due yet."""
    rt.bind("doc-demo", monitor_id="timed", approval_ttl_s=30)
    [line] = rt.enqueue_events([make_event()], "timed")
    assert line.accepted
    rt.run_until_idle()


def test_an_idle_pass_opens_no_write_transaction(rt, clock, sqlite_state):
    timed_ready_task(rt)
    seen = statements_of(rt)
    assert rt.engine.reap() == {"deliveries_released": 0, "tasks_released": 0, "expired": 0,
                         "parked": 0, "woken": 0}
    assert seen and begins(seen) == []
    clock.advance(31)  # now the deadline has passed: that pass does write
    assert rt.engine.reap()["expired"] == 1
    assert begins(seen) == ["BEGIN IMMEDIATE"]


def test_an_idle_pass_does_not_wait_for_a_writer_holding_the_lock(rt, home, sqlite_state):
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    writer = sqlite3.connect(home / "signoff.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process's long batch write
    reaper, passes = start_pass(rt)
    try:
        assert_did_not_wait(reaper, passes)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        reaper.join(timeout=40)


def start_pass(rt):
    """A reaper pass in its own thread (with its own connection, closed after)."""
    passes = []

    def run():
        try:
            passes.append(rt.engine.reap())
        finally:
            storage.drop_connection(rt.database)
    reaper = threading.Thread(target=run, daemon=True)
    reaper.start()
    return reaper, passes


def assert_did_not_wait(reaper, passes):
    # Blocked on the lock, the pass would wait for as long as the writer holds it.
    reaper.join(timeout=60)
    assert passes and passes[0]["expired"] == 0, "the idle pass waited for the write lock"


# -- the same on a PostgreSQL state database ----------------------------------------

def row_versions(url):
    """Every row of every table with its xmin/xmax: a write or a row lock changes them."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [t for (t,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            " ORDER BY tablename")]
        return {t: sorted(tuple(map(str, row)) for row in conn.execute(
            f'SELECT xmin::text, xmax::text, * FROM "{t}"')) for t in tables}


def test_an_idle_pass_writes_and_locks_no_row_on_postgresql(rt, clock, postgres_state):
    timed_ready_task(rt)
    before = row_versions(postgres_state)
    assert rt.engine.reap() == {"deliveries_released": 0, "tasks_released": 0, "expired": 0,
                         "parked": 0, "woken": 0}
    assert row_versions(postgres_state) == before
    clock.advance(31)  # now the deadline has passed: that pass does write
    assert rt.engine.reap()["expired"] == 1
    assert row_versions(postgres_state) != before


def test_an_idle_pass_does_not_wait_for_a_writer_on_postgresql(rt, postgres_state):
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    writer = psycopg.connect(postgres_state)
    tables = rt.database.get_tables()
    # Another process's long write: every state table locked against writers.
    writer.execute("LOCK TABLE " + ", ".join(f'"{t}"' for t in tables) + " IN EXCLUSIVE MODE")
    reaper, passes = start_pass(rt)
    try:
        assert_did_not_wait(reaper, passes)
    finally:
        writer.rollback()
        writer.close()
        reaper.join(timeout=40)
