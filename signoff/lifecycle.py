"""The life cycles of deliveries, tasks and notifications: the one place a status is written.

Every move is a guarded UPDATE: the row must be in an allowed ``from`` status
and, when a worker holds it, carry that worker's lease token. Anything but one
row changed means the move did not happen (another worker, a cancel or a
human got there first) and the caller must not act on it.
"""

from enum import StrEnum

from peewee import SQL

from . import storage
from .models import Attempt, Audit, DeadLetter, Delivery, Task, db
from .storage import insert_rows


class DeliveryStatus(StrEnum):
    """Where a delivery is (the values are what the database and the CLI hold)."""

    QUEUED = "queued"
    PROCESSING = "processing"
    RETRYING = "retrying"
    DONE = "done"
    DEAD = "dead"


class TaskStatus(StrEnum):
    """Where a task is in its life cycle (SPEC section 5)."""

    READY = "ready"
    APPROVED = "approved"
    UNCERTAIN = "uncertain"
    DONE = "done"
    REJECTED = "rejected"
    EXPIRED = "expired"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"
    DEAD = "dead"


class NotificationStatus(StrEnum):
    """Where a ``task.ready`` notification is (signoff/notify.py sends them)."""

    PENDING = "pending"
    SENT = "sent"
    DEAD = "dead"


D, T, N = DeliveryStatus, TaskStatus, NotificationStatus

DELIVERY_EDGES = {
    (D.QUEUED, D.PROCESSING), (D.RETRYING, D.PROCESSING),
    (D.PROCESSING, D.DONE), (D.PROCESSING, D.RETRYING), (D.PROCESSING, D.DEAD),
    (D.DEAD, D.QUEUED),
}

TASK_EDGES = {
    (T.READY, T.APPROVED), (T.READY, T.REJECTED), (T.READY, T.EXPIRED),
    (T.READY, T.BLOCKED), (T.READY, T.CANCELLED),
    (T.APPROVED, T.APPROVED), (T.APPROVED, T.UNCERTAIN), (T.APPROVED, T.DONE),
    (T.APPROVED, T.BLOCKED), (T.APPROVED, T.CANCELLED), (T.APPROVED, T.DEAD),
    (T.APPROVED, T.EXPIRED),
    (T.UNCERTAIN, T.UNCERTAIN), (T.UNCERTAIN, T.DONE), (T.UNCERTAIN, T.BLOCKED),
    (T.UNCERTAIN, T.CANCELLED), (T.UNCERTAIN, T.DEAD),
    (T.DEAD, T.APPROVED), (T.DEAD, T.UNCERTAIN),
    # redraft.py: a ready or blocked task drafted again (same record version),
    # and a blocked task superseded by the task for a newer version.
    (T.READY, T.READY), (T.BLOCKED, T.READY), (T.BLOCKED, T.BLOCKED),
    (T.APPROVED, T.READY),  # a standing policy ended before the write started
}

NOTIFICATION_EDGES = {(N.PENDING, N.SENT), (N.PENDING, N.DEAD), (N.DEAD, N.PENDING)}

# Statuses from which a task can still move without a human.
TASK_ACTIVE = (T.APPROVED, T.UNCERTAIN)
TASK_OPEN = (T.READY, T.APPROVED, T.UNCERTAIN)
DELIVERY_WAITING = (D.QUEUED, D.RETRYING)
DELIVERY_PENDING = (D.QUEUED, D.PROCESSING, D.RETRYING)


class Fenced(Exception):
    """The row moved on without us: our lease or our expected status is gone."""


def _check(edges, sources, target):
    for source in sources:
        if (source, target) not in edges:
            raise ValueError(f"no transition {source} -> {target}")


def move_task(key, sources, target, now, token=None, **fields):
    """Move task ``key`` from one of ``sources`` to ``target``; ``Fenced`` if not."""
    _check(TASK_EDGES, sources, target)
    _guarded(Task, Task.key == key, sources, token, status=target, updated_at=now, **fields)


def update_task(key, now, statuses, token=None, **fields):
    """Change non-status fields of a task still in ``statuses`` (and still ours)."""
    _guarded(Task, Task.key == key, statuses, token, updated_at=now, **fields)


def move_delivery(delivery_id, sources, target, now, token=None, **fields):
    """Move a delivery between statuses under the same rules as ``move_task``."""
    _check(DELIVERY_EDGES, sources, target)
    _guarded(Delivery, Delivery.id == delivery_id, sources, token, status=target,
             updated_at=now, **fields)


def move_notification(task_key, sources, target, now, **fields):
    """Move the notification of ``task_key`` like ``move_task``; ``Fenced`` if not."""
    from .models import Notification
    _check(NOTIFICATION_EDGES, sources, target)
    _guarded(Notification, Notification.task_key == task_key, sources, None, status=target,
             updated_at=now, **fields)


def claim_rows(model, suspect, now, limit, lease):
    """Write ``lease`` on up to ``limit`` waiting rows in one statement.

    Returns the rows claimed as ``storage.Fetched`` (instances once the claim
    has committed).

    A delivery moves from waiting to processing (an edge of the table); a task
    keeps its status and only gains the lease. ``suspect`` claims only rows
    whose last lease expired (see leases.py).
    """
    changes = dict(lease, updated_at=now)
    if model is Delivery:
        _check(DELIVERY_EDGES, DELIVERY_WAITING, D.PROCESSING)
        changes["status"] = D.PROCESSING
    return storage.claim(model, suspect, now, limit, changes)


def _guarded(model, which, statuses, token, **fields):
    query = model.update(**fields).where(which, model.status.in_(list(statuses)))
    if token is not None:
        query = query.where(model.lease_token == token)
    if query.execute() != 1:
        raise Fenced(which)


def prepare_move_deliveries(ids, sources, target, now, token, per_row=None, **fields):
    """Build a move of many deliveries at once under the rules of ``move_delivery``.

    One guarded UPDATE: each row must still be in one of ``sources`` and carry
    ``token``. ``per_row`` maps a field to ``{delivery id: value}`` for values
    that differ by row. ``run()`` it in the writer's transaction: it returns
    the ids that moved; the others are fenced. Building the UPDATE of a batch
    costs more than running it, so a writer that builds it first holds the
    write lock for the statement alone.
    """
    _check(DELIVERY_EDGES, sources, target)
    return PreparedMove(_move_query(Delivery, Delivery.id, ids, sources, target, now, token,
                                    per_row, fields))


def move_tasks(keys, sources, target, now, token=None, per_row=None, where=None, **fields):
    """Move many tasks at once under the rules of ``move_task``; returns the keys moved.

    ``where`` adds a condition every moved row must also meet.
    """
    return prepare_move_tasks(keys, sources, target, now, token, per_row, where, **fields).run()


def prepare_move_tasks(keys, sources, target, now, token=None, per_row=None, where=None,
                       **fields):
    """``move_tasks`` built now, to ``run()`` in the writer's transaction (as
    ``prepare_move_deliveries``)."""
    _check(TASK_EDGES, sources, target)
    return PreparedMove(_move_query(Task, Task.key, keys, sources, target, now, token,
                                    per_row, fields, where))


def run_moves(moves):
    """Run prepared moves in the caller's transaction; the keys that moved, all together."""
    return set().union(*(move.run() for move in moves))


class PreparedMove:
    """A guarded many-row move, compiled to SQL; ``run()`` returns the keys that moved."""

    def __init__(self, query):
        self.statement = None if query is None else query.sql()

    def run(self):
        """Run the move (in the caller's transaction); the keys of the rows it moved."""
        if self.statement is None:
            return set()
        return {moved for (moved,) in db.execute_sql(*self.statement).fetchall()}


def _move_query(model, pk, ids, sources, target, now, token, per_row, fields, where=None):
    ids = list(ids)
    if not ids:
        return None
    for name, values in (per_row or {}).items():
        distinct = set(values.values())
        fields[name] = distinct.pop() if len(distinct) == 1 else _case(pk, values)
    query = model.update(status=target, updated_at=now, **fields).where(
        key_in(pk, ids), model.status.in_(list(sources)))
    if token is not None:
        query = query.where(model.lease_token == token)
    if where is not None:
        query = query.where(where)
    return query.returning(pk)


def _case(pk, values):
    # CASE pk WHEN .. THEN .. END as one SQL node: built by peewee value by
    # value it costs more than the UPDATE itself for a batch of fifty.
    param = db.param
    return SQL(f'CASE "{pk.column_name}" ' + f"WHEN {param} THEN {param} " * len(values) + "END",
               [v for pair in values.items() for v in pair])


def key_in(field, values):
    """``field IN (values)`` as one SQL node (cheaper than ``field.in_`` for a batch)."""
    return SQL(f'"{field.column_name}" IN (' + ", ".join([db.param] * len(values)) + ")",
               list(values))


RELEASED = {"lease_owner": None, "lease_until": None, "lease_token": None}


def audit(now, code, monitor=None, event_id=None, task_key=None):
    """Append one audit row: identifiers and a code, never content; returns its ``seq``."""
    return Audit.insert(at=now, code=code, monitor=monitor, event_id=event_id,
                        task_key=task_key).execute()


def record_attempts(rows):
    """Insert attempt history rows: dicts of kind, ref, at, step, code, worker."""
    insert_rows(Attempt, rows)


def bury(kind, ref, step, code, attempts, now):
    """Write the dead-letter row for a delivery or task whose budget is spent."""
    first = (Attempt.select(Attempt.at).where(Attempt.kind == kind, Attempt.ref == str(ref))
             .order_by(Attempt.id).limit(1).scalar())
    DeadLetter.insert(kind=kind, ref=str(ref), step=step, code=code, attempts=attempts,
                      first_at=first if first is not None else now, last_at=now).execute()
