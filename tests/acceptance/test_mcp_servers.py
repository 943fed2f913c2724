"""``signoff host mcp`` and ``signoff mcp`` driven by the SDK's client over stdio.

One server process of each kind serves every test of this module (a spawn
takes over a second); each test uses its own ids and keys.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from helpers import ROOT, child_env, signoff_cmd
from signoff.app import Signoff
from signoff.hosts.reference import ReferenceHost
from signoff.hosts.mcp.session import McpCallError, McpSession, stdio_params

CHILD_ENV = {"PYTHONPATH": str(ROOT)}
HOST_TOOLS = {"get_context", "get_record", "read_material", "submit_result", "get_receipt",
              "get_records", "get_receipts", "submit_results"}
AGENT_TOOLS = {"report_event", "list_tasks", "show_task"}


def serve(home, *args):
    return McpSession(stdio_params(sys.executable, ["-m", "signoff", "--home", str(home), *args],
                                   CHILD_ENV), timeout_s=20)


def body(result):
    """What a tool answered: the structured content, unwrapped."""
    content = result.structured_content
    assert content is not None, result
    return content["result"] if set(content) == {"result"} and not result.is_error else content


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    path = tmp_path_factory.mktemp("mcp-servers") / "home"
    rt = Signoff.init(path)
    ref = rt.host()
    ref.put_record("comment-1", document="doc-demo", text="please add the date")
    ref.put_material("doc-demo", "2026-11-01")
    rt.bind("doc-demo", window_s=3600)
    rt.bind("doc-demo", "other", window_s=3600)
    yield path, rt
    rt.close()


@pytest.fixture(scope="module")
def host_server(home):
    session = serve(home[0], "host", "mcp")
    yield session
    session.close()


@pytest.fixture(scope="module")
def agent_server(home):
    session = serve(home[0], "mcp", "--monitor", "default")
    yield session
    session.close()


# -- signoff host mcp ----------------------------------------------------------

def test_host_server_lists_the_eight_tools(host_server):
    tools = {t.name: t for t in host_server.tools()}
    assert set(tools) == HOST_TOOLS
    assert tools["submit_result"].input_schema["required"] == ["key", "expected", "result"]
    assert tools["submit_results"].input_schema["properties"]["items"]["maxItems"] == 1000


@pytest.mark.parametrize("tool, arguments, reason", [
    ("get_record", {"record_id": "comment-1", "tenant": "other"}, "tenant: not an argument"),
    ("get_record", {}, "record_id: missing"),
    ("get_record", {"record_id": 5}, "record_id: wrong type"),
    ("get_context", {"as_user": "admin"}, "as_user: not an argument"),
    ("get_receipt", {"key": "bad key with spaces"}, "key: 1-128 characters"),
    ("submit_result", {"key": "k-1", "expected": "{}", "result": {}}, "expected: wrong type"),
    ("get_records", {"record_ids": ["comment-1", 5]}, "record_ids: wrong type"),
    ("get_receipts", {"keys": ["k-1"] * 1001}, "keys: more than 1000 items"),
    ("submit_results", {"items": [{"key": "k-1"}]}, "items: each is {key, expected, result}"),
])
def test_host_server_refuses_arguments_that_do_not_fit(host_server, home, tool, arguments, reason):
    result = host_server.call(tool, arguments)
    assert result.is_error
    answer = body(result)
    assert answer["ok"] is False and answer["error"] == "invalid_arguments"
    assert answer["reason"].startswith(reason)
    assert json.loads(result.content[0].text) == answer
    ref = ReferenceHost(home[0])
    assert "k-1" not in {r["key"] for r in ref.results()}
    ref.close()


def test_host_server_business_errors_and_idempotent_retry(host_server, home):
    missing = host_server.call("get_record", {"record_id": "nope"})
    assert missing.is_error and body(missing) == {"ok": False, "error": "missing"}
    record = body(host_server.call("get_record", {"record_id": "comment-1"}))
    result = {"record_id": "comment-1", "version": 1, "draft": "d", "sources": ["s"]}
    args = {"key": "k-server", "expected": record, "result": result}
    first = host_server.call("submit_result", args)
    again = host_server.call("submit_result", args)
    assert not first.is_error and body(first) == body(again) == {"ok": True, "key": "k-server"}
    conflict = host_server.call("submit_result", dict(args, result=dict(result, draft="x")))
    assert conflict.is_error and body(conflict)["error"] == "idempotency_conflict"
    assert body(host_server.call("get_receipt", {"key": "k-server"})) == result
    assert body(host_server.call("get_receipt", {"key": "k-none"})) is None


# -- signoff mcp (for agents) --------------------------------------------------

def event(event_id, **changes):
    value = {"event_id": event_id, "name": "comment.created", "document": "doc-demo",
             "record_id": "comment-1", "occurred": int(time.time())}
    value.update(changes)
    return value


def test_agent_server_has_no_approval_tools(agent_server):
    names = {t.name for t in agent_server.tools()}
    assert names == AGENT_TOOLS
    assert not any(word in name for name in names
                   for word in ("approve", "reject", "cancel", "grant", "retry"))


def test_report_event_accepts_and_never_stores_text(agent_server, home):
    path, _ = home
    secret = "SECRET-AGENT-TEXT-8c1f"
    result = agent_server.call("report_event", event("evt-agent-1", text=secret))
    answer = body(result)
    assert not result.is_error
    assert answer["accepted"] is True and answer["event_id"] == "evt-agent-1"
    assert isinstance(answer["delivery"], int) and answer["code"] is None
    stored = b"".join(p.read_bytes() for p in path.iterdir() if p.is_file())
    assert secret.encode() not in stored


@pytest.mark.parametrize("changes, reason", [
    ({"occurred": "1700000000"}, "occurred: must be an integer"),
    ({"occurred": True}, "occurred: must be an integer"),
    ({"record_id": ""}, "record_id: must be 1-128"),
    ({"name": "a\u0007b"}, "name: contains the control character"),
    ({"text": "x" * 70_000}, "event: longer than 65536 bytes"),
])
def test_report_event_validates_as_enqueue_does(agent_server, home, changes, reason):
    _, rt = home
    before = len([a for a in rt.audit() if a["code"] == "invalid_event"])
    result = agent_server.call("report_event", event("evt-bad", **changes))
    assert result.is_error  # so that a model sees the refusal
    answer = body(result)
    assert answer["accepted"] is False and answer["code"] == "invalid_event"
    assert answer["reason"].startswith(reason) and answer["delivery"] is None
    assert "line:" not in answer["reason"] and "per line" not in answer["reason"]  # none in MCP
    assert json.loads(result.content[0].text) == answer
    assert len([a for a in rt.audit() if a["code"] == "invalid_event"]) == before + 1


def test_report_event_missing_field_and_extra_argument(agent_server):
    partial = event("evt-partial")
    del partial["record_id"]
    result = agent_server.call("report_event", partial)
    assert result.is_error and body(result)["code"] == "invalid_event"
    assert body(result)["reason"].startswith("record_id: missing")
    extra = agent_server.call("report_event", dict(event("evt-extra"), approve=True))
    assert extra.is_error and body(extra)["error"] == "invalid_arguments"


def test_list_and_show_tasks_of_the_monitor_only(agent_server, home):
    _, rt = home
    body(agent_server.call("report_event", event("evt-agent-2")))
    rt.enqueue_events([event("evt-other")], "other")
    rt.run_until_idle()
    rows = body(agent_server.call("list_tasks", {}))
    assert rows and {r["monitor"] for r in rows} == {"default"}
    key = rows[0]["key"]
    shown = body(agent_server.call("show_task", {"key": key}))
    assert shown["status"] == "ready" and shown["key"] == key
    other = [t["key"] for t in rt.tasks() if t["monitor"] == "other"]
    refused = agent_server.call("show_task", {"key": other[0]})
    assert refused.is_error and body(refused)["error"] == "unknown_task"
    assert body(agent_server.call("show_task", {"key": "nope"}))["error"] == "unknown_task"
    assert body(agent_server.call("list_tasks", {"status": "done"})) == []


@pytest.mark.parametrize("tool, arguments, reason", [
    ("list_tasks", {"status": "bogus"}, "status: one of approved, blocked,"),
    ("list_tasks", {"limit": 0}, "limit: must be 1-1000"),
    ("show_task", {"key": "k" * 129}, "key: 1-128 characters"),
    ("show_task", {"key": "a b"}, "key: 1-128 characters"),
])
def test_agent_tools_refuse_arguments_out_of_bounds(agent_server, tool, arguments, reason):
    result = agent_server.call(tool, arguments)
    assert result.is_error
    answer = body(result)
    assert answer["error"] == "invalid_arguments" and answer["reason"].startswith(reason)


def test_unknown_monitor_is_refused_at_start(home):
    path, _ = home
    done = subprocess.run(signoff_cmd(path, "mcp", "--monitor", "nope"), env=child_env(),
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and done.stdout == b""
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown_monitor:")


def test_host_mcp_without_a_home_is_refused(tmp_path):
    done = subprocess.run(signoff_cmd(tmp_path / "none", "host", "mcp", "--json"),
                          env=child_env(), capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and json.loads(done.stdout)["error"] == "no_home"
    assert not (tmp_path / "none").exists()
    assert os.listdir(tmp_path) == []


def test_an_oversize_call_through_the_client_is_refused_at_once(agent_server):
    started = time.monotonic()
    with pytest.raises(McpCallError, match="-32600"):
        agent_server.call("show_task", {"key": "k" * 30_000_000})
    assert time.monotonic() - started < agent_server.timeout_s  # answered, not timed out
    assert isinstance(body(agent_server.call("list_tasks", {})), list)
