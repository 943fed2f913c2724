"""Leases: how a worker claims rows, keeps them, and loses them.

A claim is one conditional UPDATE over a batch of waiting rows; it writes the
owner, the expiry and a fresh fencing token, and counts an attempt. Every later
write by that worker names the token, so a worker that was paused past its
lease cannot overwrite the one that took over.
"""

import uuid

from .. import storage
from ..storage import key_in
from ..storage.claims import claimable
from .moves import RELEASED, claim_rows
from .statuses import DeliveryStatus
from ..models import Delivery, Task, db


def new_token():
    """A fencing token no other claim will ever use."""
    return uuid.uuid4().hex


# A row whose last lease expired without an outcome (a suspect) may be what
# killed its worker. Such a suspect is claimed alone: in a batch it would take
# the other rows down with it again, and each of them would be charged an
# attempt until innocent rows ended in the dead letters beside the one that
# kills workers.

def claimed_alone(rows):
    """True when a claim took one suspect on its own (more may be waiting)."""
    return len(rows) == 1 and rows[0].suspect


def claim_deliveries(now, owner, ttl, limit):
    """Claim up to ``limit`` waiting deliveries (a suspect alone); ``(token, rows)``."""
    token, rows = _claim(Delivery, now, owner, ttl, limit)
    rows.sort(key=lambda r: r.id)
    return token, rows


def claim_tasks(now, owner, ttl, limit):
    """Claim up to ``limit`` approved or uncertain tasks due now (a suspect alone)."""
    return _claim(Task, now, owner, ttl, limit)


def _claim(model, now, owner, ttl, limit):
    token = new_token()
    lease = {"lease_owner": owner, "lease_until": now + ttl, "lease_token": token}
    # A claim lost to a power failure is a lease that expired: its rows wait
    # again, and no write was made under its token. So it skips the fsync.
    with storage.unsynced(db):
        rows = (claim_rows(model, True, now, 1, lease)
                or claim_rows(model, False, now, limit, lease))
    return token, rows.instances()


def renew(model, token, now, ttl):
    """Extend every lease held under ``token``; returns how many rows are still ours."""
    return model.update(lease_until=now + ttl).where(model.lease_token == token).execute()


def release(model, keys, token):
    """Drop the leases still held under ``token`` on the rows ``keys``."""
    if keys:
        model.update(**RELEASED).where(key_in(model._meta.primary_key, keys),
                                       model.lease_token == token).execute()


def claimable_counts(now):
    """How many deliveries and tasks a worker could claim right now (the rows the
    claims would take, suspects included: one condition serves both)."""
    deliveries = Delivery.select().where(claimable(Delivery, now)).count()
    tasks = Task.select().where(claimable(Task, now)).count()
    return deliveries, tasks


def expired_deliveries(now):
    """Deliveries whose worker stopped renewing its lease (it crashed or hung)."""
    return list(Delivery.select().where(Delivery.status == DeliveryStatus.PROCESSING,
                                        Delivery.lease_until < now))


def expired_tasks(now):
    """Tasks whose worker stopped renewing its lease."""
    # lease_until is cleared with the token, so the index alone finds them.
    return list(Task.select().where(Task.lease_until < now))


