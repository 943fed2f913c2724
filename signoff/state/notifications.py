"""The notify outbox's rows: born ``pending``, sent or dead (chores/notify.py sends them)."""

from ..models import Notification
from ..storage import insert_rows
from .moves import check_edge, guarded
from .statuses import NOTIFICATION_EDGES, NotificationStatus as N


def move_notification(task_key, sources, target, now, **fields):
    """Move the notification of ``task_key`` like ``move_task``; ``Fenced`` if not."""
    check_edge(NOTIFICATION_EDGES, sources, target)
    guarded(Notification, Notification.task_key == task_key, sources, None, status=target,
             updated_at=now, **fields)


def new_notifications(keys, now):
    """``pending`` notifications for task ``keys`` (one per task, ever); the keys added."""
    return [k for (k,) in insert_rows(Notification, [
        {"task_key": k, "status": N.PENDING, "next_at": now, "created_at": now,
         "updated_at": now} for k in keys], ignore_conflicts=True, returning=("task_key",))]


def new_decision_notifications(rows, now):
    """``pending`` notifications of audit rows: ``(outbox key, type, task key, audit seq)``
    each, and an email's addressee after them (one per key, ever); the keys added."""
    return [k for (k,) in insert_rows(Notification, [
        {"task_key": k, "type": kind, "task": task, "audit_seq": seq,
         "reviewer": to[0] if to else None, "status": N.PENDING, "next_at": now,
         "created_at": now, "updated_at": now} for k, kind, task, seq, *to in rows],
        ignore_conflicts=True, returning=("task_key",))]


def hold_notification(task_key, next_at, until):
    """Push a pending notification's ``next_at`` from ``next_at`` to ``until`` while one
    sender tries it; False when another sender holds it already."""
    return bool(Notification.update(next_at=until).where(
        Notification.task_key == task_key, Notification.status == N.PENDING,
        Notification.next_at == next_at).execute())


def update_notification(task_key, now, **fields):
    """Change a notification's fields other than its status (a failed try)."""
    Notification.update(updated_at=now, **fields).where(
        Notification.task_key == task_key).execute()
