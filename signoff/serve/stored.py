"""What both kinds of webhook request share: reading the body, refusing, storing the event.

``hooks`` (Standard Webhooks) and ``mcpevents`` (MCP Events deliveries) verify
a request each in their own way; once verified, the body is read, refused or
stored here, through the group commit.
"""

from starlette.responses import JSONResponse

from .. import tracing
from ..rules import signatures
from ..errors import InvalidEvent, Refused
from ..intake.webhooks import REUSED, Accept, Refusal, body_digest
from ..rules.events import check_label
from .bodies import HOOK_LIMIT, read_body
from .refusals import status_of

# What a monitor without secrets (or one that does not exist) is checked
# against: a secret nobody has, so its refusal costs what a wrong signature's does.
NOBODYS = [signatures.generate()]


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
