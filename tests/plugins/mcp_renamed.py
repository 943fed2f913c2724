"""A third-party-style MCP server over a reference host, with its own names.

Run as ``python -m mcp_renamed HOME`` (stdio) or ``python -m mcp_renamed HOME
PORT`` (streamable HTTP on 127.0.0.1:PORT, path ``/mcp``). It uses the SDK's plain ``MCPServer``
(no strict arguments) and answers as many servers do: JSON text instead of
structured content, a business error as ``isError`` with a JSON text body,
and no content at all when a suggestion is not found. Tool and argument
names differ from signoff's, so ``McpHost`` reaches it through a ``tools``
mapping. A few tools misbehave on purpose, for the error mapping:

* ``whoami_slowly``: writes ``HOME/in-call``, then sleeps (a hung call);
* ``broken_fetch``: raises (``isError`` without a code);
* ``busy``: answers ``isError`` with the transient code ``unavailable``.

``environment`` answers the names of the variables the server was started with.

Batch tools (``fetch_comments``, ``find_suggestions``, ``post_suggestions``)
append each call's arguments to ``HOME/batch-calls.jsonl`` and answer as the
host's batch call would (JSON text), unless ``HOME/canned-TOOL.json`` exists:
then they answer its JSON text and do nothing else (a server answering a
wrong shape).
"""

import json
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

from signoff.errors import Blocked
from signoff.hosts.reference import ReferenceHost

HOME = Path(sys.argv[1])
host = ReferenceHost(HOME)
server = MCPServer("renamed-suggestions", log_level="WARNING")


def refused(code):
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(
        {"ok": False, "error": code}))], is_error=True)


def answer(call):
    try:
        return call()
    except Blocked as exc:
        return refused(exc.code)


@server.tool()
def whoami():
    return host.context()


@server.tool()
def whoami_slowly():
    (HOME / "in-call").write_text("1", encoding="utf-8")
    time.sleep(60)
    return host.context()


@server.tool()
def fetch_comment(comment_id: str):
    return answer(lambda: host.get(comment_id))


@server.tool()
def broken_fetch(comment_id: str):
    raise RuntimeError("this server has a bug")


@server.tool()
def fetch_material(doc: str):
    return answer(lambda: host.read_material(doc))


@server.tool()
def busy(doc: str):
    return refused("unavailable")


@server.tool()
def post_suggestion(operation_key: str, expect: dict, body: dict):
    return answer(lambda: host.submit(operation_key, expect, body) or {"posted": operation_key})


@server.tool()
def find_suggestion(operation_key: str):
    return host.receipt(operation_key)


def batch(tool, arguments, call):
    with (HOME / "batch-calls.jsonl").open("a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")
    canned = HOME / f"canned-{tool}.json"
    if canned.exists():
        text = canned.read_text(encoding="utf-8")
    else:
        text = json.dumps(call())
    return CallToolResult(content=[TextContent(type="text", text=text)])


@server.tool()
def fetch_comments(comment_ids: list):
    return batch("fetch_comments", {"comment_ids": comment_ids},
                 lambda: host.get_many(comment_ids))


@server.tool()
def find_suggestions(operation_keys: list):
    return batch("find_suggestions", {"operation_keys": operation_keys},
                 lambda: host.receipts(operation_keys))


@server.tool()
def post_suggestions(suggestions: list):
    return batch("post_suggestions", {"suggestions": suggestions}, lambda: host.submit_many(
        [(s["key"], s["expected"], s["result"]) for s in suggestions]))


@server.tool()
def environment():
    return {"names": sorted(os.environ)}


if __name__ == "__main__":
    if len(sys.argv) > 2:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
