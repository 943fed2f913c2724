"""Slack: messages posted by a real worker, clicks answered by a real ``signoff serve``.

A local server in this process speaks the Slack Web API methods signoff calls
(``signoff.demo.slackstand``, the demo's too); the clicks are signed as Slack signs them.
"""

import json
import subprocess
import time

import httpx
import pytest

from helpers import ROOT, child_env, read_here, signoff_cmd, start_worker, stop_worker, wait_for
from servekit import Server, event, make_home, post_login
from signoff.demo.slackstand import (SIGNING_SECRET, TOKEN, SlackServer, click, reject_submission,
                                     signed_action)

CHANNEL = "C0REVIEWS"
MONITOR = "slacked"
RECORD_TEXT = "please add the demo date \u202e gnp.exe"


@pytest.fixture
def slack():
    server = SlackServer()
    yield server
    server.close()


class Room:
    """A home whose monitor ``slacked`` posts to Slack, its worker, its server, its people."""

    def __init__(self, home, slack, approvals=1, signed=False):
        self.slack = slack
        self.rt = make_home(home, extra_toml=(
            '[notify.slack]\nbot_token_env = "TEST_SLACK_TOKEN"\n'
            'signing_secret_env = "TEST_SLACK_SECRET"\n'
            f'api_url = "{slack.api_url}"\nreview_url = "https://review.example/"\n'
            'attempts = 3\nbase_delay_s = 0.05\nmax_delay_s = 0.2\n'))
        read_here(self.rt)
        self.rt.host().put_record("comment-1", document="doc-demo", text=RECORD_TEXT)
        self.rt.bind("doc-demo", MONITOR, window_s=3600, approvals=approvals,
                     signed_approvals=signed, slack_channel=CHANNEL)
        self.rt.bind("doc-demo", "elsewhere", window_s=3600)
        self.tokens = {}
        for name, uid, options in (("alice", "UALICE", {}), ("bob", "UBOB", {}),
                                   ("carol", "UCAROL", {"read_only": True}),
                                   ("dave", "UDAVE", {"monitors": ["elsewhere"]})):
            self.tokens[name] = self.rt.add_reviewer(name, slack_user=uid, **options)["token"]
        env = child_env(TEST_SLACK_TOKEN=TOKEN, TEST_SLACK_SECRET=SIGNING_SECRET)
        self.worker = start_worker(home, env=env)
        self.server = Server(home, env=env)

    def ready(self):
        """Send the event, wait for the task and its Slack message; ``(key, digest, message)``."""
        self.rt.enqueue_events([event(1)], monitor_id=MONITOR)
        [task] = wait_for(lambda: self.rt.tasks("ready"), what="the ready task")
        [posted] = wait_for(lambda: self.slack.of("chat.postMessage"), what="the Slack post")
        return task["key"], self.rt.task(task["key"])["digest"], posted

    def act(self, payload, **sign):
        """POST one signed interactivity request; the response."""
        body, headers = signed_action(payload, **sign)
        return httpx.post(self.server.url + "/slack/actions", content=body, headers=headers,
                          timeout=30)

    def close(self):
        self.server.stop()
        _, err = stop_worker(self.worker)
        assert self.worker.returncode == 0, err.decode()
        self.rt.close()


@pytest.fixture
def room(home, slack):
    made = Room(home, slack)
    yield made
    made.close()


@pytest.fixture
def quorum_room(home, slack):
    """A ``Room`` whose monitor needs two approvers."""
    made = Room(home, slack, approvals=2)
    yield made
    made.close()


@pytest.fixture
def signed_room(home, slack):
    """A ``Room`` whose monitor counts signed decisions alone."""
    made = Room(home, slack, signed=True)
    yield made
    made.close()


def _texts(blocks):
    return "\n".join(b["text"]["text"] for b in blocks if b.get("type") == "section")


def _buttons(blocks):
    return {e["action_id"]: e for b in blocks if b["type"] == "actions" for e in b["elements"]}


def _updates_saying(slack, words):
    return [u for u in slack.of("chat.update") if words in json.dumps(u["blocks"], ensure_ascii=False)]


def test_a_ready_task_is_posted_with_its_excerpt_draft_digest_and_buttons(room, slack):
    key, digest, posted = room.ready()
    assert posted["channel"] == CHANNEL
    shown = _texts(posted["blocks"])
    assert "please add the demo date ⟨U+202E⟩ gnp.exe" in shown  # the override marked, not obeyed
    assert "\u202e" not in json.dumps(posted, ensure_ascii=False)
    assert room.rt.task(key)["result"]["draft"].split("\n")[0] in shown
    assert digest[:12] in shown and digest not in shown
    buttons = _buttons(posted["blocks"])
    assert buttons["approve"]["value"] == buttons["reject"]["value"] == f"{key}:{digest}"
    assert buttons["open"]["url"] == f"https://review.example/tasks/{key}"


def test_an_approve_click_approves_as_the_mapped_reviewer_and_updates_the_message(room, slack):
    key, digest, _ = room.ready()
    answer = room.act(click("approve", key, digest, "UALICE", slack.response_url()))
    assert answer.status_code == 200, room.server.stderr()
    task = room.rt.task(key)
    assert task["status"] in ("approved", "done")
    assert [(a["by"], a["channel"]) for a in task["approvals"]] == [("alice", "slack")]
    update = wait_for(lambda: _updates_saying(slack, "Approved by alice (slack)"),
                      what="the message updated")[0]  # the approval's, then done's
    assert update["channel"] == CHANNEL and update["ts"] == "1700000000.000001"
    assert not _buttons(update["blocks"])  # nothing left to click
    assert not slack.of("response_url")


def test_a_reject_asks_a_reason_in_a_modal_and_rejects_with_it(room, slack):
    key, digest, _ = room.ready()
    assert room.act(click("reject", key, digest, "UBOB", slack.response_url(),
                          trigger_id="trig-42")).status_code == 200
    [opened] = slack.of("views.open")
    assert opened["trigger_id"] == "trig-42"
    view = opened["view"] if isinstance(opened["view"], dict) else json.loads(opened["view"])
    assert room.rt.task(key)["status"] == "ready"  # the click alone decides nothing
    bad = room.act(reject_submission(view, "UBOB", "no\u202eway"))
    assert bad.status_code == 200 and bad.json()["response_action"] == "errors"
    assert "invalid_reason" in bad.json()["errors"]["reason"]
    assert room.rt.task(key)["status"] == "ready"
    done = room.act(reject_submission(view, "UBOB", "the date is wrong"))
    assert done.status_code == 200 and not done.content
    task = room.rt.task(key)
    assert (task["status"], task["rejected_by"], task["reject_reason"]) == (
        "rejected", "bob", "the date is wrong")
    wait_for(lambda: _updates_saying(slack, "Rejected by bob: the date is wrong"),
             what="the message updated")


@pytest.mark.parametrize("how", ["forged", "stale", "unsigned", "future"])
def test_a_forged_or_stale_request_gets_401_and_no_call_to_slack(room, slack, how):
    key, digest, _ = room.ready()
    calls = len(slack.calls)
    payload = click("approve", key, digest, "UALICE", slack.response_url())
    if how == "unsigned":
        body, _ = signed_action(payload)
        answer = httpx.post(room.server.url + "/slack/actions", content=body, timeout=30,
                            headers={"content-type": "application/x-www-form-urlencoded"})
    else:
        sign = {"forged": {"secret": "not-the-signing-secret"},
                "stale": {"at": time.time() - 6 * 60},
                "future": {"at": time.time() + 6 * 60}}[how]
        answer = room.act(payload, **sign)
    assert answer.status_code == 401 and answer.json()["error"] == "bad_signature"
    assert len(slack.calls) == calls  # no ephemeral reply, no update: nothing to say
    assert room.rt.task(key)["status"] == "ready" and not room.rt.task(key)["approvals"]


@pytest.mark.parametrize("user,code", [("UNOBODY", "unknown_reviewer"), ("UCAROL", "read_only"),
                                       ("UDAVE", "unknown_task"), ("UALICE", "digest_mismatch")])
@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_refusal_is_an_ephemeral_reply_and_decides_nothing(room, slack, user, code, action):
    key, digest, _ = room.ready()
    shown = "0" * 64 if code == "digest_mismatch" else digest
    response_url = slack.response_url()
    answer = room.act(click(action, key, shown, user, response_url))
    assert answer.status_code == 200
    [reply] = wait_for(lambda: slack.of("response_url"), what="the ephemeral reply")
    assert reply["response_type"] == "ephemeral" and reply["replace_original"] is False
    assert code in reply["text"]
    task = room.rt.task(key)
    assert task["status"] == "ready" and not task["approvals"]
    assert not slack.of("views.open")


def test_a_quorum_of_a_slack_click_and_an_api_approval(quorum_room, slack):
    room = quorum_room
    key, digest, _ = room.ready()
    room.act(click("approve", key, digest, "UALICE", slack.response_url()))
    assert room.rt.task(key)["approvals_missing"] == 1
    wait_for(lambda: _updates_saying(slack, "1 of 2 (approved by alice (slack))"),
             what="the message counting one approval")
    # the same person again, by a second click: counted once
    room.act(click("approve", key, digest, "UALICE", slack.response_url()))
    assert room.rt.task(key)["approvals_missing"] == 1
    api = httpx.post(f"{room.server.url}/api/v1/tasks/{key}/approve", json={"digest": digest},
                     headers={"authorization": f"Bearer {room.tokens['bob']}"}, timeout=30)
    assert api.status_code == 200, api.text
    task = room.rt.task(key)
    assert task["approved_by"] == "bob"
    assert sorted((a["by"], a["channel"]) for a in task["approvals"]) == [
        ("alice", "slack"), ("bob", "api")]
    wait_for(lambda: _updates_saying(slack, "Approved by alice (slack), bob (api)"),
             what="the message saying who approved")


def test_an_edit_updates_the_message_and_the_old_buttons_go_stale(quorum_room, slack):
    room = quorum_room
    key, digest, _ = room.ready()
    edited = httpx.post(f"{room.server.url}/api/v1/tasks/{key}/approve",
                        json={"digest": digest, "edit": "the demo is on 1 November"},
                        headers={"authorization": f"Bearer {room.tokens['bob']}"}, timeout=30)
    assert edited.status_code == 200, edited.text
    new_digest = edited.json()["digest"]
    update = wait_for(lambda: _updates_saying(slack, "the demo is on 1 November"),
                      what="the message showing the edit")[-1]
    assert new_digest[:12] in _texts(update["blocks"])
    assert _buttons(update["blocks"])["approve"]["value"] == f"{key}:{new_digest}"
    room.act(click("approve", key, digest, "UALICE", slack.response_url()))
    [reply] = wait_for(lambda: slack.of("response_url"), what="the stale click's refusal")
    assert "digest_mismatch" in reply["text"]


def test_decision_times_reach_metrics_by_monitor_and_channel(room, slack):
    key, digest, _ = room.ready()
    room.act(click("approve", key, digest, "UALICE", slack.response_url()))
    text = httpx.get(room.server.url + "/metrics", timeout=30).text
    count = [line for line in text.splitlines()
             if line.startswith("signoff_decision_seconds_count")]
    assert count == [f'signoff_decision_seconds_count{{channel="slack",monitor="{MONITOR}"}} 1.0']
    assert f'signoff_decision_seconds_bucket{{channel="slack",le="+Inf",monitor="{MONITOR}"}} 1.0' \
        in text


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


def test_a_redraft_updates_the_message_with_the_new_draft(room, slack):
    key, digest, posted = room.ready()
    room.rt.host().put_material("doc-demo", "2026-12-24")
    redrafted = httpx.post(f"{room.server.url}/api/v1/tasks/{key}/redraft", timeout=30,
                           headers={"authorization": f"Bearer {room.tokens['alice']}"})
    assert redrafted.status_code == 200, redrafted.text
    fresh = room.rt.task(key)
    assert fresh["digest"] != digest and "2026-12-24" in fresh["result"]["draft"]
    update = wait_for(lambda: _updates_saying(slack, "2026-12-24"), what="the redraft shown")[-1]
    assert _buttons(update["blocks"])["approve"]["value"] == f"{key}:{fresh['digest']}"
    assert "2026-12-24" not in json.dumps(posted)


def test_an_open_click_decides_nothing_and_a_hidden_character_draft_is_refused(quorum_room,
                                                                               slack):
    room = quorum_room
    key, digest, _ = room.ready()
    calls = len(slack.calls)
    assert room.act(click("open", key, digest, "UALICE", slack.response_url())).status_code == 200
    assert len(slack.calls) == calls and not room.rt.task(key)["approvals"]
    edited = httpx.post(f"{room.server.url}/api/v1/tasks/{key}/approve", timeout=30,
                        json={"digest": digest, "edit": "pay \u202eto account 1",
                              "ack_hidden_characters": True},
                        headers={"authorization": f"Bearer {room.tokens['alice']}"})
    assert edited.status_code == 200, edited.text
    wait_for(lambda: _updates_saying(slack, "pay ⟨U+202E⟩to account 1"), what="the edit, marked")
    room.act(click("approve", key, edited.json()["digest"], "UBOB", slack.response_url()))
    [reply] = wait_for(lambda: slack.of("response_url"), what="the refusal")
    assert "hidden_characters" in reply["text"]
    assert room.rt.task(key)["approvals_missing"] == 1
    # a Slack user id taken away: that person's clicks are no one's
    assert room.rt.set_reviewer("bob", slack_user="")["slack_user"] is None
    room.act(click("approve", key, edited.json()["digest"], "UBOB", slack.response_url()))
    wait_for(lambda: len(slack.of("response_url")) == 2, what="the second refusal")
    assert "unknown_reviewer" in slack.of("response_url")[-1]["text"]


def test_a_post_slack_refuses_ends_in_the_dead_letters_and_replay_posts_it(room, slack):
    slack.failures.extend(["channel_not_found"] * 3)  # [notify.slack] attempts = 3
    room.rt.enqueue_events([event(1)], monitor_id=MONITOR)
    [letter] = wait_for(lambda: [d for d in room.rt.dead_letters() if d["kind"] == "notification"],
                        what="the post in the dead letters")
    assert (letter["step"], letter["code"], letter["attempts"]) == (
        "notify", "slack_channel_not_found", 3)
    assert len(slack.of("chat.postMessage")) == 3
    assert room.rt.replay(letter["id"])["replayed"] == 1
    wait_for(lambda: len(slack.of("chat.postMessage")) == 4, what="the replayed post")
    key = room.rt.tasks("ready")[0]["key"]
    assert slack.of("chat.postMessage")[-1]["blocks"][-1]["elements"][0]["value"].startswith(key)


def test_a_delegate_clicks_for_the_delegator_and_the_api_refuses_beyond_it(room, slack):
    room.rt.delegate("dave", "alice")  # dave may decide `elsewhere` only
    room.rt.delegate("bob", "alice")
    key, digest, _ = room.ready()
    refused = httpx.post(f"{room.server.url}/api/v1/tasks/{key}/approve", timeout=30,
                         json={"digest": digest, "for": "dave"},
                         headers={"authorization": f"Bearer {room.tokens['alice']}"})
    assert refused.status_code == 403 and refused.json()["error"] == "not_delegated"
    assert not room.rt.task(key)["approvals"]
    room.act(click("approve", key, digest, "UALICE", slack.response_url()))
    assert [(a["by"], a["for"], a["channel"]) for a in room.rt.task(key)["approvals"]] == [
        ("alice", "bob", "slack")]
    wait_for(lambda: _updates_saying(slack, "Approved by alice for bob (slack)"),
             what="the message naming whom alice approved for")


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_token_or_secret_not_set_stops_the_worker_and_serve_naming_it(home, slack, command):
    rt = make_home(home, extra_toml=(
        '[notify.slack]\nbot_token_env = "TEST_SLACK_TOKEN"\n'
        'signing_secret_env = "TEST_SLACK_SECRET"\n'
        f'api_url = "{slack.api_url}"\n'))
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


def test_the_review_index_shows_the_oldest_waiting_task_per_monitor(room, slack):
    room.ready()
    for name, sees in (("alice", True), ("dave", False)):  # dave may see `elsewhere` only
        with httpx.Client(base_url=room.server.url, timeout=30) as client:
            assert post_login(client, name, room.tokens[name]).status_code == 303
            page = client.get("/").text
        assert ('id="oldest-waiting"' in page and f">{MONITOR}</a> since" in page) is sees


def test_a_signed_monitors_message_only_opens_the_page_and_a_click_cannot_approve(signed_room,
                                                                                  slack):
    room = signed_room
    key, digest, posted = room.ready()
    assert set(_buttons(posted["blocks"])) == {"open"}  # a click cannot sign
    assert room.act(click("approve", key, digest, "UALICE", slack.response_url())).status_code == 200
    [reply] = wait_for(lambda: slack.of("response_url"), what="the refusal")
    assert "signature_required" in reply["text"] and reply["response_type"] == "ephemeral"
    assert room.rt.task(key)["status"] == "ready" and not room.rt.task(key)["approvals"]
