"""``signoff demo --mcp``: the demo story with the host reached over MCP.

The home's host is ``signoff.hosts.mcp:McpHost`` on ``signoff host mcp``: every
record read, grant check, write and receipt goes through MCP stdio servers
that the workers (and the CLI) start themselves. The plain story runs first
(a lost acknowledgement, the worker killed with SIGKILL and restarted); then
a second task is approved and the MCP server process kills itself right after
committing its write: the task is ``uncertain``, the server is started again,
the receipt under the same key says the write happened, and the task is
``done`` with exactly one write.
"""

import gc
import json
import os
import signal
import sys
from pathlib import Path

from ..config import load_config
from ..hosts.mcp import batch_tools_toml
from .story import BASE_DELAY_S, DOCUMENT, WAIT_S, Demo, StepFailed
from ..state.statuses import TaskStatus as T

MCP_FACTORY = "signoff.hosts.mcp:McpHost"
SECOND_RECORD = "comment-2"
SECOND_MONITOR = "second"


class McpDemo(Demo):
    """The demo over MCP, plus the server killed right after a write."""

    def __init__(self, cli, home, as_json):
        super().__init__(cli, home, as_json)
        self.second_key = None
        self.second_digest = None
        self.server_kills = 0

    def init(self):
        """Write the MCP host configuration, then ``signoff init`` (which keeps it)."""
        package_root = str(Path(__file__).resolve().parent.parent.parent)
        server = [sys.executable, "-m", "signoff", "--home", str(self.home), "host", "mcp"]
        (self.home / "signoff.toml").write_text(
            f"[host]\nfactory = {json.dumps(MCP_FACTORY)}\n[host.options]\n"
            f"command = {json.dumps(server[0])}\nargs = {json.dumps(server[1:])}\n"
            f"env = {{ PYTHONPATH = {json.dumps(package_root)} }}\ntimeout_s = 10\n"
            f"{batch_tools_toml()}[retry]\nbase_delay_s = {BASE_DELAY_S}\n", encoding="utf-8")
        self.ok("init")
        config = load_config(self.home)
        if config.host_factory != MCP_FACTORY:
            return f"host factory is {config.host_factory}"
        delay = config.retry.base_delay_s
        return "initialised" if delay == BASE_DELAY_S else f"base_delay_s is {delay}"

    def story(self):
        super().story()
        self.finished = False
        self.step("bind a second monitor", f"{SECOND_MONITOR} active on {DOCUMENT}",
                  self.bind_second)
        self.step(f"event on {SECOND_RECORD} → ready", "ready", self.second_event)
        self.step("approve it → approved", "approved", lambda: self.ok(
            "approve", self.second_key, "--digest", self.second_digest,
            "--by", "demo-owner")["status"])
        self.step("arm crash-after-write", {"crash-after-write": 1},
                  lambda: self.ok("host", "fault", "crash-after-write")["faults"])
        self.step("the MCP server dies right after its write → uncertain", "uncertain",
                  self.server_dies)
        self.step("server started again, receipt under the same key → done", "done",
                  self.server_restarted)
        self.step("results on the host → 2, one per key", 2, self.two_results)
        self.step("MCP servers left running → 0", 0, self.servers_left)
        self.finished = True

    def second_task(self):
        return self.ok("tasks", "show", self.second_key)

    def bind_second(self):
        self.ok("host", "record", "--id", SECOND_RECORD, "--document", DOCUMENT,
                "--text", "And the rehearsal date?")
        m = self.ok("monitor", "bind", "--id", SECOND_MONITOR, "--document", DOCUMENT)
        return f"{m['id']} {'active' if m['active'] else 'inactive'} on {m['document']}"

    def second_event(self):
        self.enqueue("evt-3", SECOND_RECORD, SECOND_MONITOR)
        self.drain()
        row = next((r for r in self.ok("events") if r["event_id"] == "evt-3"), None)
        if row is None or row["outcome"] != "ready":
            return row and (row["outcome"] or row["last_code"])
        self.second_key = row["task_key"]
        task = self.second_task()
        self.second_digest = task["digest"]
        return task["status"]

    def server_dies(self):
        worker = self.start_worker("--workers", "1")

        def moved():
            status = self.second_task()["status"]
            return None if status == T.APPROVED else status
        status = self.wait_for(moved, "submit outcome", worker)
        written = [r for r in self.ok("host", "results") if r["key"] == self.second_key]
        if status == T.UNCERTAIN and not written:
            return "uncertain, but nothing was written"
        self.server_kills += 1
        return status

    def server_restarted(self):
        worker = self.workers[-1]

        def finished():
            status = self.second_task()["status"]
            return None if status == T.UNCERTAIN else status
        status = self.wait_for(finished, "the receipt read", worker)
        worker.send_signal(signal.SIGTERM)
        if worker.wait(timeout=WAIT_S) != 0:
            raise StepFailed(f"the worker exited {worker.returncode} on SIGTERM")
        history = self.second_task()["history"]
        if status == T.DONE and "ConnectionError" not in [h["code"] for h in history]:
            return "done, but no attempt saw the server die"
        return status

    def two_results(self):
        rows = self.ok("host", "results")
        if {r["key"] for r in rows} != {self.key, self.second_key}:
            return "results under other keys"
        return len(rows)

    def servers_left(self):
        gc.collect()  # hosts the CLI commands of this process made are closed when collected

        def none_left():
            return True if not _servers_for(self.home) else None
        try:
            self.wait_for(none_left, "the MCP servers to exit")
        except StepFailed:
            return len(_servers_for(self.home))
        return 0

    def counts(self):
        return dict(super().counts(), mcp_server_kills=self.server_kills)


def _servers_for(home):
    """Pids of ``signoff host mcp`` processes serving ``home`` (Linux ``/proc``)."""
    wanted = [b"--home", str(home).encode(), b"host", b"mcp"]
    pids = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry.name.isdigit() and int(entry.name) != os.getpid() and _contains(argv, wanted):
            pids.append(int(entry.name))
    return pids


def _contains(argv, wanted):
    return any(argv[i:i + len(wanted)] == wanted for i in range(len(argv)))
