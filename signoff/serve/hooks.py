"""``POST /hooks/{monitor}``: Standard Webhooks ingest (docs/serve.md).

Checked in this order: size (413), UTF-8 (400), signature (401), media type
(415), ``webhook-id`` already answered (200, the first answer), event (400),
then the durable write (202). A request that carries ``X-MCP-Subscription-Id``
is a delivery of an MCP Events subscription and is routed by it instead
(events.py); once mapped, its event takes this same path. A monitor that does not exist can never verify:
it answers the 401 of a wrong signature, so no caller learns which monitors
exist, and the refusal is audited as ``unknown_monitor`` for the operator.
Accepted events and refusals go through the group commit, so a 202 is sent
only once the delivery row and its ``webhook-id`` answer are committed
together, and a refusal's audit row is written before it is answered. A body
that differs from the one a ``webhook-id`` was first answered for still gets
the first answer, and is counted as the refusal ``webhook_id_reused``.
"""

import hashlib
from dataclasses import dataclass

from peewee import JOIN, InterfaceError, OperationalError, fn
from starlette.responses import JSONResponse

from .. import tracing
from ..ops import intake, subscriptions
from ..errors import InvalidEvent
from ..rules.events import MAX_LINE_BYTES, Event, check_label, parse_line
from ..models import Audit, WebhookAnswer, WebhookDigest, WebhookRefusal, db, insert_rows
from ..ops import secrets
from ..state.lifecycle import drop_deliveries

MAX_BODY = MAX_LINE_BYTES  # 64 KiB
AUDITED_PER_MINUTE = 60
STATUS = {"too_large": 413, "invalid_event": 400, "bad_signature": 401,
          "unsupported_media_type": 415, "subscription_ended": 410, "subscription_pending": 503}
REUSED = "webhook_id_reused"
# What a monitor without secrets (or one that does not exist) is checked
# against: a secret nobody has, so its refusal costs what a wrong signature's does.
_NOBODYS = [secrets.generate()]


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


async def read_body(request, limit=MAX_BODY):
    """The body, or ``None`` as soon as it is known to be over ``limit`` bytes."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def read_text(commits, request, known, limit=MAX_BODY):
    """``(body, text, None)``, or ``(None, None, the refusal)`` of a body over ``limit``
    bytes (413) or not UTF-8 (400). ``known``: the monitor the refusal is recorded for."""
    body = await read_body(request, limit)
    if body is None:
        return None, None, await refuse(commits, known, "too_large")
    try:
        return body, body.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, None, await refuse(commits, known, "invalid_event", "body: not valid UTF-8")


def is_json(content_type):
    """True for no ``Content-Type`` or ``application/json`` (parameters such as charset allowed)."""
    if content_type is None:
        return True
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


async def refuse(commits, monitor_id, code, reason=None, answer=None, via=None):
    """Record refusal ``code`` through ``commits``; answer ``answer`` (the code itself unless given)."""
    await commits.submit(Refusal(monitor_id, code, via))
    body = {"error": answer or code}
    if reason is not None:
        body["reason"] = reason
    return JSONResponse(body, status_code=STATUS[answer or code])


async def store_event(commits, monitor_id, webhook_id, body, parse, via=None, span=None):
    """The answer to a verified request: the first answer to its ``webhook-id``, a 400
    when ``parse()`` (the body's ``Event``) raises ``InvalidEvent``, else 202 once stored.
    ``span``: the request's ``signoff.webhook`` span, whose trace the delivery keeps."""
    try:
        check_label("webhook-id", webhook_id)
        event = parse()
    except InvalidEvent as exc:
        first = first_answer(monitor_id, webhook_id)
        if first is not None:
            # The first answer was for a valid event, so this is another body.
            await commits.submit(Refusal(monitor_id, REUSED, via))
            return JSONResponse(first, status_code=200)
        return await refuse(commits, monitor_id, "invalid_event", exc.reason, via=via)
    tracing.annotate(span, event_id=event.event_id)
    status, answer = await commits.submit(Accept(monitor_id, webhook_id, event,
                                                 body_digest(body), via, tracing.carrier(span)))
    tracing.annotate(span, delivery=answer.get("delivery"))
    return JSONResponse(answer, status_code=status)


def make_endpoint(rt, commits):
    """The ASGI endpoint for ``POST /hooks/{monitor}`` writing through ``commits``."""
    from .events import SUBSCRIPTION_HEADER, event_hook

    async def hook(request):
        # The span continues the sender's trace (its traceparent header), if it sent one.
        span = tracing.begin("signoff.webhook", tracing.incoming(request.headers))
        response = None
        try:
            response = await answer(request, span)
            return response
        finally:
            tracing.end(span, http_status=response and response.status_code)

    async def answer(request, span):
        monitor_id = request.path_params["monitor"]
        if SUBSCRIPTION_HEADER in request.headers:
            return await event_hook(rt, commits, request, monitor_id)
        exists, monitor_secrets = secrets.current(monitor_id)
        known = monitor_id if exists else None  # a name nobody bound is never stored
        if exists:
            tracing.annotate(span, monitor=monitor_id)  # a monitor's id, not what the path says
        body, text, refused = await read_text(commits, request, known)
        if refused is not None:
            return refused
        if not secrets.signed_by_one_of(text, request.headers, monitor_secrets or _NOBODYS):
            return await refuse(commits, known, "bad_signature" if exists else "unknown_monitor",
                                answer="bad_signature")
        if not is_json(request.headers.get("content-type")):
            return await refuse(commits, monitor_id, "unsupported_media_type")
        return await store_event(commits, monitor_id, request.headers["webhook-id"], body,
                                 lambda: parse_line(body, "body"), span=span)

    return hook


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

    intake.store_validated(rt, [(j.monitor, j.event) for j in fresh], within=within,
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
    insert_rows(Audit, audits)
    for (monitor, code), n in counts.items():
        WebhookRefusal.add(monitor, minute, code, n)
