"""Webhook intake's durable side: the first answer to each ``webhook-id``, refusals
counted and audited, and accepted events stored with their answers in one
transaction (``signoff serve`` hands it batches through its group commit).
"""

import hashlib
from dataclasses import dataclass

from peewee import JOIN, InterfaceError, OperationalError, fn

from . import enqueue
from ..admin import subscriptions
from ..rules.events import Event
from ..models import WebhookAnswer, WebhookDigest, WebhookRefusal, db, insert_rows
from ..state.deliveries import drop_deliveries
from ..state.history import append_audits

AUDITED_PER_MINUTE = 60
REUSED = "webhook_id_reused"


@dataclass(frozen=True)
class Accept:
    """A verified, valid event to store under its ``webhook-id``; ``digest``: its body's.

    ``via``: for a delivery of an MCP Events subscription, ``(row id, the id
    its header named when the row had none yet)``, for the subscription's counts.
    """

    monitor: str
    webhook_id: str
    event: Event
    digest: str
    via: tuple | None = None
    trace: dict | None = None  # the signoff.webhook span's carrier, kept on the delivery

    def differs(self, event_id, digest):
        """True when this body is not the one answered as ``event_id`` with ``digest``.

        ``digest`` is None for an answer older than the digests; the event id decides.
        """
        return self.event.event_id != event_id or (digest is not None and digest != self.digest)


@dataclass(frozen=True)
class Refusal:
    """A refused request to audit (within the per-minute allowance) and count."""

    monitor: str | None
    code: str
    via: tuple | None = None


@dataclass(frozen=True)
class Noted:
    """A request answered without a write of its own (a callback verification): counted."""

    monitor: str
    code: str
    via: tuple | None = None


def body_digest(body):
    """The sha256 hex of a request body, kept with the first answer to its ``webhook-id``."""
    return hashlib.sha256(body).hexdigest()


def _answer(delivery, event_id, duplicate=False):
    body = {"delivery": delivery, "event_id": event_id, "accepted": True}
    if duplicate:
        body["duplicate"] = True
    return body


def first_answer(monitor_id, webhook_id):
    """The stored answer to ``webhook-id`` (marked duplicate), or ``None``."""
    first = _first(monitor_id, webhook_id)
    return None if first is None else first[0]


def _first(monitor_id, webhook_id):
    # (answer, event id, body digest or None) of the first answer, or None.
    row = (WebhookAnswer.select(WebhookAnswer.delivery, WebhookAnswer.event_id,
                                WebhookDigest.digest)
           .join(WebhookDigest, JOIN.LEFT_OUTER,
                 on=(WebhookDigest.monitor == WebhookAnswer.monitor)
                 & (WebhookDigest.webhook_id == WebhookAnswer.webhook_id))
           .where(WebhookAnswer.monitor == monitor_id, WebhookAnswer.webhook_id == webhook_id)
           .tuples().first())
    if row is None:
        return None
    delivery, event_id, digest = row
    return _answer(delivery, event_id, duplicate=True), event_id, digest


def write_batch(rt, jobs):
    """Write a batch of jobs in one transaction; one ``(status, body)`` or None per job.

    A connection the database dropped is closed, so the next batch reconnects.
    """
    try:
        return _write_batch(rt, jobs)
    except (OperationalError, InterfaceError):
        db.close()
        raise


def _write_batch(rt, jobs):
    now = rt.clock.now()
    accepts = [j for j in jobs if isinstance(j, Accept)]
    first_of = {}  # a webhook-id twice in one batch: the later ones repeat the first
    for job in accepts:
        first_of.setdefault((job.monitor, job.webhook_id), job)
    fresh = list(first_of.values())
    answers, winners, out = {}, {}, []

    def within(ids):
        _claim_answers(fresh, ids, answers, winners, now)
        out[:] = [_answer_of(job, answers, first_of) for job in jobs]
        reused = [Refusal(j.monitor, REUSED) for j in accepts
                  if j.differs(*winners[(j.monitor, j.webhook_id)])]
        _count_refusals([j for j in jobs if isinstance(j, Refusal)] + reused, now)
        subscriptions.note([(*j.via, _code_of(j, answer)) for j, answer in zip(jobs, out)
                            if j.via is not None], now)

    enqueue.store_validated(rt, [(j.monitor, j.event) for j in fresh], within=within,
                           traces=[j.trace for j in fresh])
    return out


def _answer_of(job, answers, first_of):
    """``(status, body)`` for an accepted event (later copies in a batch: duplicates), else None."""
    if not isinstance(job, Accept):
        return None
    key = (job.monitor, job.webhook_id)
    status, body = answers[key]
    if first_of[key] is not job:
        status, body = 200, dict(body, duplicate=True)
    return status, body


def _code_of(job, answer):
    """What a request through a subscription is counted as."""
    if isinstance(job, Accept):
        return "accepted" if answer[0] == 202 else "duplicate"
    return job.code


def _claim_answers(fresh, ids, answers, winners, now):
    # Insert the answers first come, first served (ON CONFLICT DO NOTHING): a
    # webhook-id answered before, or by another server in the meantime, keeps
    # its first answer, and the delivery written for this copy is dropped
    # before the commit, so nothing new is stored. ``winners`` gets the event
    # id and body digest each webhook-id was first answered for.
    rows = [{"monitor": j.monitor, "webhook_id": j.webhook_id, "delivery": i,
             "event_id": j.event.event_id, "at": now} for j, i in zip(fresh, ids)]
    won = set(insert_rows(WebhookAnswer, rows, ignore_conflicts=True,
                          returning=("monitor", "webhook_id")))
    lost, digests = [], []
    for job, delivery in zip(fresh, ids):
        key = (job.monitor, job.webhook_id)
        if key in won:
            answers[key] = (202, _answer(delivery, job.event.event_id))
            winners[key] = (job.event.event_id, job.digest)
            digests.append({"monitor": job.monitor, "webhook_id": job.webhook_id,
                            "digest": job.digest})
        else:
            lost.append(delivery)
            answer, event_id, digest = _first(*key)
            answers[key], winners[key] = (200, answer), (event_id, digest)
    # Retention drops a digest with its answer, so none is in the way here.
    insert_rows(WebhookDigest, digests, ignore_conflicts=True)
    drop_deliveries(lost)


def _count_refusals(refusals, now):
    if not refusals:
        return
    minute = int(now // 60)
    monitors = {r.monitor or "" for r in refusals}
    seen = dict(WebhookRefusal.select(WebhookRefusal.monitor, fn.SUM(WebhookRefusal.count))
                .where(WebhookRefusal.minute == minute, WebhookRefusal.monitor.in_(list(monitors)))
                .group_by(WebhookRefusal.monitor).tuples())
    audits, counts = [], {}
    for r in refusals:
        monitor = r.monitor or ""
        if (seen.get(monitor) or 0) < AUDITED_PER_MINUTE:
            audits.append({"at": now, "monitor": r.monitor, "event_id": None, "task_key": None,
                           "code": r.code})
        seen[monitor] = (seen.get(monitor) or 0) + 1
        counts[(monitor, r.code)] = counts.get((monitor, r.code), 0) + 1
    append_audits(audits)
    for (monitor, code), n in counts.items():
        WebhookRefusal.add(monitor, minute, code, n)
