"""``signoff demo --channels``: approvals where people work, end to end, with one
``signoff serve`` for every channel.

The email section: a local SMTP server (aiosmtpd) runs in the demo's process
and ``signoff serve`` answers the links. A reviewer with an address is added,
the worker mails them when the task becomes ready; the demo opens the link
(which decides nothing), then presses the page's Approve button, as a browser
does: the page's form with the value of its cookie. The approval is the
reviewer's, through channel ``email``; the worker submits it, and the link
decides nothing a second time.

The Slack section (``slack_steps``, which any channels story can call with its
``Demo``): a local stand-in for the Slack Web API (``slackstand``) takes the
worker's posts and updates; ``signoff serve`` takes clicks signed as Slack signs
them. A monitor with a quorum of two posts its ready task (a second record's);
ana approves with a click (the message then says 1 of 2); a forged click is
answered 401 and reaches no one; bo approves through the JSON API, completing
the quorum; the message says who approved, and the task is written once.
"""

import email
import email.policy
import json
import re
import socket
import threading
import time

import httpx

from .pushed import EventsDemo
from .slackstand import SIGNING_SECRET, TOKEN, SlackServer, click, signed_action
from .story import DEMO_DATE, DOCUMENT, RECORD_ID, Demo, StepFailed
from ..state.statuses import TaskStatus as T

REVIEWER, ADDRESS = "alice", "alice@example.com"
WAIT_HTTP_S = 30.0
LINK = re.compile(r"(https?://\S+/r/(sol_[A-Za-z0-9_-]+))")
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
CHANNEL = "C0DEMOREVIEW"
SLACK_MONITOR, SLACK_RECORD = "slack", "rec-slack"
TOKEN_ENV, SECRET_ENV = "DEMO_SLACK_BOT_TOKEN", "DEMO_SLACK_SIGNING_SECRET"


class Mailbox:
    """An SMTP server on 127.0.0.1 in this process that keeps what it receives
    (``messages``: ``(recipients, message)``); ``url`` is its ``smtp://`` address."""

    def __init__(self):
        from aiosmtpd.controller import Controller  # the channels extra: this variant only
        self.messages = []
        self._lock = threading.Lock()
        port = _free_port()  # aiosmtpd checks its server by connecting: it needs a real port
        self.controller = Controller(self, hostname="127.0.0.1", port=port)
        self.controller.start()
        self.url = f"smtp://127.0.0.1:{port}"

    async def handle_DATA(self, server, session, envelope):
        """aiosmtpd's hook: keep the message."""
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self._lock:
            self.messages.append((list(envelope.rcpt_tos), parsed))
        return "250 OK"

    def to(self, address):
        """The messages sent to ``address`` so far, oldest first."""
        with self._lock:
            return [m for rcpts, m in self.messages if address in rcpts]

    def close(self):
        """Stop the server (once)."""
        if self.controller._thread is not None:
            self.controller.stop()


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ChannelsDemo(EventsDemo):
    """The channels story: a home, its host, one ``serve``, then each channel's section
    (``serve`` and its processes as in ``EventsDemo``)."""

    def __init__(self, cli, home, as_json):
        super().__init__(cli, home, as_json)
        self.mailbox = None
        self.client = None  # the email reviewer's browser, from the link on
        self.link = None
        self.ready_to_mail_s = None
        self.slack = None
        self.slack_calls = None
        self.bo_token = None
        self.results_before = 0

    def story(self):
        self.step("fresh home", "empty folder", self.fresh_home)
        self.step("init", "initialised", self.init)
        self.step("host record + material", f"{RECORD_ID} v1 open review; material for {DOCUMENT}",
                  self.host_setup)
        self.step("local SMTP server", "listening", self.start_mailbox)
        # Slack's settings before serve starts: it verifies the clicks with their secret.
        self.step("a stand-in for Slack; [notify.slack] pointed at it", "configured",
                  lambda: _configure_slack(self))
        self.step("signoff serve (links and clicks)", "listening", lambda: self.start_serve("serve"))
        self.step("[notify.email] through it, links to serve", "configured", self.configure)
        self.step("bind monitor", "active", lambda: "active" if self.ok(
            "monitor", "bind", "--document", DOCUMENT, "--window", "600")["active"] else "inactive")
        self.step(f"reviewer {REVIEWER} --email {ADDRESS} of that monitor", ADDRESS,
                  lambda: self.ok("reviewer", "add", REVIEWER, "--email", ADDRESS,
                                  "--monitor", "default")["email"])
        self.step("event → ready → a message with a link", "ready, 1 message", self.mailed)
        self.step("open the link (as a mail scanner would) → nothing decided", "ready, 0 approvals",
                  self.opened)
        self.step("press Approve on the link's page → approved through email", "approved by alice "
                  "(email)", self.approved)
        self.step("the worker submits it", T.DONE, self.submitted)
        self.step("the link again → used, nothing decided", "409 link_used", self.used)
        slack_steps(self)
        self.step("stop the servers", "stopped", self.stop_servers)
        self.finished = True

    def start_mailbox(self):
        try:
            self.mailbox = Mailbox()
        except ImportError:
            return "aiosmtpd is missing: pip install 'signoff[channels]'"
        return "listening"

    def configure(self):
        return _add_config(self, f'[notify.email]\nsmtp_url = "{self.mailbox.url}"\n'
                                 f'from = "signoff-demo@example.com"\n'
                                 f'public_url = {json.dumps(self.urls["serve"])}\n')

    def mailed(self):
        worker = self.start_worker()
        self.enqueue("evt-1")
        row = self.wait_for(lambda: self.delivery(1), "outcome for evt-1", worker)
        if row["outcome"] != "ready":
            return row["outcome"] or row["last_code"]
        self.key = row["task_key"]
        ready_at = time.monotonic()
        [message] = self.wait_for(lambda: self.mailbox.to(ADDRESS) or None, "a message", worker)
        self.ready_to_mail_s = round(time.monotonic() - ready_at, 2)
        found = LINK.search(message.get_content())
        if not found or not found.group(1).startswith(self.urls["serve"]):
            return "a message without a link to serve"
        self.link = found.group(1)
        return f"{self.task()['status']}, {len(self.mailbox.to(ADDRESS))} message"

    def opened(self):
        import httpx  # the serve extra, which this variant needs
        self.client = httpx.Client(timeout=WAIT_HTTP_S)
        page = self.client.get(self.link)
        if page.status_code != 200:
            return f"HTTP {page.status_code}"
        task = self.task()
        return f"{task['status']}, {len(task['approvals'])} approvals"

    def approved(self):
        page = self.client.get(self.link)
        csrf = CSRF.search(page.text)
        if csrf is None:
            return "the page has no Approve button"
        answer = self.client.post(self.link + "/approve", data={"csrf_token": csrf.group(1)},
                                  follow_redirects=False)
        if answer.status_code != 303:
            return f"HTTP {answer.status_code}"
        task = self.task()
        # The worker may have written it already: what this step shows is the approval.
        status = T.APPROVED if task["status"] in (T.APPROVED, T.DONE) else task["status"]
        by = ", ".join(f"{a['by']} ({a['channel']})" for a in task["approvals"])
        return f"{status} by {by}"

    def submitted(self):
        def finished():
            status = self.task()["status"]
            return None if status == T.APPROVED else status
        return self.wait_for(finished, "the submit", self.workers[-1])

    def used(self):
        csrf = CSRF.search(self.client.get(self.link).text)
        value = csrf.group(1) if csrf else self.client.cookies.get("signoff_link")
        again = self.client.post(self.link + "/approve", data={"csrf_token": value})
        self.client.close()
        return f"{again.status_code} {'link_used' if 'link_used' in again.text else '?'}"

    def child_env(self):
        """The sealed environment, plus the stand-in's token and signing secret (named by
        ``[notify.slack]``; the demo's own names, which no home reads)."""
        return dict(super().child_env(), **{TOKEN_ENV: TOKEN, SECRET_ENV: SIGNING_SECRET})

    def stop_workers(self):
        if self.mailbox is not None:
            self.mailbox.close()
        if self.slack is not None:
            self.slack_calls = {m: len(self.slack.of(m)) for m in
                                ("chat.postMessage", "chat.update", "views.open", "response_url")}
            self.slack.close()
            self.slack = None
        super().stop_workers()

    def counts(self):
        counts = Demo.counts(self)  # the story's, without the MCP Events requests
        counts["seconds_ready_to_mail"] = self.ready_to_mail_s
        counts["messages"] = len(self.mailbox.to(ADDRESS)) if self.mailbox else 0
        counts["slack_calls"] = self.slack_calls
        return counts


def slack_steps(demo):
    """The Slack section of a channels story run by ``demo`` (a ``ChannelsDemo`` whose
    ``serve`` runs and whose home has ``[notify.slack]``: ``_configure_slack``)."""
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


def _configure_slack(demo):
    demo.slack = SlackServer()
    return _add_config(demo, f'[notify.slack]\nbot_token_env = "{TOKEN_ENV}"\n'
                             f'signing_secret_env = "{SECRET_ENV}"\n'
                             f'api_url = "{demo.slack.api_url}"\nbase_delay_s = 0.2\n')


def _add_config(demo, table):
    """Append ``table`` (a TOML table's text) to the demo home's ``signoff.toml``."""
    with open(demo.home / "signoff.toml", "a", encoding="utf-8") as config:
        config.write("\n" + table)
    return "configured"


def _people(demo):
    m = demo.ok("monitor", "bind", "--id", SLACK_MONITOR, "--document", DOCUMENT, "--window",
                "600", "--approvals", "2", "--slack-channel", CHANNEL)
    demo.ok("reviewer", "add", "ana", "--slack-user", "UANA")
    demo.bo_token = demo.ok("reviewer", "add", "bo")["token"]
    # A record of its own: the story's first one was answered already.
    demo.ok("host", "record", "--id", SLACK_RECORD, "--document", DOCUMENT,
            "--text", "Which date is the demo? (asked again, for Slack)")
    demo.ok("host", "material", "--document", DOCUMENT, "--demo-date", DEMO_DATE)
    demo.results_before = len(demo.ok("host", "results"))
    return f"{m['slack_channel']}, {m['approvals']} approvals"


def _posted(demo):
    worker = demo.start_worker("--workers", "2")
    number = len(demo.ok("events", "--all")) + 1
    demo.enqueue("evt-slack", SLACK_RECORD, SLACK_MONITOR)
    row = demo.wait_for(lambda: demo.delivery(number), "outcome for evt-slack", worker)
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
    written = len(demo.ok("host", "results")) - demo.results_before
    return f"{demo.task()['status']}, {written} result"


def _updated(demo):
    words = "Approved by ana (slack), bo (api)"
    demo.wait_for(lambda: _saying(demo, words) or None, "the message saying who approved")
    return words


def _saying(demo, words):
    return [u for u in demo.slack.of("chat.update")
            if words in json.dumps(u["blocks"], ensure_ascii=False)]
