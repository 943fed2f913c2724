"""An ``MCPServer`` that takes arguments exactly as declared, and business errors.

The SDK's server ignores unknown arguments and coerces types (it even parses
JSON out of strings); a tool that writes must not guess what a caller meant,
so extra, missing or mistyped arguments are refused with ``invalid_arguments``
before the tool runs. Business errors are ``isError`` results whose body is
``{"ok": false, "error": CODE}``. On stdio, messages are bounded and screened
first (see ``stdio``).
"""

import json
import re

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

from . import stdio

# Records and results travel whole through a host's tools; the bound only
# keeps one message from taking the memory of the machine.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# What a key argument may look like (the task keys signoff makes are sha256 hex).
KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
              "object": (dict,), "array": (list,), "null": (type(None),)}


def error_result(code, reason=None):
    """An ``isError`` result naming ``code`` (and a reason when there is one)."""
    body = {"ok": False, "error": code}
    if reason:
        body["reason"] = reason
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(body))],
                          structured_content=body, is_error=True)


def value_result(value, is_error=False):
    """A result for a dict ``value``, as the SDK shapes a ``dict[str, Any]`` return."""
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(value))],
                          structured_content=value, is_error=is_error)


def key_refusal(key):
    """An ``invalid_arguments`` result unless ``key`` looks like a key; else ``None``."""
    if not KEY.fullmatch(key):
        return error_result("invalid_arguments", "key: 1-128 characters: letters, digits, . _ : -")
    return None


def check_arguments(schema, arguments, types=True):
    """The reason ``arguments`` do not fit the tool's input ``schema``, or ``None``."""
    if not isinstance(arguments, dict):
        return "arguments: must be an object"
    properties = schema.get("properties", {})
    extra = sorted(set(arguments) - set(properties))
    if extra:
        return f"{extra[0]}: not an argument of this tool"
    if not types:
        return None
    for name in schema.get("required", []):
        if name not in arguments:
            return f"{name}: missing"
    for name, value in arguments.items():
        if not _fits(properties[name], value):
            return f"{name}: wrong type"
        longest = properties[name].get("maxItems")
        if longest is not None and len(value) > longest:
            return f"{name}: more than {longest} items"
    return None


def _fits(spec, value):
    options = spec.get("anyOf")
    if options:
        return any(_fits(option, value) for option in options)
    kind = spec.get("type")
    if kind is None:
        return True
    allowed = JSON_TYPES.get(kind, (object,))
    if isinstance(value, bool) and bool not in allowed:
        return False  # JSON true is not the integer 1
    if not isinstance(value, allowed):
        return False
    items = spec.get("items")  # a list's elements are checked as strictly as the list
    return not (kind == "array" and items) or all(_fits(items, v) for v in value)


class StrictServer(MCPServer):
    """``MCPServer`` with strict arguments and bounded stdio messages.

    ``raw_tools`` maps a tool name to a function that receives the arguments
    dict as sent (only extra arguments are refused first) and returns the
    tool's value: for tools whose own validation must see the caller's values
    unconverted. ``duplicate_refusals`` maps a tool name to a function of a
    reason that returns the tool's answer to a call whose message names a key
    twice (by default ``invalid_arguments``). A stdio message is at most
    ``max_message_bytes``.
    """

    def __init__(self, *args, max_message_bytes=MAX_MESSAGE_BYTES, **kwargs):
        super().__init__(*args, **kwargs)
        self.raw_tools = {}
        self.duplicate_refusals = {}
        self.max_message_bytes = max_message_bytes

    async def run_stdio_async(self):
        """Serve on standard input and output, messages bounded and screened, until EOF."""
        await stdio.serve(self, self.max_message_bytes)

    def has_tool(self, name):
        """True when ``name`` is one of this server's tools."""
        return isinstance(name, str) and self._tool_manager.get_tool(name) is not None

    async def refuse_call(self, name, reason):
        """The result of a call of tool ``name`` whose message names a key twice."""
        refuse = self.duplicate_refusals.get(name)
        if refuse is None:
            return error_result("invalid_arguments", reason)
        return _as_result(await anyio.to_thread.run_sync(refuse, reason))

    async def call_tool(self, name, arguments, context=None):
        """Refuse arguments that do not fit, then run the tool."""
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            return await super().call_tool(name, arguments, context)
        raw = self.raw_tools.get(name)
        reason = check_arguments(tool.parameters, arguments, types=raw is None)
        if reason:
            return error_result("invalid_arguments", reason)
        if raw is not None:
            return _as_result(await anyio.to_thread.run_sync(raw, dict(arguments)))
        return await super().call_tool(name, arguments, context)


def _as_result(value):
    return value if isinstance(value, CallToolResult) else value_result(value)
