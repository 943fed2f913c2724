"""The worker's stop signal: its handler can land between any two steps of the loop's wait."""

import gc
import signal
import sys
import threading

import pytest

from signoff import worker
from signoff.worker import SignalStop

# Only the stop object and the interpreter: no home, no database, no queue.
pytestmark = pytest.mark.backend_independent

DEADLINE_S = 30.0  # a wait that blocks for good is a worker that never stops


def wait_with_the_signal_at(stop, step):
    """``stop.wait`` with the handler run at its ``step``-th traced line (as a signal
    would run it there, between two steps); True when the handler ran."""
    seen = {"lines": 0, "ran": False}

    def tracer(frame, event, arg):
        if event == "line" and not seen["ran"]:
            seen["lines"] += 1
            if seen["lines"] == step:
                seen["ran"] = True
                stop.ask(signal.SIGTERM, frame)
        return tracer

    # No collection meanwhile: collecting an earlier test's garbage runs Python
    # callbacks (a WeakKeyDictionary's) in this thread, whose lines would move the step.
    collecting = gc.isenabled()
    gc.disable()
    sys.settrace(tracer)
    try:
        answer = stop.wait(0.2)
    finally:
        sys.settrace(None)
        if collecting:
            gc.enable()
    return seen["ran"], answer


class NapClock:
    """Time that passes only as the wait naps: its deadline comes after the same
    steps in every run. On a busy machine real naps overshoot, a run's deadline
    came steps early, and a stop asked there was (rightly) too late."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_a_stop_asked_between_any_two_steps_of_the_wait_ends_it(monkeypatch):
    # Every line the wait runs, itself and in what it calls, takes the handler in
    # turn. A handler that took a lock the interrupted code holds (an Event's
    # set() inside that Event's wait) would block here, and the thread not end.
    monkeypatch.setattr(worker, "time", NapClock())
    results, step = [], 1
    failure = []

    def walk():
        nonlocal step
        try:
            while True:
                stop = SignalStop()
                ran, answer = wait_with_the_signal_at(stop, step)
                if not ran:  # past the wait's last line: every step was tried
                    return
                results.append((answer, stop.why))
                step += 1
        except BaseException as exc:  # reported by the test's thread
            failure.append(exc)

    thread = threading.Thread(target=walk, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert not thread.is_alive(), f"the wait blocked with the handler run at step {step}"
    assert not failure, failure
    assert len(results) >= 3
    assert all(why == "SIGTERM" for _, why in results), results
    # Asked before the wait passed its deadline, the stop ends that wait. Asked on
    # its last lines (the deadline already passed), the wait answers False and the
    # loop's next wait sees it: only a short tail may be False (the last pass's
    # lines after its check, the clock's own line among them).
    answers = [answer for answer, _ in results]
    late = answers.index(False) if False in answers else len(answers)
    assert not any(answers[late:]) and len(answers) - late <= 4, answers


def test_without_a_signal_the_wait_times_out_and_says_so():
    stop = SignalStop()
    assert stop.wait(0.01) is False and stop.why is None
    stop.ask(signal.SIGINT, None)
    assert stop.wait(10) is True and stop.why == "SIGINT"
