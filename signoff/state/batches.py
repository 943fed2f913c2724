"""A record batch's life: opened, joined, held, closed with a task or without one.

A batch is open until ``closed_at``; its members are the record versions that
joined it. Closing writes the batch, which of its members the task kept, and
the task, in the caller's transaction, once: every write here is guarded on
the batch being still open.
"""

from ..models import BatchMember, RecordBatch


def new_batch(monitor_id, document, now, window_s):
    """Open a batch of ``document``'s records for ``window_s`` seconds; its id."""
    return RecordBatch.create(monitor=monitor_id, document=document, opened_at=now,
                              closes_at=now + window_s).id


def hold_batch(batch_id, next_at, code):
    """Leave an open batch for later (``next_at``), saying why (``code``), no attempt spent."""
    RecordBatch.update(next_at=next_at, code=code).where(
        RecordBatch.id == batch_id, RecordBatch.closed_at.is_null()).execute()


def retry_batch(batch_id, attempts, code, next_at):
    """Count a failed close of an open batch: tried again from ``next_at``."""
    RecordBatch.update(attempts=attempts, code=code, next_at=next_at).where(
        RecordBatch.id == batch_id, RecordBatch.closed_at.is_null()).execute()


def close_batch(batch_id, now, members, kept, task_key=None, code=None):
    """Close a batch (locked open by the caller) with its task, or without one saying why
    (``code``); each member is marked kept or not."""
    RecordBatch.update(closed_at=now, task_key=task_key, code=code).where(
        RecordBatch.id == batch_id).execute()
    kept_ids = {(m.record_id, m.version) for m in kept}
    for m in members:
        BatchMember.update(kept=(m.record_id, m.version) in kept_ids).where(
            BatchMember.monitor == m.monitor, BatchMember.record_id == m.record_id,
            BatchMember.version == m.version).execute()
