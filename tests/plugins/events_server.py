"""A review tool's MCP server that offers MCP Events: a third party, as a vendor writes one.

It knows nothing of signoff: it is built on the official SDK's ``MCPServer`` and
``mcp_webhook_events``, keeps its comments, replies, grant and subscriptions in
its own SQLite file, and uses its own names. Run it as::

    python events_server.py --port 0 --db FILE

It prints one JSON line, ``{"url": ".../mcp", "admin": ".../_admin", "pid": N}``,
once it listens, and serves streamable HTTP on 127.0.0.1 until it is stopped.

Tools: ``whoami`` (the grant), ``fetch_comment(comment_id)``,
``release_calendar(doc)``, ``post_reply(idempotency_key, snapshot, reply)``
(idempotent under the key; ``idempotency_conflict``, ``source_changed``),
``reply_receipt(idempotency_key)`` and ``comments_since(doc, since)`` (the ids
of the document's comments added at or after ``since``, by the events clock). Business errors are ``isError`` with
``{"ok": false, "error": CODE}``. Event: ``review.comment_added``, subscribed
per document (``{"doc": ...}``), with ``{comment_id, doc, author}`` as data;
unsubscribing what it does not hold answers the draft's NotFound (-32011).

The test-only admin surface under ``/_admin`` drives it from outside:
``POST comment`` (``{doc, author?, text?, comment_id?}``: adds a comment and
publishes the event), ``POST calendar`` (``{doc, demo_date}``), ``POST deliver``
(one ``deliver_pending()`` pass), ``GET subscriptions``, ``POST clock``
(``{advance_s}``: moves the events clock), ``POST silence`` (``{on}``: MCP
requests wait, unanswered, until it is turned off) and ``POST reset`` (everything
forgotten, as a server started on an empty file: the tests that share one server).
"""

import argparse
import asyncio
import json
import os
import secrets
import socket
import sqlite3
import sys
import time
from contextlib import contextmanager

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent
from mcp_webhook_events import EventDefinition, McpEvents, SafeHttp
from starlette.responses import JSONResponse

EVENT = "review.comment_added"
GRANT = {"tenant": "acme", "user": "review-bot", "docs": ["doc-demo"],
         "actions": ["read", "draft", "submit_review"], "revision": 1}
COMMENT_ADDED = EventDefinition(
    name=EVENT, description="A review comment was added to a document.",
    input_schema={"type": "object", "properties": {"doc": {"type": "string"}},
                  "required": ["doc"], "additionalProperties": False},
    payload_schema={"type": "object", "required": ["comment_id", "doc", "author"],
                    "properties": {"comment_id": {"type": "string"}, "doc": {"type": "string"},
                                   "author": {"type": "string"}}})
SCHEMA = """
CREATE TABLE IF NOT EXISTS comments (id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS comment_times (id TEXT PRIMARY KEY, doc TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS calendars (doc TEXT PRIMARY KEY, demo_date TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS replies (idempotency_key TEXT PRIMARY KEY, reply TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS grant_context (id INTEGER PRIMARY KEY CHECK (id = 1), body TEXT NOT NULL);
"""


class Refusal(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code


class Store:
    """Comments, calendars, replies and the grant, one short transaction per call."""

    def __init__(self, path):
        self.path = path
        with self.tx() as db:
            for statement in filter(str.strip, SCHEMA.split(";")):
                db.execute(statement)
            db.execute("INSERT OR IGNORE INTO grant_context VALUES (1, ?)", (json.dumps(GRANT),))

    @contextmanager
    def tx(self):
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def grant(self, db):
        return json.loads(db.execute("SELECT body FROM grant_context").fetchone()[0])

    def comment(self, db, comment_id):
        row = db.execute("SELECT body FROM comments WHERE id = ?", (comment_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def readable(self, db, comment_id):
        comment, grant = self.comment(db, comment_id), self.grant(db)
        if comment is None:
            raise Refusal("missing")
        if (comment["tenant"] != grant["tenant"] or comment["document"] not in grant["docs"]
                or "read" not in grant["actions"]):
            raise Refusal("access")
        return comment


store = None  # set in main(): the --db file
events = None
clock_offset = [0.0]
silent = [False]
server = MCPServer("review-events", log_level="WARNING")


class DraftEvents(McpEvents):
    """Unsubscribing what is not held answers the draft's NotFound (-32011), not success."""

    def unsubscribe(self, principal, params):
        delivery = params.get("delivery") or {}
        sub_id = self.subscription_id(principal, delivery.get("url"), params.get("name"),
                                      params.get("arguments") or {})
        if not any(s["id"] == sub_id for s in self.active_subscriptions()):
            raise MCPError(code=-32011, message="Subscription not found",
                           data={"kind": "subscription"})
        return super().unsubscribe(principal, params)


def answer(work):
    """Run ``work(db)`` in one transaction; a ``Refusal`` becomes an ``isError`` result."""
    try:
        with store.tx() as db:
            return work(db)
    except Refusal as exc:
        body = {"ok": False, "error": exc.code}
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(body))],
                              structured_content=body, is_error=True)


@server.tool()
def whoami():
    return answer(store.grant)


@server.tool()
def fetch_comment(comment_id: str):
    return answer(lambda db: store.readable(db, comment_id))


@server.tool()
def release_calendar(doc: str):
    def read(db):
        if doc not in store.grant(db)["docs"]:
            raise Refusal("access")
        row = db.execute("SELECT demo_date FROM calendars WHERE doc = ?", (doc,)).fetchone()
        if row is None:
            raise Refusal("missing")
        return {"document": doc, "demo_date": row[0], "source": f"calendar://{doc}"}
    return answer(read)


@server.tool()
def post_reply(idempotency_key: str, snapshot: dict, reply: dict):
    def post(db):
        if "submit_review" not in store.grant(db)["actions"]:
            raise Refusal("action")
        row = db.execute("SELECT reply FROM replies WHERE idempotency_key = ?",
                         (idempotency_key,)).fetchone()
        if row is not None:
            if json.loads(row[0]) != reply:
                raise Refusal("idempotency_conflict")
            return {"posted": idempotency_key}
        current = store.comment(db, snapshot.get("id"))
        if current != snapshot or current.get("status") != "open":
            raise Refusal("source_changed")
        db.execute("INSERT INTO replies VALUES (?, ?)", (idempotency_key, json.dumps(reply)))
        return {"posted": idempotency_key}
    return answer(post)


@server.tool()
def comments_since(doc: str, since: float) -> list[str]:
    def read(db):
        if doc not in store.grant(db)["docs"]:
            raise Refusal("access")
        return [cid for (cid,) in db.execute(
            "SELECT id FROM comment_times WHERE doc = ? AND at >= ? ORDER BY at, id", (doc, since))]
    return answer(read)


@server.tool()
def reply_receipt(idempotency_key: str):
    def read(db):
        row = db.execute("SELECT reply FROM replies WHERE idempotency_key = ?",
                         (idempotency_key,)).fetchone()
        return json.loads(row[0]) if row else None
    return answer(read)


# -- the test-only admin surface ---------------------------------------------------

async def body_of(request):
    raw = await request.body()
    return json.loads(raw) if raw else {}


@server.custom_route("/_admin/comment", methods=["POST"])
async def add_comment(request):
    given = await body_of(request)
    doc = given["doc"]

    def add():
        with store.tx() as db:
            comment_id = given.get("comment_id") or f"c-{secrets.token_hex(4)}"
            comment = {"id": comment_id, "document": doc, "version": 1, "status": "open",
                       "kind": "review", "tenant": store.grant(db)["tenant"],
                       "text": given.get("text", ""), "source": f"review://{doc}/{comment_id}"}
            db.execute("INSERT OR REPLACE INTO comments VALUES (?, ?)",
                       (comment_id, json.dumps(comment)))
            db.execute("INSERT OR REPLACE INTO comment_times VALUES (?, ?, ?)",
                       (comment_id, doc, events.clock()))
            return comment

    comment = await anyio.to_thread.run_sync(add)
    event_id = "evt_" + secrets.token_hex(12)
    data = {"comment_id": comment["id"], "doc": doc, "author": given.get("author", "someone")}
    queued = await anyio.to_thread.run_sync(lambda: events.publish(EVENT, data, event_id=event_id))
    return JSONResponse({"comment": comment, "event_id": event_id, "queued": queued})


@server.custom_route("/_admin/calendar", methods=["POST"])
async def set_calendar(request):
    given = await body_of(request)
    with store.tx() as db:
        db.execute("INSERT OR REPLACE INTO calendars VALUES (?, ?)", (given["doc"], given["demo_date"]))
    return JSONResponse(given)


@server.custom_route("/_admin/deliver", methods=["POST"])
async def deliver(request):
    return JSONResponse(await anyio.to_thread.run_sync(events.deliver_pending))


@server.custom_route("/_admin/subscriptions", methods=["GET"])
async def subscriptions(request):
    return JSONResponse(await anyio.to_thread.run_sync(events.active_subscriptions))


@server.custom_route("/_admin/clock", methods=["POST"])
async def move_clock(request):
    clock_offset[0] += float((await body_of(request)).get("advance_s", 0))
    return JSONResponse({"now": events.clock()})


@server.custom_route("/_admin/silence", methods=["POST"])
async def silence(request):
    silent[0] = bool((await body_of(request)).get("on", True))
    return JSONResponse({"silent": silent[0]})


@server.custom_route("/_admin/reset", methods=["POST"])
async def reset(request):
    def wipe():  # every row of the file, the events' own tables too, and the grant as new
        with store.tx() as db:
            for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"
                                       " AND name NOT LIKE 'sqlite%'").fetchall():
                db.execute(f'DELETE FROM "{table}"')
            db.execute("INSERT INTO grant_context VALUES (1, ?)", (json.dumps(GRANT),))
    await anyio.to_thread.run_sync(wipe)
    clock_offset[0], silent[0] = 0.0, False
    return JSONResponse({"reset": True})


def holding_mcp_while_silent(app):
    """ASGI middleware: while silenced, MCP requests wait instead of being answered."""
    async def wrapped(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/mcp"):
            while silent[0]:
                await asyncio.sleep(0.05)
        await app(scope, receive, send)
    return wrapped


def main():
    global store, events
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--db", required=True)
    options = parser.parse_args()
    store = Store(options.db)
    # Callbacks are test receivers on http://127.0.0.1, which SafeHttp refuses by default.
    events = DraftEvents(server, store=options.db, definitions=[COMMENT_ADDED],
                         clock=lambda: time.time() + clock_offset[0],
                         http=SafeHttp(allow_insecure_for_tests=True))
    events.install()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart on the same port
    sock.bind(("127.0.0.1", options.port))
    sock.listen(128)
    port = sock.getsockname()[1]
    app = holding_mcp_while_silent(server.streamable_http_app(host="127.0.0.1"))
    base = f"http://127.0.0.1:{port}"
    print(json.dumps({"url": f"{base}/mcp", "admin": f"{base}/_admin", "pid": os.getpid()}),
          flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
