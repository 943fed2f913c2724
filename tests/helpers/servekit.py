"""Helpers for tests against a real ``signoff serve`` process."""

import contextlib
import datetime
import json
import os
import re
import select
import signal
import subprocess
import time

import httpx

from helpers import LOCAL_TLS, child_env, signoff_cmd, read_here
from signoff.app import Signoff
from standardwebhooks.webhooks import Webhook

SECRET_TEXT = "event text that must never be stored"


def make_home(path, extra_toml=""):
    """An initialised home (real clock): one open record, its material, a monitor."""
    return read_here(init_home(path, extra_toml))  # the test looks at its rows


def init_home(path, extra_toml=""):
    """``make_home`` for a room, which outlives any one test: its rows are read through
    its methods (or ``read_here`` within a test)."""
    rt = Signoff.init(path)
    if extra_toml:
        with open(path / "signoff.toml", "a", encoding="utf-8") as f:
            f.write("\n" + extra_toml)
    rt.host().put_record("comment-1", document="doc-demo", text="please add the demo date")
    rt.host().put_material("doc-demo", "2026-11-01")
    rt.bind("doc-demo", window_s=3600)
    return rt


def ready_home(home):
    """``make_home`` with three ready tasks, of records comment-1..3 (the real clock)."""
    rt = make_home(home)
    for n in (2, 3):
        rt.host().put_record(f"comment-{n}", document="doc-demo", text=f"comment {n}")
    rt.enqueue_events([event(n) for n in (1, 2, 3)])
    rt.run_until_idle()
    return rt


def ready_monitor(rt, monitor, records, document="doc-demo"):
    """Bind ``monitor`` on ``document`` and make a ready task of each of ``records`` (new
    records of that document, each sent as its own event)."""
    rt.bind(document, monitor, window_s=3600)
    for k, record in enumerate(records, 1):
        rt.host().put_record(record, document=document, text=f"comment {k}")
    rt.enqueue_events([event(k, event_id=f"evt-{record}", record_id=record, document=document)
                       for k, record in enumerate(records, 1)], monitor_id=monitor)
    rt.run_until_idle()


def event(n=1, **changes):
    """A matching event for record ``comment-<n>``, occurring now."""
    ev = {"event_id": f"evt-{n}", "name": "comment.created", "document": "doc-demo",
          "record_id": f"comment-{n}", "occurred": int(time.time()), "text": SECRET_TEXT}
    ev.update(changes)
    return ev


def signed(secret, body, msg_id, at=None):
    """Standard Webhooks headers for ``body`` (str) under ``secret``."""
    at = at or datetime.datetime.now(datetime.timezone.utc)
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": Webhook(secret).sign(msg_id, at, body),
            "content-type": "application/json"}


class Server:
    """``signoff serve --port 0`` (or ``port``) as a child process; ``url`` once it listens."""

    def __init__(self, home, *args, env=None, port=0):
        self.log = open(home.parent / f"serve-{time.monotonic_ns()}.log", "wb")
        self.proc = subprocess.Popen(signoff_cmd(home, "serve", "--port", str(port), *args),
                                     env=env or child_env(), stdout=subprocess.PIPE,
                                     stderr=self.log)
        self.url = self._wait_listening()

    def _wait_listening(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                if line:
                    return json.loads(line)["listening"]
            if self.proc.poll() is not None:
                break
        self.kill()
        raise AssertionError(f"signoff serve did not start: {self.stderr()}")

    def stderr(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, timeout=30):
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._close()

    def kill(self):
        """SIGKILL and reap."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._close()

    def _close(self):
        if self.proc.stdout:
            self.proc.stdout.close()
        self.log.close()


def csrf(page):
    """The CSRF token of a review page's forms."""
    return re.search(r'name="csrf_token" value="([0-9a-f]+)"', page).group(1)


@contextlib.contextmanager
def logged_in(home, name, token):
    """A client of a new ``signoff serve`` of ``home``, logged in as reviewer ``name``;
    the server is stopped after the block (and must stop cleanly)."""
    server = Server(home)
    try:
        with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as client:
            assert post_login(client, name, token).status_code == 303
            yield client
    finally:
        assert server.stop() == 0, server.stderr()


def post_login(client, name, token, **fields):
    """Open the login page (its CSRF cookie and field), then post the form."""
    page = client.get("/login").text
    login_csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    return client.post("/login", data={"name": name, "token": token, "csrf_token": login_csrf,
                                       **fields})
