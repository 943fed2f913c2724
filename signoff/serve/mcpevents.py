"""Requests of MCP Events subscriptions at ``POST /hooks/{monitor}`` (docs/events.md).

A request that carries ``X-MCP-Subscription-Id`` comes from an MCP server
signoff subscribed to: it is routed by its subscription, not by the monitor in
the path, and checked in this order: size (413, at most 256 KiB), UTF-8 (400),
signature against the secrets of the subscriptions whose callback this is
(401), a subscription unknown or ended, or whose monitor ended (410: the server
then drops it), a ``Content-Type`` other than JSON (415, as for a webhook), the
callback verification (200 with the challenge, only for a subscription signoff
asked for), a subscription still pending whose monitor is not written yet (503:
the server tries again later), ``webhook-id`` already answered (200), the map
(400 ``invalid_event``), the durable write (202). Once mapped, the event is an ordinary one: hooks.py's group commit,
answers, dedupe and refusal audit.
"""

from starlette.responses import JSONResponse

from ..errors import InvalidEvent
from ..rules import signatures
from ..rules.events import broken_json_reason, check_label, decode_json, validate
from ..state.statuses import SubscriptionStatus as S
from ..intake.webhooks import Noted
from .bodies import EVENTS_LIMIT
from .stored import is_json, read_text, refuse, store_event

# What marks a request as one of an MCP Events subscription (hooks.py routes by it
# before anything needs the mcp extra; signoff.hosts.mcp.events reads it the same way).
SUBSCRIPTION_HEADER = "x-mcp-subscription-id"


async def event_hook(rt, commits, reads, request, monitor_id):
    """The answer to a request that names an MCP Events subscription (``reads``: the
    endpoint's batched reads, ``hooks.reader``)."""
    from ..hosts.mcp import events as wire  # the mcp extra: a subscription implies it
    rows = await reads.submit(("subscriptions", monitor_id))  # read after it arrived, as hooks
    known = monitor_id if rows else None
    body, text, refused = await read_text(commits, request, known, EVENTS_LIMIT)
    if refused is not None:
        return refused
    row = next((r for r in rows if signatures.signed_by_one_of(text, request.headers, [r["secret"]])),
               None)
    if row is None:
        return await refuse(commits, known, "bad_signature" if rows else "unknown_subscription",
                            answer="bad_signature")
    named = request.headers[SUBSCRIPTION_HEADER]
    via = (row["id"], named if row["subscription_id"] is None else None)
    if _gone(row, named, rt.clock.now()):
        return await refuse(commits, monitor_id, "subscription_ended", via=via)
    if not is_json(request.headers.get("content-type")):
        return await refuse(commits, monitor_id, "unsupported_media_type", via=via)
    if _is_verification(text):
        answer = wire.verification_answer(body, request.headers, [row["secret"]])
        if answer is None:
            return await refuse(commits, monitor_id, "invalid_event", "verification: the "
                                "challenge must be a string of 1-1024 characters", via=via)
        await commits.submit(Noted(monitor_id, "verified", via))
        return JSONResponse(answer, status_code=200)
    if row["document"] is None:
        return await refuse(commits, monitor_id, "subscription_pending", via=via)
    return await store_event(rt, commits, monitor_id, request.headers["webhook-id"], body,
                             lambda: _mapped(wire, text, row), via=via)


def _gone(row, named, now):
    """True when the server should drop what it sent: ended, unknown here, or its monitor ended."""
    try:
        check_label("subscription id", named)
    except InvalidEvent:
        return True
    if row["status"] == S.ENDED or row["subscription_id"] not in (None, named):
        return True
    return row["document"] is not None and (not row["active"] or row["expires_at"] <= now)


def _is_verification(text):
    try:
        body = decode_json(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(body, dict) and body.get("type") == "verification"


def _mapped(wire, text, row):
    """The signoff event in a delivery: only what the subscription's map names."""
    try:
        body = decode_json(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidEvent(broken_json_reason(exc, "body")) from None
    return validate(wire.map_delivery(body, row["field_map"], row["document"]))
