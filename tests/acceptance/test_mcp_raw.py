"""``signoff mcp`` spoken to in raw JSON-RPC lines: what no SDK client sends.

Each test starts a real ``signoff mcp`` child process on its own home (and
backends) and writes lines to its standard input: broken JSON, objects naming
a key twice, a message of 30 MB.
"""

import json
import queue
import subprocess
import threading

import pytest

from helpers import child_env, make_event, signoff_cmd
from signoff.models import Audit, Delivery


class RawAgent:
    """``signoff mcp --monitor default`` as a child process, spoken to in raw lines."""

    def __init__(self, home):
        self.log = open(home.parent / "mcp-raw.log", "wb")
        self.proc = subprocess.Popen(signoff_cmd(home, "mcp", "--monitor", "default"),
                                     env=child_env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log)
        self.answers = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        opened = self.ask({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}})
        assert "result" in opened, opened
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def _read(self):
        for line in self.proc.stdout:
            self.answers.put(line)

    def send(self, raw):
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def answer(self, timeout=60):
        """The next line the server wrote, decoded."""
        try:
            return json.loads(self.answers.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"no answer within {timeout}s; exit {self.proc.poll()}, "
                                 f"stderr: {open(self.log.name, 'rb').read()[-2000:]!r}") from None

    def ask(self, message):
        self.send(json.dumps(message).encode())
        return self.answer()

    def peak_kib(self):
        """The server process's peak resident memory so far (VmHWM), in KiB."""
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))

    def close(self):
        self.proc.stdin.close()
        try:
            return self.proc.wait(30)
        finally:
            self.proc.stdout.close()
            self.log.close()


@pytest.fixture
def raw_agent(rt, home):
    agent = RawAgent(home)
    yield agent
    assert agent.close() == 0


def call(request_id, tool, arguments):
    """A ``tools/call`` request's JSON text."""
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments}})


def with_key_twice(text, key, value, within):
    """``text`` naming ``key`` once more (as ``value``), first in the object ``within``."""
    opening = f'"{within}": {{' if within else "{"
    assert text.count(opening) == 1, (text, opening)
    return text.replace(opening, opening + json.dumps({key: value})[1:-1] + ", ")


def test_lines_that_are_not_json_rpc_get_an_error_and_the_server_goes_on(raw_agent):
    for raw in (b"not json", b'{"jsonrpc": "2.0", "id": 1,', b"\xff\xfe{}",
                b'{"jsonrpc": "2.0", "id": 1, "x": NaN}'):
        raw_agent.send(raw)
        answer = raw_agent.answer()
        assert answer["jsonrpc"] == "2.0" and answer["id"] is None, answer
        assert answer["error"]["code"] == -32700, answer
        assert answer["error"]["message"].startswith("Parse error: message: ")
    for raw, request_id in ((b"[1, 2]", None), (b'{"jsonrpc": "2.0", "id": 5}', 5)):
        raw_agent.send(raw)  # JSON, but no JSON-RPC message
        answer = raw_agent.answer()
        assert answer["id"] == request_id and answer["error"]["code"] == -32600, answer
    tools = raw_agent.ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert "report_event" in {t["name"] for t in tools["result"]["tools"]}


def test_a_report_event_naming_a_key_twice_is_a_tool_error_a_model_sees(raw_agent, rt):
    good = make_event(event_id="evt-raw-good")
    cases = [  # (message, the key named twice)
        (with_key_twice(call(11, "report_event", good), "event_id", "evt-b", "arguments"),
         "event_id"),
        (call(12, "report_event", dict(good, text={"deep": [{"k": 1}]}))
         .replace('{"k": 1}', '{"k": 1, "k": 2}'), "k"),  # an ignored field, nested
        (with_key_twice(call(13, "report_event", good), "name", "report_event", "params"),
         "name"),
    ]
    for n, (message, key) in enumerate(cases):
        before = Audit.select().where(Audit.code == "invalid_event").count()
        raw_agent.send(message.encode())
        answer = raw_agent.answer()
        assert answer["id"] == 11 + n, answer
        result = answer["result"]
        assert result["isError"] is True, result
        refusal = result["structuredContent"]
        assert (refusal["accepted"], refusal["code"], refusal["delivery"]) == (
            False, "invalid_event", None)
        assert refusal["reason"].startswith(f'message: an object names the key "{key}" twice')
        assert json.loads(result["content"][0]["text"]) == refusal
        assert Audit.select().where(Audit.code == "invalid_event").count() == before + 1
    assert Delivery.select().count() == 0
    accepted = raw_agent.ask(json.loads(call(14, "report_event", good)))["result"]
    assert accepted["isError"] is False and accepted["structuredContent"]["accepted"] is True
    assert [d.event_id for d in Delivery.select()] == ["evt-raw-good"]


def test_other_messages_naming_a_key_twice_are_refused(raw_agent):
    listing = with_key_twice(call(21, "list_tasks", {"status": "done"}), "status", "ready",
                             "arguments")
    raw_agent.send(listing.encode())
    answer = raw_agent.answer()
    assert answer["id"] == 21 and answer["result"]["isError"] is True
    refusal = answer["result"]["structuredContent"]
    assert refusal["error"] == "invalid_arguments" and '"status" twice' in refusal["reason"]
    raw_agent.send(b'{"jsonrpc": "2.0", "id": 22, "method": "tools/list", '
                   b'"params": {"cursor": "a", "cursor": "b"}}')
    answer = raw_agent.answer()
    assert answer["id"] == 22 and answer["error"]["code"] == -32600
    assert '"cursor" twice' in answer["error"]["message"]


def test_an_oversize_message_is_answered_without_being_held_whole(raw_agent):
    before = raw_agent.peak_kib()
    raw_agent.send(call(31, "show_task", {"key": "k" * 30_000_000}).encode())
    answer = raw_agent.answer()
    assert answer["id"] == 31 and answer["error"]["code"] == -32600, answer
    assert "message: longer than 262144 bytes" in answer["error"]["message"]
    assert raw_agent.peak_kib() - before < 20 * 1024  # far less than the message
    raw_agent.send(b"{" + b" " * 300_000 + b"}")  # just over, with no id to answer to
    answer = raw_agent.answer()
    assert answer["id"] is None and answer["error"]["code"] == -32600
    rows = raw_agent.ask(json.loads(call(32, "list_tasks", {})))
    assert rows["result"]["isError"] is False
