"""Chores (signoff/chores): a background job runs as often as it says, a shared one once an
interval for the whole fleet, and one that fails never stops the others."""

import pytest

from signoff.chores import Chore, Schedule

pytestmark = pytest.mark.backend_independent


class Runtime:
    """The one thing ``Schedule`` asks of a runtime for chores that are not shared."""


def test_a_chore_of_every_pass_runs_each_time_and_a_failing_one_does_not_stop_the_next(caplog):
    runs = []

    def broken(rt):
        raise RuntimeError("a bug in one chore")

    schedule = Schedule([Chore("broken", broken), Chore("counted", lambda rt: runs.append(rt))])
    rt = Runtime()
    for _ in range(3):
        schedule.run_due(rt)
    assert runs == [rt, rt, rt]
    assert sum("chore broken failed" in r.getMessage() for r in caplog.records) == 3


def test_a_chore_with_an_interval_waits_for_it():
    runs = []
    schedule = Schedule([Chore("slow", lambda rt: runs.append(1), every_s=3600.0)])
    for _ in range(5):
        schedule.run_due(Runtime())
    assert runs == [1]
