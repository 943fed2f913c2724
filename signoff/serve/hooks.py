"""``POST /hooks/{monitor}``: Standard Webhooks ingest (docs/serve.md).

Checked in this order: size (413), UTF-8 (400), signature (401), media type
(415), ``webhook-id`` already answered (200, the first answer), event (400),
then the durable write (202). A request that carries ``X-MCP-Subscription-Id``
is a delivery of an MCP Events subscription and is routed by it instead
(``mcpevents``); once mapped, its event takes this same path. A monitor that does not exist can never verify:
it answers the 401 of a wrong signature, so no caller learns which monitors
exist, and the refusal is audited as ``unknown_monitor`` for the operator.
Accepted events and refusals go through the group commit, so a 202 is sent
only once the delivery row and its ``webhook-id`` answer are committed
together, and a refusal's audit row is written before it is answered. A body
that differs from the one a ``webhook-id`` was first answered for still gets
the first answer, and is counted as the refusal ``webhook_id_reused``.
"""


from .. import tracing
from ..rules.events import parse_line
from ..rules import signatures
from .mcpevents import SUBSCRIPTION_HEADER, event_hook
from .stored import NOBODYS, is_json, read_text, refuse, store_event

# The endpoint's reads, by kind: the ``Site`` method that reads a list of monitors.
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
        if not signatures.signed_by_one_of(text, request.headers, monitor_secrets or NOBODYS):
            return await refuse(commits, known, "bad_signature" if exists else "unknown_monitor",
                                answer="bad_signature")
        if not is_json(request.headers.get("content-type")):
            return await refuse(commits, monitor_id, "unsupported_media_type")
        return await store_event(rt, commits, monitor_id, request.headers["webhook-id"], body,
                                 lambda: parse_line(body, "body"), span=span)

    return hook


