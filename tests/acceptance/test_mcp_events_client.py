"""The MCP Events subscriber against a third-party events server, over real HTTP.

``tests/plugins/events_server.py`` is a review tool's MCP server built on the
official SDK and ``mcp_webhook_events``, with its own names; each test here
talks to it through ``McpSession`` and ``EventsClient``, and gets deliveries
on a small HTTP receiver of its own that answers the server's callback
verification with ``verification_answer``. Tests share one server (each uses
its own document and callback URL, so its subscriptions are its own) except
the one that kills it.
"""

import base64
import datetime
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from standardwebhooks.webhooks import Webhook

from helpers import PLUGINS, child_env
from signoff.errors import Blocked, ConfigError, InvalidEvent, Refused
from signoff.rules.events import validate
from signoff.hosts.mcp import McpHost
from signoff.hosts.mcp.events import (EventsClient, check_map, map_delivery, new_secret,
                                verification_answer)
from signoff.hosts.mcp.session import McpCallError, McpSession
from test_mcp_host import free_port, start_http_server

# A third-party server and a receiver: nothing here touches signoff's state or queue.
pytestmark = pytest.mark.backend_independent

EVENT = "review.comment_added"
TOOLS = {"context": {"name": "whoami"},
         "get": {"name": "fetch_comment", "args": {"record_id": "comment_id"}},
         "read_material": {"name": "release_calendar", "args": {"document": "doc"}},
         "submit": {"name": "post_reply",
                    "args": {"key": "idempotency_key", "expected": "snapshot", "result": "reply"}},
         "receipt": {"name": "reply_receipt", "args": {"key": "idempotency_key"}}}
MAP = {"record_id": "data.comment_id", "document": "data.doc"}


class EventsServer:
    """``events_server.py`` as a child process; ``url`` and ``admin`` once it listens."""

    def __init__(self, db, port=0):
        self.proc = subprocess.Popen([sys.executable, str(PLUGINS / "events_server.py"),
                                      "--port", str(port), "--db", str(db)],
                                     env=child_env(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            raise AssertionError("the events server did not start")
        started = json.loads(line)
        self.url, self.admin_url = started["url"], started["admin"]

    def admin(self, path, body=None):
        """Call the admin surface: GET without ``body``, POST with it."""
        data = None if body is None else json.dumps(body).encode()
        with urllib.request.urlopen(urllib.request.Request(
                f"{self.admin_url}/{path}", data=data, method="GET" if data is None else "POST",
                headers={"content-type": "application/json"}), timeout=30) as answer:
            return json.loads(answer.read())

    def subscription(self, sub_id):
        return next((s for s in self.admin("subscriptions") if s["id"] == sub_id), None)

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self.proc.stdout.close()


class Receiver:
    """A callback URL: answers verifications signed with one of ``secrets``, keeps deliveries."""

    def __init__(self, secrets, delay_s=0):
        self.secrets, self.delay_s = list(secrets), delay_s
        self.verifications, self.deliveries = [], []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = dict(self.headers.items())
                if b'"verification"' in body:
                    receiver.verifications.append((body, headers))
                    time.sleep(receiver.delay_s)  # a callback that takes its time
                    answer = verification_answer(body, headers, receiver.secrets)
                    self._answer(200 if answer else 401, answer or {"error": "refused"})
                else:
                    receiver.deliveries.append((body, headers))
                    self._answer(200, {"accepted": True})

            def _answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/hooks/mon-1"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = EventsServer(tmp_path_factory.mktemp("events") / "vendor.db")
    yield running
    running.kill()


@pytest.fixture
def client(server):
    session = McpSession(url=server.url, timeout_s=20)
    yield EventsClient(session, subscribe_timeout_s=30)
    session.close()


@pytest.fixture
def receiver():
    secret = new_secret()
    running = Receiver([secret])
    running.secret = secret
    yield running
    running.close()


def subscribe(client, receiver, doc, secret=None, ttl_s=3600):
    return client.subscribe(EVENT, {"doc": doc}, receiver.url, secret or receiver.secret, ttl_s)


# -- events/list and the checks before subscribing ----------------------------------

def test_list_offers_the_servers_event(client):
    offered = {e["name"]: e for e in client.list()}
    assert offered[EVENT]["delivery"] == ["webhook"]
    assert offered[EVENT]["inputSchema"]["required"] == ["doc"]
    assert client.check(EVENT, {"doc": "doc-a"}) == offered[EVENT]


@pytest.mark.parametrize("arguments, reason", [
    ({"doc": 5}, "arguments.doc: 5 is not of type 'string'"),
    ({}, "arguments: 'doc' is a required property"),
    ({"doc": "doc-a", "room": "x"}, "Additional properties are not allowed ('room'"),
])
def test_check_refuses_arguments_the_schema_refuses(client, arguments, reason):
    with pytest.raises(Refused) as refused:
        client.check(EVENT, arguments)
    assert refused.value.code == "invalid_arguments"
    assert reason in refused.value.message and EVENT in refused.value.message


def test_check_refuses_an_event_the_server_does_not_offer(client):
    with pytest.raises(Refused) as refused:
        client.check("comment.created", {"doc": "doc-a"})
    assert refused.value.code == "unknown_event"
    assert "'comment.created'" in refused.value.message and repr(EVENT) in refused.value.message


def test_a_server_without_events_offers_no_event(tmp_path):
    # The SDK's plain MCPServer: events/list is an unknown method there.
    port = free_port()
    plain = start_http_server(tmp_path, port)
    session = McpSession(url=f"http://127.0.0.1:{port}/mcp", timeout_s=20)
    try:
        with pytest.raises(McpCallError) as unknown:
            session.request("events/list", {})
        assert unknown.value.code == -32601 and "events/list" in str(unknown.value)
        with pytest.raises(Refused) as refused:
            EventsClient(session).check(EVENT, {"doc": "doc-a"})
        assert refused.value.code == "unknown_event"
    finally:
        session.close()
        plain.kill()
        plain.wait(30)


# -- subscribe, verification, delivery ----------------------------------------------

def test_subscribe_then_a_signed_delivery_maps_into_an_event(client, server, receiver):
    sub = subscribe(client, receiver, "doc-b")
    assert sub["id"].startswith("sub_") and sub["cursor"] is None
    assert sub["refresh_before"] == int(server.subscription(sub["id"])["expires_at"])
    (body, headers), = receiver.verifications  # verified before subscribe answered
    assert headers["X-MCP-Subscription-Id"] == sub["id"]

    added = server.admin("comment", {"doc": "doc-b", "author": "ana", "text": "ship it?"})
    assert added["queued"] == 1
    assert server.admin("deliver", {})["delivered"] == 1
    (body, headers), = receiver.deliveries
    assert headers["X-MCP-Subscription-Id"] == sub["id"]
    assert headers["webhook-id"] == added["event_id"]
    delivery = Webhook(receiver.secret).verify(body, headers)
    assert delivery["eventId"] == added["event_id"]

    event = validate(map_delivery(delivery, MAP, "doc-fallback"))
    assert (event.event_id, event.name, event.document, event.record_id) == (
        added["event_id"], EVENT, "doc-b", added["comment"]["id"])
    assert event.occurred == int(datetime.datetime.fromisoformat(delivery["timestamp"]).timestamp())


def test_a_callback_that_does_not_know_the_secret_fails_the_subscribe(client, server):
    stranger = Receiver([new_secret()])  # answers only verifications signed with its own secret
    try:
        with pytest.raises(Refused) as refused:
            client.subscribe(EVENT, {"doc": "doc-c"}, stranger.url, new_secret(), 3600)
        assert refused.value.code == "subscribe_failed"
        assert "challenge_failed" in refused.value.message and "-32015" in refused.value.message
        (body, headers), = stranger.verifications
        assert verification_answer(body, headers, stranger.secrets) is None
        assert all(s["url"] != stranger.url for s in server.admin("subscriptions"))
    finally:
        stranger.close()


def test_the_server_refuses_a_bad_secret(client, receiver):
    with pytest.raises(Refused) as refused:
        subscribe(client, receiver, "doc-d", secret="whsec_short")
    assert refused.value.code == "subscribe_failed" and "-32602" in refused.value.message
    assert receiver.verifications == []


def test_subscribing_again_refreshes_the_same_subscription(client, server, receiver):
    first = subscribe(client, receiver, "doc-e")
    server.admin("clock", {"advance_s": 600})
    again = subscribe(client, receiver, "doc-e")
    assert again["id"] == first["id"]
    assert again["refresh_before"] >= first["refresh_before"] + 599
    assert len(receiver.verifications) == 1  # the server remembers a verified callback
    other = subscribe(client, receiver, "doc-f")
    assert other["id"] != first["id"]


def test_a_short_ttl_is_clamped_to_the_servers_floor(client, server, receiver):
    before = server.admin("clock", {"advance_s": 0})["now"]
    sub = subscribe(client, receiver, "doc-g", ttl_s=60)
    assert sub["refresh_before"] >= int(before) + 3600  # at least an hour, whatever was asked


def test_unsubscribe_ends_the_subscription(client, server, receiver):
    sub = subscribe(client, receiver, "doc-h")
    assert server.subscription(sub["id"]) is not None
    client.unsubscribe(EVENT, {"doc": "doc-h"}, receiver.url, receiver.secret)
    assert server.subscription(sub["id"]) is None
    assert server.admin("comment", {"doc": "doc-h"})["queued"] == 0
    client.unsubscribe(EVENT, {"doc": "doc-h"}, receiver.url, receiver.secret)  # already ended


# -- timeouts and transient failures ---------------------------------------------------

def test_subscribe_waits_for_a_slow_callback_longer_than_a_tool_call(server):
    slow = Receiver([new_secret()], delay_s=2)
    session = McpSession(url=server.url, timeout_s=1)  # shorter than the verification takes
    try:
        sub = EventsClient(session, subscribe_timeout_s=30).subscribe(
            EVENT, {"doc": "doc-slow"}, slow.url, slow.secrets[0], 3600)
        assert server.subscription(sub["id"]) is not None
    finally:
        session.close()
        slow.close()


def test_a_server_that_stops_answering_or_dies_is_transient(tmp_path):
    server = EventsServer(tmp_path / "vendor.db")
    session = McpSession(url=server.url, timeout_s=20)
    try:
        client = EventsClient(session)
        assert client.list()
        server.admin("silence", {"on": True})
        with pytest.raises(TimeoutError):
            session.request("events/list", {}, timeout_s=1)
        server.admin("silence", {"on": False})
        assert client.list()  # a new session after the timeout
        server.kill()
        # A call on the session the server died under fails with ConnectionError, at
        # once: a TimeoutError would mean it waited out its bound.
        with pytest.raises(ConnectionError):
            session.request("events/list", {}, timeout_s=60)
    finally:
        session.close()
        server.kill()
    fresh = McpSession(url=server.url, timeout_s=5)
    try:
        with pytest.raises(ConnectionError):  # connecting to nothing
            EventsClient(fresh).list()
    finally:
        fresh.close()


# -- the same server as a host, under its own names -------------------------------------

def test_the_events_server_is_a_host_under_its_own_names(server, tmp_path):
    server.admin("calendar", {"doc": "doc-demo", "demo_date": "2026-11-01"})
    comment = server.admin("comment", {"doc": "doc-demo", "text": "when is the demo?"})["comment"]
    host = McpHost(tmp_path, url=server.url, tools=TOOLS, timeout_s=20)
    try:
        assert host.context()["docs"] == ["doc-demo"]
        record = host.get(comment["id"])
        assert record == comment and record["status"] == "open"
        assert host.read_material("doc-demo")["demo_date"] == "2026-11-01"
        result = {"record_id": record["id"], "version": 1, "draft": "On 1 November."}
        assert host.receipt("key-1") is None
        host.submit("key-1", record, result)
        host.submit("key-1", record, result)  # idempotent under the key
        assert host.receipt("key-1") == result
        with pytest.raises(Blocked) as conflict:
            host.submit("key-1", record, dict(result, draft="Another."))
        assert conflict.value.code == "idempotency_conflict"
        with pytest.raises(Blocked) as changed:
            host.submit("key-2", dict(record, version=0), result)
        assert changed.value.code == "source_changed"
        with pytest.raises(Blocked) as missing:
            host.get("c-none")
        assert missing.value.code == "missing"
        outside = server.admin("comment", {"doc": "doc-other"})["comment"]
        with pytest.raises(Blocked) as access:
            host.get(outside["id"])
        assert access.value.code == "access"
    finally:
        host.close()


# -- verification requests and deliveries, as bytes and values --------------------------

def signed(secret, body, msg_id="msg_verification_1", sub="sub_1"):
    at = datetime.datetime.now(datetime.timezone.utc)
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": Webhook(secret).sign(msg_id, at, body),
            "X-MCP-Subscription-Id": sub}


def test_verification_answer_only_for_a_verification_signed_with_a_known_secret():
    mine, theirs = new_secret(), new_secret()
    body = json.dumps({"type": "verification", "challenge": "c-123"})
    assert verification_answer(body.encode(), signed(mine, body), [theirs, mine]) == {
        "challenge": "c-123"}
    assert verification_answer(body.encode(), signed(theirs, body), [mine]) is None
    unheaded = {k: v for k, v in signed(mine, body).items() if k != "X-MCP-Subscription-Id"}
    assert verification_answer(body.encode(), unheaded, [mine]) is None
    for other in ({"type": "gap", "challenge": "c"}, {"type": "verification"},
                  {"type": "verification", "challenge": 5}, ["verification"]):
        text = json.dumps(other)
        assert verification_answer(text.encode(), signed(mine, text), [mine]) is None


@pytest.mark.parametrize("body, headers", [
    (b"\xff\xfe", None),
    (b"{}", {"webhook-id": "m", "webhook-timestamp": "nan", "webhook-signature": "v1",
             "X-MCP-Subscription-Id": "s"}),
    (b"{}", {"webhook-id": "m", "webhook-timestamp": "1", "webhook-signature": "v1,,x",
             "X-MCP-Subscription-Id": "s"}),
    (b"{}", {"webhook-id": "\ud800", "webhook-timestamp": "1e99", "webhook-signature": "v1,@@",
             "X-MCP-Subscription-Id": "s"}),
    ("a str", None),
    (b"{}", ["not", "a", "mapping"]),
    (b"{}", {1: 2, "X-MCP-Subscription-Id": None}),
])
def test_verification_answer_never_raises_on_hostile_input(body, headers):
    secret = new_secret()
    if headers is None:
        headers = signed(secret, "{}")
    assert verification_answer(body, headers, [secret]) is None


DELIVERY = {"eventId": "evt_1", "name": EVENT, "timestamp": "2026-12-02T17:26:42Z",
            "data": {"comment_id": "c-1", "doc": "doc-b", "author": "ana", "text": "secret words"},
            "cursor": None}


def test_map_delivery_keeps_only_the_five_fields():
    assert map_delivery(DELIVERY, MAP, "doc-x") == {
        "event_id": "evt_1", "name": EVENT, "document": "doc-b", "record_id": "c-1",
        "occurred": 1796232402}
    assert map_delivery(DELIVERY, {"record_id": "data.comment_id"}, "doc-x")["document"] == "doc-x"
    renamed = map_delivery(DELIVERY, dict(MAP, name="data.author"), "doc-x")
    assert renamed["name"] == "ana"


@pytest.mark.parametrize("timestamp, occurred", [
    ("2026-12-02T17:26:42.999Z", 1796232402),
    ("2026-12-02T19:26:42+02:00", 1796232402),
    ("2026-12-02T17:26:42", 1796232402),
])
def test_map_delivery_takes_the_timestamp_in_whole_seconds(timestamp, occurred):
    assert map_delivery(dict(DELIVERY, timestamp=timestamp), MAP, "d")["occurred"] == occurred


@pytest.mark.parametrize("body, reason", [
    ({k: v for k, v in DELIVERY.items() if k != "eventId"}, "event_id: the delivery has no eventId"),
    ({k: v for k, v in DELIVERY.items() if k != "timestamp"}, "occurred: the delivery has no timestamp"),
    (dict(DELIVERY, timestamp="yesterday"), "occurred: the delivery's timestamp is not"),
    (dict(DELIVERY, timestamp=1796232402), "occurred: the delivery's timestamp is not"),
    (dict(DELIVERY, data={"doc": "doc-b"}), "record_id: the delivery has no data.comment_id"),
    (dict(DELIVERY, data="c-1"), "record_id: the delivery has no data.comment_id"),
    ({k: v for k, v in DELIVERY.items() if k != "name"}, "name: the delivery has no name"),
    ({"type": "gap", "cursor": "x"}, "body: a control message"),
    (["evt_1"], "body: a delivery must be a JSON object"),
])
def test_map_delivery_names_what_is_missing(body, reason):
    with pytest.raises(InvalidEvent) as invalid:
        map_delivery(body, MAP, "doc-x")
    assert invalid.value.reason.startswith(reason)


@pytest.mark.parametrize("field_map, message", [
    ({}, "needs record_id"),
    ({"record_id": "data.id", "event_id": "data.id"}, "'event_id' cannot be mapped"),
    ({"record_id": "data..id"}, "events.map.record_id: must be a dotted path"),
    ({"record_id": 3}, "events.map.record_id: must be a dotted path"),
])
def test_a_bad_map_is_a_config_error(field_map, message):
    with pytest.raises(ConfigError) as bad:
        check_map(field_map)
    assert message in bad.value.message


def test_new_secrets_are_32_random_bytes():
    first, second = new_secret(), new_secret()
    assert first != second and first.startswith("whsec_")
    assert len(base64.b64decode(first[6:])) == 32
