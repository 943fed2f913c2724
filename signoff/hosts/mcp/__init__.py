"""A host that is an MCP tool server (docs/mcp.md), reached with the official SDK.

``[host] factory = "signoff.hosts.mcp:McpHost"`` with ``[host.options]``:
``command``/``args``/``env`` (stdio) or ``url`` (streamable HTTP), ``timeout_s``,
``tools`` (the server's tool and argument names for each contract call),
``transient_codes`` and, for a server that offers MCP Events, ``events`` (what
a monitor subscribes to; docs/events.md). signoff makes one host per worker
thread, so each host object keeps one session of its own.

The task key signoff passes to ``submit`` and ``receipt`` is the only
idempotency key sent: the mapping renames arguments but never fills one from
a record, an event or a result.
"""

import json
import re
import shutil
import weakref

from ...errors import Blocked, ConfigError

# The host contract: each call and its arguments, and the default tool names
# (those `signoff host mcp` serves).
CONTRACT = {"context": (), "get": ("record_id",), "read_material": ("document",),
            "submit": ("key", "expected", "result"), "receipt": ("key",)}
DEFAULT_TOOLS = {"context": "get_context", "get": "get_record",
                 "read_material": "read_material", "submit": "submit_result",
                 "receipt": "get_receipt"}
# Optional host methods, each only when the ``tools`` table names the server's
# tool for it: the one behind replays (monitor resume --replay, a lapsed
# subscription) and the batch calls (docs/plugins.md).
OPTIONAL = {"changes": ("document", "since"), "get_many": ("record_ids",),
            "receipts": ("keys",), "submit_many": ("items",)}
# The batch tools of `signoff host mcp`, which the configurations signoff writes name.
BATCH_TOOLS = {"get_many": "get_records", "receipts": "get_receipts",
               "submit_many": "submit_results"}
CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")
# The most ids, keys or items one batch call sends (what `signoff host mcp` takes);
# a longer batch is sent in several calls.
MAX_BATCH = 1000


class McpToolError(Exception):
    """The tool failed without naming a code, or answered something unreadable."""


class McpHost:
    """The host contract over one MCP session (stdio or streamable HTTP)."""

    def __init__(self, home, command=None, args=(), env=None, url=None, timeout_s=10,
                 tools=None, transient_codes=("timeout", "unavailable"), events=None):
        try:
            from .events import events_settings
            from .session import McpSession, stdio_params
        except ImportError as exc:
            raise ConfigError("plugin_import", f"McpHost needs the signoff[mcp] extra: {exc}") from None
        self.home = home
        self.tools = tool_map(tools)
        self.transient_codes = frozenset(_strings(transient_codes, "transient_codes"))
        timeout_s = _positive(timeout_s)
        if (command is None) == (url is None):
            raise ConfigError("bad_config", "host.options: give exactly one of command and url")
        if events is not None and url is None:
            # Deliveries are webhooks from a server that runs on its own, not a child process.
            raise ConfigError("bad_config", "host.options.events needs a url (streamable HTTP)")
        # What its monitors subscribe to (admin/subscriptions.py looks for this attribute).
        self.events_settings = None if events is None else events_settings(events)
        for op in OPTIONAL:
            if op in self.tools:  # a host without one has no such attribute at all
                setattr(self, op, getattr(self, "_" + op))
        if url is not None:
            self.session = McpSession(url=_string(url, "url"), timeout_s=timeout_s)
        else:
            env = _table(env, "env")
            self.session = McpSession(
                stdio_params(_executable(command), _strings(args, "args"), env),
                timeout_s=timeout_s)
        self._finalizer = weakref.finalize(self, self.session.close)

    # -- the host contract ---------------------------------------------------

    def context(self):
        """The grant context, from the context tool."""
        return self._call("context")

    def get(self, record_id):
        """The authoritative record."""
        return self._call("get", record_id=record_id)

    def read_material(self, document):
        """The material for ``document``."""
        return self._call("read_material", document=document)

    def submit(self, key, expected, result):
        """Submit ``result`` under the task key ``key`` (the idempotency key)."""
        self._call("submit", key=key, expected=expected, result=result)

    def receipt(self, key):
        """What the server holds under ``key``, or ``None``."""
        return self._call("receipt", key=key)

    def _changes(self, document, since):
        """Ids of the records of ``document`` changed since ``since`` (Unix seconds)."""
        return self._call("changes", document=document, since=since)

    def _get_many(self, record_ids):
        """``{record_id: record}`` for some of ``record_ids``; the others are for ``get``."""
        return self._batch("get_many", list(record_ids), dict)

    def _receipts(self, keys):
        """``{key: result}`` for the keys of ``keys`` that hold a result."""
        return self._batch("receipts", list(keys), dict)

    def _submit_many(self, items):
        """``{key: code}`` for the ``(key, expected, result)`` items the server refused.

        Each item's task key is its idempotency key, as for ``submit``. An
        item refused with a transient code fails the whole call as a transient
        failure: a refusal would block its task, where a retry reads its receipt.
        """
        refused = self._batch("submit_many", [{"key": key, "expected": expected, "result": result}
                                              for key, expected, result in items],
                              str, key=lambda item: item["key"])
        transient = sorted(set(refused.values()) & self.transient_codes)
        if transient:
            kind = TimeoutError if "timeout" in transient else ConnectionError
            raise kind(f"mcp: {self.tools['submit_many'][0]}: {transient[0]} for some items")
        return refused

    def events_client(self):
        """An ``EventsClient`` on this host's session (``events`` must be configured)."""
        from .events import EventsClient
        return EventsClient(self.session, self.events_settings.subscribe_timeout_s)

    def close(self):
        """End the session and stop a stdio server."""
        self._finalizer()

    # -- calls ---------------------------------------------------------------

    def _call(self, op, **arguments):
        name, names = self.tools[op]
        result = self.session.call(name, {names[k]: v for k, v in arguments.items()})
        return read_result(result, name, self.transient_codes)

    def _batch(self, op, values, kind, key=lambda value: value):
        """One table from calls of at most ``MAX_BATCH`` ``values`` each.

        ``values`` is the one argument's list; ``key`` names what the answer
        may be keyed by for each, and ``read_table`` checks every answer.
        """
        name, names = self.tools[op]
        (argument,) = names.values()
        table = {}
        for start in range(0, len(values), MAX_BATCH):
            share = values[start:start + MAX_BATCH]
            asked = [key(value) for value in share]
            # A table may name "result": then it is the table, not the SDK's wrapper.
            value = read_result(self.session.call(name, {argument: share}), name,
                                self.transient_codes, unwrap="result" not in asked)
            table.update(read_table(value, asked, kind, name))
        return table


def read_result(result, tool, transient_codes, unwrap=True):
    """A ``CallToolResult`` as a value, or the exception signoff expects (docs/mcp.md).

    The value is the structured content (with ``unwrap``, the SDK's
    ``{"result": ...}`` wrapper unwrapped), else the JSON text, else ``None``
    when there is no content.
    ``isError`` naming a code is ``Blocked(code)`` unless the code is transient;
    ``isError`` without one is an ordinary failed attempt.
    """
    if result.is_error:
        body = _error_body(result)
        code = body.get("error") if isinstance(body, dict) else None
        if not (isinstance(code, str) and CODE.fullmatch(code)):
            raise McpToolError(f"mcp: {tool} failed without a code")
        if code in transient_codes:
            kind = TimeoutError if code == "timeout" else ConnectionError
            raise kind(f"mcp: {tool}: {code}")
        raise Blocked(code, f"the MCP server refused {tool}: {code}")
    structured = result.structured_content
    if structured is not None:
        if unwrap and isinstance(structured, dict) and set(structured) == {"result"}:
            return structured["result"]
        return structured
    text = _text(result)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise McpToolError(f"mcp: {tool} answered text that is not JSON") from None


def read_table(value, asked, kind, tool):
    """``value``, a batch call's answer, checked: a table keyed by some of ``asked``.

    Its values are dicts (records, results) or, for ``kind`` ``str``, refusal
    codes. Anything else is an ``McpToolError``: the batch's attempt failed,
    and nothing of the answer is used.
    """
    if not isinstance(value, dict):
        raise McpToolError(f"mcp: {tool} answered {type(value).__name__}, not a table")
    wanted = set(asked)
    for key, item in value.items():
        if key not in wanted:
            raise McpToolError(f"mcp: {tool} answered for {key!r}, which was not asked for")
        if not isinstance(item, kind) or (kind is str and not CODE.fullmatch(item)):
            raise McpToolError(f"mcp: {tool} answered an unreadable value for {key!r}")
    return value


def _error_body(result):
    if isinstance(result.structured_content, dict):
        return result.structured_content
    text = _text(result)
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


def _text(result):
    parts = [c.text for c in result.content or () if getattr(c, "type", None) == "text"]
    return "".join(parts) if parts else None


def tool_map(tools):
    """``{call: (tool name, {contract argument: server argument})}`` from the ``tools`` option.

    Unknown calls or arguments, and two arguments renamed to one name, are
    configuration errors.
    """
    tools = _table(tools, "tools", values=dict)
    unknown = set(tools) - set(CONTRACT) - set(OPTIONAL)
    if unknown:
        raise ConfigError("bad_config", f"host.options.tools: unknown call {sorted(unknown)[0]!r}; "
                                        f"known: {', '.join([*CONTRACT, *OPTIONAL])}")
    mapping = {}
    wanted = dict(CONTRACT, **{op: params for op, params in OPTIONAL.items() if op in tools})
    for op, params in wanted.items():
        entry = tools.get(op, {})
        extra = set(entry) - {"name", "args"}
        if extra:
            raise ConfigError("bad_config", f"host.options.tools.{op}: unknown key {sorted(extra)[0]!r}")
        name = _string(entry.get("name", DEFAULT_TOOLS.get(op)), f"tools.{op}.name")
        renames = _table(entry.get("args"), f"tools.{op}.args", values=str)
        if set(renames) - set(params):
            bad = sorted(set(renames) - set(params))[0]
            raise ConfigError("bad_config", f"host.options.tools.{op}.args: {op} has no argument "
                                            f"{bad!r} (it has: {', '.join(params) or 'none'})")
        names = {p: renames.get(p, p) for p in params}
        if len(set(names.values())) != len(names):
            raise ConfigError("bad_config", f"host.options.tools.{op}.args: two arguments share a name")
        mapping[op] = (name, names)
    return mapping


def batch_tools_toml():
    """The ``[host.options.tools.*]`` tables naming ``signoff host mcp``'s batch tools."""
    return "".join(f'[host.options.tools.{op}]\nname = "{name}"\n'
                   for op, name in BATCH_TOOLS.items())


def _string(value, what):
    if not isinstance(value, str) or not value:
        raise ConfigError("bad_config", f"host.options.{what} must be a non-empty string")
    return value


def _executable(command):
    # Refused now, so a worker with a mistyped command does not start at all
    # (instead of failing every attempt into the dead letters).
    if shutil.which(_string(command, "command")) is None:
        raise ConfigError("bad_config", f"host.options.command: {command!r} is not an executable "
                                        "on PATH")
    return command


def _strings(values, what):
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise ConfigError("bad_config", f"host.options.{what} must be a list of strings")
    for value in values:
        if not isinstance(value, str):
            raise ConfigError("bad_config", f"host.options.{what} must be a list of strings")
    return list(values)


def _table(value, what, values=str):
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, values) for v in value.values()):
        kind = "tables" if values is dict else "strings"
        raise ConfigError("bad_config", f"host.options.{what} must be a table of {kind}")
    return value


def _positive(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 3600:
        raise ConfigError("bad_config", "host.options.timeout_s must be a number of seconds (0-3600)")
    return float(value)
