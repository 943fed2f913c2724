"""Monitors fed by MCP Events: a third-party events server, a real ``signoff serve``.

``tests/plugins/events_server.py`` is a review tool's MCP server built on the
official SDK and ``mcp_webhook_events``, with its own names (event
``review.comment_added``, tools ``whoami``, ``fetch_comment`` ...). The module
starts one, and each test finds it as new (its admin ``reset``: every
subscription, delivery, comment and clock shift of the test before forgotten);
a test that stops the server has one of its own. Each test runs a ``signoff serve``
process as the callback, and a home whose host is ``McpHost`` on that server with
``[host.options.events]``. The worker's
steps and chore run in the test (``run_until_idle``, ``tend_subscriptions``) on
a clock that is the real one shifted forward when the test says: the serve
process and the events server keep real time, so event freshness still holds.
"""

import datetime
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from helpers import (LOCAL_TLS, ROOT, child_env, invoke, signoff_cmd, state_tables, wait_for,
                     read_here)
from servekit import Server
from signoff.app import Signoff
from signoff.clock import Clock
from signoff.errors import Refused
from signoff.hosts.mcp.events import EventsClient, new_secret
from signoff.hosts.mcp.session import McpSession
from signoff.models import Audit, Delivery, Subscription, Task
from signoff.admin import subscriptions
from signoff.rules.canonical import digest
from test_mcp_events_client import EVENT, TOOLS, EventsServer
from test_mcp_host import free_port
from test_serve_pages import post_login

MONITOR = "mon-1"
WEEK_S = 7 * 24 * 3600
# The [host] section init writes, through its (empty) options table.
HOST_SECTION = re.compile(r"^\[host\]\n.*?^\[host\.options\]\n", re.S | re.M)


class ShiftedClock(Clock):
    """Real time, moved forward by the test (never back)."""

    def __init__(self):
        self.offset = 0.0

    def now(self):
        return time.time() + self.offset

    def reach(self, at):
        """Move the clock so that it reads at least ``at``."""
        self.offset = max(self.offset, at - time.time())


def host_toml(server_url, public_url, ttl_s=3600):
    """``[host]`` for the third-party server under its own names, with its events."""
    lines = ['[host]', 'factory = "signoff.hosts.mcp:McpHost"', '', '[host.options]',
             f'url = "{server_url}"', 'timeout_s = 20', '']
    for call, entry in dict(TOOLS, changes={"name": "comments_since",
                                            "args": {"document": "doc"}}).items():
        lines += [f'[host.options.tools.{call}]', f'name = "{entry["name"]}"']
        if "args" in entry:
            lines.append("args = { " + ", ".join(f'{k} = "{v}"'
                                                for k, v in entry["args"].items()) + " }")
    lines += ['', '[host.options.events]', f'name = "{EVENT}"', 'arguments = { doc = "{document}" }',
              'map = { record_id = "data.comment_id", document = "data.doc" }', f'ttl_s = {ttl_s}',
              '']
    return "\n".join(lines) + f'\n[serve]\npublic_url = "{public_url}"\n'


def start_vendor(folder):
    """The third-party events server, on a port it keeps across a restart."""
    port = free_port()
    server = EventsServer(folder / "vendor.db", port)
    server.port, server.db = port, folder / "vendor.db"
    return server


@pytest.fixture(scope="module")
def shared_vendor(tmp_path_factory):
    server = start_vendor(tmp_path_factory.mktemp("vendor"))
    yield server
    server.kill()


@pytest.fixture
def vendor(request, tmp_path):
    """The events server, holding the calendar of doc-demo and nothing else: the module's,
    reset, or one of the test's own where it stops it
    (``parametrize("vendor", ["own"], indirect=True)``)."""
    if getattr(request, "param", None) == "own":
        server = start_vendor(tmp_path)
    else:
        server = request.getfixturevalue("shared_vendor")
        assert server.proc.poll() is None, "the module's events server stopped"
        server.admin("reset", {})
    server.admin("calendar", {"doc": "doc-demo", "demo_date": "2026-11-01"})
    yield server
    if getattr(request, "param", None) == "own":
        server.kill()


@pytest.fixture
def served(home, vendor):
    """``(rt, serve, vendor, clock)``: a home on the vendor's server, its serve running."""
    Signoff.init(home).close()
    serve = Server(home)
    config = home / "signoff.toml"
    text = config.read_text(encoding="utf-8")
    assert HOST_SECTION.search(text)
    config.write_text(HOST_SECTION.sub("", text) + "\n" + host_toml(vendor.url, serve.url),
                      encoding="utf-8")
    clock = ShiftedClock()
    rt = read_here(Signoff(home, clock=clock))
    yield rt, serve, vendor, clock
    rt.close()
    serve.stop()


def bind(rt):
    return rt.bind("doc-demo", MONITOR, ttl_s=WEEK_S, window_s=3600)


def the_subscription(rt):
    [row] = [s for s in rt.subscriptions() if s["state"] != "ended"]
    return row


def requests_by_code(rt):
    return rt.stats()["subscriptions"]["requests"]


# -- subscribe, verify, deliver --------------------------------------------------------

def test_bind_subscribes_and_a_published_comment_becomes_a_ready_task(served):
    rt, serve, vendor, _ = served
    monitor = bind(rt)
    assert monitor["event_names"] == [EVENT]  # the subscribed event's name, not comment.created
    sub = the_subscription(rt)
    held = vendor.subscription(sub["subscription_id"])
    assert held["url"] == f"{serve.url}/hooks/{MONITOR}" and held["arguments"] == {"doc": "doc-demo"}
    assert (sub["state"], sub["refresh_before"]) == ("active", int(held["expires_at"]))
    assert requests_by_code(rt) == {"verified": 1}  # serve answered the challenge

    added = vendor.admin("comment", {"doc": "doc-demo", "author": "ana", "text": "when?"})
    assert vendor.admin("deliver", {})["delivered"] == 1
    [delivery] = rt.events()
    assert (delivery["event_id"], delivery["monitor"]) == (added["event_id"], MONITOR)
    rt.run_until_idle()
    [task] = rt.tasks()
    assert (task["status"], task["record_id"]) == ("ready", added["comment"]["id"])
    assert rt.task(task["key"])["record"] == added["comment"]
    assert the_subscription(rt)["last_delivery_at"] is not None
    assert requests_by_code(rt) == {"verified": 1, "accepted": 1}

    metrics = httpx.get(f"{serve.url}/metrics", verify=LOCAL_TLS, timeout=30).text
    assert 'signoff_subscriptions{state="active"} 1.0' in metrics
    assert 'signoff_event_deliveries_total{code="accepted"} 1.0' in metrics
    listed = invoke(rt.home, "subscriptions", "--json")
    [row] = json.loads(listed.stdout)
    assert {k: row[k] for k in ("monitor", "event", "subscription_id", "state")} == {
        "monitor": MONITOR, "event": EVENT, "subscription_id": sub["subscription_id"],
        "state": "active"}
    secret = Subscription.get().secret
    assert secret not in listed.stdout and secret not in json.dumps(rt.audit())
    token = rt.add_reviewer("rita", read_only=True)["token"]
    with httpx.Client(verify=LOCAL_TLS, base_url=serve.url, timeout=30) as page:
        post_login(page, "rita", token)
        shown = page.get("/monitors").text
    assert MONITOR in shown and sub["subscription_id"] in shown and "subscription-active" in shown
    assert secret not in shown


REFUSED_CONFIGS = [
    (f'name = "{EVENT}"', 'name = "comment.created"', "unknown_event", repr(EVENT)),
    ('arguments = { doc = "{document}" }', 'arguments = { doc = 5 }', "invalid_arguments",
     "arguments.doc: 5 is not of type 'string'"),
    ('arguments = { doc = "{document}" }', 'arguments = { doc = "{document}", room = "x" }',
     "invalid_arguments", "('room'"),
]


def test_an_event_or_arguments_the_server_refuses_bind_nothing(served):
    rt, serve, vendor, _ = served
    config = rt.home / "signoff.toml"
    original = config.read_text(encoding="utf-8")
    for old, new, code, words in REFUSED_CONFIGS:
        config.write_text(original.replace(old, new), encoding="utf-8")
        other = Signoff(rt.home, clock=rt.clock)
        try:
            with pytest.raises(Refused) as refused:
                other.bind("doc-demo", MONITOR)
            assert refused.value.code == code and words in refused.value.message, new
            assert other.monitors() == [] and Subscription.select().count() == 0
        finally:
            other.close()
    assert vendor.admin("subscriptions") == []


def test_a_subscribe_the_server_refuses_binds_nothing_and_says_why(served):
    rt, serve, vendor, _ = served
    serve.stop()  # nobody answers the callback's verification
    with pytest.raises(Refused) as refused:
        bind(rt)
    assert refused.value.code == "subscribe_failed"
    assert "connection_failed" in refused.value.message  # the server's reason
    assert rt.monitors() == []
    [row] = rt.subscriptions()
    assert (row["state"], row["end_code"], row["unsubscribed"]) == (
        "ended", "subscribe_failed", True)  # refused by the server: it holds nothing
    assert vendor.admin("subscriptions") == []


# -- what is refused --------------------------------------------------------------------

def signed_request(secret, body, sub_id, msg_id):
    at = datetime.datetime.now(datetime.timezone.utc)
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": Webhook(secret).sign(msg_id, at, body),
            "X-MCP-Subscription-Id": sub_id, "content-type": "application/json"}


def delivery_body(comment_id, data=None, event_id="evt_forged"):
    at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps({"eventId": event_id, "name": EVENT, "timestamp": at, "cursor": None,
                       "data": data or {"comment_id": comment_id, "doc": "doc-demo",
                                        "author": "eve"}})


def post(serve, body, headers, monitor=MONITOR):
    return httpx.post(f"{serve.url}/hooks/{monitor}", verify=LOCAL_TLS, content=body,
                      headers=headers, timeout=30)


def test_a_forged_delivery_or_verification_is_refused_and_nothing_is_stored(served):
    rt, serve, vendor, _ = served
    bind(rt)
    sub_id = the_subscription(rt)["subscription_id"]
    comment = vendor.admin("comment", {"doc": "doc-demo"})["comment"]
    before = state_tables(rt)["delivery"], Audit.select().count()
    forged = delivery_body(comment["id"])
    answer = post(serve, forged, signed_request(new_secret(), forged, sub_id, "evt_forged"))
    assert (answer.status_code, answer.json()) == (401, {"error": "bad_signature"})
    challenge = json.dumps({"type": "verification", "challenge": "give-me-your-events"})
    answer = post(serve, challenge, signed_request(new_secret(), challenge, sub_id, "msg_v"))
    assert answer.status_code == 401 and "give-me" not in answer.text
    assert state_tables(rt)["delivery"] == before[0]
    assert [a["code"] for a in rt.audit(latest=2)] == ["bad_signature", "bad_signature"]
    assert Audit.select().count() == before[1] + 2


def test_a_delivery_that_is_not_json_answers_415_as_a_webhook_does(served):
    rt, serve, vendor, _ = served
    bind(rt)
    comment = vendor.admin("comment", {"doc": "doc-demo"})["comment"]
    secret, sub_id = Subscription.get().secret, the_subscription(rt)["subscription_id"]
    body = delivery_body(comment["id"], event_id="evt_plain")
    headers = signed_request(secret, body, sub_id, "evt_plain")
    answer = post(serve, body, dict(headers, **{"content-type": "text/plain"}))
    assert (answer.status_code, answer.json()) == (415, {"error": "unsupported_media_type"})
    assert state_tables(rt)["delivery"] == []
    assert rt.audit(latest=1)[0]["code"] == "unsupported_media_type"
    # The same delivery as JSON is taken (a refusal is not an answer to its webhook-id).
    assert post(serve, body, headers).status_code == 202
    assert [e["event_id"] for e in rt.events()] == ["evt_plain"]


def test_a_subscription_signoff_never_asked_for_is_not_verified(served):
    rt, serve, vendor, _ = served
    # Someone else asks the server to send signoff's callback their subscription's events.
    session = McpSession(url=vendor.url, timeout_s=20)
    try:
        with pytest.raises(Refused) as refused:
            EventsClient(session).subscribe(EVENT, {"doc": "doc-demo"},
                                            f"{serve.url}/hooks/{MONITOR}", new_secret(), 3600)
    finally:
        session.close()
    assert refused.value.code == "subscribe_failed" and "challenge_failed" in refused.value.message
    assert vendor.admin("subscriptions") == []
    assert rt.audit(latest=1)[0]["code"] == "unknown_subscription"
    assert requests_by_code(rt) == {}  # no subscription of signoff's was asked
    bind(rt)  # signoff's own is verified at that very callback
    assert [s["url"] for s in vendor.admin("subscriptions")] == [f"{serve.url}/hooks/{MONITOR}"]
    assert requests_by_code(rt) == {"verified": 1}


def test_a_delivery_cannot_approve_choose_the_key_or_move_the_document(served):
    rt, serve, vendor, _ = served
    config = rt.home / "signoff.toml"  # a map without document: the monitor's document
    config.write_text(config.read_text().replace(', document = "data.doc"', ""))
    rt = Signoff(rt.home, clock=rt.clock)
    try:
        bind(rt)
        comment = vendor.admin("comment", {"doc": "doc-demo"})["comment"]
        secret, sub_id = Subscription.get().secret, the_subscription(rt)["subscription_id"]
        hostile = {"comment_id": comment["id"], "doc": "doc-other", "document": "doc-other",
                   "approve": True, "approved_digest": "0" * 64, "digest": "0" * 64,
                   "key": "attacker-key", "task_key": "attacker-key", "status": "approved",
                   "version": 99, "grant": {"docs": ["doc-other"]}, "text": "HOSTILE-TEXT"}
        body = delivery_body(comment["id"], hostile, event_id="evt_hostile")
        answer = post(serve, body, signed_request(secret, body, sub_id, "evt_hostile"))
        assert answer.status_code == 202, answer.text
        [delivery] = Delivery.select()
        assert (delivery.document, delivery.record_id, delivery.name) == (
            "doc-demo", comment["id"], EVENT)
        rt.run_until_idle()
        [task] = Task.select()
        monitor = rt.monitors()[0]
        assert task.key == digest([MONITOR, monitor["grant_digest"], comment["id"], 1])
        assert (task.status, task.approved_digest, task.approved_by) == ("ready", None, None)
        assert task.record == comment  # read back from the host, not taken from the delivery
        tables = repr(state_tables(rt))
        assert "HOSTILE-TEXT" not in tables and "attacker-key" not in tables
        assert "doc-other" not in tables
    finally:
        rt.close()


# -- a crash between the durable write and the answer --------------------------------------

@pytest.mark.slow
def test_serve_killed_after_its_write_the_servers_retry_is_a_duplicate(served):
    rt, serve, vendor, _ = served
    bind(rt)
    port = serve.url.rsplit(":", 1)[1]
    assert serve.stop() == 0
    dying = subprocess.Popen([sys.executable, "-m", "signoff.demo.dying_serve", "--home",
                              str(rt.home), "serve", "--port", port], env=child_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert json.loads(dying.stdout.readline())["listening"].endswith(port)
        added = vendor.admin("comment", {"doc": "doc-demo"})
        assert vendor.admin("deliver", {}) == {"delivered": 0, "retrying": 1, "failed": 0}
        assert dying.wait(30) == -signal.SIGKILL
    finally:
        if dying.poll() is None:
            dying.kill()
        dying.wait(30)
        dying.stdout.close()
    [stored] = rt.events()
    assert stored["event_id"] == added["event_id"]  # durable, though never answered
    restarted = Server(rt.home, port=port)
    try:
        vendor.admin("clock", {"advance_s": 31})  # the server's first retry is due after 30 s
        assert vendor.admin("deliver", {}) == {"delivered": 1, "retrying": 0, "failed": 0}
    finally:
        assert restarted.stop() == 0
    assert [e["event_id"] for e in rt.events()] == [added["event_id"]]
    assert requests_by_code(rt) == {"verified": 1, "accepted": 1, "duplicate": 1}
    rt.run_until_idle()
    assert [t["record_id"] for t in rt.tasks()] == [added["comment"]["id"]]


# -- ending: cancel --------------------------------------------------------------------------

def test_cancel_answers_the_next_delivery_410_and_the_server_drops_it(served):
    rt, serve, vendor, _ = served
    bind(rt)
    sub_id = the_subscription(rt)["subscription_id"]
    rt.cancel(MONITOR)
    [row] = rt.subscriptions()
    assert (row["state"], row["end_code"], row["unsubscribed"]) == ("ended", "cancelled", False)
    assert vendor.admin("comment", {"doc": "doc-demo"})["queued"] == 1
    assert vendor.admin("deliver", {}) == {"delivered": 0, "retrying": 0, "failed": 1}
    assert vendor.subscription(sub_id) is None  # 410: the server dropped it
    assert rt.events() == [] and requests_by_code(rt)["subscription_ended"] == 1
    assert rt.engine.tend_subscriptions() == {"unsubscribed": 1}  # the server: already gone
    [row] = rt.subscriptions()
    assert (row["state"], row["unsubscribed"]) == ("ended", True)
    assert rt.audit(latest=1)[0]["code"] == "unsubscribed"
    assert rt.engine.tend_subscriptions() == {}  # nothing left to do


@pytest.mark.parametrize("vendor", ["own"], indirect=True)  # it stops it
def test_cancel_while_the_server_is_down_unsubscribes_once_it_is_back(served, tmp_path):
    rt, serve, vendor, clock = served
    bind(rt)
    sub_id = the_subscription(rt)["subscription_id"]
    vendor.kill()
    rt.cancel(MONITOR)
    assert rt.engine.tend_subscriptions() == {"ConnectionError": 1}  # at once, not a timeout
    [row] = rt.subscriptions()
    assert (row["unsubscribed"], row["attempts"]) == (False, 1)
    assert rt.engine.tend_subscriptions() == {}  # backing off
    back = EventsServer(vendor.db, vendor.port)
    try:
        assert back.subscription(sub_id) is not None  # it kept it while it was down
        clock.reach(row["next_at"])
        assert rt.engine.tend_subscriptions() == {"unsubscribed": 1}
        assert back.subscription(sub_id) is None
    finally:
        back.kill()


def test_expiry_and_a_changed_grant_end_and_unsubscribe(served):
    rt, serve, vendor, clock = served
    short = rt.bind("doc-demo", "short", ttl_s=2, window_s=3600)
    bind(rt)
    wait_for(lambda: time.time() > short["expires_at"] + 0.5, timeout=30, what="the expiry")
    vendor.admin("comment", {"doc": "doc-demo"})  # one delivery to each subscription
    assert vendor.admin("deliver", {}) == {"delivered": 1, "retrying": 0, "failed": 1}
    assert [e["monitor"] for e in rt.events()] == [MONITOR]  # the expired one got 410
    with sqlite3.connect(vendor.db) as store:  # the server's operator narrows the grant
        grant = json.loads(store.execute("SELECT body FROM grant_context").fetchone()[0])
        store.execute("UPDATE grant_context SET body = ?",
                      (json.dumps(dict(grant, revision=2)),))
    clock.reach(max(s.next_at for s in Subscription.select()))
    assert rt.engine.tend_subscriptions() == {"unsubscribed": 2}
    ended = {s["monitor"]: (s["state"], s["end_code"], s["unsubscribed"])
             for s in rt.subscriptions()}
    assert ended == {"short": ("ended", "expired", True),
                     MONITOR: ("ended", "scope_changed", True)}
    assert vendor.admin("subscriptions") == []


def test_an_ended_subscription_never_unsubscribes_a_live_one_with_its_parameters(served):
    rt, serve, vendor, clock = served
    bind(rt)
    live = Subscription.get()
    # An earlier bind of this id whose subscribe got no answer: ended, to be unsubscribed.
    # The server names subscriptions by (url, name, arguments): the same as the live one.
    Subscription.create(monitor=MONITOR, name=live.name, arguments=live.arguments,
                        field_map=live.field_map, url=live.url, secret=new_secret(),
                        ttl_s=live.ttl_s, status="ended", end_code="subscribe_failed",
                        next_at=0.0, created_at=clock.now(), updated_at=clock.now())
    assert rt.engine.tend_subscriptions() == {"superseded": 1}
    assert vendor.subscription(live.subscription_id) is not None
    assert the_subscription(rt)["state"] == "active"


# -- refresh and lapse ---------------------------------------------------------------------

def test_refresh_keeps_the_id_and_moves_refresh_before(served):
    rt, serve, vendor, clock = served
    bind(rt)
    first = Subscription.get()
    assert rt.engine.tend_subscriptions() == {}  # not due yet
    vendor.admin("clock", {"advance_s": 600})
    due = subscriptions.refresh_at(first.refresh_before, first.subscribed_at)
    assert first.refresh_before - 3600 < due < first.refresh_before
    clock.reach(due)
    assert rt.engine.tend_subscriptions() == {"refreshed": 1}
    again = Subscription.get()
    assert again.subscription_id == first.subscription_id
    assert again.refresh_before >= first.refresh_before + 599
    assert int(vendor.subscription(again.subscription_id)["expires_at"]) == again.refresh_before
    assert rt.engine.tend_subscriptions() == {}  # once: the next refresh is an hour away
    assert requests_by_code(rt) == {"verified": 1}  # the server remembers a verified callback


def test_one_worker_claims_a_due_subscription(served):
    rt, serve, vendor, clock = served
    bind(rt)
    row = Subscription.get()
    now = clock.now()
    clock.reach(row.next_at)
    tokens = [subscriptions._claim(row, clock.now(), 60) for _ in range(3)]  # the same snapshot
    assert sum(t is not None for t in tokens) == 1
    assert Subscription.get().next_at > now


@pytest.mark.parametrize("vendor", ["own"], indirect=True)  # it stops it
def test_a_server_down_at_refresh_time_lapses_records_a_gap_and_resubscribes(served):
    rt, serve, vendor, clock = served
    bind(rt)
    row = Subscription.get()
    vendor.kill()
    clock.reach(subscriptions.refresh_at(row.refresh_before, row.subscribed_at))
    assert rt.engine.tend_subscriptions() == {"ConnectionError": 1}
    assert the_subscription(rt)["state"] == "active"
    clock.reach(row.refresh_before + 1)
    assert rt.engine.tend_subscriptions() == {"ConnectionError": 1}
    lapsed = Subscription.get()
    assert (lapsed.status, lapsed.lapsed_at, lapsed.attempts) == ("lapsed", row.refresh_before, 2)
    assert rt.audit(latest=1)[0]["code"] == "subscription_lapsed"

    back = EventsServer(vendor.db, vendor.port)
    try:
        # Past the expiry the server forgot the subscription; a comment meanwhile is not sent.
        back.admin("clock", {"advance_s": row.refresh_before - time.time() + 60})
        back.admin("deliver", {})
        assert back.admin("subscriptions") == []
        missed = back.admin("comment", {"doc": "doc-demo"})
        assert missed["queued"] == 0
        clock.reach(lapsed.next_at)
        assert rt.engine.tend_subscriptions() == {"resubscribed": 1}
        again = Subscription.get()
        assert (again.status, again.subscription_id) == ("active", row.subscription_id)
        assert back.subscription(again.subscription_id) is not None
        [gap] = rt.gaps()["lapse_gaps"]
        assert (gap["monitor"], gap["from"], gap["mode"], gap["replayed"]) == (
            MONITOR, row.refresh_before, "replay", 1)
        assert gap["to"] >= row.refresh_before + 1
        assert rt.stats()["observation_gaps"]["lapse_gaps"] == 1
        [replayed] = Delivery.select()  # what the host said changed while nobody watched
        assert replayed.record_id == missed["comment"]["id"]
        assert replayed.event_id.startswith(f"gap-{gap['gap']}-")
        rt.run_until_idle()
        assert [t["status"] for t in rt.tasks()] == ["ready"]
    finally:
        back.kill()


# -- the demo ------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(500)
def test_demo_with_events_pushed_over_mcp_events(tmp_path):
    keep = tmp_path / "demo"
    proc = subprocess.run(signoff_cmd(tmp_path, "demo", "--events", "--keep", str(keep), "--json"),
                          cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=450)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["passed"] is True and all(s["ok"] for s in report["steps"])
    counts = report["counts"]
    assert counts["worker_kills"] == 1 and counts["results_on_host"] == 1
    assert counts["event_requests"] == {"verified": 1, "accepted": 2, "duplicate": 1,
                                        "subscription_ended": 1}
    assert counts["outcomes"] == {"ready": 2} and counts["seconds_publish_to_ready"] > 0
    left = [p for p in os.listdir("/proc") if p.isdigit() and _runs_in(p, keep)]
    assert left == []  # the host server, serve and the workers are all stopped


def _runs_in(pid, folder):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return str(folder).encode() in f.read()
    except OSError:
        return False
