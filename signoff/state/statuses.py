"""The statuses of every table that has one, and the moves allowed between them.

The values are what the database and the CLI hold; every face and step names a
status by these enums, never by its text. The writes themselves are the other
modules of ``state``: one per table.
"""

from enum import StrEnum


class DeliveryStatus(StrEnum):
    """Where a delivery is (the values are what the database and the CLI hold)."""

    QUEUED = "queued"
    PROCESSING = "processing"
    RETRYING = "retrying"
    DONE = "done"
    DEAD = "dead"


class TaskStatus(StrEnum):
    """Where a task is in its life cycle (docs/concepts.md)."""

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
    """Where a notification of the outbox is (chores/notify.py sends them)."""

    PENDING = "pending"
    SENT = "sent"
    DEAD = "dead"


class SubscriptionStatus(StrEnum):
    """Where an MCP Events subscription is (admin/subscriptions.py)."""

    PENDING = "pending"  # asked for; the server has not answered yet
    ACTIVE = "active"
    LAPSED = "lapsed"  # its refreshBefore passed without a refresh
    ENDED = "ended"


D, T, N, S = DeliveryStatus, TaskStatus, NotificationStatus, SubscriptionStatus


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
    # A cancel that lands while a worker writes the task: the worker's receipt
    # confirms the write (see cancel_tasks).
    (T.CANCELLED, T.DONE),
}


NOTIFICATION_EDGES = {(N.PENDING, N.SENT), (N.PENDING, N.DEAD), (N.DEAD, N.PENDING)}


SUBSCRIPTION_EDGES = {
    (S.PENDING, S.ACTIVE), (S.PENDING, S.ENDED),
    (S.ACTIVE, S.LAPSED), (S.LAPSED, S.ACTIVE), (S.ACTIVE, S.ENDED), (S.LAPSED, S.ENDED),
    # The same status again: a refresh, a failed try of the chore, an unsubscribe confirmed.
    (S.ACTIVE, S.ACTIVE), (S.LAPSED, S.LAPSED), (S.ENDED, S.ENDED),
}


SUBSCRIPTION_LIVE = (S.PENDING, S.ACTIVE, S.LAPSED)


# Statuses from which a task can still move without a human; a task still open;
# deliveries waiting for a worker; deliveries not finished.
TASK_ACTIVE = (T.APPROVED, T.UNCERTAIN)
TASK_OPEN = (T.READY, T.APPROVED, T.UNCERTAIN)
DELIVERY_WAITING = (D.QUEUED, D.RETRYING)
DELIVERY_PENDING = (D.QUEUED, D.PROCESSING, D.RETRYING)
