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


from starlette.responses import JSONResponse

from .. import tracing
from ..errors import InvalidEvent, Refused
from ..rules.events import check_label, parse_line
from ..ops import secrets
from ..ops.webhooks import REUSED, Accept, Refusal, body_digest
from .bodies import HOOK_LIMIT, read_body
from .refusals import status_of

# What a monitor without secrets (or one that does not exist) is checked
# against: a secret nobody has, so its refusal costs what a wrong signature's does.
_NOBODYS = [secrets.generate()]


async def read_text(commits, request, known, limit=HOOK_LIMIT):
    """``(body, text, None)``, or ``(None, None, the refusal)`` of a body over ``limit``
    bytes (413) or not UTF-8 (400). ``known``: the monitor the refusal is recorded for."""
    try:
        body = await read_body(request, limit)
    except Refused:  # too_large: the one refusal of reading a body
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
    return JSONResponse(body, status_code=status_of(answer or code))


async def store_event(rt, commits, monitor_id, webhook_id, body, parse, via=None, span=None):
    """The answer to a verified request: the first answer to its ``webhook-id``, a 400
    when ``parse()`` (the body's ``Event``) raises ``InvalidEvent``, else 202 once stored.
    ``span``: the request's ``signoff.webhook`` span, whose trace the delivery keeps."""
    try:
        check_label("webhook-id", webhook_id)
        event = parse()
    except InvalidEvent as exc:
        # In the loop's thread: one indexed read on a path no sender takes in
        # bulk, and no pool thread (each would hold a connection of its own).
        first = rt.first_webhook_answer(monitor_id, webhook_id)
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


# The endpoint's reads, by kind: the ``Signoff`` method that reads a list of monitors.
READS = {"secrets": "webhook_secrets", "subscriptions": "subscription_callbacks"}


def reader(rt):
    """``read(jobs)`` for the endpoint's batched reads: a job is ``(kind, monitor id)``,
    ``kind`` one of ``READS``; each kind is read once for all its monitors."""
    def read(jobs):
        answers = {kind: iter(getattr(rt, READS[kind])([m for k, m in jobs if k == kind]))
                   for kind in {kind for kind, _ in jobs}}
        return [next(answers[kind]) for kind, _ in jobs]
    return read


def make_endpoint(rt, commits, reads):
    """The ASGI endpoint for ``POST /hooks/{monitor}`` writing through ``commits``;
    ``reads``: the batched reads (``reader``) of what a request is verified against."""
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
            return await event_hook(rt, commits, reads, request, monitor_id)
        # Read for each request, after it arrived (a removed secret never verifies
        # again), but once for all the requests waiting: on a database server a
        # read in the loop's thread would stop every request for a round trip.
        exists, monitor_secrets = await reads.submit(("secrets", monitor_id))
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
        return await store_event(rt, commits, monitor_id, request.headers["webhook-id"], body,
                                 lambda: parse_line(body, "body"), span=span)

    return hook


