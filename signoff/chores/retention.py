"""Retention: finished tasks lose their record snapshot and result
(``[retention]`` in docs/configuration.md).

What stays is what an operator and the dedupe layer need: the task row's key,
status, code, digests, who approved and when, every time, the attempt history,
the audit trail, the deliveries and the inbox (so a redelivered event is still a
duplicate of its task). A purged task is marked by a ``PurgedTask`` row.

Work is done in chunks of ``CHUNK`` tasks, each its own short transaction read
in key order, so a purge of any size runs in constant memory and a crash
mid-way loses nothing: the next run carries on where this one stopped.

The HTTP layer's rows age out with the same period. A webhook answer (the
``webhook-id`` dedupe) older than it is dropped: a sender retrying that late
gets a new delivery, which the inbox still knows as a duplicate. Refusal counts
older than it are folded into one row per monitor and code (minute 0), so the
``signoff_webhook_refusals_total`` counter never goes down.
"""

import time

from peewee import Tuple, fn

from .. import storage
from ..state.history import audit
from ..state.tasks import strip_tasks
from . import Chore
from ..models import (DeadLetter, PurgedTask, Task, WebhookAnswer, WebhookDigest,
                      WebhookRefusal, db, insert_rows)
from ..state.statuses import TaskStatus as T

# A dead task counts as finished only once it has been replayed and died again:
# until then ``dlq replay`` may still need its snapshot.
FINISHED = ("done", "rejected", "cancelled", "expired", "blocked")
CHUNK = 500
# Task keys one search reads through at most, purgeable or not: each search is a
# short snapshot however many tasks the home keeps.
SCAN = 20_000
DAY_S = 24 * 60 * 60
EVERY_S = 60 * 60  # how often the workers purge, together


def _purgeable(cutoff):
    """Tasks retention may purge: finished before ``cutoff`` and not purged yet."""
    replayed = DeadLetter.select(DeadLetter.id).where(
        DeadLetter.kind == "task", DeadLetter.ref == Task.key, DeadLetter.replayed > 0)
    purged = PurgedTask.select(PurgedTask.key).where(PurgedTask.key == Task.key)
    # COALESCE keeps the planner off the status index: read in key order, a
    # chunk is the next ``CHUNK`` rows; by status, every chunk would sort them all.
    status = fn.COALESCE(Task.status, "")
    return ((status.in_(list(FINISHED)) | ((status == T.DEAD) & fn.EXISTS(replayed)))
            & (Task.updated_at < cutoff) & ~fn.EXISTS(purged))


def purge(rt, older_than_days=None, dry_run=False, progress=None):
    """Purge finished tasks older than ``older_than_days`` (default from the config).

    ``dry_run`` only counts them. ``progress(done)`` is called after each chunk.
    Returns ``{older_than_days, cutoff, dry_run, purged, by_status, webhook_answers,
    refusal_minutes, seconds}``: the last two count webhook answers dropped and
    refusal counts folded (or, in a dry run, that would be).
    """
    started = time.monotonic()
    now = rt.clock.now()
    days = rt.config.retention_days if older_than_days is None else float(older_than_days)
    cutoff = now - days * DAY_S
    if dry_run:
        by_status = dict(Task.select(Task.status, fn.COUNT(Task.key)).where(_purgeable(cutoff))
                         .group_by(Task.status).tuples())
        answers = WebhookAnswer.select().where(WebhookAnswer.at < cutoff).count()
        refusals = WebhookRefusal.select().where(_old_minutes(cutoff)).count()
    else:
        by_status = _purge_chunks(cutoff, now, progress)
        answers, refusals = _drop_webhook_answers(cutoff), _fold_refusals(cutoff)
    return {"older_than_days": days, "cutoff": cutoff, "dry_run": dry_run,
            "purged": sum(by_status.values()), "by_status": by_status,
            "webhook_answers": answers, "refusal_minutes": refusals,
            "seconds": round(time.monotonic() - started, 3)}


def _purge_chunks(cutoff, now, progress):
    by_status, after = {}, ""
    while after is not None:
        keys, after = _next_purgeable(cutoff, after)
        if not keys:
            continue
        with db.atomic():
            # Earlier drafts hold results too. The same test again in the UPDATE:
            # a row that moved since the search (a dead task replayed) is left as it is.
            moved = strip_tasks(keys, _purgeable(cutoff))
            insert_rows(PurgedTask, [{"key": k, "purged_at": now} for k, _ in moved],
                        ignore_conflicts=True)
            if moved:
                audit(now, "purged")
        for _, status in moved:
            by_status[status] = by_status.get(status, 0) + 1
        if progress:
            progress(sum(by_status.values()))
    return by_status


def _next_purgeable(cutoff, after):
    """Up to ``CHUNK`` purgeable keys after ``after``, among the next ``SCAN`` keys; and
    the key the next search starts after (``None``: none is left).

    Read in a snapshot of its own, not in the purge's write: a search may pass over
    many tasks that stay (purged already, or not finished long enough), and on
    SQLite a write transaction would hold every writer back meanwhile (a home of
    a million unpurgeable tasks: 3 s an hour in which no event was stored).
    """
    with storage.read_snapshot(db):
        bound = (Task.select(Task.key).where(Task.key > after).order_by(Task.key)
                 .offset(SCAN - 1).limit(1).scalar())
        span = (Task.key > after) if bound is None else (Task.key > after) & (Task.key <= bound)
        keys = [k for (k,) in Task.select(Task.key).where(_purgeable(cutoff), span)
                .order_by(Task.key).limit(CHUNK).tuples()]
    return keys, (keys[-1] if len(keys) == CHUNK else bound)


def _drop_webhook_answers(cutoff):
    dropped = 0
    while True:
        with db.atomic():
            keys = list(WebhookAnswer.select(WebhookAnswer.monitor, WebhookAnswer.webhook_id)
                        .where(WebhookAnswer.at < cutoff).limit(CHUNK).tuples())
            if keys:
                dropped += WebhookAnswer.delete().where(
                    Tuple(WebhookAnswer.monitor, WebhookAnswer.webhook_id).in_(keys),
                    WebhookAnswer.at < cutoff).execute()
                # The body digests go with their answers: a webhook-id answered
                # anew gets its new body's digest.
                WebhookDigest.delete().where(
                    Tuple(WebhookDigest.monitor, WebhookDigest.webhook_id).in_(keys)).execute()
        if len(keys) < CHUNK:
            return dropped


def _old_minutes(cutoff):
    return (WebhookRefusal.minute > 0) & (WebhookRefusal.minute < int(cutoff // 60))


def _fold_refusals(cutoff):
    folded = 0
    while True:
        with db.atomic():
            minutes = [m for (m,) in WebhookRefusal.select(WebhookRefusal.minute).distinct()
                       .where(_old_minutes(cutoff)).order_by(WebhookRefusal.minute)
                       .limit(CHUNK).tuples()]
            # What a DELETE returns is this transaction's alone: a purge running
            # beside it (the CLI's and a worker's) gets none of the same rows,
            # so no count is added twice.
            rows = list(WebhookRefusal.delete().where(WebhookRefusal.minute.in_(minutes))
                        .returning(WebhookRefusal.monitor, WebhookRefusal.code,
                                   WebhookRefusal.count).tuples().execute()) if minutes else []
            totals = {}
            for monitor, code, count in rows:
                totals[(monitor, code)] = totals.get((monitor, code), 0) + count
            for (monitor, code), count in totals.items():
                WebhookRefusal.add(monitor, 0, code, count)
        folded += len(rows)
        if len(minutes) < CHUNK:
            return folded


def purged_at(key):
    """When task ``key`` was purged, or ``None``."""
    row = PurgedTask.get_or_none(PurgedTask.key == key)
    return row.purged_at if row else None


# The workers' hourly purge: the one worker that claims the hour does it. Its row
# of ``Chore`` keeps the name it always had.
RETENTION = Chore("purge", lambda rt: purge(rt), EVERY_S, shared=True)
