"""Writing a batch's outcomes: the one loop every worker step ends with.

A step decides an outcome for each row it claimed with no transaction open,
then ``write`` persists them all in one transaction, each write fenced by the
lease token. Outcomes that many rows share (a delivery done, a task done) are
moved by a few statements the step prepares before BEGIN, so the write lock is
held for SQL alone; the others are written row by row. Each written outcome adds
its attempt to the history and, unless the step says otherwise (a retry), an
audit row. A row another worker or a cancel took meanwhile is skipped.
"""

from dataclasses import dataclass
from typing import Callable

from ..models import db
from ..rules.canonical import canonical
from ..state.history import append_audits, record_attempts
from ..storage import retried


@dataclass(frozen=True)
class Step:
    """How one step's outcomes are written (see ``write``)."""

    kind: str  # the attempt history's kind: "delivery" or "task"
    ref: Callable  # row -> the key the prepared moves return for it
    settled: Callable  # outcome -> True when the prepared moves write it
    prepare: Callable  # (pairs, token, now) -> finish(now): runs the moves, returns keys kept
    apply: Callable  # (row, outcome, token, now) -> False when the row is no longer ours
    audit: Callable  # (row, outcome, now) -> the audit row, or None for none
    after: Callable | None = None  # (rows not written, token), inside the transaction
    counted: Callable | None = None  # outcome -> False when it is no attempt (None: all are)


@retried
def write(rt, step, token, owner, pairs):
    """Persist ``(row, outcome)`` pairs in one transaction; rows not ours are skipped."""
    now = rt.clock.now()
    finish = step.prepare(pairs, token, now)  # built before the write lock
    audits, attempts, skipped = [], [], []
    with db.atomic():
        kept = finish(now)
        for row, out in pairs:
            ours = (step.ref(row) in kept) if step.settled(out) else step.apply(row, out, token, now)
            if not ours:
                skipped.append(row)
                continue
            if step.counted is not None and not step.counted(out):
                continue
            attempts.append({"kind": step.kind, "ref": str(step.ref(row)), "at": now,
                             "step": out.step, "code": out.code, "worker": owner})
            entry = step.audit(row, out, now)
            if entry is not None:
                audits.append(entry)
        if step.after is not None:
            step.after(skipped, token)
        record_attempts(attempts)
        append_audits(audits)


def failures_key(failures):
    """A key equal for equal failure counts: prepared moves write one group per key.

    Nearly every row has none, and that key costs no encoding.
    """
    return "{}" if failures == {} else canonical(failures)
