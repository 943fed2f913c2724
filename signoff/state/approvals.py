"""A task's quorum: approvals counted by identity, an edit that restarts the count,
a policy's places withdrawn (docs/concepts.md, "Who decides")."""

from peewee import fn

from ..models import Approval, Task
from ..storage import insert_rows, key_in, lock_rows, select_tuples
from .history import append_audits, record_decision_times
from .moves import Fenced
from .statuses import TaskStatus as T
from .tasks import move_tasks, update_task


def add_approvals(wanted, actor, now, audit_code="approved", proofs=None, stand_ins=None):
    """Record ``actor``'s approval of each task in ``wanted`` (``{key: (digest, needed)}``)
    and approve those whose digest now has ``needed`` distinct identities.

    ``stand_ins``: ``{key: reviewer}`` a delegate approves for (kept with the
    approval; the identity counted is still the actor's, once).

    Run in the caller's transaction. The task rows are locked first (PostgreSQL;
    SQLite's transaction holds the write lock since BEGIN), so two approvers at
    once are counted one after the other: never a lost approval, never a second
    move. Only a task still ``ready`` with that very digest counts, and a
    policy's only while the draft is as drafted (no person edited it: an edit
    needs people for every remaining place). Returns ``(counted, approved,
    repeated, stale)``: sets of keys whose approval was added, that moved to
    ``approved``, that the identity had approved already, and that moved on,
    changed digest or were edited meanwhile. ``proofs``: ``{key: (statement,
    signature, audit data)}`` of signed approvals, kept on their rows.
    """
    proofs, stand_ins = proofs or {}, stand_ins or {}
    keys = sorted(wanted)
    policy = actor.channel == "policy"
    # The monitor and the ready time too: the audit entries and decision times need them.
    columns = (Task.key, Task.status, Task.digest, Task.monitor, Task.created_at) + (
        (Task.edits,) if policy else ())
    current = {row[0]: row[1:] for row in select_tuples(lock_rows(
        Task.select(*columns).where(key_in(Task.key, keys)).order_by(Task.key)))} if keys else {}
    live = [k for k in keys if current.get(k, ())[:2] == (T.READY, wanted[k][0])
            and not (policy and current[k][4])]
    stale = set(keys) - set(live)
    # Whom a delegate stood in for, as columns only when someone was: every row
    # of one insert names the same columns, and most approvals stand in for no one.
    approval_extra = ({k: {"for_reviewer": stand_ins.get(k)} for k in keys} if stand_ins
                      else dict.fromkeys(keys, {}))
    counted = {k for (k,) in insert_rows(Approval, [
        {"task_key": k, "digest": wanted[k][0], "by": actor.identity, "channel": actor.channel,
         "at": now, "note": actor.note, "statement": proofs.get(k, (None,))[0],
         "signature": proofs.get(k, (None, None))[1], **approval_extra[k]} for k in live],
        ignore_conflicts=True, returning=("task_key",))} if live else set()
    counts = approval_counts(live)
    complete = [k for k in live if counts.get(k, 0) >= wanted[k][1]]
    # The digest approved is the task's own: its rows are locked and live means
    # unchanged. Named as the column, not value by value: a CASE of one branch a
    # task is read through for every row it updates, quadratic in a bulk approval.
    approved = move_tasks(complete, [T.READY], T.APPROVED, now, approved_digest=Task.digest,
                          approved_by=actor.identity, approved_at=now, next_at=now,
                          code=None) if complete else set()
    # Each counted approval enters the task's chain with the digest it approved;
    # the one that completed the quorum also with the quorum's size (what submit
    # and `audit verify` count again).
    rows = [{"at": now, "code": audit_code if k in approved else "approval_added",
             "task_key": k, **actor.audit,
             "data": {**({"digest": wanted[k][0], "quorum": wanted[k][1]} if k in approved
                         else {"digest": wanted[k][0]}),
                      **(proofs.get(k, (None, None, None))[2] or {}),
                      **({"for": stand_ins[k]} if k in stand_ins else {})}}
            for k in keys if k in counted]
    if rows:
        _enter_counted(rows, {k: current[k][2:4] for k in counted}, actor, now)
    return counted, approved, set(live) - counted, stale


def _enter_counted(rows, tasks, actor, now):
    """Write the counted approvals' audit ``rows`` with their tasks' monitors, and a
    person's decision times (a policy's are no one's wait); ``tasks``: ``{key:
    (monitor, created_at)}``."""
    append_audits([dict(r, monitor=tasks[r["task_key"]][0]) for r in rows])
    if actor.channel != "policy":
        record_decision_times([(tasks[r["task_key"]], r["code"]) for r in rows],
                              actor.channel, now)


def quorum_of(monitor):
    """The distinct approvers a task of ``monitor`` needs (its ``approvals``, at least 1)."""
    return max(1, getattr(monitor, "approvals", None) or 1)


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
    # Locked, as every writer of a task's chain holds its row (state/history.py).
    monitors = dict(select_tuples(lock_rows(Task.select(Task.key, Task.monitor).where(
        key_in(Task.key, sorted({k for _, k, _ in gone}))).order_by(Task.key))))
    append_audits([{"at": now, "code": "approval_withdrawn", "monitor": monitors.get(k),
                    "task_key": k, "subject": by} for _, k, by in gone])
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
