"""Leases: how a worker claims rows, keeps them, and loses them.

A claim is one conditional UPDATE over a batch of waiting rows; it writes the
owner, the expiry and a fresh fencing token, and counts an attempt. Every later
write by that worker names the token, so a worker that was paused past its
lease cannot overwrite the one that took over.
"""

import uuid

from .lifecycle import TASK_ACTIVE, key_in
from .models import Delivery, Task, db, is_sqlite


def new_token():
    """A fencing token no other claim will ever use."""
    return uuid.uuid4().hex


def _waiting_deliveries(now):
    return ((Delivery.status == "queued")
            | ((Delivery.status == "retrying") & (Delivery.next_at <= now)))


def _waiting_tasks(now):
    return (Task.status.in_(list(TASK_ACTIVE)) & (Task.parked == False)  # noqa: E712
            & (Task.next_at <= now) & Task.lease_token.is_null())


def _lock(subquery):
    # PostgreSQL: without SKIP LOCKED concurrent claimers deadlock or both win.
    if is_sqlite():
        return subquery
    return subquery.for_update("FOR UPDATE SKIP LOCKED")


# A row whose last lease expired without an outcome may be what killed its
# worker. Such a suspect is claimed alone: in a batch it would take the other
# rows down with it again, and each of them would be charged an attempt until
# innocent rows ended in the dead letters beside the one that kills workers.
SUSPECT = "lease_expired"


def claimed_alone(rows):
    """True when a claim took one suspect on its own (more may be waiting)."""
    return len(rows) == 1 and SUSPECT in (getattr(rows[0], "last_code", None),
                                          getattr(rows[0], "code", None))


def claim_deliveries(now, owner, ttl, limit):
    """Claim up to ``limit`` waiting deliveries (a suspect alone); ``(token, rows)``."""
    token = new_token()
    suspect = Delivery.last_code == SUSPECT
    with db.atomic():
        rows = (_claim_deliveries(_waiting_deliveries(now) & suspect, 1, owner, token, now, ttl,
                                  True)
                or _claim_deliveries(_waiting_deliveries(now) & (Delivery.last_code.is_null() | ~suspect),
                                     limit, owner, token, now, ttl, False))
    rows.sort(key=lambda r: r.id)
    return token, rows


def _claim_deliveries(waiting, limit, owner, token, now, ttl, suspects):
    if is_sqlite():
        chosen = key_in(Delivery.id, _sqlite_pick(Delivery, suspects, now, limit))
    else:
        chosen = Delivery.id.in_(_lock(Delivery.select(Delivery.id).where(waiting)
                                       .order_by(Delivery.id).limit(limit)))
    return list(Delivery.update(
        status="processing", lease_owner=owner, lease_until=now + ttl,
        lease_token=token, attempts=Delivery.attempts + 1, updated_at=now,
    ).where(chosen, waiting).returning(Delivery).execute())


def claim_tasks(now, owner, ttl, limit):
    """Claim up to ``limit`` approved or uncertain tasks due now (a suspect alone)."""
    token = new_token()
    suspect = Task.code == SUSPECT
    with db.atomic():
        rows = (_claim_tasks(_waiting_tasks(now) & suspect, 1, owner, token, now, ttl, True)
                or _claim_tasks(_waiting_tasks(now) & (Task.code.is_null() | ~suspect),
                                limit, owner, token, now, ttl, False))
    return token, rows


def _claim_tasks(waiting, limit, owner, token, now, ttl, suspects):
    if is_sqlite():
        chosen = key_in(Task.key, _sqlite_pick(Task, suspects, now, limit))
    else:
        chosen = Task.key.in_(_lock(Task.select(Task.key).where(waiting)
                                    .order_by(Task.next_at).limit(limit)))
    return list(Task.update(
        lease_owner=owner, lease_until=now + ttl, lease_token=token,
        attempts=Task.attempts + 1, updated_at=now,
    ).where(chosen, waiting).returning(Task).execute())


# The claimable rows again, as SQLite reads them fast (``_sqlite_pick``). With
# the portable OR of statuses SQLite reads every waiting row (and, for the
# suspect test, every row behind them) and sorts them all, so a claim slows
# down as the backlog grows: ~14 ms per claim at 100,000 waiting. Here each
# status is one range of the (status, next_at) index read in order and cut at
# the limit; suspects come from their own small partial index (the unary ``+``
# keeps the status index out of that query).
_PICK = {
    (Delivery, False): """
        SELECT id FROM (
          SELECT id, next_at FROM (SELECT id, next_at FROM delivery
            WHERE status = 'queued' AND (last_code IS NULL OR last_code != ?)
            ORDER BY next_at, id LIMIT ?)
          UNION ALL
          SELECT id, next_at FROM (SELECT id, next_at FROM delivery
            WHERE status = 'retrying' AND next_at <= ? AND (last_code IS NULL OR last_code != ?)
            ORDER BY next_at, id LIMIT ?)
          ORDER BY 2, 1 LIMIT ?)""",
    (Delivery, True): f"""
        SELECT id FROM delivery
        WHERE last_code = '{SUSPECT}'
          AND (+status = 'queued' OR (+status = 'retrying' AND +next_at <= ?))
        ORDER BY next_at, id LIMIT ?""",
    # Ties in next_at (a bulk approval) are taken in row order, as the index holds them.
    (Task, False): """
        SELECT key FROM (
          SELECT key, next_at FROM (SELECT key, next_at FROM task
            WHERE status = 'approved' AND next_at <= ? AND parked = 0 AND lease_token IS NULL
              AND (code IS NULL OR code != ?)
            ORDER BY next_at LIMIT ?)
          UNION ALL
          SELECT key, next_at FROM (SELECT key, next_at FROM task
            WHERE status = 'uncertain' AND next_at <= ? AND parked = 0 AND lease_token IS NULL
              AND (code IS NULL OR code != ?)
            ORDER BY next_at LIMIT ?)
          ORDER BY 2 LIMIT ?)""",
    (Task, True): f"""
        SELECT key FROM task
        WHERE code = '{SUSPECT}' AND +status IN ('approved', 'uncertain') AND +next_at <= ?
          AND parked = 0 AND lease_token IS NULL
        ORDER BY next_at LIMIT ?""",
}
assert TASK_ACTIVE == ("approved", "uncertain")  # the task queries above name them


def _sqlite_pick(model, suspects, now, limit):
    """The keys of up to ``limit`` claimable rows (earliest ``next_at`` first), SQLite."""
    if suspects:
        params = [now, limit]
    elif model is Delivery:
        params = [SUSPECT, limit, now, SUSPECT, limit, limit]
    else:
        params = [now, SUSPECT, limit, now, SUSPECT, limit, limit]
    return [key for (key,) in db.execute_sql(_PICK[model, suspects], params).fetchall()]


def renew(model, token, now, ttl):
    """Extend every lease held under ``token``; returns how many rows are still ours."""
    return model.update(lease_until=now + ttl).where(model.lease_token == token).execute()


def claimable_counts(now):
    """How many deliveries and tasks a worker could claim right now."""
    deliveries = Delivery.select().where(_waiting_deliveries(now)).count()
    tasks = Task.select().where(_waiting_tasks(now)).count()
    return deliveries, tasks


def expired_deliveries(now):
    """Deliveries whose worker stopped renewing its lease (it crashed or hung)."""
    return list(Delivery.select().where(Delivery.status == "processing",
                                        Delivery.lease_until < now))


def expired_tasks(now):
    """Tasks whose worker stopped renewing its lease."""
    # lease_until is cleared with the token, so the index alone finds them.
    return list(Task.select().where(Task.lease_until < now))


