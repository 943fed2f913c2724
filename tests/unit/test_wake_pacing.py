"""The wake-up policy's pacing (tasks.WakePolicy) on its own clock: a burst costs one
wake-up per window, a lone announcement is never held, nothing held is lost.

The queue is Huey's own in-memory one; a worker blocked on a Redis or PostgreSQL
queue, which takes each wake-up the moment it lands, is the ``taken`` switch.
"""

import types

import pytest
from huey import MemoryHuey

from signoff.tasks import BURST_GAP_S, WINDOW_S, Wakers, WakePolicy

pytestmark = pytest.mark.backend_independent


class Paced:
    """A policy over a real in-memory queue, on a clock and timers the test moves."""

    def __init__(self, taken):
        self.now, self.timers, self.sent_at = 1000.0, [], []
        self.queue = MemoryHuey("pacing", immediate=False)
        self.wakers = Wakers(self.queue, types.SimpleNamespace(claim_limit=lambda kind: 50))
        send = self.wakers.send

        def sending(kind, count):
            send(kind, count)
            self.sent_at.extend([self.now] * count)
            if taken:
                self.queue.flush()
        self.wakers.send = sending
        self.policy = WakePolicy(self.wakers, lambda kind: 50, clock=lambda: self.now,
                                 later=self.later)

    def later(self, delay, run):
        timer = types.SimpleNamespace(due=self.now + delay, run=run, cancelled=False)
        timer.cancel = lambda: setattr(timer, "cancelled", True)
        self.timers.append(timer)
        return timer

    def advance_to(self, when):
        """Move the clock to ``when``, running each timer due on the way at its time."""
        for timer in sorted(self.timers, key=lambda t: t.due):
            if timer.due <= when and not timer.cancelled:
                self.timers.remove(timer)
                self.now = max(self.now, timer.due)
                timer.run()
        self.now = when

    def announce_every(self, gap, count):
        for n in range(count):
            self.advance_to(self.now + gap)
            self.policy.wake("ingest")


def test_an_announcement_alone_tops_the_queue_up_at_once():
    paced = Paced(taken=False)
    assert paced.policy.wake("ingest", 120) == 3  # one wake-up a claim of 50 rows
    assert paced.wakers.pending_by_kind(100) == {"ingest": 3, "submit": 0}
    assert paced.timers == []


def test_a_burst_taken_as_it_lands_costs_one_wake_up_a_window_and_none_is_left_held():
    paced = Paced(taken=True)
    gap, count = BURST_GAP_S / 10, 400
    paced.announce_every(gap, count)
    paced.advance_to(paced.now + WINDOW_S)  # the last window's timer
    windows = gap * count / WINDOW_S
    assert windows <= len(paced.sent_at) <= windows + 2
    assert paced.timers == [] and paced.policy.flush() == 0


def test_in_a_steady_burst_no_announcement_waits_longer_than_a_window():
    paced = Paced(taken=True)
    announced = []
    for n in range(300):
        paced.advance_to(paced.now + BURST_GAP_S / 3)
        announced.append(paced.now)
        paced.policy.wake("ingest")
    paced.advance_to(paced.now + WINDOW_S)
    for at in announced:
        first_after = min(sent for sent in paced.sent_at if sent >= at)
        assert first_after - at <= WINDOW_S + 1e-9


def test_announcements_further_apart_than_a_burst_are_each_sent_at_once():
    paced = Paced(taken=True)
    paced.announce_every(BURST_GAP_S * 2, 50)
    assert len(paced.sent_at) == 50 and paced.timers == []


def test_a_wake_up_still_waiting_is_not_sent_again():
    paced = Paced(taken=False)
    paced.announce_every(BURST_GAP_S * 2, 50)
    assert len(paced.sent_at) == 1 and paced.wakers.pending() == 1


def test_what_a_window_holds_is_sent_by_flush_when_the_runtime_closes_first():
    paced = Paced(taken=True)
    paced.announce_every(BURST_GAP_S / 10, 5)
    assert len(paced.sent_at) == 1 and len(paced.timers) == 1
    assert paced.policy.flush() == 1
    assert paced.timers[0].cancelled and len(paced.sent_at) == 2
