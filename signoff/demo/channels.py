"""``signoff demo --channels``: approvals where people work, end to end.

The Slack section (``slack_steps``, which any channels story can call with its
``Demo``): a local stand-in for the Slack Web API (``slackstand``) takes the
worker's posts and updates; ``signoff serve`` takes clicks signed as Slack signs
them. A monitor with a quorum of two posts its ready task; ana approves with a
click (the message then says 1 of 2); a forged click is answered 401 and
reaches no one; bo approves through the JSON API, completing the quorum; the
message says who approved, and the task is written once.
"""

import json
import time

import httpx

from .pushed import EventsDemo
from .slackstand import SIGNING_SECRET, TOKEN, SlackServer, click, signed_action
from .story import DEMO_DATE, DOCUMENT, RECORD_ID, StepFailed

CHANNEL = "C0DEMOREVIEW"
TOKEN_ENV, SECRET_ENV = "DEMO_SLACK_BOT_TOKEN", "DEMO_SLACK_SIGNING_SECRET"


class ChannelsDemo(EventsDemo):
    """The channels story: a home, its host, then each channel's section."""

    def __init__(self, cli, home, as_json):
        super().__init__(cli, home, as_json)
        self.slack = None
        self.slack_calls = None
        self.bo_token = None

    def story(self):
        self.step("fresh home", "empty folder", self.fresh_home)
        self.step("init", "initialised", self.init)
        self.step("record and material on the host", f"{RECORD_ID} v1 open review; material "
                  f"for {DOCUMENT}", self.host_setup)
        slack_steps(self)
        self.step("stop the servers", "stopped", self.stop_servers)
        self.finished = True

    def child_env(self):
        """The sealed environment, plus the stand-in's token and signing secret (named by
        ``[notify.slack]``; the demo's own names, which no home reads)."""
        return dict(super().child_env(), **{TOKEN_ENV: TOKEN, SECRET_ENV: SIGNING_SECRET})

    def stop_workers(self):
        if self.slack is not None:
            self.slack_calls = {m: len(self.slack.of(m)) for m in
                                ("chat.postMessage", "chat.update", "views.open", "response_url")}
            self.slack.close()
            self.slack = None
        super().stop_workers()

    def counts(self):
        return dict(super().counts(), slack_calls=self.slack_calls)


def slack_steps(demo):
    """The Slack section of a channels story run by ``demo`` (a ``ChannelsDemo``)."""
    demo.step("a stand-in for Slack; [notify.slack] pointed at it", "configured",
              lambda: _configure(demo))
    demo.step("signoff serve (it takes the clicks)", "listening", lambda: demo.start_serve("serve"))
    demo.step("monitor with a Slack channel and a quorum of 2; ana on Slack, bo on the API",
              f"{CHANNEL}, 2 approvals", lambda: _people(demo))
    demo.step("new comment → ready → posted with its digest and buttons",
              "posted, Approve/Reject/Open", lambda: _posted(demo))
    demo.step("ana clicks Approve (signed as Slack signs) → 1 of 2, message updated",
              "1 of 2", lambda: _clicked(demo))
    demo.step("a forged click → 401, nothing decided, no call to Slack", "401, 1 approval",
              lambda: _forged(demo))
    demo.step("bo approves through the API → approved, written once", "done, 1 result",
              lambda: _completed(demo))
    demo.step("the message says who approved", "Approved by ana (slack), bo (api)",
              lambda: _updated(demo))


def _configure(demo):
    demo.slack = SlackServer()
    with open(demo.home / "signoff.toml", "a", encoding="utf-8") as config:
        config.write(f'\n[notify.slack]\nbot_token_env = "{TOKEN_ENV}"\n'
                     f'signing_secret_env = "{SECRET_ENV}"\n'
                     f'api_url = "{demo.slack.api_url}"\nbase_delay_s = 0.2\n')
    return "configured"


def _people(demo):
    m = demo.ok("monitor", "bind", "--document", DOCUMENT, "--window", "600", "--approvals", "2",
                "--slack-channel", CHANNEL)
    demo.ok("reviewer", "add", "ana", "--slack-user", "UANA")
    demo.bo_token = demo.ok("reviewer", "add", "bo")["token"]
    demo.ok("host", "material", "--document", DOCUMENT, "--demo-date", DEMO_DATE)
    return f"{m['slack_channel']}, {m['approvals']} approvals"


def _posted(demo):
    worker = demo.start_worker("--workers", "2")
    demo.enqueue("evt-1")
    row = demo.wait_for(lambda: demo.delivery(1), "outcome for evt-1", worker)
    demo.key = row["task_key"]
    demo.digest = demo.task()["digest"]
    [post] = demo.wait_for(lambda: demo.slack.of("chat.postMessage") or None, "the Slack post")
    shown = json.dumps(post["blocks"], ensure_ascii=False)
    if demo.digest[:12] not in shown:
        return "posted without the digest"
    buttons = [e["text"]["text"] for b in post["blocks"] if b["type"] == "actions"
               for e in b["elements"]]
    return "posted, " + "/".join(buttons)


def _act(demo, payload, **sign):
    body, headers = signed_action(payload, **sign)
    return httpx.post(demo.urls["serve"] + "/slack/actions", content=body, headers=headers,
                      timeout=30)


def _clicked(demo):
    answer = _act(demo, click("approve", demo.key, demo.digest, "UANA",
                              demo.slack.response_url()))
    if answer.status_code != 200 or demo.slack.of("response_url"):
        raise StepFailed(f"answered {answer.status_code}: {demo.slack.of('response_url')}")
    demo.wait_for(lambda: _saying(demo, "1 of 2") or None, "the message counting one approval")
    return f"{2 - demo.task()['approvals_missing']} of 2"


def _forged(demo):
    calls = len(demo.slack.calls)
    answer = _act(demo, click("approve", demo.key, demo.digest, "UANA", demo.slack.response_url()),
                  secret="not-the-signing-secret")
    time.sleep(1)  # what a forged click would have caused had it been taken
    extra = len(demo.slack.calls) - calls
    given = len(demo.task()["approvals"])
    return f"{answer.status_code}, {given} approval" + (f", {extra} Slack calls" if extra else "")


def _completed(demo):
    answer = httpx.post(f"{demo.urls['serve']}/api/v1/tasks/{demo.key}/approve",
                        json={"digest": demo.digest}, timeout=30,
                        headers={"authorization": f"Bearer {demo.bo_token}"})
    if answer.status_code != 200:
        raise StepFailed(f"the API answered {answer.status_code}: {answer.text}")
    demo.drain()
    return f"{demo.task()['status']}, {len(demo.ok('host', 'results'))} result"


def _updated(demo):
    words = "Approved by ana (slack), bo (api)"
    demo.wait_for(lambda: _saying(demo, words) or None, "the message saying who approved")
    return words


def _saying(demo, words):
    return [u for u in demo.slack.of("chat.update")
            if words in json.dumps(u["blocks"], ensure_ascii=False)]
