"""Read-only views for the operator: events, tasks, history, audit and stats.

Listings come in two shapes: a list (the Python API, optionally bounded), and
``listing(...)``: a lazily read page plus the count of rows left out, which the
CLI prints row by row so even ``--all`` runs in constant memory.
"""


from peewee import Case, fn

from .. import storage
from ..steps import drafting, recordbatches
from ..admin import gaps, subscriptions
from ..rules.drafts import draft_diff
from ..rules.retry import TRANSIENT
from . import timing
from .lookup import get_task
from ..errors import Blocked, Refused
from ..models import (Approval, Attempt, Audit, AuditReviewer, DeadLetter, Delivery, Monitor,
                      Notification, Task, WebhookRefusal)
from ..rules.text import hidden_characters
from ..chores.retention import purged_at
from ..state import heartbeats, tallies
from ..state.history import task_entries
from ..state.statuses import DeliveryStatus as D, NotificationStatus as N, TaskStatus as T


def delivery_row(d):
    """A delivery (a row dict) as ``signoff events`` shows it."""
    return {"delivery": d["id"], "event_id": d["event_id"], "monitor": d["monitor"],
            "status": d["status"], "outcome": d["outcome"], "task_key": d["task_key"],
            "attempts": d["attempts"], "last_code": d["last_code"], "last_reason": d["last_reason"]}


def task_row(t):
    """A task (a row dict) as ``signoff tasks list`` shows it."""
    return {"key": t["key"], "monitor": t["monitor"], "record_id": t["record_id"],
            "version": t["version"], "status": t["status"], "code": t["code"],
            "parked": t["parked"], "outcome_unknown": t["outcome_unknown"],
            "attempts": t["attempts"], "updated_at": t["updated_at"], "digest": t["digest"],
            "needs_answers": t["needs_answers"]}


# name -> (model, row function, columns read, order oldest first, status column)
LISTINGS = {
    "events": (Delivery, delivery_row, (Delivery.id, Delivery.event_id, Delivery.monitor,
               Delivery.status, Delivery.outcome, Delivery.task_key, Delivery.attempts,
               Delivery.last_code, Delivery.last_reason), (Delivery.id,), Delivery.status),
    "tasks": (Task, task_row, (Task.key, Task.monitor, Task.record_id, Task.version,
              Task.status, Task.code, Task.parked, Task.outcome_unknown, Task.attempts,
              Task.updated_at, Task.digest, Task.needs_answers), (Task.created_at, Task.key),
              Task.status),
    # Audit and dead-letter rows are shown with their column names as they are
    # (an audit row's reviewer, for logins, is kept beside it).
    "audit": (Audit, dict, (Audit.seq, Audit.at, Audit.monitor, Audit.event_id,
              Audit.task_key, Audit.code, Audit.actor, Audit.channel, Audit.note, Audit.subject,
              AuditReviewer.select(AuditReviewer.reviewer).where(
                  AuditReviewer.seq == Audit.seq).alias("reviewer")), (Audit.seq,), None),
    "dead_letters": (DeadLetter, dict, (
        DeadLetter.id, DeadLetter.kind, DeadLetter.ref, DeadLetter.step, DeadLetter.code,
        DeadLetter.attempts, DeadLetter.first_at, DeadLetter.last_at, DeadLetter.replayed,
        DeadLetter.reason), (DeadLetter.id,), None),
}


def _query(name, status=None, newest_first=False, where=()):
    model, _, columns, order, status_column = LISTINGS[name]
    query = model.select(*columns)
    if status:
        if model is Task and status not in tallies.unsettled(Task):
            # Most tasks are finished: a page of the newest reads the listings' index
            # and skips the others, where the status index would sort them all first.
            status_column = storage.unindexed(status_column)
        query = query.where(status_column == status)
    if where:
        query = query.where(*where)
    return query.order_by(*(c.desc() for c in order) if newest_first else order)


def rows(name, status=None, limit=None, newest_first=False, where=()):
    """A listing as a list (oldest first unless ``newest_first``)."""
    query = _query(name, status, newest_first, where)
    if limit:
        query = query.limit(limit)
    convert = LISTINGS[name][1]
    return [convert(r) for r in query.dicts()]


def listing(name, status=None, limit=None):
    """``(rows, more)`` for the CLI: newest first, read lazily; ``limit=None`` is all.

    ``rows`` is an iterator over a server-side cursor (rows are not cached), and
    ``more`` the number of rows beyond ``limit`` (0 with no limit).
    """
    query = _query(name, status, newest_first=True)
    more = 0
    if limit:
        total = (task_total(status) if name == "tasks" else delivery_total(status)
                 if name == "events" else query.order_by().count())
        more = max(0, total - limit)
        query = query.limit(limit)
    convert = LISTINGS[name][1]
    return (convert(r) for r in query.dicts().iterator()), more


def events(limit=None, status=None, newest_first=False):
    """Deliveries, oldest first unless ``newest_first``."""
    return rows("events", status, limit, newest_first)


def tasks(status=None, limit=None, newest_first=False):
    """Tasks, oldest first unless ``newest_first``, optionally of one status."""
    return rows("tasks", status, limit, newest_first)


def monitor_tasks(monitor_id, status=None, limit=100):
    """One monitor's tasks, oldest first, optionally of one status."""
    query = Task.select().where(Task.monitor == monitor_id)
    if status is not None:
        query = query.where(Task.status == status)
    return [task_row(t.__data__) for t in query.order_by(Task.created_at, Task.key).limit(limit)]


def task_page(status=None, monitor=None, parked=False, monitors=None, limit=50, offset=0):
    """``(rows, more)``: one page of tasks, newest first, as the review pages filter them.

    ``monitors`` (a set) keeps only those monitors' tasks (a limited reviewer's);
    ``more`` counts the rows after this page.
    """
    where = []
    if monitor:
        where.append(Task.monitor == monitor)
    if parked:
        where.append(Task.parked == True)  # noqa: E712
    if monitors is not None:
        # One monitor's page reads its index in order; of several, the newest of all
        # are read and the others' skipped (an IN list's rows would be sorted).
        column = Task.monitor if len(monitors) == 1 else storage.unindexed(Task.monitor)
        where.append(column.in_(sorted(monitors)))
    query = _query("tasks", status, newest_first=True, where=where)
    more = max(0, task_total(status, monitor, parked, monitors) - offset - limit)
    convert = LISTINGS["tasks"][1]
    return [convert(r) for r in query.limit(limit).offset(offset).dicts()], more


def task_total(status=None, monitor=None, parked=False, monitors=None):
    """How many tasks the task listings' filters keep: the tallies for the statuses a
    task never leaves, the rows themselves for the others."""
    statuses = [T(status)] if status else list(T)
    if monitor is not None:
        monitors = {monitor} & set(monitors) if monitors is not None else {monitor}
    live = [s for s in statuses if s in tallies.unsettled(Task)]
    total = 0
    if live:
        query = Task.select().where(Task.status.in_(live))
        if monitors is not None:  # found by status: the few not finished
            query = query.where(storage.unindexed(Task.monitor).in_(sorted(monitors)))
        if parked:
            query = query.where(Task.parked == True)  # noqa: E712
        total += query.count()
    settled = [s for s in statuses if s not in tallies.unsettled(Task)]
    if settled:
        total += sum(tallies.counts("task", "parked" if parked else "", settled,
                                    monitors).values())
    return total


def delivery_total(status=None):
    """How many deliveries the events listing keeps (as ``task_total``)."""
    statuses = [D(status)] if status else list(D)
    live = [s for s in statuses if s in tallies.unsettled(Delivery)]
    total = Delivery.select().where(Delivery.status.in_(live)).count() if live else 0
    return total + sum(n for (s, _), n in tallies.by_detail("delivery").items()
                       if s in statuses)


def metric_counts(now):
    """What ``/metrics`` adds to ``stats``: attempts by step and code, webhook refusals
    and notifications by code and status, and the oldest ready task's age."""
    oldest = Task.select(fn.MIN(Task.created_at)).where(Task.status == T.READY).scalar()
    return {
        "attempts": sorted((step, code, n)
                           for (step, code), n in tallies.by_detail("attempt").items()),
        "refusals": list(WebhookRefusal.select(WebhookRefusal.code, fn.SUM(WebhookRefusal.count))
                         .group_by(WebhookRefusal.code).tuples()),
        "notifications": _notification_counts(),
        "oldest_ready_s": max(0.0, now - oldest) if oldest is not None else 0.0,
        "decision_seconds": timing.decision_seconds(),
    }


def _notification_counts():
    counts = dict(Notification.select(Notification.status, fn.COUNT(Notification.task_key))
                  .where(Notification.status.in_(tallies.unsettled(Notification)))
                  .group_by(Notification.status).tuples())
    for (status, _), n in tallies.by_detail("notification").items():
        counts[status] = counts.get(status, 0) + n
    return counts


def review_list(status, monitor=None, parked=False, monitors=None, limit=200):
    """``(rows, counts)`` for the review pages' task list, oldest first: ``status``
    (or ``"all"``), one ``monitor``, only ``parked`` ones, only ``monitors`` (a limited
    reviewer's); ``counts`` by status. A ready task's row carries its draft, whether it
    holds hidden characters (bulk approval refuses those) and its ``quorum``."""
    query = Task.select(Task.key, Task.monitor, Task.record_id, Task.version, Task.status,
                        Task.code, Task.parked, Task.outcome_unknown, Task.digest,
                        Task.updated_at, Task.created_at, Task.result, Task.needs_answers)
    # The few tasks of a status not finished are found by status; a finished status
    # or all of them, in the listings' order, skipping the others.
    by_status = status != "all" and status in tallies.unsettled(Task)
    status_column = Task.status if by_status else storage.unindexed(Task.status)
    monitor_column = storage.unindexed(Task.monitor) if by_status else Task.monitor
    if status != "all":
        query = query.where(status_column == status)
    if monitor:
        query = query.where(monitor_column == monitor)
    if parked:
        query = query.where(Task.parked == True)  # noqa: E712
    if monitors is not None:
        query = query.where(monitor_column.in_(sorted(monitors)))
    tasks = list(query.order_by(Task.created_at, Task.key).limit(limit))
    quorum = _quorum([t for t in tasks if t.status == T.READY])
    rows = [{"key": t.key, "monitor": t.monitor, "record_id": t.record_id, "version": t.version,
             "status": t.status, "state": describe(t), "parked": t.parked, "digest": t.digest,
             "may_be_written": t.status == T.UNCERTAIN or t.outcome_unknown,
             "needs_answers": t.needs_answers, "updated_at": t.updated_at,
             "quorum": quorum.get(t.key), **_ready_draft(t)}
            for t in tasks]
    return rows, _counts_by_status(monitors)


def _counts_by_status(monitors):
    """Tasks by status (of ``monitors`` only, when given), as ``task_total`` counts them."""
    counted = (Task.select(Task.status, fn.COUNT(Task.key)).where(Task.status.in_(tallies.unsettled(Task)))
               .group_by(Task.status))
    if monitors is not None:  # found by status, as in ``task_total``
        counted = counted.where(storage.unindexed(Task.monitor).in_(sorted(monitors)))
    counts = dict(counted.tuples())
    for (_, status), n in tallies.counts("task", monitors=monitors).items():
        counts[status] = counts.get(status, 0) + n
    return counts


def _quorum(ready):
    """``{key: {"given", "needed"}}`` for ``ready`` tasks: the approvals of each one's
    current digest (as ``decisions`` counts them) and its monitor's quorum; two reads
    for the whole list."""
    if not ready:
        return {}
    needed = dict(Monitor.select(Monitor.id, Monitor.approvals)
                  .where(Monitor.id.in_(sorted({t.monitor for t in ready}))).tuples())
    given = dict(Approval.select(Approval.task_key, fn.COUNT(Approval.id))
                 .join(Task, on=(Task.key == Approval.task_key) & (Task.digest == Approval.digest))
                 .where(Approval.task_key.in_([t.key for t in ready]))
                 .group_by(Approval.task_key).tuples())
    return {t.key: {"given": given.get(t.key, 0), "needed": needed.get(t.monitor) or 1}
            for t in ready}


def _ready_draft(task):
    result = task.result if task.status == T.READY and isinstance(task.result, dict) else {}
    draft = result.get("draft")
    if not isinstance(draft, str):
        return {"draft": None, "hidden": False}
    return {"draft": draft, "hidden": bool(hidden_characters(draft))}


def dead_letters(limit=None, newest_first=False, monitors=None):
    """Dead letters, oldest first unless ``newest_first``; ``monitors``' alone if given."""
    where = () if monitors is None else (dead_letters_of(monitors),)
    return rows("dead_letters", None, limit, newest_first, where)


def delivery_detail(delivery_id, monitors=None):
    """One delivery as ``events`` shows it, with its event's fields and attempt history;
    ``monitors`` (a limited reviewer's): another monitor's delivery is unknown."""
    d = Delivery.get_or_none(Delivery.id == delivery_id, *(
        () if monitors is None else (Delivery.monitor.in_(sorted(monitors)),)))
    if d is None:
        raise Refused("unknown_delivery", f"no delivery {delivery_id}")
    return dict(delivery_row(d.__data__), name=d.name, document=d.document,
                record_id=d.record_id, occurred=d.occurred, accepted_at=d.accepted_at,
                updated_at=d.updated_at, history=_history("delivery", str(d.id)))


def _history(kind, ref):
    """The attempts at a delivery or task, oldest first."""
    return [{"at": a.at, "step": a.step, "code": a.code, "worker": a.worker}
            for a in Attempt.select().where(Attempt.kind == kind, Attempt.ref == ref)
            .order_by(Attempt.id)]


def describe(t):
    """A plain-words reading of a task's state, for people."""
    if t.status == T.UNCERTAIN and t.parked:
        return f"uncertain, may have been written; parked ({t.code}): not resolved automatically"
    if t.parked:
        return f"parked by the gate ({t.code}): fix the cause, then `signoff tasks retry`"
    if t.status == T.UNCERTAIN:
        return "uncertain: the receipt is read under the same key before any new write"
    if t.outcome_unknown:
        return f"{t.status}, outcome unknown: the host may have written the result"
    return t.status


def task_detail(key, monitors=None):
    """Everything about one task, with its attempt history as a timeline.

    ``key`` may be a unique prefix. ``draft_changes`` is a unified diff of the
    last earlier draft against the current one (null when there is none).
    ``monitors`` (a limited reviewer's): another monitor's task is unknown.
    """
    t = get_task(key, monitors)
    key = t.key
    history = _history("task", key)
    events = [{"at": a.at, "code": a.code, "event_id": a.event_id, "actor": a.actor,
               "channel": a.channel, "note": a.note, "subject": a.subject,
               "for": (a.data or {}).get("for") if isinstance(a.data, dict) else None}
              for a in task_entries(key)]
    previous = list(t.previous_drafts or [])
    purged = purged_at(key)
    if purged is not None:  # retention removed the snapshot and the result
        t.record = t.result = None
    state = describe(t) if purged is None else f"purged ({t.status})"
    detail = dict(task_row(t.__data__), state=state,
                open_questions=list((t.result or {}).get("open_questions") or []),
                record=t.record, result=t.result, draft_meta=t.draft_meta,
                digest=t.digest, approved_digest=t.approved_digest,
                approved_by=t.approved_by, approved_at=t.approved_at,
                approval_deadline=t.approval_deadline, write_possible=t.write_possible,
                next_at=t.next_at, lease_owner=t.lease_owner, lease_until=t.lease_until,
                superseded_by=t.superseded_by, previous_drafts=previous,
                draft_changes=draft_changes(previous[-1] if previous else None, t),
                purged=purged is not None, purged_at=purged, covers=recordbatches.covers(key),
                history=history, audit=events, **decisions(t))
    detail["hidden_characters_by_field"] = hidden_by_field(detail)
    detail["timeline"] = timeline(events, history)
    detail["may_be_written"] = bool(t.status == T.UNCERTAIN or t.outcome_unknown)
    return detail


def who(identity, channel, note=None, for_reviewer=None):
    """An identity as every face shows a decision's: ``operator:ana (cli, note "on call")``,
    a delegate's ``bob for ana (slack)``."""
    shown = identity if for_reviewer is None else f"{identity} for {for_reviewer}"
    return f"{shown} ({channel}" + (f', note "{note}")' if note else ")")


def timeline(audit, history):
    """A task's or a delivery's history as every face shows it, oldest first: rows of
    ``{at, kind, code, who}`` (``kind``: ``audit`` or ``attempt STEP``; ``who``: the
    decision's identity and subject, the event, or the worker)."""
    rows = [{"at": a["at"], "kind": "audit", "code": a["code"],
             "who": " ".join(filter(None, [who(a["actor"], a["channel"], a.get("note"),
                                               a.get("for"))
                                           if a.get("actor") else a.get("event_id"),
                                           a.get("subject")]))} for a in audit]
    rows += attempt_rows(history)
    # Sorted by time alone: rows of one instant keep the audit log's order.
    return sorted(rows, key=lambda r: r["at"])


def attempt_rows(history):
    """Attempt history as timeline rows (see ``timeline``)."""
    return [{"at": h["at"], "kind": "attempt " + h["step"], "code": h["code"],
             "who": h["worker"] or ""} for h in history]


def current_source(rt, task):
    """``(record now, problem)`` of a task's source, read from the host for a person
    deciding: the record (``None`` when it could not be read) and why not (a code)."""
    try:
        return rt.host().get(task["record_id"]), None
    except Blocked as exc:
        return None, exc.code
    except TRANSIENT:
        return None, "host_unavailable"
    except Exception as exc:  # a host bug shows to the person instead of failing the view
        return None, type(exc).__name__


# The fields of a task's detail that a person reads (drafts, edits, the record, reasons,
# reviewers' names, the monitor id, the drafter's metadata), whose hidden characters
# ``hidden_by_field`` lists.
PERSON_READ = ("monitor", "record_id", "record", "result", "draft_meta", "open_questions",
               "edits", "previous_drafts", "draft_changes", "approvals", "approved_by",
               "rejected_by", "rejected_for", "reject_reason", "audit")


def hidden_by_field(detail):
    """``{field: ["U+XXXX", …]}`` for each ``PERSON_READ`` field of a task's detail: the
    hidden characters of every string it holds, keys included (``[]`` when none)."""
    return {name: hidden_characters("".join(_strings(detail.get(name)))) for name in PERSON_READ}


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def decisions(t):
    """Who decided what on task ``t``: its quorum, its edits, its rejection, and the
    hidden characters its draft holds (``⟨U+XXXX⟩`` on every face)."""
    needed = Monitor.select(Monitor.approvals).where(Monitor.id == t.monitor).scalar() or 1
    # A signed approval shows its statement and signature (docs/concepts.md, "Signed approvals").
    given = [{"by": a.by, "for": a.for_reviewer, "channel": a.channel, "at": a.at,
              "note": a.note,
              **({"statement": a.statement, "signature": a.signature} if a.statement else {})}
             for a in Approval.select().where(
        Approval.task_key == t.key, Approval.digest == t.digest).order_by(Approval.at, Approval.id)]
    edits = list(t.edits or [])
    draft = t.result.get("draft") if isinstance(t.result, dict) else None
    return {"approvals": given, "approvals_needed": needed,
            "approvals_missing": max(0, needed - len(given)) if t.status == T.READY else 0,
            "edits": edits, "drafted_digest": edits[0]["from_digest"] if edits else t.digest,
            "rejected_by": t.rejected_by, "rejected_for": t.rejected_for,
            "reject_reason": t.reject_reason,
            **({"reject_proof": t.reject_proof} if t.reject_proof else {}),
            "hidden_characters": hidden_characters(draft)}


def draft_changes(previous, task):
    """A unified diff of an earlier draft's text against the task's, or ``None``."""
    if previous is None:
        return None
    return draft_diff(_draft_text(previous.get("result")), _draft_text(task.result),
                      previous.get("digest", ""), task.digest)


def _draft_text(result):
    draft = result.get("draft") if isinstance(result, dict) else None
    return draft if isinstance(draft, str) else ""


def audit(limit=None, after=0, latest=None, newest_first=False):
    """Audit rows in order; ``latest=N`` gives only the last N (still oldest first)."""
    if latest:
        return list(reversed(rows("audit", limit=latest, newest_first=True)))
    return rows("audit", limit=limit, newest_first=newest_first, where=(Audit.seq > after,))


def stats(now, tokens_per_hour=None):
    """The operator's numbers: states, leases, retries, uncertainty, dead letters, gaps,
    and the drafter's calls and tokens (``tokens_per_hour``: the per-monitor budget).

    Read them inside ``storage.read_snapshot`` (``Signoff.stats`` does) so that
    they agree with each other even while workers commit.
    """
    deliveries, outcomes = _delivery_tallies()
    tasks_, flags = _task_tallies()
    retrying = Delivery.select(fn.COUNT(Delivery.id), fn.MIN(Delivery.next_at)).where(
        Delivery.status == D.RETRYING).tuples().get()
    task_retries = Task.select(fn.COUNT(Task.key), fn.MIN(Task.next_at)).where(
        Task.status.in_([T.APPROVED, T.UNCERTAIN]), Task.parked == False,  # noqa: E712
        Task.next_at > now).tuples().get()
    stale = outcomes.get("stale_event", 0)
    return {
        "at": now,
        "deliveries": deliveries,
        "outcomes": outcomes,
        "tasks": tasks_,
        "oldest_waiting": timing.oldest_waiting(now),
        "in_flight": {"deliveries": deliveries.get("processing", 0), "tasks": flags["leased"]},
        "retries_waiting": {"deliveries": retrying[0], "tasks": task_retries[0],
                            "next_due_in_s": _due(now, retrying[1], task_retries[1])},
        "uncertain": {
            "now": tasks_.get("uncertain", 0),
            "parked_may_be_written": flags["parked_uncertain"],
            "outcome_unknown": flags["outcome_unknown"],
            "recovered": flags["recovered"],
        },
        "parked": flags["parked"],
        "paused": _paused(),
        "dead_letters": {"total": DeadLetter.select().count(),
                         "not_replayed": DeadLetter.select().where(DeadLetter.replayed == 0).count()},
        "stale_event_gaps": stale,
        "observation_gaps": gaps.summary(stale_events=stale),
        "lease_expiries": sum(n for (_, code), n in tallies.by_detail("attempt").items()
                              if code == "lease_expired"),
        "workers": heartbeats.summary(now),
        "subscriptions": subscriptions.summary(),
        "drafter": drafting.summary(tokens_per_hour, now),
    }


def _paused():
    """Paused monitors and the deliveries waiting for them to be unpaused."""
    ids = [m for (m,) in Monitor.select(Monitor.id).where(Monitor.paused_at.is_null(False))
           .order_by(Monitor.id).tuples()]
    held = Delivery.select().where(Delivery.monitor.in_(ids), Delivery.status.in_(
        ["queued", "retrying"])).count() if ids else 0
    return {"monitors": ids, "deliveries_waiting": held}


# The rows not settled, counted in one pass over each table (they are few: they
# wait for a worker or a person), and the settled ones from their tallies: never
# the whole history (a COUNT per figure over every finished row took ~1 s per
# `watch` refresh at 100,000 finished tasks; one pass, 0.3 s at 200,000).
def _delivery_tallies():
    deliveries, outcomes = {}, {}
    live = (Delivery.select(Delivery.status, Delivery.outcome, fn.COUNT(Delivery.id))
            .where(Delivery.status.in_(tallies.unsettled(Delivery)))
            .group_by(Delivery.status, Delivery.outcome).tuples())
    for status, outcome, n in [*live, *((s, o or None, n) for (s, o), n
                                        in tallies.by_detail("delivery").items())]:
        deliveries[status] = deliveries.get(status, 0) + n
        if outcome is not None:
            outcomes[outcome] = outcomes.get(outcome, 0) + n
    return deliveries, outcomes


_TASK_FLAGS = {
    "leased": Task.lease_token.is_null(False),
    "parked_uncertain": (Task.status == T.UNCERTAIN) & (Task.parked == True),  # noqa: E712
    "outcome_unknown": Task.outcome_unknown == True,  # noqa: E712
    "recovered": (Task.status == T.DONE) & (Task.write_possible == True)  # noqa: E712
                 & (Task.attempts > 1),
    "parked": Task.parked == True,  # noqa: E712
}


def _task_tallies():
    sums = [fn.SUM(Case(None, [(flag, 1)], 0)) for flag in _TASK_FLAGS.values()]
    tasks_, flags = {}, dict.fromkeys(_TASK_FLAGS, 0)
    query = (Task.select(Task.status, fn.COUNT(Task.key), *sums)
             .where(Task.status.in_(tallies.unsettled(Task))).group_by(Task.status))
    for status, n, *counts in query.tuples():
        tasks_[status] = n
        for name, count in zip(_TASK_FLAGS, counts):
            flags[name] += int(count or 0)
    for (_, status), n in tallies.counts("task").items():
        tasks_[status] = tasks_.get(status, 0) + n
    for flag in ("parked", "outcome_unknown", "recovered"):
        flags[flag] += sum(tallies.counts("task", flag).values())
    return tasks_, flags


def _due(now, *times):
    times = [t for t in times if t is not None]
    return max(0.0, min(times) - now) if times else None


def dead_letter_row(letter):
    """A dead letter as the CLI shows it."""
    return {"id": letter.id, "kind": letter.kind, "ref": letter.ref, "step": letter.step,
            "code": letter.code, "attempts": letter.attempts, "first_at": letter.first_at,
            "last_at": letter.last_at, "replayed": letter.replayed, "reason": letter.reason}


def dead_letters_of(monitors):
    """The condition on ``DeadLetter`` that keeps the letters of ``monitors``' deliveries,
    tasks and notifications (what a reviewer limited to them may see)."""
    monitors = sorted(monitors)
    tasks = Task.select(Task.key).where(Task.monitor.in_(monitors))
    deliveries = Delivery.select(Delivery.id.cast("TEXT")).where(Delivery.monitor.in_(monitors))
    notes = Notification.select(Notification.task_key).where(
        fn.COALESCE(Notification.task, Notification.task_key).in_(tasks))
    return (((DeadLetter.kind == "delivery") & DeadLetter.ref.in_(deliveries))
            | ((DeadLetter.kind == "task") & DeadLetter.ref.in_(tasks))
            | ((DeadLetter.kind == "notification") & DeadLetter.ref.in_(notes)))
