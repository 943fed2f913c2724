"""``signoff mcp --monitor ID``: signoff as an MCP stdio server for agents.

An agent may report events and read tasks, for the one monitor fixed when the
server starts. There is no tool that approves, rejects, cancels or changes a
grant: approval stays with people (the CLI and the Python API).

``report_event`` takes the event's fields as arguments and runs them through
the same validation as ``signoff enqueue`` (the values as sent, unconverted);
``text`` is accepted and dropped before anything is stored, as everywhere. A
refused event is an ``isError`` result, so that a model sees the refusal; its
reasons speak of the event, never of lines. A message that names a key twice
is refused as an invalid event before the SDK picks one of the values.
"""

import threading
from typing import Any

from ..errors import InvalidEvent, Refused, SignoffError
from ..rules.events import MAX_LINE_BYTES, check_value
from ..state.statuses import TaskStatus
from .strict import StrictServer, error_result, key_refusal, value_result

LIST_LIMIT = 1000
# An event's JSON is at most 64 KiB; a client escaping everything outside ASCII
# sends that in up to three times as many bytes, and the envelope comes on top.
MAX_MESSAGE_BYTES = 4 * MAX_LINE_BYTES
STATUSES = sorted(s.value for s in TaskStatus)
INSTRUCTIONS = ("signoff turns change events into drafts a person approves. Report events with "
                "report_event; read what became of them with list_tasks and show_task. "
                "Approving, rejecting and cancelling are not available here.")


def build(rt, monitor_id):
    """The agents' MCP server for ``monitor_id``; ``unknown_monitor`` if there is none."""
    if not any(m["id"] == monitor_id for m in rt.monitors()):
        raise Refused("unknown_monitor", f"no monitor {monitor_id!r}: bind it first")
    server = StrictServer("signoff", instructions=INSTRUCTIONS, log_level="WARNING",
                          max_message_bytes=MAX_MESSAGE_BYTES)
    lock = threading.Lock()

    def store(outcome):
        with lock:
            line = rt.enqueue_checked([outcome], monitor_id)[0]
        answer = {"accepted": line.accepted, "event_id": line.event_id,
                  "delivery": line.delivery, "code": line.code, "reason": line.reason}
        return value_result(answer, is_error=not line.accepted)

    def report(event):
        return store(check_value(event, "event"))

    # Served through ``raw_tools`` with the values as sent; this signature is
    # what the tool listing shows.
    @server.tool()
    def report_event(event_id: str, name: str, document: str, record_id: str, occurred: int,
                     text: str | None = None) -> dict[str, Any]:
        """Report one change event to signoff (text is never stored; the host is re-read)."""
        return report({"event_id": event_id, "name": name, "document": document,
                       "record_id": record_id, "occurred": occurred, "text": text})

    server.raw_tools["report_event"] = report
    server.duplicate_refusals["report_event"] = lambda reason: store(InvalidEvent(reason))

    @server.tool()
    def list_tasks(status: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """This monitor's tasks, oldest first (``status`` to filter; at most ``limit``)."""
        if not 1 <= limit <= LIST_LIMIT:
            return error_result("invalid_arguments", f"limit: must be 1-{LIST_LIMIT}")
        if status is not None and status not in STATUSES:
            return error_result("invalid_arguments", f"status: one of {', '.join(STATUSES)}")
        return rt.monitor_tasks(monitor_id, status, limit)

    @server.tool()
    def show_task(key: str) -> dict[str, Any]:
        """One task of this monitor: record, result, digests and history."""
        refusal = key_refusal(key)
        if refusal:
            return refusal
        try:
            detail = rt.task(key)
        except SignoffError as exc:
            return error_result(exc.code)
        if detail["monitor"] != monitor_id:
            return error_result("unknown_task")
        return detail

    return server


def serve(rt, monitor_id):
    """Serve agents on standard input and output until EOF."""
    build(rt, monitor_id).run("stdio")
