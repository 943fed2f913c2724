"""Redraft: re-read a task's record and material and draft it again.

A task blocked because its source changed (or its draft failed acceptance)
otherwise has no way forward. A redraft runs the gate, reads the record and
the material, drafts, and runs acceptance; nothing changes unless all of that
holds. Then:

- same record version (so the same task key): the task returns to ``ready``
  with the new snapshot, result and digest, any approval is cleared, and the
  draft it replaces is kept in ``previous_drafts`` (audit ``redrafted``);
- a new record version: a new ``ready`` task is made under the new key (the
  inbox is not touched), carrying the earlier drafts; the old task stays
  ``blocked`` with code ``superseded`` and names its successor in
  ``superseded_by`` (audit ``superseded`` on the old key, ``redrafted`` on
  the new one).

Redraftable: ``ready`` tasks, and ``blocked`` ones whose code is
``source_changed`` or ``acceptance_failed`` and whose write never became
possible (a host that may hold a result under the key keeps the task).
"""

from .approval import acceptance, get_task, host_refusal, with_retries
from ..errors import AttemptFailed, Blocked, Refused
from ..rules.gate import INGEST_ACTIONS, gate
from ..steps import drafting
from ..steps.ingest import new_task
from ..rules.names import Actor
from ..state.approvals import clear_approvals, quorum_of
from ..state.history import audit
from ..state.moves import Fenced
from ..state.statuses import TaskStatus as T
from ..state.tasks import move_task, new_tasks
from ..models import Monitor, Task, db
from ..rules.records import check_material, check_record

REDRAFTABLE_BLOCKS = ("source_changed", "acceptance_failed")


def redraft(rt, key, by=None, channel="cli", monitors=None):
    """Draft task ``key`` (or a unique key prefix) again; see the module docstring.

    Answers ``{key, status, digest, changed, replaces}``: ``key`` is the task
    to review now, ``replaces`` the superseded key when a new task was made.
    The approvals given so far are forgotten: the quorum starts again at zero.
    """
    actor = Actor.of(by, channel, monitors)
    who = actor.audit
    task = get_task(key, actor.monitors)
    _check_redraftable(task)
    now = rt.clock.now()
    host = rt.host()
    monitor = Monitor.get_or_none(Monitor.id == task.monitor)
    refusal = gate(monitor, with_retries(rt, host.context), now, INGEST_ACTIONS)
    if refusal:
        raise Refused(refusal, f"the monitor's gate refused: {refusal}")
    record = _read_record(rt, host, task.record_id, monitor)
    fresh = new_task(monitor, record, _draft(rt, host, monitor, record), now)
    problem = acceptance(fresh["result"], record)
    if problem:
        raise Refused("acceptance_failed", f"the new draft fails acceptance: {problem}")
    # The draft's first entry in its task's chain: its digest and the quorum it needs.
    proof = {"digest": fresh["digest"], "quorum": quorum_of(monitor)}
    if fresh["key"] == task.key:
        return _same_version(task, fresh, now, who, proof)
    return _new_version(task, fresh, now, who, proof)


def redraftable(status, code, write_possible):
    """True for a task (its ``status``, ``code``, ``write_possible``) a redraft may draft again."""
    return status == T.READY or (status == T.BLOCKED and code in REDRAFTABLE_BLOCKS
                                 and not write_possible)


def _check_redraftable(task):
    if redraftable(task.status, task.code, task.write_possible):
        return
    why = f"{task.status} ({task.code})" if task.code else task.status
    raise Refused("not_redraftable", f"task is {why}; only ready tasks and tasks blocked by "
                  f"{' or '.join(REDRAFTABLE_BLOCKS)} can be redrafted")


def _read_record(rt, host, record_id, monitor):
    try:
        record = check_record(with_retries(rt, lambda: host.get(record_id)),
                              rt.config.max_record_bytes)
    except Blocked as exc:
        raise host_refusal(exc, "re-reading the source failed") from None
    if (record["id"] != record_id or record["document"] != monitor.document
            or record["kind"] != "review" or record["status"] != "open"):
        raise Refused("source_nonmatch", "the record is no longer an open review of the "
                      "monitor's document")
    return record


def _draft(rt, host, monitor, record):
    if drafting.wait_until(rt, monitor.id, rt.clock.now()) is not None:
        raise Refused("budget_exhausted", "the monitor's drafter tokens for this hour are spent; "
                      "redraft in the next hour")
    try:
        material = check_material(with_retries(rt, lambda: host.read_material(record["document"])),
                                  rt.config.max_material_bytes)
        drafted = drafting.draft(rt, monitor.id, record, material)
    except (Blocked, Refused) as exc:
        raise host_refusal(exc, "drafting failed") from None
    except AttemptFailed as exc:  # the drafter's own code (draft_invalid, drafter_auth, ...)
        raise Refused(exc.code, f"drafting failed: {exc.message}; nothing was changed") from None
    except Exception as exc:  # a drafter's bug: one line for the operator, nothing changed
        raise Refused("draft_failed", f"the drafter failed ({type(exc).__name__}); "
                      "nothing was changed") from None
    return drafted


def _earlier(task, now):
    """The task's drafts so far, the current one last."""
    return list(task.previous_drafts or []) + [
        {"at": now, "digest": task.digest, "result": task.result, "record": task.record}]


def _same_version(task, fresh, now, who, proof):
    if task.status == T.READY and fresh["digest"] == task.digest and fresh["record"] == task.record:
        return _answer(task.key, task.status, task.digest, changed=False)
    try:
        with db.atomic():
            current = _unchanged(task)
            move_task(task.key, [task.status], T.READY, now, code=None, parked=False,
                      record=fresh["record"], result=fresh["result"], digest=fresh["digest"],
                      approval_deadline=fresh["approval_deadline"], approved_digest=None,
                      needs_answers=fresh["needs_answers"], draft_meta=fresh["draft_meta"],
                      approved_by=None, approved_at=None, failures={},
                      previous_drafts=_earlier(current, now))
            clear_approvals(task.key)
            audit(now, "redrafted", task.monitor, task_key=task.key, data=proof, **who)
    except Fenced:
        raise _moved_on() from None
    return _answer(task.key, "ready", fresh["digest"], changed=True)


def _new_version(task, fresh, now, who, proof):
    fresh["previous_drafts"] = _earlier(task, now)
    try:
        with db.atomic():
            _unchanged(task)
            made = new_tasks([fresh]).run()
            move_task(task.key, [task.status], T.BLOCKED, now, code="superseded", parked=False,
                      superseded_by=fresh["key"])
            audit(now, "superseded", task.monitor, task_key=task.key, **who)
            if made:
                audit(now, "redrafted", task.monitor, task_key=fresh["key"], data=proof, **who)
    except Fenced:
        raise _moved_on() from None
    successor = Task.get_by_id(fresh["key"])  # made now, or by an event that came first
    return _answer(successor.key, successor.status, successor.digest, changed=True,
                   replaces=task.key)


def _unchanged(task):
    """The task row, inside the write transaction, if no one moved it meanwhile."""
    current = Task.get_by_id(task.key)
    if current.status != task.status or current.digest != task.digest:
        raise Fenced(task.key)
    return current


def _moved_on():
    return Refused("not_redraftable", "the task moved on while it was being redrafted")


def _answer(key, status, digest, changed, replaces=None):
    return {"key": key, "status": status, "digest": digest, "changed": changed,
            "replaces": replaces}
