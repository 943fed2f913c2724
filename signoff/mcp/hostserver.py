"""``signoff host mcp``: the home's reference host as an MCP stdio server.

Five tools, named as ``McpHost`` calls them by default: ``get_context``,
``get_record``, ``read_material``, ``submit_result``, ``get_receipt``.
Arguments are strict (``invalid_arguments``). The grant is checked before the
idempotency lookup, so a principal without ``submit_review`` learns nothing
from a key. A submit retried with the same key and result returns the
original outcome; another result under the key is ``idempotency_conflict``.
The reference host's fault switches work through it (``crash-after-write``
kills this server process right after the write commits).
"""

import threading
from typing import Any

from ..errors import Blocked
from .strict import StrictServer, error_result, key_refusal

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
    def submit_result(key: str, expected: dict, result: dict) -> dict[str, Any]:
        """Write ``result`` once under the idempotency ``key`` if the record still equals ``expected``."""
        return run(lambda: _submit(host, key, expected, result))

    @server.tool()
    def get_receipt(key: str) -> dict[str, Any] | None:
        """The result stored under ``key``, or null."""
        return run(lambda: _receipt(host, key))

    return server


def _authorize(host, document=None):
    """The grant check that comes before any idempotency lookup."""
    grant = host.context()
    if "submit_review" not in grant.get("actions", []):
        raise Blocked("action", "the grant does not allow submit_review")
    if document is not None and document not in grant.get("docs", []):
        raise Blocked("access", "the grant does not cover this document")


def _submit(host, key, expected, result):
    refusal = key_refusal(key)
    if refusal:
        return refusal
    _authorize(host, expected.get("document"))
    host.submit(key, expected, result)
    return {"ok": True, "key": key}


def _receipt(host, key):
    refusal = key_refusal(key)
    if refusal:
        return refusal
    _authorize(host)
    return host.receipt(key)


def serve(host):
    """Serve ``host`` on standard input and output until EOF."""
    build(host).run("stdio")
