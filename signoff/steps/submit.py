"""The submit step: write an approved result exactly once and confirm it.

For each claimed task: gate (with ``submit_review``) → the approved digest →
the receipt under the task's key. Only when no receipt exists is the task
marked "a write may now happen" (committed before the host is called), then
submitted and the receipt read again. From that mark on, a crash or a timeout
leaves the task ``uncertain``; its next try starts by reading the receipt under
the same key. A new key is never minted.
"""

import logging
from dataclasses import dataclass

from .. import tracing
from ..rules.canonical import digest
from ..errors import Blocked
from ..hosts.contract import Capability, supports
from ..rules.gate import SUBMIT_ACTIONS, gate
from .claiming import open_batch
from .hostreads import receipts, submit
from .outcomes import Step, failures_key
from .outcomes import write as outcomes_write
from ..state.leases import release
from ..state.approvals import quorum_of
from ..state.history import approvals_in_chains, bury
from ..state.moves import Fenced, RELEASED, run_moves
from ..state.statuses import TASK_ACTIVE, TaskStatus as T
from ..state.tasks import (mark_write_possible, maybe_written, move_task, ours_under,
                           prepare_move_tasks, update_task)
from ..models import Task, db
from ..rules.retry import failed_try

log = logging.getLogger(__name__)


# What the audit log says for outcomes whose code is an exception's name.
AUDIT_CODES = {"dead": "dead_letter", "uncertain": "uncertain"}


@dataclass
class Outcome:
    """What became of one task in this attempt."""

    kind: str  # done, blocked, park, retry, uncertain, dead, write, fenced, withdrawn
    code: str
    step: str = "submit"
    next_at: float | None = None
    failures: dict | None = None
    unwritten: bool = False  # withdrawn: no write was ever possible before this attempt
    data: dict | None = None  # what its audit entry proves (a written result's digests)


def submit_batch(rt, owner):
    """Claim and process one batch of due approved/uncertain tasks.

    Returns ``(claimed, full)``; ``full`` means more may be waiting.
    """
    batch = open_batch(rt, "submit", owner)
    if batch is None:
        return 0, False
    tasks, host = batch.rows, batch.host
    # One span per task, in the trace of the event that made it (tracing.py).
    spans = {t.key: tracing.begin("signoff.submit", t, task_key=t.key,
                                  monitor=t.monitor) for t in tasks} if tracing.enabled() else {}
    problems = chain_problems(tasks, batch.monitors)
    outcomes = {t.key: precheck(rt, t, batch, problems.get(t.key)) for t in tasks}
    # The receipt first: one already there is compared at once, and nothing is written.
    earlier = [t for t in tasks if outcomes[t.key].kind == "write"]
    if earlier:
        found = receipts(host, earlier, spans, batch.keep_lease)
        for task in earlier:
            outcomes[task.key] = judge(rt, task, found[task.key], before=True)
    to_write = [t for t in tasks if outcomes[t.key].kind == "write"]
    if to_write:
        outcomes.update(_write_all(rt, batch, to_write, spans))
    write_outcomes(rt, batch.token, owner, tasks, outcomes)
    batch.done()
    for key, span in spans.items():
        tracing.end(span, status=outcomes[key].kind, code=outcomes[key].code)
    return len(tasks), batch.full


def chain_problems(tasks, monitors):
    """``{key: what is wrong}`` for the tasks whose counted approvals are not in their
    audit chain: an approval on record that no chain entry records, or fewer
    approvals of the task's digest than the quorum (a status or a row written
    around signoff). One query a batch; the links and digests themselves are
    ``audit verify``'s.
    """
    approvals = approvals_in_chains([t.key for t in tasks])
    found = {}
    for task in tasks:
        mine = approvals.get(task.key, ())
        needed = quorum_of(monitors.get(task.monitor))
        counted = sum(1 for digest, _ in mine if digest == task.digest)
        if not all(inside for _, inside in mine):
            found[task.key] = "an approval on record is not in its chain"
        elif counted < needed:
            found[task.key] = f"{counted} of the {needed} approvals it needs"
    return found


def precheck(rt, task, batch, chain_problem=None):
    """The checks before any host call: ``kind == "write"`` means go on."""
    now = batch.keep_lease()
    if batch.context_error is not None:
        return failed(rt, task, batch.context_error, now)
    refusal = gate(batch.monitors.get(task.monitor), batch.grant, now, SUBMIT_ACTIONS)
    if refusal:
        return Outcome("park", refusal, "gate")
    if digest(task.result) != task.approved_digest:
        return Outcome("blocked", "approval_mismatch", "verify")
    if chain_problem is not None:
        log.warning("task %s blocked (chain_broken): %s", task.key, chain_problem)
        return Outcome("blocked", "chain_broken", "verify")
    return Outcome("write", "write")


def judge(rt, task, receipt, before=False):
    """The outcome a receipt read gives: ``write`` when none is there yet (before
    the write only), ``done`` or ``receipt_mismatch``, or a failed attempt."""
    if isinstance(receipt, Blocked):
        return Outcome("blocked", receipt.code, "confirm")
    if isinstance(receipt, Exception):
        return failed(rt, task, receipt, rt.clock.now())
    if receipt is None:
        return Outcome("write", "write") if before else failed(rt, task, None, rt.clock.now(),
                                                              code="no_receipt")
    return confirm(receipt, task)


def _write_all(rt, batch, tasks, spans):
    """Mark, submit and read back ``tasks``; their outcomes by key.

    A host with ``submit_many`` gets the batch in one call; otherwise each task
    is a call of its own, and a cancel made during one write still stops the
    writes that have not started.
    """
    marked = _mark_write_possible(rt, batch.token, tasks)
    outcomes = {t.key: Outcome("fenced", "fenced") for t in tasks if t.key not in marked}
    going = [t for t in tasks if t.key in marked]
    one_call = supports(batch.host, Capability.SUBMIT_MANY)
    ours_of = ours_under(batch.token)
    landed = []
    for group in [going] if one_call else [[t] for t in going]:
        ours = ours_of([t.key for t in group])
        for task in group:
            if task.key not in ours:  # a cancel ended it after the mark: no write starts
                outcomes[task.key] = Outcome("withdrawn", "cancelled",
                                             unwritten=not task.write_possible)
        group = [t for t in group if t.key in ours]
        if not group:
            continue
        for task in group:
            task.write_possible = True
        refusals = submit(batch.host, group, spans, batch.keep_lease)
        for task in group:
            refusal = refusals[task.key]
            if refusal is None:
                landed.append(task)
            elif isinstance(refusal, Blocked):
                outcomes[task.key] = Outcome("blocked", refusal.code)
            else:
                outcomes[task.key] = failed(rt, task, refusal, rt.clock.now())
    if landed:
        found = receipts(batch.host, landed, spans, batch.keep_lease)
        outcomes.update({t.key: judge(rt, t, found[t.key]) for t in landed})
    return outcomes


def confirm(receipt, task):
    """Compare a receipt with the approved result.

    The audit entry says which digest was written and which the receipt read
    back has: the approved one, checked before the write (``precheck``).
    """
    if receipt == task.result:
        return Outcome("done", "done", "confirm", data={"digest": task.approved_digest,
                                                       "receipt": task.approved_digest})
    return Outcome("blocked", "receipt_mismatch", "confirm",
                   data={"digest": task.approved_digest, "receipt": digest(receipt)})


def failed(rt, task, exc, now, code=None):
    """A failed attempt: uncertain if a write may have happened, else a plain retry."""
    code = code or type(exc).__name__
    failures, delay = failed_try(task.failures, "submit", rt.config.retry)
    if delay is None:
        return Outcome("dead", code, failures=failures)
    kind = "uncertain" if maybe_written(task) else "retry"
    return Outcome(kind, code, next_at=now + delay, failures=failures)


def _mark_write_possible(rt, token, tasks):
    """Record that a write may now happen; the keys still ours (and open) that got the mark."""
    with db.atomic():
        return mark_write_possible([t.key for t in tasks], token, rt.clock.now())


def write_outcomes(rt, token, owner, tasks, outcomes):
    """Persist every task outcome of a batch in one transaction, fenced."""
    outcomes_write(rt, STEP, token, owner, [(task, outcomes[task.key]) for task in tasks])


def _audit_row(task, out, now):
    if out.kind in ("retry", "withdrawn"):
        return None
    return {"at": now, "monitor": task.monitor, "task_key": task.key,
            "code": AUDIT_CODES.get(out.kind, out.code), "data": out.data}


def _release(skipped, token):
    # A cancel keeps the lease of a write in flight; whatever the write came to,
    # this worker is done with the row.
    release(Task, [task.key for task in skipped], token)


def _prepare_finish(pairs, token, now):
    """The moves of the batch's ``done`` tasks: one guarded UPDATE per group of equal values.

    Each row is fenced by the token as ``move_task`` fences it; the function
    returned runs them and returns the keys that were still ours.
    """
    groups = {}
    for task, out in pairs:
        if out.kind == "done":
            failures = out.failures if out.failures is not None else task.failures
            groups.setdefault(failures_key(failures), (failures, []))[1].append(task.key)
    # A task a cancel reached while its write was in flight is done too: the
    # token says it is that write (see state.tasks.cancel_tasks).
    moves = [prepare_move_tasks(keys, [*TASK_ACTIVE, T.CANCELLED], T.DONE, now, token,
                                code=None, outcome_unknown=False, failures=failures, **RELEASED)
             for failures, keys in groups.values()]
    return lambda now: run_moves(moves)


def _apply(task, out, token, now):
    """Write every outcome but ``done`` (those are the moves of ``_prepare_finish``);
    False when the task is no longer ours."""
    if out.kind == "fenced":
        return False
    try:
        _write_one(task, out, token, now)
    except Fenced:
        return False
    return True


def _write_one(task, out, token, now):
    sources = list(TASK_ACTIVE)
    failures = out.failures if out.failures is not None else task.failures
    if out.kind == "blocked":
        move_task(task.key, sources, T.BLOCKED, now, token, code=out.code,
                  failures=failures, **RELEASED)
    elif out.kind == "park":
        update_task(task.key, now, sources, token, parked=True, code=out.code, **RELEASED)
    elif out.kind == "retry":
        update_task(task.key, now, sources, token, next_at=out.next_at, code=out.code,
                    failures=failures, **RELEASED)
    elif out.kind == "uncertain":
        move_task(task.key, sources, T.UNCERTAIN, now, token, next_at=out.next_at,
                  code=out.code, failures=failures, **RELEASED)
    elif out.kind == "withdrawn":
        # Cancelled after the mark, before the host was called. With no write
        # possible before this attempt, none has happened: it is known unwritten.
        changes = {"outcome_unknown": False, "write_possible": False} if out.unwritten else {}
        update_task(task.key, now, [T.CANCELLED], token, **changes, **RELEASED)
    elif out.kind == "dead":
        move_task(task.key, sources, T.DEAD, now, token, code=out.code,
                  outcome_unknown=task.write_possible, failures=failures, **RELEASED)
        bury("task", task.key, out.step, out.code, task.attempts, now)
    else:
        raise ValueError(f"unknown outcome {out.kind}")


STEP = Step(kind="task", ref=lambda task: task.key, settled=lambda out: out.kind == "done",
            prepare=_prepare_finish, apply=_apply, audit=_audit_row, after=_release)
