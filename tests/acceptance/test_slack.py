"""Slack: messages posted by a real worker, clicks answered by a real ``signoff serve``.

A local server in this process speaks the Slack Web API methods signoff calls
(``signoff.demo.slackstand``, the demo's too); the clicks are signed as Slack signs them.

The module's tests share one room: a home, its worker and its server, started once.
Each test works at a desk of its own there, a monitor with a record and a Slack channel
no other test uses, and looks only at the calls about that channel, its own response
URLs and its own modal's trigger. A test that changes a reviewer (a Slack id taken
away, a delegation) changes people of its own; the one that changes a document's
material has a document of its own.
"""

import itertools
import json
import subprocess
import time

import httpx
import pytest

from helpers import ROOT, child_env, signoff_cmd, start_worker, stop_worker, wait_for
from servekit import Server, event, make_home, post_login
from signoff.app import Signoff
from signoff.demo.slackstand import (SIGNING_SECRET, TOKEN, SlackServer, click, reject_submission,
                                     signed_action)

RECORD_TEXT = "please add the demo date \u202e gnp.exe"
SLACK_TOML = ('[notify.slack]\nbot_token_env = "TEST_SLACK_TOKEN"\n'
              'signing_secret_env = "TEST_SLACK_SECRET"\n'
              'api_url = "{api_url}"\nreview_url = "https://review.example/"\n'
              'attempts = 3\nbase_delay_s = 0.05\nmax_delay_s = 0.2\n')
# The room's people; none of the tests changes them (see ``Desk.person``).
PEOPLE = (("alice", "UALICE", {}), ("bob", "UBOB", {}), ("carol", "UCAROL", {"read_only": True}),
          ("dave", "UDAVE", {"monitors": ["elsewhere"]}))


@pytest.fixture
def slack():
    server = SlackServer()
    yield server
    server.close()


class Room:
    """A home whose monitors post to Slack, its worker, its server, its people."""

    def __init__(self, home, env):
        self.slack = SlackServer()
        self.rt = Signoff.init(home)
        with open(home / "signoff.toml", "a", encoding="utf-8") as f:  # for its worker and server
            f.write("\n" + SLACK_TOML.format(api_url=self.slack.api_url))
        host = self.rt.host()
        host.put_grant(docs=["doc-demo", "doc-redraft"])  # doc-redraft: for the redraft test
        for document in ("doc-demo", "doc-redraft"):
            host.put_material(document, "2026-11-01")
        self.rt.bind("doc-demo", "elsewhere", window_s=3600)
        self.tokens = {name: self.rt.add_reviewer(name, slack_user=uid, **options)["token"]
                       for name, uid, options in PEOPLE}
        self.desks = itertools.count(1)
        env = dict(env, TEST_SLACK_TOKEN=TOKEN, TEST_SLACK_SECRET=SIGNING_SECRET)
        self.worker = start_worker(home, env=env)
        self.server = Server(home, env=env)

    def close(self):
        try:
            assert self.server.stop() == 0, self.server.stderr()
            _, err = stop_worker(self.worker)
            assert self.worker.returncode == 0, err.decode()
        finally:
            self.rt.close()
            self.slack.close()


class Desk:
    """One test's place in the room: its monitor and record, posting to a Slack channel
    of its own."""

    def __init__(self, room, approvals=1, signed=False, document="doc-demo"):
        self.room, self.rt, self.server, self.slack = room, room.rt, room.server, room.slack
        self.n = next(room.desks)
        self.monitor, self.channel = f"slacked-{self.n}", f"C0REVIEWS{self.n}"
        self.document, self.trigger = document, f"trigger-{self.n}"
        self.tokens = dict(room.tokens)
        self.urls = []  # the response URLs of this desk's clicks
        self.rt.host().put_record(f"comment-{self.n}", document=document, text=RECORD_TEXT)
        self.rt.bind(self.document, self.monitor, window_s=3600, approvals=approvals,
                     signed_approvals=signed, slack_channel=self.channel)

    def person(self, name, **options):
        """``(name, Slack id)`` of a reviewer of this test's own, whom it may change."""
        name, uid = f"{name}-{self.n}", f"U{name.upper()}{self.n}"
        self.tokens[name] = self.rt.add_reviewer(name, slack_user=uid, **options)["token"]
        return name, uid

    def send(self):
        """Send this desk's event."""
        self.rt.enqueue_events([event(self.n, document=self.document)], monitor_id=self.monitor)

    def ready(self):
        """Send the event, wait for the task and its Slack message; ``(key, digest, message)``."""
        self.send()
        [task] = wait_for(lambda: self.tasks("ready"), what="the ready task")
        [posted] = wait_for(lambda: self.of("chat.postMessage"), what="the Slack post")
        return task["key"], self.rt.task(task["key"])["digest"], posted

    def tasks(self, status=None):
        return self.rt.monitor_tasks(self.monitor, status)

    def response_url(self):
        """A new ``response_url`` for one of this desk's clicks."""
        self.urls.append(self.slack.response_url())
        return self.urls[-1]

    def click(self, action, key, digest, user, **options):
        """A ``block_actions`` payload of this desk's (its response URL, its trigger)."""
        return click(action, key, digest, user, self.response_url(),
                     **{"trigger_id": self.trigger, **options})

    def act(self, payload, **sign):
        """POST one signed interactivity request; the response."""
        body, headers = signed_action(payload, **sign)
        return httpx.post(self.server.url + "/slack/actions", content=body, headers=headers,
                          timeout=30)

    def of(self, method):
        """The bodies of this desk's calls of ``method``: its channel's Web API calls, its
        modals, the replies to its response URLs."""
        if method == "response_url":
            return [body for url in self.urls for body in self.slack.replies_to(url)]
        if method == "views.open":
            return [body for body in self.slack.of(method) if body["trigger_id"] == self.trigger]
        return [body for body in self.slack.of(method) if body.get("channel") == self.channel]

    def calls(self):
        """How many calls about this desk Slack got."""
        return sum(len(self.of(m)) for m in ("chat.postMessage", "chat.update", "views.open",
                                             "response_url"))

    def updates_saying(self, words):
        return [u for u in self.of("chat.update")
                if words in json.dumps(u["blocks"], ensure_ascii=False)]


@pytest.fixture(scope="module")
def room(room_home, room_env):
    made = Room(room_home, room_env)
    yield made
    made.close()


def _desk(room, **options):
    made = Desk(room, **options)
    yield made
    assert room.worker.poll() is None, "the room's worker stopped"


@pytest.fixture
def desk(room, in_room):
    yield from _desk(room)


@pytest.fixture
def quorum_desk(room, in_room):
    """A ``Desk`` whose monitor needs two approvers."""
    yield from _desk(room, approvals=2)


@pytest.fixture
def signed_desk(room, in_room):
    """A ``Desk`` whose monitor counts signed decisions alone."""
    yield from _desk(room, signed=True)


@pytest.fixture
def redraft_desk(room, in_room):
    """A ``Desk`` on the document whose material its test changes."""
    yield from _desk(room, document="doc-redraft")


def _texts(blocks):
    return "\n".join(b["text"]["text"] for b in blocks if b.get("type") == "section")


def _buttons(blocks):
    return {e["action_id"]: e for b in blocks if b["type"] == "actions" for e in b["elements"]}


def test_a_ready_task_is_posted_with_its_excerpt_draft_digest_and_buttons(desk):
    key, digest, posted = desk.ready()
    assert posted["channel"] == desk.channel
    shown = _texts(posted["blocks"])
    assert "please add the demo date ⟨U+202E⟩ gnp.exe" in shown  # the override marked, not obeyed
    assert "\u202e" not in json.dumps(posted, ensure_ascii=False)
    assert desk.rt.task(key)["result"]["draft"].split("\n")[0] in shown
    assert digest[:12] in shown and digest not in shown
    buttons = _buttons(posted["blocks"])
    assert buttons["approve"]["value"] == buttons["reject"]["value"] == f"{key}:{digest}"
    assert buttons["open"]["url"] == f"https://review.example/tasks/{key}"


def test_an_approve_click_approves_as_the_mapped_reviewer_and_updates_the_message(desk):
    key, digest, posted = desk.ready()
    answer = desk.act(desk.click("approve", key, digest, "UALICE"))
    assert answer.status_code == 200, desk.server.stderr()
    task = desk.rt.task(key)
    assert task["status"] in ("approved", "done")
    assert [(a["by"], a["channel"]) for a in task["approvals"]] == [("alice", "slack")]
    update = wait_for(lambda: desk.updates_saying("Approved by alice (slack)"),
                      what="the message updated")[0]  # the approval's, then done's
    assert update["channel"] == desk.channel
    assert desk.slack.posted[update["ts"]] == posted  # the message posted, updated
    assert not _buttons(update["blocks"])  # nothing left to click
    assert not desk.of("response_url")


def test_a_reject_asks_a_reason_in_a_modal_and_rejects_with_it(desk):
    key, digest, _ = desk.ready()
    assert desk.act(desk.click("reject", key, digest, "UBOB")).status_code == 200
    [opened] = desk.of("views.open")
    assert opened["trigger_id"] == desk.trigger
    view = opened["view"] if isinstance(opened["view"], dict) else json.loads(opened["view"])
    assert desk.rt.task(key)["status"] == "ready"  # the click alone decides nothing
    bad = desk.act(reject_submission(view, "UBOB", "no\u202eway"))
    assert bad.status_code == 200 and bad.json()["response_action"] == "errors"
    assert "invalid_reason" in bad.json()["errors"]["reason"]
    assert desk.rt.task(key)["status"] == "ready"
    done = desk.act(reject_submission(view, "UBOB", "the date is wrong"))
    assert done.status_code == 200 and not done.content
    task = desk.rt.task(key)
    assert (task["status"], task["rejected_by"], task["reject_reason"]) == (
        "rejected", "bob", "the date is wrong")
    wait_for(lambda: desk.updates_saying("Rejected by bob: the date is wrong"),
             what="the message updated")


@pytest.mark.parametrize("how", ["forged", "stale", "unsigned", "future"])
def test_a_forged_or_stale_request_gets_401_and_no_call_to_slack(desk, how):
    key, digest, _ = desk.ready()
    calls = desk.calls()
    payload = desk.click("approve", key, digest, "UALICE")
    if how == "unsigned":
        body, _ = signed_action(payload)
        answer = httpx.post(desk.server.url + "/slack/actions", content=body, timeout=30,
                            headers={"content-type": "application/x-www-form-urlencoded"})
    else:
        sign = {"forged": {"secret": "not-the-signing-secret"},
                "stale": {"at": time.time() - 6 * 60},
                "future": {"at": time.time() + 6 * 60}}[how]
        answer = desk.act(payload, **sign)
    assert answer.status_code == 401 and answer.json()["error"] == "bad_signature"
    assert desk.calls() == calls  # no ephemeral reply, no update: nothing to say
    assert desk.rt.task(key)["status"] == "ready" and not desk.rt.task(key)["approvals"]


@pytest.mark.parametrize("user,code", [("UNOBODY", "unknown_reviewer"), ("UCAROL", "read_only"),
                                       ("UDAVE", "unknown_task"), ("UALICE", "digest_mismatch")])
@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_refusal_is_an_ephemeral_reply_and_decides_nothing(desk, user, code, action):
    key, digest, _ = desk.ready()
    shown = "0" * 64 if code == "digest_mismatch" else digest
    answer = desk.act(desk.click(action, key, shown, user))
    assert answer.status_code == 200
    [reply] = wait_for(lambda: desk.of("response_url"), what="the ephemeral reply")
    assert reply["response_type"] == "ephemeral" and reply["replace_original"] is False
    assert code in reply["text"]
    task = desk.rt.task(key)
    assert task["status"] == "ready" and not task["approvals"]
    assert not desk.of("views.open")


def test_a_quorum_of_a_slack_click_and_an_api_approval(quorum_desk):
    desk = quorum_desk
    key, digest, _ = desk.ready()
    desk.act(desk.click("approve", key, digest, "UALICE"))
    assert desk.rt.task(key)["approvals_missing"] == 1
    wait_for(lambda: desk.updates_saying("1 of 2 (approved by alice (slack))"),
             what="the message counting one approval")
    # the same person again, by a second click: counted once
    desk.act(desk.click("approve", key, digest, "UALICE"))
    assert desk.rt.task(key)["approvals_missing"] == 1
    api = httpx.post(f"{desk.server.url}/api/v1/tasks/{key}/approve", json={"digest": digest},
                     headers={"authorization": f"Bearer {desk.tokens['bob']}"}, timeout=30)
    assert api.status_code == 200, api.text
    task = desk.rt.task(key)
    assert task["approved_by"] == "bob"
    assert sorted((a["by"], a["channel"]) for a in task["approvals"]) == [
        ("alice", "slack"), ("bob", "api")]
    wait_for(lambda: desk.updates_saying("Approved by alice (slack), bob (api)"),
             what="the message saying who approved")


def test_an_edit_updates_the_message_and_the_old_buttons_go_stale(quorum_desk):
    desk = quorum_desk
    key, digest, _ = desk.ready()
    edited = httpx.post(f"{desk.server.url}/api/v1/tasks/{key}/approve",
                        json={"digest": digest, "edit": "the demo is on 1 November"},
                        headers={"authorization": f"Bearer {desk.tokens['bob']}"}, timeout=30)
    assert edited.status_code == 200, edited.text
    new_digest = edited.json()["digest"]
    update = wait_for(lambda: desk.updates_saying("the demo is on 1 November"),
                      what="the message showing the edit")[-1]
    assert new_digest[:12] in _texts(update["blocks"])
    assert _buttons(update["blocks"])["approve"]["value"] == f"{key}:{new_digest}"
    desk.act(desk.click("approve", key, digest, "UALICE"))
    [reply] = wait_for(lambda: desk.of("response_url"), what="the stale click's refusal")
    assert "digest_mismatch" in reply["text"]


def test_decision_times_reach_metrics_by_monitor_and_channel(desk):
    key, digest, _ = desk.ready()
    desk.act(desk.click("approve", key, digest, "UALICE"))
    text = httpx.get(desk.server.url + "/metrics", timeout=30).text
    count = [line for line in text.splitlines()
             if line.startswith("signoff_decision_seconds_count")
             and f'monitor="{desk.monitor}"' in line]  # the room's other monitors have theirs
    assert count == [f'signoff_decision_seconds_count{{channel="slack",monitor="{desk.monitor}"}} 1.0']
    assert (f'signoff_decision_seconds_bucket{{channel="slack",le="+Inf",monitor="{desk.monitor}"}}'
            ' 1.0') in text


@pytest.mark.backend_independent  # the demo is sealed: its own home, whatever is configured
@pytest.mark.timeout(300)
def test_the_demo_clicks_in_slack(tmp_path):
    done = subprocess.run(signoff_cmd(tmp_path, "demo", "--channels", "--json"), cwd=ROOT,
                          env=child_env(), capture_output=True, text=True, timeout=240)
    assert "Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True and all(s["ok"] for s in report["steps"])
    calls = report["counts"]["slack_calls"]
    assert calls["chat.postMessage"] == 1 and calls["response_url"] == 0
    assert calls["chat.update"] >= 2  # one approval added, then the quorum completed
    assert report["counts"]["results_on_host"] == 2  # the email section's and Slack's


def test_a_redraft_updates_the_message_with_the_new_draft(redraft_desk):
    desk = redraft_desk
    key, digest, posted = desk.ready()
    desk.rt.host().put_material(desk.document, "2026-12-24")
    redrafted = httpx.post(f"{desk.server.url}/api/v1/tasks/{key}/redraft", timeout=30,
                           headers={"authorization": f"Bearer {desk.tokens['alice']}"})
    assert redrafted.status_code == 200, redrafted.text
    fresh = desk.rt.task(key)
    assert fresh["digest"] != digest and "2026-12-24" in fresh["result"]["draft"]
    update = wait_for(lambda: desk.updates_saying("2026-12-24"), what="the redraft shown")[-1]
    assert _buttons(update["blocks"])["approve"]["value"] == f"{key}:{fresh['digest']}"
    assert "2026-12-24" not in json.dumps(posted)


def test_an_open_click_decides_nothing_and_a_hidden_character_draft_is_refused(quorum_desk):
    desk = quorum_desk
    bob, bob_id = desk.person("bob")  # whose Slack id this test takes away
    key, digest, _ = desk.ready()
    calls = desk.calls()
    assert desk.act(desk.click("open", key, digest, "UALICE")).status_code == 200
    assert desk.calls() == calls and not desk.rt.task(key)["approvals"]
    edited = httpx.post(f"{desk.server.url}/api/v1/tasks/{key}/approve", timeout=30,
                        json={"digest": digest, "edit": "pay \u202eto account 1",
                              "ack_hidden_characters": True},
                        headers={"authorization": f"Bearer {desk.tokens['alice']}"})
    assert edited.status_code == 200, edited.text
    wait_for(lambda: desk.updates_saying("pay ⟨U+202E⟩to account 1"), what="the edit, marked")
    desk.act(desk.click("approve", key, edited.json()["digest"], bob_id))
    [reply] = wait_for(lambda: desk.of("response_url"), what="the refusal")
    assert "hidden_characters" in reply["text"]
    assert desk.rt.task(key)["approvals_missing"] == 1
    # a Slack user id taken away: that person's clicks are no one's
    assert desk.rt.set_reviewer(bob, slack_user="")["slack_user"] is None
    desk.act(desk.click("approve", key, edited.json()["digest"], bob_id))
    wait_for(lambda: len(desk.of("response_url")) == 2, what="the second refusal")
    assert "unknown_reviewer" in desk.of("response_url")[-1]["text"]


def test_a_post_slack_refuses_ends_in_the_dead_letters_and_replay_posts_it(desk):
    desk.slack.fail(desk.channel, *["channel_not_found"] * 3)  # [notify.slack] attempts = 3
    desk.send()
    [letter] = wait_for(lambda: [d for d in desk.rt.dead_letters(monitors=[desk.monitor])
                                 if d["kind"] == "notification"],
                        what="the post in the dead letters")
    assert (letter["step"], letter["code"], letter["attempts"]) == (
        "notify", "slack_channel_not_found", 3)
    assert len(desk.of("chat.postMessage")) == 3
    assert desk.rt.replay(letter["id"])["replayed"] == 1
    wait_for(lambda: len(desk.of("chat.postMessage")) == 4, what="the replayed post")
    [task] = desk.tasks("ready")
    assert desk.of("chat.postMessage")[-1]["blocks"][-1]["elements"][0]["value"].startswith(
        task["key"])


def test_a_delegate_clicks_for_the_delegator_and_the_api_refuses_beyond_it(desk):
    # People of this test's own: a delegation lasts until it is taken back.
    alice, alice_id = desk.person("alice")
    bob, _ = desk.person("bob")
    dave, _ = desk.person("dave", monitors=["elsewhere"])
    desk.rt.delegate(dave, alice)  # dave may decide `elsewhere` only
    desk.rt.delegate(bob, alice)
    key, digest, _ = desk.ready()
    refused = httpx.post(f"{desk.server.url}/api/v1/tasks/{key}/approve", timeout=30,
                         json={"digest": digest, "for": dave},
                         headers={"authorization": f"Bearer {desk.tokens[alice]}"})
    assert refused.status_code == 403 and refused.json()["error"] == "not_delegated"
    assert not desk.rt.task(key)["approvals"]
    desk.act(desk.click("approve", key, digest, alice_id))
    assert [(a["by"], a["for"], a["channel"]) for a in desk.rt.task(key)["approvals"]] == [
        (alice, bob, "slack")]
    wait_for(lambda: desk.updates_saying(f"Approved by {alice} for {bob} (slack)"),
             what="the message naming whom alice approved for")


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_token_or_secret_not_set_stops_the_worker_and_serve_naming_it(home, slack, command):
    rt = make_home(home, extra_toml=SLACK_TOML.format(api_url=slack.api_url))
    rt.close()
    env = child_env(TEST_SLACK_TOKEN=TOKEN)  # the signing secret is missing
    if command == "worker":
        env = child_env(TEST_SLACK_SECRET=SIGNING_SECRET)  # the worker posts: the token
    done = subprocess.run(signoff_cmd(home, command, *(["--port", "0"] if command == "serve"
                                                       else [])),
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    missing = "TEST_SLACK_SECRET" if command == "serve" else "TEST_SLACK_TOKEN"
    assert "bad_config" in done.stderr and missing in done.stderr
    assert not slack.calls


def test_the_review_index_shows_the_oldest_waiting_task_per_monitor(desk):
    desk.ready()
    for name, sees in (("alice", True), ("dave", False)):  # dave may see `elsewhere` only
        with httpx.Client(base_url=desk.server.url, timeout=30) as client:
            assert post_login(client, name, desk.tokens[name]).status_code == 303
            page = client.get("/").text
        assert ('id="oldest-waiting"' in page and f">{desk.monitor}</a> since" in page) is sees


def test_a_signed_monitors_message_only_opens_the_page_and_a_click_cannot_approve(signed_desk):
    desk = signed_desk
    key, digest, posted = desk.ready()
    assert set(_buttons(posted["blocks"])) == {"open"}  # a click cannot sign
    assert desk.act(desk.click("approve", key, digest, "UALICE")).status_code == 200
    [reply] = wait_for(lambda: desk.of("response_url"), what="the refusal")
    assert "signature_required" in reply["text"] and reply["response_type"] == "ephemeral"
    assert desk.rt.task(key)["status"] == "ready" and not desk.rt.task(key)["approvals"]
