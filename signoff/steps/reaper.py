"""The reaper: finds what a crash orphaned and makes it claimable again.

It runs at worker start and then every second from the worker's own loop (Huey's
periodic tasks run at most once a minute). Each pass is safe to run in several
processes at once: every change is a guarded UPDATE.
"""

from ..state.leases import claimable_counts, expired_deliveries, expired_tasks
from ..state.deliveries import move_delivery
from ..state.history import audit, bury, record_attempts
from ..state.moves import EXPIRED, Fenced, RELEASED
from ..state.statuses import TASK_ACTIVE, TASK_OPEN, DeliveryStatus as D, TaskStatus as T
from ..state.tasks import may_be_written, maybe_written, move_task, update_task
from ..models import Delivery, Monitor, Task, db
from ..rules.retry import failed_try

# The reason a delivery's attempt failed when its lease ran out before its outcome.
LEASE_EXPIRED = "its worker's lease ran out before the attempt had an outcome (the worker " \
    "died, hung or was killed)"


def reap(rt):
    """One pass; returns counts of what it changed and woke."""
    now = rt.clock.now()
    summary = {"deliveries_released": 0, "tasks_released": 0, "expired": 0,
               "parked": 0, "woken": 0}
    for row in expired_deliveries(now):
        summary["deliveries_released"] += _release_delivery(rt, row, now)
    for task in expired_tasks(now):
        summary["tasks_released"] += _release_task(rt, task, now)
    summary["expired"], summary["parked"] = _expire(now)
    summary["woken"] = _wake(rt, now)
    return summary


def _release_delivery(rt, row, now):
    # The worker that held this lease died or hung: that was an attempt.
    failures, delay = failed_try(row.failures, "read", rt.config.retry)
    try:
        with db.atomic():
            _still_expired(Delivery, Delivery.id == row.id, row.lease_token, now)
            if delay is None:
                move_delivery(row.id, [D.PROCESSING], D.DEAD, now, row.lease_token,
                              last_code="lease_expired", last_reason=LEASE_EXPIRED,
                              failures=failures, **EXPIRED)
                bury("delivery", row.id, "read", "lease_expired", row.attempts, now,
                     LEASE_EXPIRED)
                audit(now, "dead_letter", row.monitor, row.event_id)
            else:
                move_delivery(row.id, [D.PROCESSING], D.RETRYING, now, row.lease_token,
                              next_at=now + delay, last_code="lease_expired",
                              last_reason=LEASE_EXPIRED, failures=failures, **EXPIRED)
            record_attempts([{"kind": "delivery", "ref": str(row.id), "at": now, "step": "read",
                              "code": "lease_expired", "worker": row.lease_owner}])
    except Fenced:
        return 0
    return 1


def _release_task(rt, task, now):
    failures, delay = failed_try(task.failures, "submit", rt.config.retry)
    try:
        with db.atomic():
            _still_expired(Task, Task.key == task.key, task.lease_token, now)
            if task.status not in TASK_ACTIVE:
                # Ended while leased (a cancel keeps the lease of a write in
                # flight, for the worker to confirm): only the lease is left to drop.
                update_task(task.key, now, [task.status], task.lease_token, **RELEASED)
            elif delay is None:
                move_task(task.key, [task.status], T.DEAD, now, task.lease_token,
                          code="lease_expired", outcome_unknown=task.write_possible,
                          failures=failures, **EXPIRED)
                bury("task", task.key, "submit", "lease_expired", task.attempts, now)
                audit(now, "dead_letter", task.monitor, task_key=task.key)
            else:
                target = T.UNCERTAIN if maybe_written(task) else task.status
                move_task(task.key, [task.status], target, now, task.lease_token,
                          next_at=now + delay, code="lease_expired", failures=failures,
                          **EXPIRED)
            record_attempts([{"kind": "task", "ref": task.key, "at": now, "step": "submit",
                              "code": "lease_expired", "worker": task.lease_owner}])
    except Fenced:
        return 0
    return 1


def _still_expired(model, which, token, now):
    # The holder may have renewed since the row was read; its lease stands then.
    if not model.select().where(which, model.lease_token == token,
                                model.lease_until < now).exists():
        raise Fenced(token)


def _expire(now):
    # Read first, write only when something is due: an idle pass every second
    # must not queue for the write lock behind the workers' batches.
    deadline_passed = Task.select(Task.key, Task.monitor).where(
        Task.status == T.READY, Task.approval_deadline <= now)
    gone = [m.id for m in Monitor.select(Monitor.id).where(Monitor.expires_at <= now,
                                                           Monitor.active == True)]  # noqa: E712
    orphans = _orphans(gone) if gone else None
    if not (deadline_passed.exists() or (orphans is not None and orphans.exists())):
        return 0, 0
    expired = parked = 0
    with db.atomic():
        for task in deadline_passed:
            if _try(lambda: move_task(task.key, [T.READY], T.EXPIRED, now, code="expired")):
                expired += 1
                audit(now, "expired", task.monitor, task_key=task.key)
        for task in (orphans if orphans is not None else []):
            if maybe_written(task):
                # It may have been written: say so and leave it to a human.
                parked += _try(lambda: update_task(task.key, now, [task.status],
                                                   parked=True, code="expired"))
            elif _try(lambda: move_task(task.key, [task.status], T.EXPIRED, now, code="expired")):
                expired += 1
                audit(now, "expired", task.monitor, task_key=task.key)
    return expired, parked


def _orphans(gone):
    """Open, unleased tasks of expired monitors that a pass still has to end or park."""
    return Task.select().where(Task.monitor.in_(gone), Task.status.in_(list(TASK_OPEN)),
                               Task.lease_token.is_null(),
                               ~(may_be_written() & (Task.parked == True)))  # noqa: E712


def _try(move):
    try:
        move()
        return 1
    except Fenced:
        return 0


def _wake(rt, now):
    deliveries, tasks = claimable_counts(now)
    return rt.wakers.top_up({"ingest": deliveries, "submit": tasks})
