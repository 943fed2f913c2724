"""The stdio transport of signoff's MCP servers: bounded, screened JSON-RPC messages.

The SDK's stdio server reads each line whole, however long, leaves a line that
is not JSON unanswered, and keeps one of the values of a key an object names
twice. Here standard input is read in chunks: a message over the server's
limit is skipped as it streams by, never held whole, and answered with an
Invalid Request error (-32600); a line that is not JSON gets the JSON-RPC
parse error (-32700), and JSON that is no JSON-RPC message the Invalid Request
error; a message that names a key twice is refused before the SDK parses it
(a tool call gets the tool's refusal as an ``isError`` result). What passes
goes on to the SDK unchanged. The server keeps serving after each refusal.
"""

import json
import os
import re

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import (INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCResponse,
                       jsonrpc_message_adapter)
from pydantic import ValidationError

from ..rules.events import DuplicateKey, Oversize, broken_json_reason, decode_json, iter_lines

# Where JSON-RPC clients put a request's id: first, or right after "jsonrpc"
# (the SDK's order), so the answer to an oversize message can still name it.
_LEADING_ID = re.compile(
    rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d{1,15}|"[^"\\]{0,128}")')


async def serve(server, limit):
    """Serve ``server`` (a ``StrictServer``) on standard input and output until EOF."""
    screen = _Screen(server, limit)
    async with stdio_server(stdin=screen) as (read_stream, write_stream):
        screen.start(write_stream)
        lowlevel = server._lowlevel_server
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


class _Stdin:
    """File descriptor 0 for ``iter_lines``: a read returns what one read(2) gives,
    so a message is handled as soon as its line ends."""

    def read(self, size):
        return os.read(0, size)


class _Screen:
    """Standard input as the SDK's stdio server reads it: only the lines that may pass."""

    def __init__(self, server, limit):
        self.server, self.limit = server, limit
        self._replies = None
        self._started = anyio.Event()

    def start(self, replies):
        """Begin reading; refusals are answered on ``replies`` (the transport's write stream)."""
        self._replies = replies
        self._started.set()

    async def __aiter__(self):
        await self._started.wait()
        lines = iter_lines(_Stdin(), self.limit)
        while True:
            item = await anyio.to_thread.run_sync(next, lines, None)
            if item is None:
                return
            text = await self._screen(item[1])
            if text is not None:
                yield text

    async def _screen(self, raw):
        """``raw`` decoded when it may go on to the SDK; else answered here and ``None``."""
        if isinstance(raw, Oversize):
            return await self._error(_leading_id(raw.head), INVALID_REQUEST,
                                     f"message: longer than {self.limit} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return await self._error(None, PARSE_ERROR, f"message: not valid UTF-8 "
                                     f"(byte {exc.start + 1})")
        try:
            value = decode_json(text)
        except DuplicateKey as exc:
            return await self._duplicate(text, broken_json_reason(exc, "message"))
        except (ValueError, RecursionError) as exc:
            return await self._error(None, PARSE_ERROR, broken_json_reason(exc, "message"))
        try:  # as the SDK will read it, which answers nothing when it cannot
            jsonrpc_message_adapter.validate_json(text, by_name=False)
        except ValidationError:
            request_id = _request_id(value.get("id")) if isinstance(value, dict) else None
            return await self._error(request_id, INVALID_REQUEST, "message: not a JSON-RPC "
                                     "2.0 request, notification or response")
        return text

    async def _duplicate(self, text, reason):
        # What the SDK would have read (one of the values) tells what was asked.
        message = decode_json(text, unique_keys=False)
        message = message if isinstance(message, dict) else {}
        request_id = _request_id(message.get("id"))
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if (request_id is None or message.get("method") != "tools/call"
                or not self.server.has_tool(name)):
            return await self._error(request_id, INVALID_REQUEST, reason)
        result = await self.server.refuse_call(name, reason)
        await self._send(JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result.model_dump(
            by_alias=True, mode="json", exclude_unset=True)))
        return None

    async def _error(self, request_id, code, reason):
        words = "Parse error" if code == PARSE_ERROR else "Invalid Request"
        await self._send(JSONRPCError(jsonrpc="2.0", id=request_id,
                                      error=ErrorData(code=code, message=f"{words}: {reason}")))
        return None

    async def _send(self, message):
        await self._replies.send(SessionMessage(message))


def _request_id(value):
    """``value`` when it can be a JSON-RPC request id (a string or an integer), else ``None``."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def _leading_id(head):
    found = _LEADING_ID.match(head)
    return json.loads(found.group(1)) if found else None
