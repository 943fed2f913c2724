"""Reading a request's body with a limit: the one place every route of ``signoff serve``
reads one (webhooks, MCP Events callbacks, the JSON API, the pages' forms, the login).

A body over its route's limit is refused (``too_large``, 413) as soon as that is
known: at once when its ``Content-Length`` says so, else when the bytes read so
far pass the limit. No more than the limit is ever held, so a client sending
hundreds of megabytes costs the server what the limit costs; what it still
sends after the answer, uvicorn reads and drops.
"""

from starlette.datastructures import FormData
from starlette.formparsers import FormParser, MultiPartException, MultiPartParser

from ..errors import Refused
from ..hosts.mcp.events import MAX_DELIVERY_BYTES
from ..rules.events import MAX_LINE_BYTES, broken_json_reason, decode_json

HOOK_LIMIT = MAX_LINE_BYTES  # one event object, 64 KiB
EVENTS_LIMIT = MAX_DELIVERY_BYTES  # one MCP Events delivery, 256 KiB (the draft's limit)
API_LIMIT = 256 * 1024  # a JSON API request: a decision, an edited draft
# A page's form: an edited draft percent-encoded takes up to three bytes per byte.
FORM_LIMIT = 1024 * 1024
LOGIN_LIMIT = 16 * 1024  # a name, a token, the CSRF value and the path to go back to
LIMITS = (HOOK_LIMIT, EVENTS_LIMIT, API_LIMIT, FORM_LIMIT, LOGIN_LIMIT)
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def too_large(limit):
    """The refusal of a body over ``limit`` bytes."""
    return Refused("too_large", f"the body is over {limit} bytes")


async def chunks(request, limit):
    """The body's chunks as they arrive; ``too_large`` once they pass ``limit`` bytes."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise too_large(limit)
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        yield chunk


async def read_body(request, limit):
    """The whole body, at most ``limit`` bytes (else ``too_large``)."""
    return b"".join([chunk async for chunk in chunks(request, limit)])


async def read_form(request, limit):
    """The form fields of a urlencoded or multipart body of at most ``limit`` bytes
    (else ``too_large``); an empty form for any other type. A multipart body may
    carry no files (``invalid_body``): no form of signoff takes one."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media not in FORM_TYPES:
        return FormData()
    stream = chunks(request, limit)
    if media == FORM_TYPES[0]:
        return await FormParser(request.headers, stream).parse()
    try:
        return await MultiPartParser(request.headers, stream, max_files=0).parse()
    except MultiPartException as exc:
        raise Refused("invalid_body", f"form: {exc.message}") from None


def json_object(raw):
    """A JSON body as one object (an empty body is ``{}``); ``invalid_body`` for one that
    is not UTF-8, not JSON (a key named twice included) or not an object."""
    if not raw.strip():
        return {}
    try:
        value = decode_json(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Refused("invalid_body", "body: not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise Refused("invalid_body", broken_json_reason(exc, "body")) from None
    if not isinstance(value, dict):
        raise Refused("invalid_body", "body: must be one JSON object")
    return value
