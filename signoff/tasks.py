"""Huey tasks: the wake-ups that make workers ingest deliveries and submit tasks.

A message carries nothing but "there is work": the rows say what. Huey deletes
a message before running it, so a task that dies mid-way loses nothing but the
wake-up, and the reaper sends another.

How many wake-ups to send, when, and what a failed send means, is one policy
(``WakePolicy``). A wake-up is a Huey message saying "rows of this kind are waiting"; the rows
say which. Every sender (intake, approval, retry, dead-letter replay, the
reaper, a worker handing on a long backlog) goes through ``WakePolicy``, which
tops the queue up to what the backlog calls for and no further. That is safe
because a wake-up still waiting in the queue runs after the sender's commit,
and its claim then sees the sender's rows. The reaper is the safety net: it
tops the queue up for every claimable row every second, so a wake-up that is
skipped or lost only costs latency.

Looking at the queue is not enough on its own: a worker blocked on a Redis or
PostgreSQL queue takes each wake-up the moment it lands, so none is ever seen
waiting, and events enqueued one call at a time would send one wake-up each.
So a process also paces itself (``wake``) while announcements come in a
burst: one that follows the last of its kind within ``BURST_GAP_S``, inside
``WINDOW_S`` of the last top-up, is held and sent with the others as one
top-up when the window ends (a throttle with a leading and a trailing edge).
Any other tops the queue up at once: an event that arrives alone is never
held, however recently the one before it was sent. A burst therefore costs
one wake-up per window per kind on every backend, and a steady stream is never
held back for more than one window, which a pure trailing debounce (wait for a
quiet spell) would do for as long as the stream lasts. What is held is always
sent after the commit it announces, by a timer in long-running processes and
by ``flush`` when a runtime closes (the CLI closes it before exiting). The
reaper and a worker handing on call ``top_up``, which sends at once: they are
paced by their own clocks.

Sending happens after the commit. If the queue cannot be reached then, what
was committed stands: the caller's answer does not change, one
``queue_unreachable`` warning is logged for the outage, and the reaper of any
running worker sends the wake-ups once the queue is back.
"""

import logging
import os
import socket
import threading
import time

from peewee import InterfaceError, OperationalError

from .storage import log_failed_pass
from .storage.queue import queue_errors

KINDS = ("ingest", "submit")
CAP = 4  # wake-ups of one kind waiting at once: each drains batches for a while
# How far into the queue to look for waiting wake-ups. Under this policy the
# queue holds at most about CAP per kind, so this sees all of them.
LOOK_AHEAD = 4 * CAP
# After a failed send, leave the queue alone this long: every caller would
# otherwise pay the connect timeout again, and the reaper covers the gap.
RETRY_AFTER_S = 5.0
# How long announcements of one kind are held after a top-up before the next:
# a bound on the wake-ups a burst sends (one per window per kind and process),
# and the most a held one waits. At 100 ms, events arriving 1.7 ms apart waited
# 52 ms (p50) for a task; at 20 ms, 13 ms, with no loss of throughput
# (``python -m bench --latency`` and ``--events 2000``, docs/performance.md).
WINDOW_S = 0.02
# Announcements closer together than this are a burst, which the window paces;
# one further from the last is sent at once. Events arriving 50 ms apart were
# each held up to a window (event → ready p50 55 ms, where the work takes 5).
BURST_GAP_S = 0.01

wake_log = logging.getLogger("signoff.wakeups")


def needed(rows, per_claim):
    """Wake-ups that ``rows`` claimable rows call for: one per claim of ``per_claim``
    rows, at most ``CAP``."""
    if rows <= 0:
        return 0
    return min(-(-rows // per_claim), CAP)


def _daemon_timer(delay, run):
    timer = threading.Timer(delay, run)
    timer.daemon = True  # close() flushes; the reaper covers the rest
    timer.start()
    return timer


class WakePolicy:
    """Decides and sends wake-ups for one ``Wakers``; never raises a queue error.

    ``clock`` and ``later(delay, run)`` (which returns something with ``cancel()``)
    are the monotonic clock and the timer it paces by.
    """

    def __init__(self, wakers, claim_limit, clock=time.monotonic, later=_daemon_timer):
        self.wakers = wakers
        self._clock, self._later = clock, later
        # kind -> rows a claim takes: the runtime's config may be replaced, and its
        # claims shrink when rows are slow (steps.claiming.ClaimSizes).
        self.claim_limit = claim_limit
        self.unreachable = None  # the failure, while the queue cannot be reached
        self._retry_at = 0.0
        self._lock = threading.Lock()
        self._window_end = {}  # kind -> when announcements of it may top up again
        self._held = {}  # kind -> rows of the largest announcement held in the window
        self._last = {}  # kind -> when it was last announced
        self._timer = None

    def wake(self, kind, rows=1):
        """Announce ``rows`` rows of ``kind`` made claimable by a commit that has happened.

        Tops the queue up at once unless it comes in a burst: within ``BURST_GAP_S``
        of the last announcement of ``kind`` and ``WINDOW_S`` of the last top-up;
        then it is held for the window's end. Returns the wake-ups sent now.
        """
        if rows <= 0:
            return 0
        with self._lock:
            now = self._clock()
            end = self._window_end.get(kind, 0.0)
            burst = now - self._last.get(kind, float("-inf")) < BURST_GAP_S
            self._last[kind] = now
            if burst and now < end:
                # The largest, not the sum: one waiting wake-up drains full batches
                # for a while and hands on, so a stream of small commits needs one.
                self._held[kind] = max(self._held.get(kind, 0), rows)
                if self._timer is None:
                    self._timer = self._later(end - now, self.flush)
                return 0
            # A timer that has not run yet at the window's end: this top-up covers it.
            rows = max(rows, self._held.pop(kind, 0))
            self._window_end[kind] = now + WINDOW_S
        return self.top_up({kind: rows})

    def flush(self):
        """Top the queue up now for every held announcement; returns wake-ups sent.

        Run by the timer at a window's end, and by a runtime before it closes the
        queue, so that a short-lived process does not take its last one with it.
        """
        with self._lock:
            held, self._held = self._held, {}
            timer, self._timer = self._timer, None
            end = self._clock() + WINDOW_S
            self._window_end.update(dict.fromkeys(held, end))
        if timer is not None:
            timer.cancel()  # a no-op when the timer is what runs this
        return self.top_up(held) if held else 0

    def top_up(self, backlog):
        """Top the queue up for ``{kind: claimable rows}`` now; returns how many were sent."""
        wanted = {kind: needed(rows, self.claim_limit(kind)) for kind, rows in backlog.items()}
        wanted = {kind: n for kind, n in wanted.items() if n}
        if not wanted or self._clock() < self._retry_at:
            return 0
        try:
            waiting = self.wakers.pending_by_kind(LOOK_AHEAD)
            sent = 0
            for kind, want in wanted.items():
                missing = want - waiting.get(kind, 0)
                if missing > 0:
                    self.wakers.send(kind, missing)
                    sent += missing
        except queue_errors() as exc:
            self._failed(exc)
            return 0
        self.unreachable = None
        return sent

    def _failed(self, exc):
        with self._lock:
            first = self.unreachable is None
            self.unreachable = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            self._retry_at = self._clock() + RETRY_AFTER_S
        if first:  # one line per outage, not one per call
            wake_log.warning("queue_unreachable: no wake-up sent (%s); what was committed "
                             "stands, a worker's reaper sends the wake-ups once the queue is back",
                             self.unreachable)


# A batch that failed is the worker's line, as its loop's are.
batch_log = logging.getLogger("signoff.worker")

# How long one wake-up keeps claiming batches before yielding its thread.
SLICE_S = 1.0


def worker_name():
    """This thread's name as it appears in leases and attempt history."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"


class Wakers:
    """The two Huey tasks bound to one home's ``engine``, and the wake-up policy that sends them.

    Callers ask for wake-ups with ``wake`` / ``top_up`` (``WakePolicy``)
    and ``flush`` what is held before closing; ``ingest`` and ``submit`` send
    unconditionally and are the policy's own.
    """

    def __init__(self, queue, engine):
        self.queue = queue
        self.policy = WakePolicy(self, engine.claim_limit)

        @queue.task(name="signoff.ingest")
        def ingest():
            _drain_for_a_while("ingest", engine.ingest_batch,
                               lambda: self.top_up({"ingest": 1}))

        @queue.task(name="signoff.submit")
        def submit():
            _drain_for_a_while("submit", engine.submit_batch,
                               lambda: self.top_up({"submit": 1}))

        self._ingest, self._submit = ingest, submit
        # Messages name their task as Huey's registry does: read it off one.
        self._kind_of = {queue.serializer.deserialize(queue.serialize_task(task.s())).name: kind
                         for task, kind in ((ingest, "ingest"), (submit, "submit"))}

    def wake(self, kind, rows=1):
        """Make sure wake-ups will be waiting for ``rows`` newly claimable rows of ``kind``."""
        return self.policy.wake(kind, rows)

    def top_up(self, backlog):
        """Make sure wake-ups are waiting for ``{kind: claimable rows}``, now."""
        return self.policy.top_up(backlog)

    def flush(self):
        """Send the wake-ups ``wake`` is holding back, now."""
        return self.policy.flush()

    @property
    def unreachable(self):
        """Why the last send failed, while the queue cannot be reached; else ``None``."""
        return self.policy.unreachable

    def send(self, kind, count):
        """Send ``count`` wake-ups of ``kind`` (ingest or submit)."""
        getattr(self, kind)(count)

    def ingest(self, count=1):
        """Send ``count`` wake-ups for waiting deliveries."""
        for _ in range(count):
            self._ingest()

    def submit(self, count=1):
        """Send ``count`` wake-ups for approved or uncertain tasks."""
        for _ in range(count):
            self._submit()

    def pending(self):
        """Wake-ups waiting in the queue."""
        return self.queue.pending_count()

    def pending_by_kind(self, limit):
        """``{kind: wake-ups waiting}`` among the next ``limit`` messages of the queue."""
        counts = dict.fromkeys(self._kind_of.values(), 0)
        for data in self.queue.storage.enqueued_items(limit):
            # The message's name only: a task this process does not know (another
            # version's) is counted as nothing instead of logged as broken.
            kind = self._kind_of.get(self.queue.serializer.deserialize(data).name)
            if kind is not None:
                counts[kind] += 1
        return counts


def _drain_for_a_while(step, batch, wake_again):
    deadline = time.monotonic() + SLICE_S
    while True:
        try:
            claimed, full = batch(worker_name())
        except (OperationalError, InterfaceError):
            # The database stayed out of reach for the batch's whole reconnect
            # window: one line, not Huey's traceback. What the batch claimed
            # waits for its lease to end; the reaper wakes it again.
            log_failed_pass(batch_log, f"{step} batch", "its rows wait for the reaper")
            return
        if not full:
            return
        if time.monotonic() >= deadline:
            # More is waiting: hand the rest to the next free thread.
            wake_again()
            return
