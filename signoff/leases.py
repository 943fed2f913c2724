"""Leases: how a worker claims rows, keeps them, and loses them.

A claim is one conditional UPDATE over a batch of waiting rows; it writes the
owner, the expiry and a fresh fencing token, and counts an attempt. Every later
write by that worker names the token, so a worker that was paused past its
lease cannot overwrite the one that took over.
"""

import uuid


from .lifecycle import TASK_ACTIVE
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


def claim_deliveries(now, owner, ttl, limit):
    """Claim up to ``limit`` waiting deliveries; return ``(token, rows)``."""
    token = new_token()
    ids = _lock(Delivery.select(Delivery.id).where(_waiting_deliveries(now))
                .order_by(Delivery.id).limit(limit))
    with db.atomic():
        rows = list(Delivery.update(
            status="processing", lease_owner=owner, lease_until=now + ttl,
            lease_token=token, attempts=Delivery.attempts + 1, updated_at=now,
        ).where(Delivery.id.in_(ids), _waiting_deliveries(now))
            .returning(Delivery).execute())
    rows.sort(key=lambda r: r.id)
    return token, rows


def claim_tasks(now, owner, ttl, limit):
    """Claim up to ``limit`` approved or uncertain tasks due now."""
    token = new_token()
    keys = _lock(Task.select(Task.key).where(_waiting_tasks(now))
                 .order_by(Task.next_at).limit(limit))
    with db.atomic():
        rows = list(Task.update(
            lease_owner=owner, lease_until=now + ttl, lease_token=token,
            attempts=Task.attempts + 1, updated_at=now,
        ).where(Task.key.in_(keys), _waiting_tasks(now)).returning(Task).execute())
    return token, rows


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


