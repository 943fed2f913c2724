"""Read-only views for the operator: events, tasks, history, audit and stats."""

from peewee import fn

from . import batching, gaps
from .approval import get_task
from .models import Attempt, Audit, DeadLetter, Delivery, Task
from .retention import purged_at


def delivery_row(d):
    """A delivery as ``signoff events`` shows it."""
    return {"delivery": d.id, "event_id": d.event_id, "monitor": d.monitor,
            "status": d.status, "outcome": d.outcome, "task_key": d.task_key,
            "attempts": d.attempts, "last_code": d.last_code}


def events(limit=None, status=None):
    """Deliveries, oldest first."""
    query = Delivery.select().order_by(Delivery.id)
    if status:
        query = query.where(Delivery.status == status)
    if limit:
        query = query.limit(limit)
    return [delivery_row(d) for d in query]


def task_row(t):
    """A task as ``signoff tasks list`` shows it."""
    return {"key": t.key, "monitor": t.monitor, "record_id": t.record_id,
            "version": t.version, "status": t.status, "code": t.code,
            "parked": t.parked, "outcome_unknown": t.outcome_unknown,
            "attempts": t.attempts, "updated_at": t.updated_at}


def tasks(status=None):
    """Tasks, oldest first, optionally of one status."""
    query = Task.select().order_by(Task.created_at, Task.key)
    if status:
        query = query.where(Task.status == status)
    return [task_row(t) for t in query]


def describe(t):
    """A plain-words reading of a task's state, for people."""
    if t.status == "uncertain" and t.parked:
        return f"uncertain, may have been written; parked ({t.code}): not resolved automatically"
    if t.parked:
        return f"parked by the gate ({t.code}): fix the cause, then `signoff tasks retry`"
    if t.status == "uncertain":
        return "uncertain: the receipt is read under the same key before any new write"
    if t.outcome_unknown:
        return f"{t.status}, outcome unknown: the host may have written the result"
    return t.status


def task_detail(key):
    """Everything about one task, with its attempt history as a timeline."""
    t = get_task(key)
    history = [{"at": a.at, "step": a.step, "code": a.code, "worker": a.worker}
               for a in Attempt.select().where(Attempt.kind == "task", Attempt.ref == key)
               .order_by(Attempt.id)]
    events = [{"at": a.at, "code": a.code, "event_id": a.event_id}
              for a in Audit.select().where(Audit.task_key == key).order_by(Audit.seq)]
    purged = purged_at(key)
    if purged is not None:  # retention removed the snapshot and the result
        t.record = t.result = None
    return dict(task_row(t), state=describe(t) if purged is None else f"purged ({t.status})",
                record=t.record, result=t.result,
                digest=t.digest, approved_digest=t.approved_digest,
                approved_by=t.approved_by, approved_at=t.approved_at,
                approval_deadline=t.approval_deadline, write_possible=t.write_possible,
                next_at=t.next_at, lease_owner=t.lease_owner, lease_until=t.lease_until,
                purged=purged is not None, purged_at=purged, covers=batching.covers(key),
                history=history, audit=events)


def audit(limit=None, after=0, latest=None):
    """Audit rows in order; ``latest=N`` gives only the last N."""
    query = Audit.select().where(Audit.seq > after).order_by(Audit.seq)
    if limit:
        query = query.limit(limit)
    if latest:
        query = Audit.select().order_by(Audit.seq.desc()).limit(latest)
        return list(reversed(_audit_rows(query)))
    return _audit_rows(query)


def _audit_rows(query):
    return [{"seq": a.seq, "at": a.at, "monitor": a.monitor, "event_id": a.event_id,
             "task_key": a.task_key, "code": a.code} for a in query]


def _count_by(model, column, *where):
    query = model.select(column, fn.COUNT(model._meta.primary_key)).group_by(column)
    if where:
        query = query.where(*where)
    return {k: n for k, n in query.tuples() if k is not None}


def stats(now):
    """The operator's numbers: states, leases, retries, uncertainty, dead letters, gaps."""
    deliveries = _count_by(Delivery, Delivery.status)
    tasks_ = _count_by(Task, Task.status)
    leased_d = Delivery.select().where(Delivery.status == "processing").count()
    leased_t = Task.select().where(Task.lease_token.is_null(False)).count()
    retrying = Delivery.select(fn.COUNT(Delivery.id), fn.MIN(Delivery.next_at)).where(
        Delivery.status == "retrying").tuples().get()
    task_retries = Task.select(fn.COUNT(Task.key), fn.MIN(Task.next_at)).where(
        Task.status.in_(["approved", "uncertain"]), Task.parked == False,  # noqa: E712
        Task.next_at > now).tuples().get()
    return {
        "at": now,
        "deliveries": deliveries,
        "outcomes": _count_by(Delivery, Delivery.outcome),
        "tasks": tasks_,
        "in_flight": {"deliveries": leased_d, "tasks": leased_t},
        "retries_waiting": {"deliveries": retrying[0], "tasks": task_retries[0],
                            "next_due_in_s": _due(now, retrying[1], task_retries[1])},
        "uncertain": {
            "now": tasks_.get("uncertain", 0),
            "parked_may_be_written": Task.select().where(
                Task.status == "uncertain", Task.parked == True).count(),  # noqa: E712
            "outcome_unknown": Task.select().where(Task.outcome_unknown == True).count(),  # noqa: E712
            "recovered": Task.select().where(Task.status == "done", Task.write_possible == True,
                                             Task.attempts > 1).count(),
        },
        "parked": Task.select().where(Task.parked == True).count(),  # noqa: E712
        "dead_letters": {"total": DeadLetter.select().count(),
                         "not_replayed": DeadLetter.select().where(DeadLetter.replayed == 0).count()},
        "stale_event_gaps": Delivery.select().where(Delivery.outcome == "stale_event").count(),
        "observation_gaps": gaps.summary(),
        "lease_expiries": Attempt.select().where(Attempt.code == "lease_expired").count(),
    }


def _due(now, *times):
    times = [t for t in times if t is not None]
    return max(0.0, min(times) - now) if times else None
