"""Pure pieces of surviving a silent network: the database's clock, and the reconnect
window of ``storage.retrying`` (on a PostgreSQL database object that never connects:
the failures are handed to it)."""

import logging
import time

import pytest
from peewee import OperationalError

from signoff import clock as clock_module
from signoff.clock import ServerClock
from signoff.storage import faults
from signoff.storage.engines import PostgresEngine

# No home, database or queue: only objects and the interpreter.
pytestmark = pytest.mark.backend_independent


def test_a_server_clock_reads_the_server_s_time_through_this_machine_s():
    ahead = ServerClock(lambda: time.time() + 30.0)  # a server 30 s ahead of this machine
    ahead.sync()
    assert ahead.offset == pytest.approx(30.0, abs=0.5)
    assert ahead.now() - time.time() == pytest.approx(30.0, abs=0.5)
    behind = ServerClock(lambda: time.time() - 30.0)
    behind.sync()
    assert behind.now() - time.time() == pytest.approx(-30.0, abs=0.5)


def test_a_slow_reading_keeps_the_offset_an_earlier_one_found(monkeypatch):
    answers = iter([100.0, 500.0])
    server = ServerClock(lambda: time.time() + next(answers))
    server.sync()
    monkeypatch.setattr(clock_module, "SYNC_RTT_S", -1.0)  # every round trip now "too slow"
    server.sync()
    assert server.offset == pytest.approx(100.0, abs=0.5)


def lost_connection():
    return OperationalError("consuming input failed: server closed the connection unexpectedly")


def test_the_reconnect_window_counts_from_the_failure_not_the_call(caplog):
    # A connection that went silent is found dead only when its bounds run out, seconds
    # into the call: the retries still get their whole window, and say so in one line.
    database = PostgresEngine.open("postgresql://signoff@127.0.0.1:1/never")
    calls = []

    def call():
        calls.append(time.monotonic())
        if len(calls) == 1:
            time.sleep(0.4)  # longer than the whole budget below
        if len(calls) <= 3:
            raise lost_connection()
        return "answered"

    with caplog.at_level(logging.WARNING, logger="signoff.storage"):
        assert faults.retrying(database, call, budget_s=0.3) == "answered"
    assert len(calls) == 4
    assert len([r for r in caplog.records if "retrying on a new connection" in r.message]) == 1


def test_a_failure_that_outlasts_the_window_is_raised():
    database = PostgresEngine.open("postgresql://signoff@127.0.0.1:1/never")
    calls = []

    def call():
        calls.append(1)
        raise lost_connection()

    with pytest.raises(OperationalError):
        faults.retrying(database, call, budget_s=0.2)
    assert len(calls) >= 2
