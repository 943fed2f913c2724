"""An ``MCPServer`` that takes arguments exactly as declared, and business errors.

The SDK's server ignores unknown arguments and coerces types (it even parses
JSON out of strings); a tool that writes must not guess what a caller meant,
so extra, missing or mistyped arguments are refused with ``invalid_arguments``
before the tool runs. Business errors are ``isError`` results whose body is
``{"ok": false, "error": CODE}``.
"""

import json

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
              "object": (dict,), "array": (list,), "null": (type(None),)}


def error_result(code, reason=None):
    """An ``isError`` result naming ``code`` (and a reason when there is one)."""
    body = {"ok": False, "error": code}
    if reason:
        body["reason"] = reason
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(body))],
                          structured_content=body, is_error=True)


def value_result(value):
    """A successful result for a dict ``value``, as the SDK shapes a ``dict[str, Any]`` return."""
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(value))],
                          structured_content=value)


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
    return isinstance(value, allowed)


class StrictServer(MCPServer):
    """``MCPServer`` with strict arguments.

    ``raw_tools`` maps a tool name to a function that receives the arguments
    dict as sent (only extra arguments are refused first) and returns the
    tool's value: for tools whose own validation must see the caller's values
    unconverted.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.raw_tools = {}

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
            value = await anyio.to_thread.run_sync(raw, dict(arguments))
            return value if isinstance(value, CallToolResult) else value_result(value)
        return await super().call_tool(name, arguments, context)
