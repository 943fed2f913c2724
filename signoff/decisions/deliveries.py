"""An operator's hand on one delivery: a retry hurried (``signoff events retry``)."""

from ..errors import Refused
from ..models import Delivery, db
from ..rules.names import Actor
from ..state.deliveries import update_delivery
from ..state.history import audit
from ..state.moves import Fenced
from ..state.statuses import DeliveryStatus as D
from ..storage import retried
from ..views import delivery_row


def hurry(rt, delivery_id, by=None, channel="cli"):
    """Make a ``retrying`` delivery due now, audited as a human decision (``retry``).

    The attempt it makes is one of its budget, as the waited-for one would
    have been. Refuses ``unknown_delivery``, and ``not_retrying`` for a
    delivery in any other status (queued and processing ones are being dealt
    with, done and dead ones are over: ``dlq replay`` queues a dead one again).
    Nothing changes on a refusal.
    """
    actor = Actor.of(by, channel)
    if isinstance(delivery_id, bool) or not isinstance(delivery_id, int):
        raise Refused("unknown_delivery", f"no delivery {delivery_id!r}")
    row = Delivery.get_or_none(Delivery.id == delivery_id)
    if row is None:
        raise Refused("unknown_delivery", f"no delivery {delivery_id}")
    now = rt.clock.now()
    try:
        _due_now(row, now, actor)
    except Fenced:
        status = Delivery.get_by_id(row.id).status
        raise Refused("not_retrying", f"delivery {row.id} is {status}, not retrying: only a "
                      "delivery waiting for its next try can be made due now") from None
    rt.wakers.wake("ingest")
    return dict(delivery_row(Delivery.get_by_id(row.id).__data__), next_at=now)


@retried  # a deadlock with a worker's batch is tried again: the write is guarded
def _due_now(row, now, actor):
    with db.atomic():
        update_delivery(row.id, now, [D.RETRYING], next_at=now)
        audit(now, "retry", row.monitor, row.event_id, **actor.audit)
