"""``signoff demo --events``: the story with events pushed by the host over MCP Events.

The reference host is served over streamable HTTP as an MCP Events server
(``signoff host mcp --http --events``): a new comment on it (``signoff host
record``) publishes ``comment.created``, which the server delivers as a signed
webhook to ``signoff serve``. The home's host is ``McpHost`` on that server,
and ``monitor bind`` subscribes (the server verifies the callback through
serve first). Then: the event becomes a ready task; the approved task loses
its acknowledgement and the worker is killed with SIGKILL and restarted; serve
is killed right after it stored a delivery and before answering, and the
server's retry (sent at once, not after the server's 30 s backoff) is answered
as a duplicate; ``monitor cancel`` makes serve answer the next delivery 410, and
the server drops the subscription.
"""

import json
import signal
import subprocess
import sys
import time

from ..config import private_file
from ..hosts.reference import EVENTS_FILENAME, events_held
from ..mcp.hostserver import retry_now
from .story import DEMO_DATE, DOCUMENT, WAIT_S, Demo, StepFailed, _show

EVENT = "comment.created"
# The default host and its (empty) options, as `signoff init` writes them.
DEFAULT_FACTORY = 'factory = "signoff.hosts.reference:ReferenceHost"\n'
EMPTY_OPTIONS = "[host.options]\n\n"


class EventsDemo(Demo):
    """The demo fed by MCP Events, plus serve killed after a write and a cancel answered 410."""

    def __init__(self, cli, home, as_json):
        super().__init__(cli, home, as_json)
        self.servers = {}  # name -> the process of `host mcp --http` or `serve`
        self.urls = {}
        self.publish_to_ready_s = None

    def story(self):
        self.step("fresh home", "empty folder", self.fresh_home)
        self.step("init (retry base delay 3s)", "initialised", self.init)
        self.step("material on the host", DOCUMENT, lambda: self.ok(
            "host", "material", "--document", DOCUMENT, "--demo-date", DEMO_DATE)["document"])
        self.step("host as an MCP Events server over HTTP", "events on", self.start_host_server)
        self.step("signoff serve", "listening", lambda: self.start_serve("serve"))
        self.step("host = McpHost on it, events comment.created", "configured", self.configure)
        self.step("bind monitor → subscribed (callback verified through serve)",
                  "active, verified 1", self.bind_subscribed)
        self.step("new comment → comment.created delivered → ready", "ready", self.first_comment)
        self.lost_ack_and_kill()
        self.step("results on the host → 1", 1, self.results)
        self.step("serve killed right after storing a delivery, before answering",
                  "killed, delivery stored", self.serve_dies)
        self.step("serve back; the server's retry (due in 30 s, sent now) → duplicate,"
                  " nothing stored twice", "duplicate, 2 deliveries", self.retry_deduped)
        self.step("worker --drain → one task for comment-2", 1, self.second_task)
        self.step("cancel the monitor", "inactive, subscription ended", self.cancel_subscribed)
        self.step("new comment → 410 → the server drops the subscription", 0, self.gone)
        self.step("worker --drain unsubscribes", "ended, unsubscribed", self.unsubscribed)
        self.step("stop the servers", "stopped", self.stop_servers)
        self.finished = True

    # -- processes ----------------------------------------------------------------

    def _start(self, name, argv):
        """Start a server process; its first stdout line is JSON naming where it listens."""
        log = private_file(self.home / f"{name}.log", "wb")
        self.logs.append(log)
        proc = subprocess.Popen([sys.executable, *argv], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=log, env=self.child_env())
        self.servers[name] = proc
        line = proc.stdout.readline()  # the server prints it once listening, or exits
        if not line:
            raise StepFailed(f"{name} exited ({proc.wait(timeout=WAIT_S)}) before listening")
        return json.loads(line)

    def start_host_server(self):
        started = self._start("host-server", ["-m", "signoff", "--home", str(self.home), "host",
                                              "mcp", "--http", "--events",
                                              "--loopback-callbacks"])
        self.urls["host"] = started["url"]
        return "events on" if started["events"] else "events off"

    def start_serve(self, name, port=0, module="signoff"):
        started = self._start(name, ["-m", module, "--home", str(self.home), "serve",
                                     "--port", str(port)])
        self.urls["serve"] = started["listening"]
        return "listening"

    def stop_server(self, name):
        proc = self.servers.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=WAIT_S)
        proc.stdout.close()
        return code

    def stop_servers(self):
        codes = {name: self.stop_server(name) for name in list(self.servers)}
        bad = {name: code for name, code in codes.items() if code not in (0, -signal.SIGTERM)}
        return "stopped" if not bad else f"exit codes {bad}"

    def stop_workers(self):
        for proc in self.servers.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
            proc.stdout.close()
        self.servers = {}
        super().stop_workers()

    # -- steps ----------------------------------------------------------------------

    def configure(self):
        config = self.home / "signoff.toml"
        text = config.read_text(encoding="utf-8")
        if DEFAULT_FACTORY not in text or EMPTY_OPTIONS not in text:
            return "signoff.toml has no default [host] section"
        options = (f'[host.options]\nurl = {json.dumps(self.urls["host"])}\ntimeout_s = 10\n\n'
                   f'[host.options.events]\nname = "{EVENT}"\n'
                   'arguments = { document = "{document}" }\n'
                   'map = { record_id = "data.record_id", document = "data.document" }\n\n')
        text = text.replace(DEFAULT_FACTORY, 'factory = "signoff.hosts.mcp:McpHost"\n', 1)
        serve = f'\n[serve]\npublic_url = {json.dumps(self.urls["serve"])}\n'
        config.write_text(text.replace(EMPTY_OPTIONS, options, 1) + serve, encoding="utf-8")
        return "configured"

    def bind_subscribed(self):
        self.ok("monitor", "bind", "--document", DOCUMENT, "--window", "600")
        [sub] = self.ok("subscriptions")
        verified = self.requests().get("verified", 0)
        return f"{sub['state']}, verified {verified}"

    def requests(self):
        return self.ok("stats")["subscriptions"]["requests"]

    def first_comment(self):
        worker = self.start_worker("--workers", "2")
        published = time.monotonic()
        self.ok("host", "record", "--id", "comment-1", "--document", DOCUMENT,
                "--text", "Which date is the demo? (read back over MCP, never trusted)")
        row = self.wait_for(lambda: self.delivery(1), "the delivery of comment-1", worker)
        if row["outcome"] != "ready" or not row["task_key"]:
            return row["outcome"] or row["last_code"]
        self.publish_to_ready_s = round(time.monotonic() - published, 2)
        self.key = row["task_key"]
        task = self.task()
        self.digest = task["digest"]
        return task["status"]

    def serve_dies(self):
        port = self.urls["serve"].rsplit(":", 1)[1]
        self.stop_server("serve")
        self.start_serve("dying-serve", port, module="signoff.demo.dying_serve")
        self.ok("host", "record", "--id", "comment-2", "--document", DOCUMENT,
                "--text", "And the rehearsal?")
        dying = self.servers["dying-serve"]
        try:
            code = dying.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            return "serve was not killed"
        self.stop_server("dying-serve")
        stored = len(self.ok("events", "--all"))
        if code != -signal.SIGKILL:
            return f"serve exited {code}"
        return "killed, delivery stored" if stored == 2 else f"{stored} deliveries"

    def retry_deduped(self):
        port = self.urls["serve"].rsplit(":", 1)[1]
        self.start_serve("serve", port)
        # The host's own pass would send it 30 s after the failure: the demo sends it now.
        sent = retry_now(self.home / EVENTS_FILENAME)
        if sent != {"delivered": 1, "retrying": 0, "failed": 0}:
            return f"the retry: {sent}"
        duplicates = self.requests().get("duplicate", 0)
        stored = len(self.ok("events", "--all"))
        return f"duplicate, {stored} deliveries" if duplicates == 1 else (
            f"{duplicates} duplicates, {stored} deliveries")

    def second_task(self):
        self.drain()
        return sum(1 for t in self.ok("tasks", "list", "--all") if t["record_id"] == "comment-2")

    def cancel_subscribed(self):
        m = self.ok("monitor", "cancel", "default")
        [sub] = self.ok("subscriptions")
        return ("inactive" if not m["active"] else "still active") + f", subscription {sub['state']}"

    def gone(self):
        self.ok("host", "record", "--id", "comment-3", "--document", DOCUMENT)

        def dropped():
            held = self.held_by_server()
            return held if held == 0 and self.requests().get("subscription_ended") else None
        try:
            return self.wait_for(dropped, "the server to drop the subscription")
        except StepFailed:
            return f"the server holds {self.held_by_server()}, {_show(self.requests())}"

    def held_by_server(self):
        """Subscriptions the host's events server still holds (its store in the home)."""
        return events_held(self.home)

    def unsubscribed(self):
        self.drain()
        [sub] = self.ok("subscriptions")
        return f"{sub['state']}, {'unsubscribed' if sub['unsubscribed'] else 'still subscribed'}"

    # -- the report -------------------------------------------------------------------

    def counts(self):
        counts = super().counts()
        if self.home_is_ours and (self.home / "signoff.toml").exists():
            try:
                requests = self.requests()
            except StepFailed:
                return counts
            counts.update(event_requests=requests,
                          event_deliveries=requests.get("accepted", 0) + requests.get("duplicate", 0),
                          verify_round_trips=requests.get("verified", 0),
                          seconds_publish_to_ready=self.publish_to_ready_s)
        return counts
