"""The ingest step: from a delivery to a `ready` task (the checks in docs/concepts.md).

Work is done in batches: one statement claims many waiting deliveries, the host
is asked about each (no transaction is open meanwhile), and every outcome of the
batch is written in one transaction, each write fenced by the lease token.
"""

import logging
from dataclasses import dataclass, field

from . import drafting, recordbatches
from .. import tracing
from ..rules.canonical import digest, task_key
from ..errors import Blocked, InvalidEvent, SignoffError
from ..rules.events import validate
from ..rules.gate import gate, held_s
from .claiming import open_batch
from .hostreads import BatchReads
from .outcomes import Step, failures_key
from .outcomes import write as outcomes_write
from ..state.deliveries import move_delivery, prepare_move_deliveries, relabel_duplicate
from ..state.history import bury
from ..state.moves import Fenced, RELEASED, run_moves
from ..state.statuses import DeliveryStatus as D, TaskStatus as T
from ..state.tasks import new_tasks
from ..models import Inbox, Task
from ..rules.drafts import result_fields, task_fields
from ..rules.records import check_record
from ..rules.retry import failed_try
from ..rules.text import visible
from ..storage import PreparedInsert, key_in, lock_rows, unstorable

FUTURE_TOLERANCE_S = 5
REASON_CHARS = 500  # the most of a failed attempt's reason a delivery keeps

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What became of one delivery in this attempt."""

    kind: str  # "final", "retry", "dead" or "wait" (no attempt spent)
    code: str
    step: str
    consume: bool = False  # write the inbox row (a redelivery is then a duplicate)
    task_key: str | None = None
    task: dict | None = None  # the task to create when the event is consumed first
    member: dict | None = None  # the record joins its document's batch (batching monitors)
    next_at: float | None = None
    failures: dict = field(default_factory=dict)
    reason: str | None = None  # why the attempt failed, in words (``reason_of``)


def ingest_batch(rt, owner):
    """Claim and process one batch of waiting deliveries.

    Returns ``(claimed, full, monitors)``: ``full`` means more may be waiting,
    ``monitors`` are those that gained a ``ready`` task (for standing policies).
    """
    # A drafter that calls out (it has a timeout) may take seconds a row.
    batch = open_batch(rt, "ingest", owner, cautious=rt.drafter_timeout_s() > 0)
    if batch is None:
        return 0, False, set()
    for monitor_id, window_s in recordbatches.windows(batch.monitors).items():
        batch.monitors[monitor_id].batch_window_s = window_s
    # Both key columns, so the lookup stays on the primary key as the inbox grows.
    consumed = {(i.monitor, i.event_id): i.task_key for i in Inbox.select().where(
        Inbox.monitor.in_(list(batch.monitors) or [""]),
        key_in(Inbox.event_id, list({r.event_id for r in batch.rows})))}
    with drafting.tallied():  # the batch's drafter calls: counted in its outcome write
        outcomes = _examine_all(rt, batch, consumed)
        write_outcomes(rt, batch.token, owner, batch.rows, outcomes)
    batch.done()
    ready = {row.monitor for row, out in zip(batch.rows, outcomes) if out.code == "ready"}
    return len(batch.rows), batch.full, ready


def _examine_all(rt, batch, consumed):
    """Each claimed delivery's outcome, in order (``consumed`` gains the consumed ones)."""
    readable = _may_read(batch, rt.clock.now())
    outcomes, host = [], BatchReads(batch.host, [r.record_id for r in readable], readable)
    # A drafter bounded by timeout_s (below the lease) gets a lease that outlasts its call.
    need = rt.drafter_timeout_s()
    for row in batch.rows:
        now = batch.keep_lease(need)
        # One span per delivery, in the trace that accepted its event (tracing.py).
        with tracing.span("signoff.ingest", row, delivery=row.id,
                          event_id=row.event_id, monitor=row.monitor) as span:
            if batch.context_error is not None:
                outcome = failed(rt, row, "read", batch.context_error, now)
            else:
                outcome = examine(rt, host, row, batch.monitors.get(row.monitor),
                                  batch.grant, consumed, now)
            tracing.annotate(span, code=outcome.code, task_key=outcome.task_key)
            if outcome.task is not None and span is not None:
                outcome.task.update(tracing.carrier(span))  # approve and submit continue it
        if outcome.consume:
            consumed[(row.monitor, row.event_id)] = outcome.task_key
        outcomes.append(outcome)
    return outcomes


def _may_read(batch, now):
    """The batch's rows whose monitors the grant lets read: the batch's one read
    asks for no record a gate would refuse."""
    if batch.context_error is not None:
        return []
    open_gate = {m.id for m in batch.monitors.values() if not gate(m, batch.grant, now)}
    return [row for row in batch.rows if row.monitor in open_gate]


def examine(rt, host, row, monitor, context, consumed, now):
    """Run the ingest checks (docs/concepts.md) for one delivery, in order.

    ``host``: the batch's ``BatchReads``; ``context``: the grant context read for
    the batch (or a ``GrantRead`` of it).
    """
    try:
        validate({"event_id": row.event_id, "name": row.name, "document": row.document,
                  "record_id": row.record_id, "occurred": row.occurred})
    except InvalidEvent:
        return Outcome("final", "invalid_event", "validate")
    refusal = gate(monitor, context, now)
    if refusal:
        return Outcome("final", refusal, "gate")
    seen = (row.monitor, row.event_id)
    if seen in consumed:
        return Outcome("final", "duplicate", "dedupe", task_key=consumed[seen])
    if row.name not in monitor.event_names or row.document != monitor.document:
        return Outcome("final", "nonmatch", "match", consume=True)
    age = now - held_s(monitor, row.accepted_at) - row.occurred
    if age > monitor.window_s or row.occurred - now > FUTURE_TOLERANCE_S:
        return Outcome("final", "stale_event", "fresh", consume=True)
    try:
        record = check_record(host.get(row.record_id), rt.config.max_record_bytes)
    except Blocked as exc:  # an answer signoff cannot keep (InvalidRecord) too
        return Outcome("final", exc.code, "read")
    except Exception as exc:
        return failed(rt, row, "read", exc, now, monitor)
    if (record["id"] != row.record_id or record["document"] != monitor.document
            or record["kind"] != "review" or record["status"] != "open"):
        return Outcome("final", "source_nonmatch", "source", consume=True)
    if getattr(monitor, "batch_window_s", None):
        closed = recordbatches.closed_batch_of(monitor.id, record["id"], record["version"])
        if closed is not None:  # the record's batch is drafted already: nothing joins it
            return Outcome("final", "duplicate", "dedupe", consume=True, task_key=closed.task_key)
        return Outcome("final", "batched", "batch", consume=True,
                       member=recordbatches.member(monitor, record, row.event_id))
    waiting = drafting.wait_until(rt, monitor.id, now)
    if waiting is not None:  # the hour's tokens are spent: wait for the next, no attempt
        return Outcome("wait", "budget_exhausted", "draft", next_at=waiting)
    try:
        material = host.material(record["document"], rt.config.max_material_bytes)
        drafted = drafting.draft(rt, monitor.id, record, material)
    except Blocked as exc:
        return Outcome("final", exc.code, "draft")
    except Exception as exc:
        return failed(rt, row, "draft", exc, now, monitor)
    task = new_task(monitor, record, drafted, now)
    return Outcome("final", "ready", "draft", consume=True, task_key=task["key"], task=task)


def new_task(monitor, record, drafted, now):
    """The row of a ``ready`` task for ``record`` as drafted (ingest's last step)."""
    result = {"record_id": record["id"], "version": record["version"],
              **result_fields(drafted)}
    key = task_key(monitor.id, monitor.grant_digest, record["id"], record["version"])
    deadline = now + monitor.approval_ttl_s if monitor.approval_ttl_s else None
    return {"key": key, "monitor": monitor.id, "record_id": record["id"],
            "version": record["version"], "record": record,
            "result": result, "digest": digest(result), "approval_deadline": deadline,
            "created_at": now, "updated_at": now, **task_fields(drafted)}


def failed(rt, row, step, exc, now, monitor=None):
    """A failed attempt: retry later, end as stale, or go to the dead letters.

    The worker's log says so at warning level, with the reason (``reason_of``).
    """
    code = exc.code if isinstance(exc, SignoffError) else type(exc).__name__
    failures, delay = failed_try(row.failures, step, rt.config.retry, getattr(exc, "final", False),
                                 getattr(exc, "retry_after", None))
    reason = reason_of(exc)
    if delay is None:
        outcome = Outcome("dead", code, step, failures=failures, reason=reason)
    else:
        next_at = now + delay
        outcome = Outcome("retry", code, step, next_at=next_at, failures=failures, reason=reason)
        if step == "read" and monitor is not None and (
                next_at - held_s(monitor, row.accepted_at) - row.occurred > monitor.window_s):
            outcome = Outcome("final", "stale_event", step, consume=True, failures=failures)
    _log_failure(row, outcome, code, now)
    return outcome


def reason_of(exc):
    """Why an attempt failed, in words: a signoff error's message on one line (at most
    ``REASON_CHARS`` characters, hidden characters marked), else ``None``.

    Another exception's text is never kept: it may quote a record (its class
    name is the attempt's code already).
    """
    if not isinstance(exc, SignoffError):
        return None
    return visible(" ".join(exc.message.split())[:REASON_CHARS]) or None


def _log_failure(row, outcome, code, now):
    if outcome.kind == "dead":
        then = "a dead letter now"
    elif outcome.kind == "retry":
        then = f"next try in {max(0.0, outcome.next_at - now):.1f} s"
    else:
        then = f"{outcome.code} now: its retry would come too late"
    log.warning("delivery %s (event %s, monitor %s): %s attempt failed (%s)%s; %s", row.id,
                row.event_id, row.monitor, outcome.step, code,
                f": {outcome.reason}" if outcome.reason else "", then)


def write_outcomes(rt, token, owner, rows, outcomes):
    """Persist a batch's outcomes in one transaction; fenced rows are skipped.

    Final outcomes take a few statements per batch, built before the
    transaction begins (see ``_prepare_finish``); retries and dead letters are
    written row by row. When the engine refuses a value the batch is written
    again row by row, and a row it still refuses gets a failed attempt (the
    exception's class name) instead: one row can never hold up the others.
    """
    try:
        outcomes_write(rt, STEP, token, owner, list(zip(rows, outcomes)))
    except Exception as exc:
        if not unstorable(exc):
            raise
        if len(rows) > 1:
            for row, out in zip(rows, outcomes):
                write_outcomes(rt, token, owner, [row], [out])
            return
        [row] = rows
        outcomes_write(rt, STEP, token, owner,
                       [(row, failed(rt, row, "draft", exc, rt.clock.now()))])


def _audit_row(row, out, now):
    if out.kind in ("retry", "wait"):
        return None
    return {"at": now, "monitor": row.monitor, "event_id": row.event_id,
            "task_key": out.task_key, "code": "dead_letter" if out.kind == "dead" else out.code}


@dataclass
class _Finish:
    """A batch's final-outcome writes, built before its transaction (``_prepare_finish``)."""

    moves: list  # one prepared UPDATE per group of equal values
    consumed: list  # (row, outcome) of each final outcome that writes an inbox row
    inbox: PreparedInsert  # their inbox rows, in the order of ``consumed``
    tasks: PreparedInsert  # the tasks they create, in the order of ``consumed``
    task_at: dict  # position in ``consumed`` -> position in ``tasks``


def _prepare_finish(pairs, token, now):
    """Build the statements that write a batch's final outcomes, without running them.

    One guarded UPDATE per group of equal values moves the deliveries to
    ``done`` (each row fenced by the token, as ``move_delivery`` does); the
    inbox rows and the new tasks are converted for their bulk inserts. Returns
    the function that runs them (``_finish``).
    """
    groups = {}
    for row, out in pairs:
        if out.kind == "final":
            failures = out.failures or row.failures
            group = groups.setdefault((out.code, failures_key(failures)), (failures, {}))
            group[1][row.id] = out.task_key
    moves = [prepare_move_deliveries(keys, [D.PROCESSING], D.DONE, now, token,
                                     per_row={"task_key": keys}, outcome=code, last_code=code,
                                     last_reason=None, failures=failures, **RELEASED)
             for (code, _), (failures, keys) in groups.items()]
    consumed = [(row, out) for row, out in pairs if out.kind == "final" and out.consume]
    creating = [i for i, (_, out) in enumerate(consumed) if out.task is not None]
    finish = _Finish(
        moves, consumed,
        PreparedInsert(Inbox, [{"monitor": row.monitor, "event_id": row.event_id,
                                "outcome": out.code, "task_key": out.task_key, "at": now}
                               for row, out in consumed],
                       ignore_conflicts=True, returning=("monitor", "event_id")),
        new_tasks([consumed[i][1].task for i in creating]),
        {i: n for n, i in enumerate(creating)})
    return lambda now: _finish(finish, now)


def _finish(finish, now):
    """Write a batch's final outcomes (``_prepare_finish``); returns the ids still ours.

    An inbox row another worker wrote first turns that delivery into a
    duplicate of its task.
    """
    kept = run_moves(finish.moves)
    ours = [i for i, (row, _) in enumerate(finish.consumed) if row.id in kept]
    if not ours:
        return kept
    inserted = set(finish.inbox.run(ours))
    tasks, members = [], []
    for i in ours:
        row, out = finish.consumed[i]
        if (row.monitor, row.event_id) not in inserted:
            _lost_race(row, out)
        elif out.task is not None:
            tasks.append(finish.task_at[i])
        elif out.member is not None:
            members.append(out.member)
    created = {key for (key,) in finish.tasks.run(tasks)}
    _moved_on([finish.consumed[i] for i in ours], created)
    if members:  # in the transaction of their inbox rows: never lost, never twice
        recordbatches.join(members, now)
    return kept


def _moved_on(consumed, created):
    """Events whose task existed already and is past ``ready``: duplicates of it.

    A task still ``ready`` takes the event (two events, one task); one that moved
    on must not gain a ``ready`` after its later steps. The rows are locked, so
    no approval lands between this look and the commit.
    """
    existing = {out.task_key for _, out in consumed if out.task is not None} - created
    if not existing:
        return
    moved_on = {key for key, status in lock_rows(Task.select(Task.key, Task.status).where(
        key_in(Task.key, sorted(existing)))).tuples() if status != T.READY}
    for row, out in consumed:
        if out.task is not None and out.task_key in moved_on:
            was, out.code, out.task = out.code, "duplicate", None
            relabel_duplicate(row.id, row.monitor, row.event_id, was, inbox=True)


def _lost_race(row, out):
    # Another worker consumed this event id after our batch looked.
    first = Inbox.get(Inbox.monitor == row.monitor, Inbox.event_id == row.event_id)
    was = out.code
    out.code, out.task_key, out.consume, out.task = "duplicate", first.task_key, False, None
    relabel_duplicate(row.id, row.monitor, row.event_id, was, task_key=first.task_key)


def _apply(row, out, token, now):
    """Write a retry or a dead letter (final outcomes go through ``_finish``);
    False when the delivery is no longer ours."""
    failures = out.failures or row.failures
    try:
        if out.kind == "retry":
            move_delivery(row.id, [D.PROCESSING], D.RETRYING, now, token, next_at=out.next_at,
                          last_code=out.code, last_reason=out.reason, failures=failures,
                          **RELEASED)
        elif out.kind == "wait":  # the claim counted an attempt this was not: undone
            move_delivery(row.id, [D.PROCESSING], D.RETRYING, now, token, next_at=out.next_at,
                          last_code=out.code, last_reason=None, attempts=row.attempts - 1,
                          **RELEASED)
        elif out.kind == "dead":
            move_delivery(row.id, [D.PROCESSING], D.DEAD, now, token, last_code=out.code,
                          last_reason=out.reason, failures=failures, **RELEASED)
            bury("delivery", row.id, out.step, out.code, row.attempts, now, out.reason)
        else:
            raise ValueError(f"unexpected outcome kind {out.kind!r}")
    except Fenced:
        return False
    return True


STEP = Step(kind="delivery", ref=lambda row: row.id, settled=lambda out: out.kind == "final",
            prepare=_prepare_finish, apply=_apply, audit=_audit_row,
            after=lambda skipped, token: drafting.write_tally(),
            counted=lambda out: out.kind != "wait")
