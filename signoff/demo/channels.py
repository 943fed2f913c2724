"""``signoff demo --channels``: a task approved where people work, from an email link.

A local SMTP server (aiosmtpd) runs in the demo's process and ``signoff serve``
answers the links. A reviewer with an address is added, the worker mails them
when the task becomes ready; the demo opens the link (which decides nothing),
then presses the page's Approve button, as a browser does: the page's form with
the value of its cookie. The approval is the reviewer's, through channel
``email``; the worker submits it, and the link decides nothing a second time.
"""

import email
import email.policy
import json
import re
import socket
import threading
import time

from .pushed import EventsDemo
from .story import DOCUMENT, RECORD_ID, Demo
from ..state.statuses import TaskStatus as T

REVIEWER, ADDRESS = "alice", "alice@example.com"
WAIT_HTTP_S = 30.0
LINK = re.compile(r"(https?://\S+/r/(sol_[A-Za-z0-9_-]+))")
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


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
    """The story of one task approved from an email link (``serve`` and its processes
    as in ``EventsDemo``)."""

    def __init__(self, cli, home, as_json):
        super().__init__(cli, home, as_json)
        self.mailbox = None
        self.client = None  # the reviewer's browser, from the link on
        self.link = None
        self.ready_to_mail_s = None

    def story(self):
        self.step("fresh home", "empty folder", self.fresh_home)
        self.step("init", "initialised", self.init)
        self.step("host record + material", f"{RECORD_ID} v1 open review; material for {DOCUMENT}",
                  self.host_setup)
        self.step("local SMTP server", "listening", self.start_mailbox)
        self.step("signoff serve", "listening", lambda: self.start_serve("serve"))
        self.step("[notify.email] through it, links to serve", "configured", self.configure)
        self.step(f"reviewer {REVIEWER} --email {ADDRESS}", ADDRESS, lambda: self.ok(
            "reviewer", "add", REVIEWER, "--email", ADDRESS)["email"])
        self.step("bind monitor", "active", lambda: "active" if self.ok(
            "monitor", "bind", "--document", DOCUMENT, "--window", "600")["active"] else "inactive")
        self.step("event → ready → a message with a link", "ready, 1 message", self.mailed)
        self.step("open the link (as a mail scanner would) → nothing decided", "ready, 0 approvals",
                  self.opened)
        self.step("press Approve on the link's page → approved through email", "approved by alice "
                  "(email)", self.approved)
        self.step("the worker submits it", T.DONE, self.submitted)
        self.step("the link again → used, nothing decided", "409 link_used", self.used)
        self.step("stop serve", "stopped", self.stop_servers)
        self.finished = True

    def start_mailbox(self):
        try:
            self.mailbox = Mailbox()
        except ImportError:
            return "aiosmtpd is missing: pip install 'signoff[channels]'"
        return "listening"

    def configure(self):
        with open(self.home / "signoff.toml", "a", encoding="utf-8") as f:
            f.write(f'\n[notify.email]\nsmtp_url = "{self.mailbox.url}"\n'
                    f'from = "signoff-demo@example.com"\n'
                    f'public_url = {json.dumps(self.urls["serve"])}\n')
        return "configured"

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
        by = ", ".join(f"{a['by']} ({a['channel']})" for a in task["approvals"])
        return f"{task['status']} by {by}"

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

    def stop_workers(self):
        if self.mailbox is not None:
            self.mailbox.close()
        super().stop_workers()

    def counts(self):
        counts = Demo.counts(self)  # the story's, without the MCP Events requests
        counts["seconds_ready_to_mail"] = self.ready_to_mail_s
        counts["messages"] = len(self.mailbox.to(ADDRESS)) if self.mailbox else 0
        return counts

