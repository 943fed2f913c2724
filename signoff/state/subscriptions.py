"""An MCP Events subscription's rows: pending, active, lapsed, ended (admin/subscriptions.py)."""

from ..models import Subscription
from .moves import check_edge, guarded
from .statuses import SUBSCRIPTION_EDGES, SubscriptionStatus as S


def move_subscription(row_id, sources, target, now, token=None, **fields):
    """Move subscription row ``row_id`` like ``move_task``; ``Fenced`` if not."""
    check_edge(SUBSCRIPTION_EDGES, sources, target)
    guarded(Subscription, Subscription.id == row_id, sources, token, status=target,
             updated_at=now, **fields)


def new_subscription(now, **fields):
    """A ``pending`` subscription row, written before the server is asked (its
    verification request must find the row); returns the row."""
    return Subscription.create(status=S.PENDING, created_at=now, updated_at=now, **fields)
