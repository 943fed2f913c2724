"""``signoff host mcp``: the home's reference host as an MCP server (stdio or HTTP).

Eight tools: the five ``McpHost`` calls by default (``get_context``,
``get_record``, ``read_material``, ``submit_result``, ``get_receipt``) and the
batch calls' three (``get_records``, ``get_receipts``, ``submit_results``, at
most 1,000 ids, keys or items a call), which answer as the single tools would
for each. Arguments are strict (``invalid_arguments``). The grant is checked
before the idempotency lookup, so a principal without ``submit_review`` learns
nothing from a key. A submit retried with the same key and result returns the
original outcome; another result under the key is ``idempotency_conflict``.
The reference host's fault switches work through it (``crash-after-write``
kills this server process right after the write commits).

Over streamable HTTP (``--http``) it can also offer MCP Events (``--events``,
with the ``mcp-webhook-events`` package): one event, ``comment.created``,
subscribed per document (``{"document": ...}``), whose data is the new
record's ``{record_id, document}``. ``signoff host record`` publishes it when
it adds a record, into the events store in the home; this server delivers
what is due every half second, with the package's retries.
"""

import ipaddress
import json
import logging
import os
import socket
import threading
import time
from typing import Annotated, Any

from pydantic import Field

from ..errors import Blocked
from ..hosts.mcp import MAX_BATCH
from ..hosts.reference import EVENTS_FILENAME
from .strict import StrictServer, error_result, key_refusal

EVENT = "comment.created"
DELIVER_EVERY_S = 0.5
LOOPBACK_NAMES = ("localhost",)

log = logging.getLogger("signoff.hostserver")

ITEM = {"key", "expected", "result"}
# The strict server refuses a longer list, or one with an element of another type.
Strings = Annotated[list[str], Field(max_length=MAX_BATCH)]
Items = Annotated[list[dict[str, Any]], Field(max_length=MAX_BATCH)]
# A task's record, or the records of a batch window's task (its result covers them all).
Expected = dict[str, Any] | Annotated[list[dict[str, Any]], Field(min_length=1, max_length=MAX_BATCH)]

INSTRUCTIONS = ("The signoff reference host: records, materials, results and the current grant. "
                "Results are written once per idempotency key.")


def build(host):
    """The MCP server for ``host`` (a ``ReferenceHost``)."""
    lock = threading.Lock()  # tools run on worker threads; the host has one connection
    server = StrictServer("signoff-reference-host", instructions=INSTRUCTIONS, log_level="WARNING")

    def run(call):
        with lock:
            try:
                return call()
            except Blocked as exc:
                return error_result(exc.code)
            except TimeoutError:
                return error_result("timeout")

    @server.tool()
    def get_context() -> dict[str, Any]:
        """The grant context of the current principal."""
        return run(host.context)

    @server.tool()
    def get_record(record_id: str) -> dict[str, Any]:
        """The authoritative record ``record_id``."""
        return run(lambda: host.get(record_id))

    @server.tool()
    def read_material(document: str) -> dict[str, Any]:
        """The material for ``document``."""
        return run(lambda: host.read_material(document))

    @server.tool()
    def submit_result(key: str, expected: Expected, result: dict) -> dict[str, Any]:
        """Write ``result`` once under the idempotency ``key`` if the record (or each record of a
        batch window's list) still equals ``expected``."""
        return run(lambda: _submit(host, key, expected, result))

    @server.tool()
    def get_receipt(key: str) -> dict[str, Any] | None:
        """The result stored under ``key``, or null."""
        return run(lambda: _receipt(host, key))

    @server.tool()
    def get_records(record_ids: Strings) -> dict[str, Any]:
        """``{record_id: record}`` for the records ``get_record`` would answer; the others left out."""
        return run(lambda: host.get_many(record_ids))

    @server.tool()
    def get_receipts(keys: Strings) -> dict[str, Any]:
        """``{key: result}`` for the keys that hold a result; the others left out."""
        return run(lambda: _receipts(host, keys))

    @server.tool()
    def submit_results(items: Items) -> dict[str, Any]:
        """Each ``{key, expected, result}`` written as ``submit_result`` would; ``{key: code}``
        for the items refused."""
        return run(lambda: _submit_many(host, items))

    return server


def _authorize(host):
    """The grant check that comes before any idempotency lookup; the grant."""
    grant = host.context()
    if "submit_review" not in grant.get("actions", []):
        raise Blocked("action", "the grant does not allow submit_review")
    return grant


def _covers(grant, document):
    return document is None or document in grant.get("docs", [])


def _documents(expected):
    """The documents of ``expected`` (a record or a batch window's records); None if malformed."""
    records = expected if isinstance(expected, list) else [expected]
    if not records or not all(isinstance(record, dict) for record in records):
        return None
    return [record.get("document") for record in records]


def _submit(host, key, expected, result):
    refusal = key_refusal(key)
    if refusal:
        return refusal
    grant = _authorize(host)
    if not all(_covers(grant, document) for document in _documents(expected)):
        raise Blocked("access", "the grant does not cover this document")
    host.submit(key, expected, result)
    return {"ok": True, "key": key}


def _receipt(host, key):
    refusal = key_refusal(key)
    if refusal:
        return refusal
    _authorize(host)
    return host.receipt(key)


def _receipts(host, keys):
    for key in keys:
        refusal = key_refusal(key)
        if refusal:
            return refusal
    _authorize(host)
    return host.receipts(keys) if keys else {}


def _submit_many(host, items):
    """The batch as ``_submit`` would take each item: a malformed list is refused whole,
    like a call with a mistyped argument; an item ``_submit`` would refuse is refused alone."""
    if not all(set(item) == ITEM and isinstance(item["key"], str) for item in items):
        return error_result("invalid_arguments", "items: each is {key, expected, result}, "
                                                 "key a string")
    grant = _authorize(host)
    refused, ready = {}, []
    for item in items:
        code = _item_refusal(item, grant)
        if code:
            refused[item["key"]] = code
        else:
            ready.append((item["key"], item["expected"], item["result"]))
    if ready:
        refused.update(host.submit_many(ready))
    return refused


def _item_refusal(item, grant):
    """The code ``submit_result`` would refuse ``item`` with before writing, or ``None``."""
    documents = _documents(item["expected"])
    if documents is None or not isinstance(item["result"], dict) or key_refusal(item["key"]):
        return "invalid_arguments"
    if not all(_covers(grant, document) for document in documents):
        return "access"
    return None


def serve(host):
    """Serve ``host`` on standard input and output until EOF."""
    build(host).run("stdio")


# -- over HTTP, with MCP Events ----------------------------------------------------

def definitions():
    """The events this server offers: ``comment.created`` per document."""
    from mcp_webhook_events import EventDefinition
    return [EventDefinition(
        name=EVENT, description="A review comment (a record) was added to a document.",
        input_schema={"type": "object", "properties": {"document": {"type": "string"}},
                      "required": ["document"], "additionalProperties": False},
        payload_schema={"type": "object", "required": ["record_id", "document"],
                        "properties": {"record_id": {"type": "string"},
                                       "document": {"type": "string"}}})]


def publish_created(store, record):
    """Queue ``comment.created`` for ``record`` to the subscriptions in ``store``; how many."""
    from mcp_webhook_events import McpEvents
    events = McpEvents(None, store=str(store), definitions=definitions())
    return events.publish(EVENT, {"record_id": record["id"], "document": record["document"]})


def retry_now(store):
    """Make now the delivery pass the server would make one first backoff (30 s) from
    now: deliveries waiting out their first retry in ``store``'s outbox are sent, by
    the library as the server sends them, to loopback callbacks only (the demo).
    The pass's counts."""
    from mcp_webhook_events import RETRY_DELAYS, McpEvents
    events = McpEvents(None, store=str(store), definitions=definitions(), http=_callbacks(True),
                       clock=lambda: time.time() + RETRY_DELAYS[0])
    return events.deliver_pending()


def _callbacks(loopback):
    """Where deliveries may go: HTTPS to public addresses only, or with ``loopback``
    (tests and the demo) only to this machine, plain HTTP allowed."""
    from mcp_webhook_events import CallbackError, SafeHttp

    class Callbacks(SafeHttp):
        def check_url(self, url):
            parts = super().check_url(url)
            if loopback and not _is_loopback(parts.hostname):
                raise CallbackError("insecure_url")
            return parts

    return Callbacks(allow_insecure_for_tests=loopback)


def _is_loopback(hostname):
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return hostname in LOOPBACK_NAMES


def serve_http(host, home, port=0, events=False, loopback_callbacks=False):
    """Serve ``host`` over streamable HTTP on 127.0.0.1 until stopped.

    Prints one JSON line (``{"url", "events", "pid"}``) once listening. With
    ``events``, MCP Events too, its subscriptions and outbox in the home.
    """
    import uvicorn
    server = build(host)
    if events:
        from mcp_webhook_events import McpEvents
        offered = McpEvents(server, store=str(home / EVENTS_FILENAME), definitions=definitions(),
                            http=_callbacks(loopback_callbacks))
        offered.install()
        threading.Thread(target=_deliver_forever, args=(offered,), name="deliver",
                         daemon=True).start()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    print(json.dumps({"url": url, "events": events, "pid": os.getpid()}), flush=True)
    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def _deliver_forever(offered):
    while True:
        try:
            offered.deliver_pending()
        except Exception:  # the next pass tries again; the outbox keeps what is due
            log.exception("delivering events failed")
        time.sleep(DELIVER_EVERY_S)
