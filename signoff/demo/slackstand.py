"""A local stand-in for the Slack Web API, in this process, recording every call.

``signoff demo --channels`` clicks against it, and the tests run it in theirs.

It answers the methods signoff calls (``chat.postMessage``, ``chat.update``,
``views.open``) under ``/api/`` as Slack does (``{"ok": true, ...}``, or
``{"ok": false, "error": ...}`` for a bad token or a failure asked for), and
takes the ``response_url`` posts under ``/response/<n>``. ``slack_sdk`` is
pointed at it through ``[notify.slack] api_url``. ``signed_action`` signs an
interactivity request as Slack documents it (v0 HMAC-SHA256 over
``v0:timestamp:body``).
"""

import hashlib
import hmac
import itertools
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "xoxb-stand-in-token"
SIGNING_SECRET = "stand-in-signing-secret"


class SlackServer:
    """The stand-in; ``calls`` is a list of ``(method, body)``, ``failures`` a list of
    Slack error names the next Web API calls answer (one each); ``fail`` queues them for
    the calls about one channel alone."""

    def __init__(self):
        self.calls, self.failures = [], []
        self.failing = {}  # channel -> the errors its next calls answer
        self.replies = {}  # path of a response_url -> the bodies posted to it
        self.posted = {}  # ts -> the body of the message posted as it
        self.lock = threading.Lock()
        self.ts = itertools.count(1)
        slack = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                status, answer = slack.answer(self.path, dict(self.headers.items()), raw)
                data = json.dumps(answer).encode() if isinstance(answer, dict) else answer.encode()
                self.send_response(status)
                self.send_header("content-type", "application/json" if isinstance(answer, dict)
                                 else "text/plain")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        self.api_url = self.base + "/api/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path, headers, raw):
        """``(status, answer)`` for one request, recorded."""
        body = _decode(headers, raw)
        if path.startswith("/response/"):
            with self.lock:
                self.calls.append(("response_url", body))
                self.replies.setdefault(path, []).append(body)
            return 200, "ok"
        method = path.removeprefix("/api/")
        with self.lock:
            self.calls.append((method, body))
            queued = self.failing.get(body.get("channel")) or self.failures
            failure = queued.pop(0) if queued else None
        if headers.get("Authorization", headers.get("authorization")) != f"Bearer {TOKEN}":
            return 200, _failed("invalid_auth")
        if failure:
            return 200, _failed(failure)
        if method == "chat.postMessage":
            ts = f"1700000000.{next(self.ts):06d}"
            with self.lock:
                self.posted[ts] = body
            return 200, {"ok": True, "channel": body["channel"], "ts": ts}
        if method == "chat.update":
            return 200, {"ok": True, "channel": body["channel"], "ts": body["ts"]}
        if method == "views.open":
            return 200, {"ok": True, "view": {"id": "V1"}}
        return 200, _failed("unknown_method")

    def of(self, method):
        """The bodies of the calls of ``method`` so far."""
        with self.lock:
            return [body for name, body in self.calls if name == method]

    def fail(self, channel, *errors):
        """Answer the next Web API calls about ``channel`` with these Slack errors, one each."""
        with self.lock:
            self.failing.setdefault(channel, []).extend(errors)

    def response_url(self):
        """A new ``response_url`` for one action."""
        return f"{self.base}/response/{time.monotonic_ns()}"

    def replies_to(self, response_url):
        """The bodies posted to ``response_url`` so far."""
        with self.lock:
            return list(self.replies.get(urllib.parse.urlsplit(response_url).path, ()))

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _failed(error):
    """Slack's answer to a call it refuses (signoff shows it as ``slack_<error>``)."""
    return {"ok": False, "error": error}


def _decode(headers, raw):
    kind = headers.get("Content-Type", headers.get("content-type", ""))
    text = raw.decode("utf-8")
    if kind.startswith("application/json"):
        return json.loads(text) if text else {}
    return {k: v[0] for k, v in urllib.parse.parse_qs(text).items()}


def signed_action(payload, secret=SIGNING_SECRET, at=None):
    """``(body, headers)`` of an interactivity request carrying ``payload``, signed."""
    body = urllib.parse.urlencode({"payload": json.dumps(payload)})
    stamp = str(int(time.time() if at is None else at))
    mac = hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return body, {"content-type": "application/x-www-form-urlencoded",
                  "x-slack-request-timestamp": stamp, "x-slack-signature": f"v0={mac}"}


def click(action, key, digest, user, response_url, trigger_id="trigger-1"):
    """A ``block_actions`` payload: ``user`` clicked ``action`` on the message of ``key``."""
    return {"type": "block_actions", "user": {"id": user}, "trigger_id": trigger_id,
            "response_url": response_url, "container": {"type": "message"},
            "actions": [{"action_id": action, "block_id": "signoff", "value": f"{key}:{digest}",
                         "type": "button"}]}


def reject_submission(view, user, reason):
    """The ``view_submission`` payload of the reject modal ``view`` (as ``views.open`` got
    it) with ``reason`` typed in."""
    return {"type": "view_submission", "user": {"id": user},
            "view": {"callback_id": view["callback_id"],
                     "private_metadata": view["private_metadata"],
                     "state": {"values": {"reason": {"reason": {"type": "plain_text_input",
                                                                "value": reason}}}}}}
