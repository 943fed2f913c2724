"""The ingest step: from a delivery to a `ready` task (the checks in docs/concepts.md).

Work is done in batches: one statement claims many waiting deliveries, the host
is asked about each (no transaction is open meanwhile), and every outcome of the
batch is written in one transaction, each write fenced by the lease token.
"""

from dataclasses import dataclass, field

from . import batching
from .. import tracing
from ..ops import policy
from ..rules.canonical import canonical, digest, task_key
from ..errors import Blocked, InvalidEvent
from ..rules.events import validate
from ..rules.gate import gate
from .batch import open_batch
from ..state.leases import claim_deliveries
from ..state.lifecycle import (RELEASED, Fenced, bury, move_delivery, prepare_move_deliveries,
                               record_attempts, run_moves)
from ..models import Audit, Delivery, Inbox, Task, db, insert_rows
from ..rules.retry import decide
from ..storage import PreparedInsert, retried

FUTURE_TOLERANCE_S = 5
RECORD_KEYS = ("id", "document", "version", "status", "kind")


@dataclass
class Outcome:
    """What became of one delivery in this attempt."""

    kind: str  # "final", "retry" or "dead"
    code: str
    step: str
    consume: bool = False  # write the inbox row (a redelivery is then a duplicate)
    task_key: str | None = None
    task: dict | None = None  # the task to create when the event is consumed first
    member: dict | None = None  # the record joins its document's batch (batching monitors)
    next_at: float | None = None
    failures: dict = field(default_factory=dict)


def ingest_batch(rt, owner):
    """Claim and process one batch of waiting deliveries.

    Returns ``(claimed, full)``; ``full`` means more may be waiting.
    """
    batch = open_batch(rt, claim_deliveries, Delivery, owner)
    if batch is None:
        return 0, False
    for monitor_id, window_s in batching.windows(batch.monitors).items():
        batch.monitors[monitor_id].batch_window_s = window_s
    # Both key columns, so the lookup stays on the primary key as the inbox grows.
    consumed = {(i.monitor, i.event_id): i.task_key for i in Inbox.select().where(
        Inbox.monitor.in_(list(batch.monitors) or [""]),
        Inbox.event_id.in_(list({r.event_id for r in batch.rows})))}
    outcomes = []
    for row in batch.rows:
        now = batch.keep_lease()
        # One span per delivery, in the trace that accepted its event (tracing.py).
        with tracing.span("signoff.ingest", row, delivery=row.id,
                          event_id=row.event_id, monitor=row.monitor) as span:
            if batch.context_error is not None:
                outcome = failed(rt, row, "read", batch.context_error, now)
            else:
                outcome = examine(rt, batch.host, row, batch.monitors.get(row.monitor),
                                  batch.context, consumed, now)
            tracing.annotate(span, code=outcome.code, task_key=outcome.task_key)
            if outcome.task is not None and span is not None:
                outcome.task.update(tracing.carrier(span))  # approve and submit continue it
        if outcome.consume:
            consumed[(row.monitor, row.event_id)] = outcome.task_key
        outcomes.append(outcome)
    write_outcomes(rt, batch.token, owner, batch.rows, outcomes)
    policy.after_ingest(rt, {row.monitor for row, out in zip(batch.rows, outcomes)
                             if out.code == "ready"})
    return len(batch.rows), batch.full


def examine(rt, host, row, monitor, context, consumed, now):
    """Run the ingest checks (docs/concepts.md) for one delivery, in order."""
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
    if now - row.occurred > monitor.window_s or row.occurred - now > FUTURE_TOLERANCE_S:
        return Outcome("final", "stale_event", "fresh", consume=True)
    try:
        record = host.get(row.record_id)
        check_record(record)
    except Blocked as exc:
        return Outcome("final", exc.code, "read")
    except Exception as exc:
        return failed(rt, row, "read", exc, now, monitor)
    if (record["id"] != row.record_id or record["document"] != monitor.document
            or record["kind"] != "review" or record["status"] != "open"):
        return Outcome("final", "source_nonmatch", "source", consume=True)
    if getattr(monitor, "batch_window_s", None):
        return Outcome("final", "batched", "batch", consume=True,
                       member=batching.member(monitor, record, row.event_id))
    try:
        material = host.read_material(record["document"])
        drafted = rt.drafter()(record, material)
        check_draft(drafted)
    except Blocked as exc:
        return Outcome("final", exc.code, "draft")
    except Exception as exc:
        return failed(rt, row, "draft", exc, now, monitor)
    task = new_task(monitor, record, drafted, now)
    return Outcome("final", "ready", "draft", consume=True, task_key=task["key"], task=task)


def new_task(monitor, record, drafted, now):
    """The row of a ``ready`` task for ``record`` as drafted (ingest's last step)."""
    result = {"record_id": record["id"], "version": record["version"],
              "draft": drafted["draft"], "sources": list(drafted["sources"])}
    key = task_key(monitor.id, monitor.grant_digest, record["id"], record["version"])
    deadline = now + monitor.approval_ttl_s if monitor.approval_ttl_s else None
    return {"key": key, "monitor": monitor.id, "record_id": record["id"],
            "version": record["version"], "status": "ready", "record": record,
            "result": result, "digest": digest(result), "approval_deadline": deadline,
            "created_at": now, "updated_at": now}


def failed(rt, row, step, exc, now, monitor=None):
    """A failed attempt: retry later, end as stale, or go to the dead letters."""
    code = exc.code if isinstance(exc, Blocked) else type(exc).__name__
    failures = dict(row.failures or {})
    failures[step] = failures.get(step, 0) + 1
    delay = decide(failures[step], step, rt.config.retry)
    if delay is None:
        return Outcome("dead", code, step, failures=failures)
    next_at = now + delay
    if step == "read" and monitor is not None and next_at - row.occurred > monitor.window_s:
        return Outcome("final", "stale_event", step, consume=True, failures=failures)
    return Outcome("retry", code, step, next_at=next_at, failures=failures)


def check_record(record):
    """Raise ``TypeError`` unless ``record`` has the shape of a host record."""
    if not isinstance(record, dict) or any(k not in record for k in RECORD_KEYS):
        raise TypeError("host.get returned something that is not a record")
    if type(record["version"]) is not int:
        raise TypeError("record version must be an integer")


def check_draft(drafted):
    """Raise ``TypeError`` unless the drafter's answer has the documented shape."""
    if (not isinstance(drafted, dict) or not isinstance(drafted.get("draft"), str)
            or not isinstance(drafted.get("sources"), list)
            or not all(isinstance(s, str) for s in drafted["sources"])):
        raise TypeError("the drafter must return {'draft': str, 'sources': [str, ...]}")


@retried
def write_outcomes(rt, token, owner, rows, outcomes):
    """Persist a batch's outcomes in one transaction; fenced rows are skipped.

    Final outcomes take a few statements per batch, built before the
    transaction begins (see ``_prepare_finish``); retries and dead letters are
    written row by row.
    """
    now = rt.clock.now()
    finish = _prepare_finish(rows, outcomes, token, now)
    audits, attempts = [], []
    with db.atomic():
        kept = _finish(finish, now)
        for row, out in zip(rows, outcomes):
            if out.kind == "final":
                if row.id not in kept:
                    continue  # another worker owns this delivery now
            else:
                try:
                    _apply(row, out, token, now)
                except Fenced:
                    continue
            attempts.append({"kind": "delivery", "ref": str(row.id), "at": now,
                             "step": out.step, "code": out.code, "worker": owner})
            if out.kind != "retry":
                audits.append({"at": now, "monitor": row.monitor, "event_id": row.event_id,
                               "task_key": out.task_key,
                               "code": "dead_letter" if out.kind == "dead" else out.code})
        record_attempts(attempts)
        insert_rows(Audit, audits)


@dataclass
class _Finish:
    """A batch's final-outcome writes, built before its transaction (``_prepare_finish``)."""

    moves: list  # one prepared UPDATE per group of equal values
    consumed: list  # (row, outcome) of each final outcome that writes an inbox row
    inbox: PreparedInsert  # their inbox rows, in the order of ``consumed``
    tasks: PreparedInsert  # the tasks they create, in the order of ``consumed``
    task_at: dict  # position in ``consumed`` -> position in ``tasks``


def _prepare_finish(rows, outcomes, token, now):
    """Build the statements that write a batch's final outcomes, without running them.

    One guarded UPDATE per group of equal values moves the deliveries to
    ``done`` (each row fenced by the token, as ``move_delivery`` does); the
    inbox rows and the new tasks are converted for their bulk inserts.
    """
    groups = {}
    for row, out in zip(rows, outcomes):
        if out.kind == "final":
            failures = out.failures or row.failures
            group = groups.setdefault((out.code, canonical(failures)), (failures, {}))
            group[1][row.id] = out.task_key
    moves = [prepare_move_deliveries(keys, ["processing"], "done", now, token,
                                     per_row={"task_key": keys}, outcome=code, last_code=code,
                                     failures=failures, **RELEASED)
             for (code, _), (failures, keys) in groups.items()]
    consumed = [(row, out) for row, out in zip(rows, outcomes)
                if out.kind == "final" and out.consume]
    creating = [i for i, (_, out) in enumerate(consumed) if out.task is not None]
    return _Finish(
        moves, consumed,
        PreparedInsert(Inbox, [{"monitor": row.monitor, "event_id": row.event_id,
                                "outcome": out.code, "task_key": out.task_key, "at": now}
                               for row, out in consumed],
                       ignore_conflicts=True, returning=("monitor", "event_id")),
        PreparedInsert(Task, [consumed[i][1].task for i in creating], ignore_conflicts=True),
        {i: n for n, i in enumerate(creating)})


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
    finish.tasks.run(tasks)
    if members:  # in the transaction of their inbox rows: never lost, never twice
        batching.join(members, now)
    return kept


def _lost_race(row, out):
    # Another worker consumed this event id after our batch looked.
    first = Inbox.get(Inbox.monitor == row.monitor, Inbox.event_id == row.event_id)
    out.code, out.task_key, out.consume, out.task = "duplicate", first.task_key, False, None
    Delivery.update(outcome="duplicate", task_key=first.task_key,
                    last_code="duplicate").where(Delivery.id == row.id).execute()


def _apply(row, out, token, now):
    """Write a retry or a dead letter (final outcomes go through ``_finish``)."""
    failures = out.failures or row.failures
    if out.kind == "retry":
        move_delivery(row.id, ["processing"], "retrying", now, token, next_at=out.next_at,
                      last_code=out.code, failures=failures, **RELEASED)
    elif out.kind == "dead":
        move_delivery(row.id, ["processing"], "dead", now, token, last_code=out.code,
                      failures=failures, **RELEASED)
        bury("delivery", row.id, out.step, out.code, row.attempts, now)
    else:
        raise ValueError(f"unexpected outcome kind {out.kind!r}")
