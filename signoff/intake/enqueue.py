"""Event intake: validate each line, store accepted deliveries, then wake the queue.

A delivery row is committed before any wake-up is sent; if the process dies in
between, the reaper finds the row and wakes a worker, so an accepted delivery is
never lost. Input is read in chunks, so a file of any length runs in constant
memory.
"""

import weakref
from dataclasses import dataclass

from .. import tracing
from ..errors import InvalidEvent, Refused
from ..rules.events import read_events
from ..models import db
from ..state.deliveries import new_deliveries
from ..state.history import append_audits

CHUNK = 2000


@dataclass
class LineResult:
    """The answer for one input line."""

    line: int
    event_id: str | None
    accepted: bool
    delivery: int | None
    code: str | None
    reason: str | None

    def as_dict(self):
        """The line's answer as the CLI prints it."""
        return dict(self.__dict__)


def enqueue(rt, stream, monitor_id="default", progress=None):
    """Accept the JSON Lines on binary ``stream`` for ``monitor_id``.

    Yields one list of ``LineResult`` per stored chunk, one result per non-blank
    line. ``progress(lines)`` is called after each chunk is stored. An unknown
    monitor refuses the whole call before any line is read.
    """
    return enqueue_items(rt, read_events(stream), monitor_id, progress)


def enqueue_items(rt, items, monitor_id="default", progress=None):
    """Like ``enqueue``, for ``(line number, Event | InvalidEvent)`` items already read."""
    if not _monitor_exists(monitor_id):
        raise Refused("unknown_monitor", f"no monitor {monitor_id!r}: bind it first")
    chunk, done = [], 0
    for item in items:
        chunk.append(item)
        if len(chunk) >= CHUNK:
            yield _store(rt, monitor_id, chunk)
            done += len(chunk)
            chunk = []
            if progress:
                progress(done)
    if chunk:
        # A call that fits in one chunk (an event a webhook or agent sends alone)
        # shares its commit with other threads' calls; not one made inside the
        # caller's transaction (a monitor bound with a replay), whose rows commit or
        # vanish with it and which another connection could not see or wait out.
        grouped = not done and not db.in_transaction()
        yield (rt.commits.run((monitor_id, chunk)) if grouped
               else _store(rt, monitor_id, chunk))
        if progress:
            progress(done + len(chunk))


# Monitors known to exist, per database. Monitors are never deleted, so a
# monitor once seen committed stays; only a miss asks the database again.
_KNOWN_MONITORS = weakref.WeakKeyDictionary()


def _monitor_exists(monitor_id):
    database = db.obj
    known = _KNOWN_MONITORS.setdefault(database, set())
    if monitor_id in known:
        return True
    # Raw SQL: webhooks send one event per call, and building the ORM query
    # for this check cost about as much as storing the event.
    found = db.execute_sql(f'SELECT 1 FROM "monitor" WHERE "id" = {db.param}',
                           (monitor_id,)).fetchone() is not None
    if found and not db.in_transaction():  # a monitor bound in an open transaction may vanish
        known.add(monitor_id)
    return found


def _store(rt, monitor_id, chunk):
    return store_chunks(rt, [(monitor_id, chunk)])[0]


def store_chunks(rt, jobs):
    """Store ``(monitor_id, [(line, Event | InvalidEvent), ...])`` jobs in one transaction.

    Returns each job's line results, in order, or the exception that job alone
    raised. All jobs' rows go in one statement per table; should the database
    refuse it, each job is written again in a savepoint of its own, so one that
    fails leaves the others to commit. The queue is woken once, after the commit.
    """
    now = rt.clock.now()
    if len(jobs) == 1:
        answers = _write(jobs, now)
    else:
        try:
            answers = _write(jobs, now)
        except Exception:  # some job's rows: find which, each job on its own
            answers = _each_alone(jobs, now)
    stored = sum(1 for a in answers if not isinstance(a, Exception) for r in a if r.accepted)
    if stored:
        rt.wakers.wake("ingest", stored)
    return answers


def _each_alone(jobs, now):
    answers = []
    with db.atomic():
        for job in jobs:
            try:
                with db.atomic():
                    answers.append(_write([job], now)[0])
            except Exception as exc:  # this job's own failure, answered to its caller
                answers.append(exc)
    return answers


def _write(jobs, now):
    """Every job's lines, in one statement per table: each job's line results."""
    good = [(m, n, ev) for m, chunk in jobs for n, ev in chunk if not isinstance(ev, InvalidEvent)]
    bad = [m for m, chunk in jobs for _, ev in chunk if isinstance(ev, InvalidEvent)]
    # One trace per event: its signoff.enqueue span's context is kept on its delivery.
    spans = ([tracing.begin("signoff.enqueue", event_id=ev.event_id, monitor=m)
              for m, _, ev in good] if tracing.enabled() else [])
    traces = [tracing.carrier(s) for s in spans]
    ids = []
    try:
        if len(good) == 1 and not bad:
            # One row is one statement, atomic and committed by itself (every engine
            # runs in autocommit mode outside a transaction; inside one it joins it):
            # no BEGIN and COMMIT, two round trips on PostgreSQL, for each event a
            # webhook or agent sends alone.
            ids = new_deliveries([(good[0][0], good[0][2])], now, traces)
        else:
            ids = _store_batch(good, bad, now, traces)
    finally:  # a refused attempt's spans end without a delivery; a retry begins its own
        for span, delivery in zip(spans, ids or [None] * len(spans)):
            tracing.end(span, delivery=delivery)
    id_of = iter(ids)
    return [[LineResult(n, None, False, None, "invalid_event", ev.reason)
             if isinstance(ev, InvalidEvent) else LineResult(n, ev.event_id, True, next(id_of),
                                                            None, None)
             for n, ev in chunk] for _, chunk in jobs]


def _store_batch(good, bad, now, traces):
    with db.atomic():
        ids = []
        if good:
            ids = new_deliveries([(m, ev) for m, _, ev in good], now, traces)
        if bad:
            # One row per bad line, and nothing from the line itself.
            append_audits([{"at": now, "monitor": m, "code": "invalid_event"} for m in bad])
    return ids


# -- for callers that validated events themselves (signoff serve) -------------

def store_validated(rt, items, within=None, traces=None):
    """Store ``(monitor_id, Event)`` pairs as deliveries in one transaction.

    ``within(ids)`` runs inside that transaction with the new delivery ids (in
    order), so the caller's own rows commit or vanish with the deliveries. The
    queue is woken after the commit. ``traces``: each item's trace carrier, if
    traced. Returns the delivery ids.
    """
    now = rt.clock.now()
    with db.atomic():
        ids = new_deliveries(items, now, traces)
        if within is not None:
            within(ids)
    if ids:
        rt.wakers.wake("ingest", len(ids))
    return ids
