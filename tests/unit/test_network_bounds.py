"""Pure pieces of surviving a silent network: the database's clock, the worker loop's
watchdog, and the reconnect window of ``storage.retrying`` (on a PostgreSQL database
object that never connects: the failures are handed to it)."""

import logging
import threading
import time

import pytest
from peewee import OperationalError

from signoff import clock as clock_module
from signoff.clock import ServerClock
from signoff.storage import faults
from signoff.storage.engines import PostgresEngine
from signoff.watchdog import Watchdog, default_limit

# No home, database or queue: only objects and the interpreter.
pytestmark = pytest.mark.backend_independent

DEADLINE_S = 10.0


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


def test_a_watchdog_that_is_not_fed_calls_expire_once():
    expired = []
    fired = threading.Event()
    dog = Watchdog(0.2, lambda silent: (expired.append(silent), fired.set())).start()
    try:
        assert fired.wait(DEADLINE_S)
    finally:
        dog.stop()
    assert len(expired) == 1 and expired[0] > 0.2


def test_a_watchdog_fed_in_time_or_stopped_never_expires():
    expired = threading.Event()
    dog = Watchdog(0.3, lambda silent: expired.set()).start()
    try:
        end = time.monotonic() + 0.9  # three limits' worth of feeding
        while time.monotonic() < end:
            dog.feed()
            time.sleep(0.05)
    finally:
        dog.stop()
    assert not expired.wait(0.6)  # and stopped, it stays quiet past its limit


def test_a_watchdog_block_left_by_an_exception_stops_watching():
    # A worker that failed to start must not be ended by its watchdog later on (an
    # in-process worker's caller goes on running).
    expired = threading.Event()
    with pytest.raises(RuntimeError):
        with Watchdog(0.2, lambda silent: expired.set()):
            raise RuntimeError("the loop could not start")
    assert not expired.wait(0.5)


def test_the_default_limit_is_a_few_leases_and_never_under_a_minute():
    assert default_limit(30.0) == 120.0
    assert default_limit(2.0) == 60.0


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
