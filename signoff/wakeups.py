"""The one wake-up policy: how many wake-ups to send, and what a failed send means.

A wake-up is a Huey message saying "rows of this kind are waiting"; the rows
say which. Every sender (intake, approval, retry, dead-letter replay, the
reaper, a worker handing on a long backlog) goes through ``WakePolicy``, which
tops the queue up to what the backlog calls for and no further. That is safe
because a wake-up still waiting in the queue runs after the sender's commit,
and its claim then sees the sender's rows. So events enqueued one call at a
time add a wake-up only when none of their kind is waiting, instead of one
each, and the wake-ups that would find nothing never reach the queue. The
reaper is the safety net: it tops the queue up for every claimable row every
second, so a wake-up that is skipped or lost only costs latency.

Sending happens after the commit. If the queue cannot be reached then, what
was committed stands: the caller's answer does not change, one
``queue_unreachable`` warning is logged for the outage, and the reaper of any
running worker sends the wake-ups once the queue is back.
"""

import logging
import sqlite3
import threading
import time

KINDS = ("ingest", "submit")
CAP = 4  # wake-ups of one kind waiting at once: each drains batches for a while
# How far into the queue to look for waiting wake-ups. Under this policy the
# queue holds at most about CAP per kind, so this sees all of them.
LOOK_AHEAD = 4 * CAP
# After a failed send, leave the queue alone this long: every caller would
# otherwise pay the connect timeout again, and the reaper covers the gap.
RETRY_AFTER_S = 5.0

log = logging.getLogger("signoff.wakeups")


def _queue_errors():
    errors = [OSError, sqlite3.Error]
    try:
        import redis
        errors.append(redis.exceptions.RedisError)
    except ImportError:
        pass
    try:
        import psycopg
        errors.append(psycopg.Error)
    except ImportError:
        pass
    return tuple(errors)


QUEUE_ERRORS = _queue_errors()


def needed(rows, batch_size):
    """Wake-ups that ``rows`` claimable rows call for: one per batch, at most ``CAP``."""
    if rows <= 0:
        return 0
    return min(-(-rows // batch_size), CAP)


class WakePolicy:
    """Decides and sends wake-ups for one ``Wakers``; never raises a queue error."""

    def __init__(self, wakers, batch_size):
        self.wakers = wakers
        self.batch_size = batch_size  # a callable: the runtime's config may be replaced
        self.unreachable = None  # the failure, while the queue cannot be reached
        self._retry_at = 0.0
        self._lock = threading.Lock()

    def wake(self, kind, rows=1):
        """Top the queue up for ``rows`` newly claimable rows of ``kind``; returns wake-ups sent."""
        return self.top_up({kind: rows})

    def top_up(self, backlog):
        """Top the queue up for ``{kind: claimable rows}``; returns how many were sent."""
        size = self.batch_size()
        wanted = {kind: needed(rows, size) for kind, rows in backlog.items()}
        wanted = {kind: n for kind, n in wanted.items() if n}
        if not wanted or time.monotonic() < self._retry_at:
            return 0
        try:
            waiting = self.wakers.pending_by_kind(LOOK_AHEAD)
            sent = 0
            for kind, want in wanted.items():
                missing = want - waiting.get(kind, 0)
                if missing > 0:
                    self.wakers.send(kind, missing)
                    sent += missing
        except QUEUE_ERRORS as exc:
            self._failed(exc)
            return 0
        self.unreachable = None
        return sent

    def _failed(self, exc):
        with self._lock:
            first = self.unreachable is None
            self.unreachable = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            self._retry_at = time.monotonic() + RETRY_AFTER_S
        if first:  # one line per outage, not one per call
            log.warning("queue_unreachable: no wake-up sent (%s); what was committed stands, "
                        "a worker's reaper sends the wake-ups once the queue is back",
                        self.unreachable)
