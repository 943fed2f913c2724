"""The life cycles of deliveries, tasks, notifications and subscriptions: the one place a
status is written.

A row is born here with its first status (``new_deliveries``, ``new_tasks``,
``new_notifications``), and every later write to a delivery, task or
notification is made here too. Every move is a guarded UPDATE: the row must be
in an allowed ``from`` status and, when a worker holds it, carry that worker's
lease token. Anything but one row changed means the move did not happen
(another worker, a cancel or a human got there first) and the caller must not
act on it.
"""

from enum import StrEnum

from peewee import fn

from .. import storage
from ..models import (Approval, Attempt, Audit, DeadLetter, Delivery, Inbox, Notification,
                      Subscription, Task, db)
from ..storage import PreparedInsert, insert_rows, key_in, lock_rows, select_tuples


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
    """Where a ``task.ready`` notification is (signoff/notify.py sends them)."""

    PENDING = "pending"
    SENT = "sent"
    DEAD = "dead"


class SubscriptionStatus(StrEnum):
    """Where an MCP Events subscription is (ops/subscriptions.py)."""

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

# Statuses from which a task can still move without a human.
TASK_ACTIVE = (T.APPROVED, T.UNCERTAIN)
TASK_OPEN = (T.READY, T.APPROVED, T.UNCERTAIN)
DELIVERY_WAITING = (D.QUEUED, D.RETRYING)
DELIVERY_PENDING = (D.QUEUED, D.PROCESSING, D.RETRYING)


class Fenced(Exception):
    """The row moved on without us: our lease or our expected status is gone."""


def _check(edges, sources, target):
    for source in sources:
        if (source, target) not in edges:
            raise ValueError(f"no transition {source} -> {target}")


def move_task(key, sources, target, now, token=None, **fields):
    """Move task ``key`` from one of ``sources`` to ``target``; ``Fenced`` if not."""
    _check(TASK_EDGES, sources, target)
    _guarded(Task, Task.key == key, sources, token, status=target, updated_at=now, **fields)


def update_task(key, now, statuses, token=None, **fields):
    """Change non-status fields of a task still in ``statuses`` (and still ours)."""
    _guarded(Task, Task.key == key, statuses, token, updated_at=now, **fields)


def update_delivery(delivery_id, now, statuses, **fields):
    """Change non-status fields of a delivery still in ``statuses`` and held by no
    worker; ``Fenced`` if not."""
    _guarded(Delivery, (Delivery.id == delivery_id) & Delivery.lease_token.is_null(), statuses,
             None, updated_at=now, **fields)


def move_delivery(delivery_id, sources, target, now, token=None, **fields):
    """Move a delivery between statuses under the same rules as ``move_task``."""
    _check(DELIVERY_EDGES, sources, target)
    _guarded(Delivery, Delivery.id == delivery_id, sources, token, status=target,
             updated_at=now, **fields)


def move_notification(task_key, sources, target, now, **fields):
    """Move the notification of ``task_key`` like ``move_task``; ``Fenced`` if not."""
    from ..models import Notification
    _check(NOTIFICATION_EDGES, sources, target)
    _guarded(Notification, Notification.task_key == task_key, sources, None, status=target,
             updated_at=now, **fields)


def move_subscription(row_id, sources, target, now, token=None, **fields):
    """Move subscription row ``row_id`` like ``move_task``; ``Fenced`` if not."""
    _check(SUBSCRIPTION_EDGES, sources, target)
    _guarded(Subscription, Subscription.id == row_id, sources, token, status=target,
             updated_at=now, **fields)


def new_subscription(now, **fields):
    """A ``pending`` subscription row, written before the server is asked (its
    verification request must find the row); returns the row."""
    return Subscription.create(status=S.PENDING, created_at=now, updated_at=now, **fields)


def claim_rows(model, suspect, now, limit, lease):
    """Write ``lease`` on up to ``limit`` waiting rows in one statement.

    Returns the rows claimed as ``storage.Fetched`` (instances once the claim
    has committed).

    A delivery moves from waiting to processing (an edge of the table); a task
    keeps its status and only gains the lease. ``suspect`` claims only rows
    whose last lease expired (see leases.py).
    """
    changes = dict(lease, updated_at=now)
    if model is Delivery:
        _check(DELIVERY_EDGES, DELIVERY_WAITING, D.PROCESSING)
        changes["status"] = D.PROCESSING
    return storage.claim(model, suspect, now, limit, changes)


def _guarded(model, which, statuses, token, **fields):
    query = model.update(**fields).where(which, model.status.in_(list(statuses)))
    if token is not None:
        query = query.where(model.lease_token == token)
    if query.execute() != 1:
        raise Fenced(which)


def prepare_move_deliveries(ids, sources, target, now, token, per_row=None, **fields):
    """Build a move of many deliveries at once under the rules of ``move_delivery``.

    One guarded UPDATE: each row must still be in one of ``sources`` and carry
    ``token``. ``per_row`` maps a field to ``{delivery id: value}`` for values
    that differ by row. ``run()`` it in the writer's transaction: it returns
    the ids that moved; the others are fenced. Building the UPDATE of a batch
    costs more than running it, so a writer that builds it first holds the
    write lock for the statement alone.
    """
    _check(DELIVERY_EDGES, sources, target)
    return PreparedMove(_move_query(Delivery, Delivery.id, ids, sources, target, now, token,
                                    per_row, fields))


def move_tasks(keys, sources, target, now, token=None, where=None, **fields):
    """Move many tasks at once under the rules of ``move_task``; returns the keys moved.

    ``where`` adds a condition every moved row must also meet; with ``keys``
    ``None`` it alone picks the rows.
    """
    return prepare_move_tasks(keys, sources, target, now, token, where, **fields).run()


def prepare_move_tasks(keys, sources, target, now, token=None, where=None, **fields):
    """``move_tasks`` built now, to ``run()`` in the writer's transaction (as
    ``prepare_move_deliveries``)."""
    _check(TASK_EDGES, sources, target)
    return PreparedMove(_move_query(Task, Task.key, keys, sources, target, now, token,
                                    None, fields, where))


def run_moves(moves):
    """Run prepared moves in the caller's transaction; the keys that moved, all together."""
    return set().union(*(move.run() for move in moves))


class PreparedMove:
    """A guarded many-row move, compiled to SQL; ``run()`` returns the keys that moved."""

    def __init__(self, query):
        self.statement = None if query is None else query.sql()

    def run(self):
        """Run the move (in the caller's transaction); the keys of the rows it moved."""
        if self.statement is None:
            return set()
        return {moved for (moved,) in db.execute_sql(*self.statement).fetchall()}


def _move_query(model, pk, ids, sources, target, now, token, per_row, fields, where=None):
    if ids is not None:
        ids = list(ids)
        if not ids:
            return None
    for name, values in (per_row or {}).items():
        distinct = set(values.values())
        fields[name] = (distinct.pop() if len(distinct) == 1
                        else storage.key_case(pk, values, model._meta.fields[name]))
    status = model.status if ids is None else storage.unindexed(model.status)
    query = model.update(status=target, updated_at=now, **fields).where(
        status.in_(list(sources)))
    if ids is not None:
        query = query.where(key_in(pk, ids))
    if token is not None:
        query = query.where(model.lease_token == token)
    if where is not None:
        query = query.where(where)
    return query.returning(pk)


# What a worker writes with an outcome: the lease is dropped, and the row is no
# suspect any more (it got an outcome, so it did not kill its worker).
RELEASED = {"lease_owner": None, "lease_until": None, "lease_token": None, "suspect": False}
# What the reaper writes when a lease expired without an outcome: the row may be
# what killed its worker, so its next claim takes it alone (see leases.py).
EXPIRED = dict(RELEASED, suspect=True)


def may_be_written():
    """The tasks a host may hold a result for: a write was marked possible, or is uncertain."""
    return (Task.status == T.UNCERTAIN) | (Task.write_possible == True)  # noqa: E712


def cancel_tasks(which, now):
    """End the open tasks that ``which`` selects, as a cancel does.

    Returns ``(cancelled, in_flight)``: the keys cancelled, and among them those
    whose write a worker may be making right now. Each kind is one guarded
    UPDATE whose conditions the database checks row by row, so no worker's
    move in between can make the cancel fail:

    - no write can have reached the task: ``cancelled``, its lease dropped (a
      worker holding it is fenced before it marks the write possible);
    - it may have been written and nobody holds it: ``cancelled`` with
      ``outcome_unknown``;
    - it may have been written and a worker holds it (its write is in flight):
      ``cancelled`` with ``outcome_unknown``, keeping the lease, so that worker
      moves it to ``done`` if the receipt confirms the write; anything else
      leaves it as it is (the reaper drops the lease of a worker that died).
    """
    maybe, held = may_be_written(), Task.lease_token.is_null(False)
    ended = {"code": "cancelled", "parked": False}
    cancelled, in_flight = set(), set()
    # On PostgreSQL a worker's outcome may commit between two of the UPDATEs (an
    # in-flight write ending `uncertain` and released after the second, before
    # the third): the pass is made again until it finds no open task left.
    while True:
        moved = move_tasks(None, TASK_OPEN, T.CANCELLED, now, where=which & ~maybe,
                           outcome_unknown=False, **ended, **RELEASED)
        moved |= move_tasks(None, TASK_OPEN, T.CANCELLED, now, where=which & maybe & ~held,
                            outcome_unknown=True, **ended)
        flying = move_tasks(None, TASK_OPEN, T.CANCELLED, now, where=which & maybe & held,
                            outcome_unknown=True, **ended)
        if not moved and not flying:
            return cancelled | in_flight, in_flight
        cancelled |= moved
        in_flight |= flying


# -- births: each row's first status, and the writes that are not moves -----------

def new_deliveries(items, now, traces=None):
    """Insert ``queued`` deliveries for ``(monitor id, Event)`` pairs; their ids, in order.

    ``traces``: the trace carrier of each (see ``tracing.carrier``), kept on its row.
    """
    rows = [dict(ev.as_dict(), monitor=monitor_id, status=D.QUEUED, next_at=now,
                 accepted_at=now, updated_at=now) for monitor_id, ev in items]
    if traces and any(traces):  # untraced rows leave the columns alone
        for row, trace in zip(rows, traces):
            row.update(traceparent=(trace or {}).get("traceparent"),
                       tracestate=(trace or {}).get("tracestate"))
    return [r[0] for r in insert_rows(Delivery, rows, returning=("id",))]


def drop_deliveries(ids):
    """Delete deliveries written in this transaction that must not be kept (a lost race)."""
    if ids:
        Delivery.delete().where(key_in(Delivery.id, ids)).execute()


def new_tasks(rows):
    """``ready`` tasks to insert (keys that exist already are skipped), built now:
    ``run()`` them in the writer's transaction; it returns the keys inserted."""
    return PreparedInsert(Task, [dict(r, status=T.READY) for r in rows],
                          ignore_conflicts=True, returning=("key",))


def new_notifications(keys, now):
    """``pending`` notifications for task ``keys`` (one per task, ever); the keys added."""
    return [k for (k,) in insert_rows(Notification, [
        {"task_key": k, "status": N.PENDING, "next_at": now, "created_at": now,
         "updated_at": now} for k in keys], ignore_conflicts=True, returning=("task_key",))]


def new_decision_notifications(rows, now):
    """``pending`` notifications of decisions: ``(outbox key, type, task key, audit seq)``
    each (one per audit row, ever); the keys added."""
    return [k for (k,) in insert_rows(Notification, [
        {"task_key": k, "type": kind, "task": task, "audit_seq": seq, "status": N.PENDING,
         "next_at": now, "created_at": now, "updated_at": now} for k, kind, task, seq in rows],
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


def relabel_duplicate(delivery_id, monitor, event_id, task_key=None, inbox=False):
    """Say a finished delivery (and, with ``inbox``, its event's inbox row) was a
    duplicate; ``task_key`` links it to the task it duplicates."""
    fields = {"outcome": "duplicate", "last_code": "duplicate"}
    if task_key is not None:
        fields["task_key"] = task_key
    Delivery.update(**fields).where(Delivery.id == delivery_id).execute()
    if inbox:
        Inbox.update(outcome="duplicate").where(Inbox.monitor == monitor,
                                                Inbox.event_id == event_id).execute()


def link_batched(monitor, event_ids, task_key):
    """Link the batched deliveries of ``event_ids`` (and their inbox rows) to their task."""
    Inbox.update(task_key=task_key).where(Inbox.monitor == monitor,
                                          key_in(Inbox.event_id, event_ids)).execute()
    Delivery.update(task_key=task_key).where(Delivery.monitor == monitor,
                                             key_in(Delivery.event_id, event_ids),
                                             Delivery.outcome == "batched").execute()


def still_ours(keys, token):
    """The conditions picking the tasks of ``keys`` still open and leased under ``token``
    (looked up by key: see ``storage.unindexed``)."""
    return (key_in(Task.key, keys), Task.lease_token == token,
            storage.unindexed(Task.status).in_(list(TASK_ACTIVE)))


def mark_write_possible(keys, token, now):
    """Record that a write may now happen on the tasks ``keys`` still leased under
    ``token``; returns the keys marked (a cancel may have taken the others)."""
    marked = Task.update(write_possible=True, updated_at=now).where(
        *still_ours(keys, token)).returning(Task.key)
    return {key for (key,) in marked.tuples().execute()}


def strip_tasks(keys, where):
    """Drop the record snapshots and results of the tasks ``keys`` that still meet
    ``where`` (retention), and the differences their edits kept; returns
    ``[(key, status)]`` of those stripped (who edited stays in the audit log)."""
    return list(Task.update(record={}, result={}, previous_drafts=[], edits=[]).where(
        key_in(Task.key, keys), where).returning(Task.key, Task.status).tuples().execute())


# -- approvals: the quorum ---------------------------------------------------------

def add_approvals(wanted, actor, now, audit_code="approved"):
    """Record ``actor``'s approval of each task in ``wanted`` (``{key: (digest, needed)}``)
    and approve those whose digest now has ``needed`` distinct identities.

    Run in the caller's transaction. The task rows are locked first (PostgreSQL;
    SQLite's transaction holds the write lock since BEGIN), so two approvers at
    once are counted one after the other: never a lost approval, never a second
    move. Only a task still ``ready`` with that very digest counts, and a
    policy's only while the draft is as drafted (no person edited it: an edit
    needs people for every remaining place). Returns ``(counted, approved,
    repeated, stale)``: sets of keys whose approval was added, that moved to
    ``approved``, that the identity had approved already, and that moved on,
    changed digest or were edited meanwhile.
    """
    keys = sorted(wanted)
    policy = actor.channel == "policy"
    columns = (Task.key, Task.status, Task.digest) + ((Task.edits,) if policy else ())
    current = {row[0]: row[1:] for row in select_tuples(lock_rows(
        Task.select(*columns).where(key_in(Task.key, keys)).order_by(Task.key)))} if keys else {}
    live = [k for k in keys if current.get(k, ())[:2] == (T.READY, wanted[k][0])
            and not (policy and current[k][2])]
    stale = set(keys) - set(live)
    counted = {k for (k,) in insert_rows(Approval, [
        {"task_key": k, "digest": wanted[k][0], "by": actor.identity, "channel": actor.channel,
         "at": now, "note": actor.note} for k in live],
        ignore_conflicts=True, returning=("task_key",))} if live else set()
    counts = approval_counts(live)
    complete = [k for k in live if counts.get(k, 0) >= wanted[k][1]]
    # The digest approved is the task's own: its rows are locked and live means
    # unchanged. Named as the column, not value by value: a CASE of one branch a
    # task is read through for every row it updates, quadratic in a bulk approval.
    approved = move_tasks(complete, [T.READY], T.APPROVED, now, approved_digest=Task.digest,
                          approved_by=actor.identity, approved_at=now, next_at=now,
                          code=None) if complete else set()
    rows = [{"at": now, "code": audit_code if k in approved else "approval_added",
             "monitor": None, "event_id": None, "task_key": k, **actor.audit}
            for k in keys if k in counted]
    if rows:
        monitors = dict(select_tuples(Task.select(Task.key, Task.monitor).where(
            key_in(Task.key, [r["task_key"] for r in rows]))))
        insert_rows(Audit, [dict(r, monitor=monitors.get(r["task_key"])) for r in rows])
    return counted, approved, set(live) - counted, stale


def approval_counts(keys):
    """``{key: approvers of its current digest}`` for the task ``keys``."""
    if not keys:
        return {}
    query = (Approval.select(Approval.task_key, fn.COUNT(Approval.id))
             .join(Task, on=(Task.key == Approval.task_key) & (Task.digest == Approval.digest))
             .where(key_in(Approval.task_key, list(keys))).group_by(Approval.task_key))
    return dict(select_tuples(query))


def clear_approvals(key):
    """Forget the approvals of task ``key`` (its draft was edited or drafted again)."""
    Approval.delete().where(Approval.task_key == key).execute()


def withdraw_approvals(policies, now):
    """Forget the places ``policies`` (ended ones' identities) hold in quorums still open.

    Only approvals given through the policy channel: a reviewer's decision is
    never touched, whatever its name. Each withdrawn place leaves an audit row
    (``approval_withdrawn``, its subject the policy), so a count that went down
    says why.
    """
    which = (Approval.by.in_(list(policies)) & (Approval.channel == "policy")
             & Approval.task_key.in_(Task.select(Task.key).where(Task.status == T.READY)))
    gone = list(Approval.select(Approval.id, Approval.task_key, Approval.by).where(which).tuples())
    if not gone:
        return 0
    Approval.delete().where(Approval.id.in_([i for i, _, _ in gone])).execute()
    monitors = dict(select_tuples(Task.select(Task.key, Task.monitor).where(
        key_in(Task.key, list({k for _, k, _ in gone})))))
    insert_rows(Audit, [{"at": now, "code": "approval_withdrawn", "monitor": monitors.get(k),
                         "event_id": None, "task_key": k, "subject": by} for _, k, by in gone])
    return len(gone)


def edit_task(key, reviewed, result, new_digest, edit, now):
    """Replace the result of ready task ``key`` (still at digest ``reviewed``) by an edit.

    ``edit`` is appended to the task's ``edits``; earlier approvals are forgotten.
    Run in the caller's transaction; ``Fenced`` if the task moved on or changed.
    """
    row = lock_rows(Task.select(Task.status, Task.digest, Task.edits).where(Task.key == key)).first()
    if row is None or row.status != T.READY or row.digest != reviewed:
        raise Fenced(key)
    update_task(key, now, [T.READY], result=result, digest=new_digest,
                edits=list(row.edits or []) + [edit])
    clear_approvals(key)


def audit(now, code, monitor=None, event_id=None, task_key=None, actor=None, channel=None,
          note=None, subject=None):
    """Append one audit row: identifiers and a code, never content; returns its ``seq``.

    ``actor`` (an identity) and ``channel`` name who decided and through which
    face, for human decisions (and ``policy``); the engine's own moves leave
    them null. ``note`` is the CLI's ``--by`` word; ``subject`` what a change of
    a reviewer, secret, policy or monitor was about.
    """
    return Audit.insert(at=now, code=code, monitor=monitor, event_id=event_id,
                        task_key=task_key, actor=actor, channel=channel, note=note,
                        subject=subject).execute()


def record_attempts(rows):
    """Insert attempt history rows: dicts of kind, ref, at, step, code, worker."""
    insert_rows(Attempt, rows)


def bury(kind, ref, step, code, attempts, now, reason=None):
    """Write the dead-letter row for a delivery or task whose budget is spent
    (``reason``: why its last attempt failed, in words, when known)."""
    first = (Attempt.select(Attempt.at).where(Attempt.kind == kind, Attempt.ref == str(ref))
             .order_by(Attempt.id).limit(1).scalar())
    DeadLetter.insert(kind=kind, ref=str(ref), step=step, code=code, attempts=attempts,
                      first_at=first if first is not None else now, last_at=now,
                      reason=reason).execute()
