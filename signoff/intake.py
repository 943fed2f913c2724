"""Event intake: validate each line, store accepted deliveries, then wake the queue.

A delivery row is committed before any wake-up is sent; if the process dies in
between, the reaper finds the row and wakes a worker, so an accepted delivery is
never lost. Input is read in chunks, so a file of any length runs in constant
memory.
"""

from dataclasses import dataclass

from .errors import InvalidEvent, Refused
from .events import read_events
from .models import Audit, Delivery, db, insert_rows

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

    Yields one ``LineResult`` per non-blank line. ``progress(lines)`` is called
    after each chunk is stored. An unknown monitor refuses the whole call before
    any line is read.
    """
    if not _monitor_exists(monitor_id):
        raise Refused("unknown_monitor", f"no monitor {monitor_id!r}: bind it first")
    chunk, done = [], 0
    for item in read_events(stream):
        chunk.append(item)
        if len(chunk) >= CHUNK:
            yield from _store(rt, monitor_id, chunk)
            done += len(chunk)
            chunk = []
            if progress:
                progress(done)
    if chunk:
        yield from _store(rt, monitor_id, chunk)
        if progress:
            progress(done + len(chunk))


def _monitor_exists(monitor_id):
    # Raw SQL: webhooks send one event per call, and building the ORM query
    # for this check cost about as much as storing the event.
    return db.execute_sql(f'SELECT 1 FROM "monitor" WHERE "id" = {db.param}',
                          (monitor_id,)).fetchone() is not None


def _insert_deliveries(items, now):
    """Insert queued deliveries for ``(monitor id, Event)`` pairs; their ids, in order."""
    rows = [dict(ev.as_dict(), monitor=monitor_id, status="queued", next_at=now,
                 accepted_at=now, updated_at=now, failures={}) for monitor_id, ev in items]
    return [r[0] for r in insert_rows(Delivery, rows, returning=("id",))]


def _store(rt, monitor_id, chunk):
    now = rt.clock.now()
    good = [(n, ev) for n, ev in chunk if not isinstance(ev, InvalidEvent)]
    bad = [(n, ev) for n, ev in chunk if isinstance(ev, InvalidEvent)]
    with db.atomic():
        ids = []
        if good:
            ids = _insert_deliveries([(monitor_id, ev) for _, ev in good], now)
        if bad:
            # One row per bad line, and nothing from the line itself.
            insert_rows(Audit, [{"at": now, "monitor": monitor_id, "event_id": None,
                                 "task_key": None, "code": "invalid_event"}] * len(bad))
    if good:
        rt.wakers.wake("ingest", len(good))
    by_line = {n: ev for n, ev in bad}
    id_of = {n: i for (n, _), i in zip(good, ids)}
    for n, ev in chunk:
        if n in by_line:
            yield LineResult(n, None, False, None, "invalid_event", ev.reason)
        else:
            yield LineResult(n, ev.event_id, True, id_of[n], None, None)


# -- for callers that validated events themselves (signoff serve) -------------

def store_validated(rt, items, within=None):
    """Store ``(monitor_id, Event)`` pairs as deliveries in one transaction.

    ``within(ids)`` runs inside that transaction with the new delivery ids (in
    order), so the caller's own rows commit or vanish with the deliveries. The
    queue is woken after the commit. Returns the delivery ids.
    """
    now = rt.clock.now()
    with db.atomic():
        ids = _insert_deliveries(items, now)
        if within is not None:
            within(ids)
    if ids:
        rt.wakers.wake("ingest", len(ids))
    return ids
