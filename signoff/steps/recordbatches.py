"""Batches: open review records of one document, one task per window.

How they behave for users: docs/policies-and-batches.md.

A monitor bound with ``--batch-window S`` does not draft per event. Ingest runs
every check of a single event (docs/concepts.md) up to the source check, then
the record joins the open batch of its document (one is opened, closing S
seconds later, when none is open): the ``BatchMember`` row is written in the
transaction that writes the inbox row, and its primary key ``(monitor, record
id, version)`` puts a record version in one batch only, so a crash or a
redelivery can neither lose a member nor put it in two batches.

Closing is a pass of the worker loop once the window has passed: every member is
read back, those still open and unchanged are drafted together (the drafter gets
the list of records), and in one transaction the batch is closed, the task made
(key: digest of ``[monitor id, grant digest, sorted [record id, version] set]``)
and the members' inbox rows linked to it. The close commits only if the batch is
still open with the members it drafted, so it is idempotent, and a member that
joined meanwhile makes the next pass draft again. A record that arrives once the
window has passed starts a new batch; a closed batch never changes.
"""

import logging

from .. import tracing
from . import drafting
from ..rules.drafts import result_fields, task_fields
from ..rules.canonical import digest
from ..errors import AttemptFailed, Blocked, InvalidRecord
from ..rules.gate import gate
from ..state.approvals import quorum_of
from ..state.batches import close_batch, hold_batch, new_batch, retry_batch
from ..state.deliveries import link_batched
from ..state.history import audit
from ..state.tasks import new_tasks
from ..models import (BatchMember, Delivery, Monitor, MonitorBatching, RecordBatch, db,
                      insert_rows)
from ..rules.records import check_material, check_record
from ..rules.retry import failed_try
from ..storage import lock_name, lock_rows

CLOSE_LIMIT = 10  # batches one pass closes; the next pass takes the rest

log = logging.getLogger("signoff.batching")


def set_window(monitor_id, window_s):
    """Make ``monitor_id`` gather its records in windows of ``window_s`` seconds."""
    MonitorBatching.create(monitor=monitor_id, window_s=window_s)


def windows(monitor_ids):
    """``{monitor id: window seconds}`` for the batching monitors among ``monitor_ids``."""
    if not monitor_ids:
        return {}
    return dict(MonitorBatching.select(MonitorBatching.monitor, MonitorBatching.window_s)
                .where(MonitorBatching.monitor.in_(list(monitor_ids))).tuples())


def member(monitor, record, event_id):
    """What ingest keeps of a record that joins a batch."""
    return {"monitor": monitor.id, "document": record["document"], "record_id": record["id"],
            "version": record["version"], "event_id": event_id,
            "window_s": monitor.batch_window_s}


def join(members, now):
    """Put ``members`` in their document's open batch (inside ingest's transaction)."""
    groups = {}
    for m in members:
        groups.setdefault((m["monitor"], m["document"]), []).append(m)
    for (monitor_id, document), group in groups.items():
        batch = _open_batch(monitor_id, document, now, group[0]["window_s"])
        insert_rows(BatchMember, [{"monitor": monitor_id, "record_id": m["record_id"],
                                   "version": m["version"], "batch": batch, "event_id": m["event_id"]}
                                  for m in group], ignore_conflicts=True)


def _open_batch(monitor_id, document, now, window_s):
    # Two workers joining the first records of a window at once must not open
    # two batches: the one that finds none creates it under this lock.
    lock_name("batch", monitor_id, document)
    query = RecordBatch.select(RecordBatch.id).where(
        RecordBatch.monitor == monitor_id, RecordBatch.document == document,
        RecordBatch.closed_at.is_null(), RecordBatch.closes_at > now).order_by(RecordBatch.id.desc())
    found = query.first()
    if found is not None:
        return found.id
    return new_batch(monitor_id, document, now, window_s)


def closed_batch_of(monitor_id, record_id, version):
    """The closed batch a record version is a member of (``task_key`` may be null), or ``None``."""
    return (RecordBatch.select(RecordBatch.id, RecordBatch.task_key)
            .join(BatchMember, on=(BatchMember.batch == RecordBatch.id))
            .where(BatchMember.monitor == monitor_id, BatchMember.record_id == record_id,
                   BatchMember.version == version, RecordBatch.closed_at.is_null(False))
            .first())


def holds_drain():
    """True while a batch is open: ``worker --drain`` waits for it to close."""
    return RecordBatch.select().where(RecordBatch.closed_at.is_null()).exists()


def close_due(rt):
    """Close the batches whose window has passed; returns how many closed."""
    now = rt.clock.now()
    due = list(RecordBatch.select().where(RecordBatch.closed_at.is_null(),
                                          RecordBatch.closes_at <= now, RecordBatch.next_at <= now)
               .order_by(RecordBatch.closes_at).limit(CLOSE_LIMIT))
    closed = 0
    for batch in due:
        try:
            # A batch's task starts a trace of its own, linked to the traces of its events.
            with tracing.span("signoff.batch", links=_member_traces(batch),
                              monitor=batch.monitor) as span:
                closed += _close(rt, batch, tracing.carrier(span))
        except AttemptFailed as exc:  # the drafter's: final ones close the batch at once
            log.warning("closing batch %s failed: %s", batch.id, exc.code)
            _failed(rt, batch, exc.code, final=exc.final, retry_after=exc.retry_after)
        except Exception as exc:  # a failed close is an attempt; the batch stays open
            log.warning("closing batch %s failed: %s", batch.id, type(exc).__name__)
            _failed(rt, batch, type(exc).__name__)
    return closed


def _member_traces(batch):
    """The trace carriers kept on the deliveries of ``batch``'s events (none when off)."""
    if not tracing.enabled():
        return ()
    events = BatchMember.select(BatchMember.event_id).where(BatchMember.batch == batch.id)
    return list(Delivery.select(Delivery.traceparent, Delivery.tracestate).where(
        Delivery.monitor == batch.monitor, Delivery.event_id.in_(events),
        Delivery.traceparent.is_null(False)))


def _close(rt, batch, trace):
    members = list(BatchMember.select().where(BatchMember.batch == batch.id)
                   .order_by(BatchMember.record_id, BatchMember.version))
    monitor = Monitor.get_or_none(Monitor.id == batch.monitor)
    host = rt.host()
    now = rt.clock.now()
    refusal = gate(monitor, host.context(), now)
    if refusal:
        return _commit(batch, members, now, code=refusal)
    kept = _read_back(host, monitor, members, rt.config.max_record_bytes)
    if not kept:
        return _commit(batch, members, now, code="source_nonmatch")
    records = [record for _, record in kept]
    try:
        material = check_material(host.read_material(monitor.document),
                                  rt.config.max_material_bytes)
    except InvalidRecord as exc:  # final: the same material would be read again
        return _commit(batch, members, now, code=exc.code)
    waiting = drafting.wait_until(rt, monitor.id, now)
    if waiting is not None:  # the hour's tokens are spent: no attempt, tried next hour
        hold_batch(batch.id, waiting, "budget_exhausted")
        return 0
    drafted = drafting.draft(rt, monitor.id, records, material)
    covers = sorted([r["id"], r["version"]] for r in records)
    result = {"records": covers, **result_fields(drafted)}
    key = digest([monitor.id, monitor.grant_digest, covers])
    deadline = now + monitor.approval_ttl_s if monitor.approval_ttl_s else None
    task = {"key": key, "monitor": monitor.id, "record_id": f"batch:{batch.id}",
            "version": len(records), "record": records, "result": result,
            "digest": digest(result), "approval_deadline": deadline, "created_at": now,
            "updated_at": now, **task_fields(drafted), **trace}
    return _commit(batch, members, now, task=task, kept=[m for m, _ in kept],
                   quorum=quorum_of(monitor))


def _read_back(host, monitor, members, max_bytes):
    """The members whose record reads back unchanged and open: ``[(member, record)]``."""
    kept = []
    for m in members:
        try:
            record = check_record(host.get(m.record_id), max_bytes)
        except Blocked:
            continue  # missing, no longer readable or not one to keep: not in the task
        if (record.get("version") == m.version and record.get("document") == monitor.document
                and record.get("kind") == "review" and record.get("status") == "open"):
            kept.append((m, record))
    return kept


def _commit(batch, members, now, task=None, kept=(), code=None, quorum=None):
    """Close ``batch`` as drafted, if it is still open with exactly these members."""
    with db.atomic():
        query = RecordBatch.select(RecordBatch.id).where(RecordBatch.id == batch.id,
                                                         RecordBatch.closed_at.is_null())
        if lock_rows(query).first() is None:
            return 0  # another worker closed it
        now_members = {(m.record_id, m.version) for m in
                       BatchMember.select().where(BatchMember.batch == batch.id)}
        if now_members != {(m.record_id, m.version) for m in members}:
            return 0  # a member joined since the read-back: the next pass drafts again
        key = task["key"] if task else None
        close_batch(batch.id, now, members, kept, key, code)
        if task:
            new_tasks([task]).run()
            link_batched(batch.monitor, [m.event_id for m in kept], key)
        audit(now, "ready" if task else code, batch.monitor, task_key=key,
              data={"digest": task["digest"], "quorum": quorum} if task else None)
    return 1


def _failed(rt, batch, code, final=False, retry_after=None):
    """Count a failed close: retried with backoff; past the read budget (or at once
    when ``final``) it closes without a task, saying why."""
    counted, delay = failed_try({"read": batch.attempts}, "read", rt.config.retry, final,
                                retry_after)
    now = rt.clock.now()
    if delay is not None:
        retry_batch(batch.id, counted["read"], code, now + delay)
        return
    members = list(BatchMember.select().where(BatchMember.batch == batch.id))
    _commit(batch, members, now, code=code)


def read_back(host, task, max_bytes):
    """The source as it is now: one record, or the list of a batch task's records.

    A record signoff could not keep is refused (``InvalidRecord``).
    """
    if isinstance(task.record, list):
        return [check_record(host.get(r["id"]), max_bytes) for r in task.record]
    return check_record(host.get(task.record_id), max_bytes)


def covers(key):
    """The ``[record id, version]`` set a batch task covers, or ``None`` for a single task."""
    batch = RecordBatch.get_or_none(RecordBatch.task_key == key)
    if batch is None:
        return None
    return sorted([m.record_id, m.version] for m in BatchMember.select().where(
        BatchMember.batch == batch.id, BatchMember.kept == True))  # noqa: E712
