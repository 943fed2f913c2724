"""McpHost's batch calls against real MCP stdio servers, through the SDK's client.

Servers: ``signoff host mcp`` (its batch tools ``get_records``, ``get_receipts``,
``submit_results``) and ``tests/plugins/mcp_renamed.py``, whose batch tools
have other names, log their arguments and can be made to answer a canned
(wrong) shape. MCP calls are counted through the host's session; writes by
SQLite triggers in ``host.db`` (``RecordingHost``).
"""

import json
import sys
from collections import Counter

import pytest

from helpers import read_here, write_mcp_host
from signoff.app import Signoff
from signoff.errors import Blocked
from signoff.hosts.mcp import BATCH_TOOLS, McpToolError, batch_tools_toml
from signoff.models import Task

from test_mcp_host import (CHILD_ENV, RENAMED, fresh_record, hosted, reference_mcp_host,
                           renamed_mcp_host, result_for)
from testhosts import RecordingHost  # noqa: E402

EVENTS = 20
RENAMED_BATCHES = dict(RENAMED, get_many={"name": "fetch_comments",
                                          "args": {"record_ids": "comment_ids"}},
                       receipts={"name": "find_suggestions", "args": {"keys": "operation_keys"}},
                       submit_many={"name": "post_suggestions", "args": {"items": "suggestions"}})
SERVER_BATCHES = {op: {"name": name} for op, name in BATCH_TOOLS.items()}


def counting(host):
    """Count ``host``'s MCP tool calls by name, as its session makes them."""
    calls, call = Counter(), host.session.call

    def counted(name, arguments):
        calls[name] += 1
        return call(name, arguments)
    host.session.call = counted
    return calls


def batch_calls(home):
    path = home / "batch-calls.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] \
        if path.exists() else []


# -- McpHost on a server with its own names --------------------------------------

@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    with hosted(tmp_path_factory, "mcp-batches", lambda home: renamed_mcp_host(
            home, tools=RENAMED_BATCHES, timeout_s=30)) as renamed:
        yield renamed


def test_batch_calls_go_out_renamed_with_the_task_keys_and_items_as_objects(renamed):
    home, ref, host = renamed
    one, two = fresh_record(ref, "b-1"), fresh_record(ref, "b-2")
    assert host.get_many(["b-1", "b-2", "b-none"]) == {"b-1": one, "b-2": two}
    changed = dict(two, text="not what is stored")
    # A result that carries a key of its own changes nothing: the task key is sent.
    result = dict(result_for(one), key="k-chosen-by-a-model")
    assert host.submit_many([("bk-1", one, result), ("bk-2", changed, result_for(two))]) == {
        "bk-2": "source_changed"}
    assert host.receipts(["bk-1", "bk-2"]) == {"bk-1": result}
    assert batch_calls(home)[-3:] == [
        {"tool": "fetch_comments", "arguments": {"comment_ids": ["b-1", "b-2", "b-none"]}},
        {"tool": "post_suggestions", "arguments": {"suggestions": [
            {"key": "bk-1", "expected": one, "result": result},
            {"key": "bk-2", "expected": changed, "result": result_for(two)}]}},
        {"tool": "find_suggestions", "arguments": {"operation_keys": ["bk-1", "bk-2"]}}]
    assert ref.write_counts() == {"bk-1": 1}


WRONG = [
    ("get_many", ["b-1"], [{"id": "b-1"}]),  # a list, not a table
    ("get_many", ["b-1"], {"b-1": {"id": "b-1"}, "b-other": {"id": "b-other"}}),  # not asked
    ("get_many", ["b-1"], {"b-1": "a record"}),
    ("get_many", ["b-1"], None),
    ("receipts", ["k-1"], {"k-1": None}),  # a key without a receipt is left out
    ("receipts", ["k-1"], {"k-2": {"draft": "d"}}),
    ("submit_many", [("k-1", {"id": "b-1"}, {"draft": "d"})], {"k-1": "Not A Code"}),
    ("submit_many", [("k-1", {"id": "b-1"}, {"draft": "d"})], {"k-1": 409}),
    ("submit_many", [("k-1", {"id": "b-1"}, {"draft": "d"})], {"k-2": "source_changed"}),
    ("submit_many", [("k-1", {"id": "b-1"}, {"draft": "d"})], ["k-1"]),
]
TOOLS = {op: entry["name"] for op, entry in RENAMED_BATCHES.items()}


@pytest.mark.parametrize("op, asked, answer", WRONG)
def test_an_answer_of_the_wrong_shape_is_a_tool_error(renamed, op, asked, answer):
    home, _, host = renamed
    canned = home / f"canned-{TOOLS[op]}.json"
    canned.write_text(json.dumps(answer), encoding="utf-8")
    try:
        with pytest.raises(McpToolError):
            getattr(host, op)(asked)
    finally:
        canned.unlink()


@pytest.mark.parametrize("code, error", [("unavailable", ConnectionError),
                                         ("timeout", TimeoutError)])
def test_an_item_refused_with_a_transient_code_fails_the_whole_batch_transiently(
        renamed, code, error):
    home, _, host = renamed
    canned = home / f"canned-{TOOLS['submit_many']}.json"
    canned.write_text(json.dumps({"k-1": code}), encoding="utf-8")
    try:
        with pytest.raises(error):
            host.submit_many([("k-1", {"id": "b-1"}, {"draft": "d"}),
                              ("k-2", {"id": "b-2"}, {"draft": "d"})])
    finally:
        canned.unlink()


# -- the batch tools of `signoff host mcp` ----------------------------------------

@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with hosted(tmp_path_factory, "mcp-host-batches", lambda home: reference_mcp_host(
            home, tools=SERVER_BATCHES, timeout_s=30)) as served:
        yield served


def refusal(host, tool, arguments):
    """The ``isError`` body of a call, or the answer when it is no error."""
    result = host.session.call(tool, arguments)
    return result.structured_content if result.is_error else ("answer", result.structured_content)


def item(key, record, result=None):
    return {"key": key, "expected": record, "result": result or result_for(record)}


def test_the_batch_tools_take_their_arguments_strictly(served):
    _, ref, host = served
    record = fresh_record(ref, "s-1")
    invalid = [
        ("get_records", {}), ("get_records", {"record_ids": ["s-1"], "extra": 1}),
        ("get_records", {"record_ids": "s-1"}), ("get_records", {"record_ids": ["s-1", 1]}),
        ("get_records", {"record_ids": ["s-1"] * 1001}),
        ("get_receipts", {"keys": ["sk-1"] * 1001}), ("get_receipts", {"keys": ["no spaces"]}),
        ("get_receipts", {"keys": [None]}),
        ("submit_results", {"items": [item("sk-1", record)] * 1001}),
        ("submit_results", {"items": [dict(item("sk-1", record), extra=1)]}),
        ("submit_results", {"items": [{"key": "sk-1", "result": result_for(record)}]}),
        ("submit_results", {"items": [dict(item("sk-1", record), key=7)]}),
        ("submit_results", {"items": ["sk-1"]}),
    ]
    for tool, arguments in invalid:
        body = refusal(host, tool, arguments)
        assert body["ok"] is False and body["error"] == "invalid_arguments", (tool, arguments, body)
    # An item submit_result would refuse is refused alone; the others are written.
    elsewhere = dict(record, document="doc-other")
    assert refusal(host, "submit_results", {"items": [
        item("sk-1", record), item("bad key", record), dict(item("sk-3", record), result=[]),
        item("sk-4", elsewhere, result_for(record))]}) == ("answer", {
            "bad key": "invalid_arguments", "sk-3": "invalid_arguments", "sk-4": "access"})
    assert ref.write_counts() == {"sk-1": 1}


def test_a_table_that_names_result_is_not_taken_for_the_sdks_wrapper(served):
    _, ref, host = served
    record = fresh_record(ref, "result")
    assert host.get_many(["result", "r-none"]) == {"result": record}


def test_the_grant_is_checked_before_any_idempotency_lookup_of_a_batch(served):
    _, ref, host = served
    record = fresh_record(ref, "g-1")
    assert host.submit_many([("gk-1", record, result_for(record))]) == {}
    ref.put_grant(actions=["read", "draft"])
    try:
        for call in (lambda: host.submit_many([("gk-1", record, result_for(record))]),
                     lambda: host.receipts(["gk-1"])):
            with pytest.raises(Blocked) as refused:
                call()
            assert refused.value.code == "action"
    finally:
        ref.put_grant(actions=["read", "draft", "submit_review"])
    assert host.receipts(["gk-1", "gk-none"]) == {"gk-1": result_for(record)}
    assert ref.write_counts()["gk-1"] == 1


# -- the engine over MCP -----------------------------------------------------------

def mcp_home(home, clock, command, args, tools_toml):
    """An initialised home whose host is McpHost, with ``EVENTS`` open records."""
    write_mcp_host(home, command, args, CHILD_ENV["PYTHONPATH"], tools_toml)
    rt = read_here(Signoff.init(home, clock=clock))
    ref = RecordingHost(home)
    for n in range(EVENTS):
        fresh_record(ref, f"comment-{n}")
    ref.put_material("doc-demo", "2026-11-01")
    rt.bind("doc-demo")
    return rt, ref


def tools_toml(tools):
    """``[host.options.tools.*]`` tables for a ``tools`` mapping."""
    return "".join(f"[host.options.tools.{op}]\nname = {json.dumps(entry['name'])}\n" + "".join(
        f"args.{k} = {json.dumps(v)}\n" for k, v in entry.get("args", {}).items())
        for op, entry in tools.items())


def reference_home(home, clock, tools_toml):
    return mcp_home(home, clock, sys.executable,
                    ["-m", "signoff", "--home", str(home), "host", "mcp"], tools_toml)


def events(rt):
    rt.enqueue_events([{"event_id": f"evt-{n}", "name": "comment.created",
                        "document": "doc-demo", "record_id": f"comment-{n}",
                        "occurred": int(rt.clock.now())} for n in range(EVENTS)])


def approve_all(rt):
    answers = rt.approve_many([(t.key, t.digest) for t in Task.select()])
    assert all(isinstance(a, dict) for a in answers), answers


def pipeline(rt):
    """Ingest, approve and submit every event; the MCP tool calls of each phase."""
    calls = counting(rt.host())
    phases = {}
    for phase, run in (("ingest", lambda: (events(rt), rt.run_until_idle())),
                       ("approve", lambda: approve_all(rt)), ("submit", rt.run_until_idle)):
        run()
        phases[phase] = Counter(calls)
        calls.clear()
    return phases


def test_the_pipeline_over_mcp_makes_at_most_three_calls_per_event(home, clock):
    rt, ref = reference_home(home, clock, batch_tools_toml())
    try:
        phases = pipeline(rt)
        assert [t.status for t in Task.select()] == ["done"] * EVENTS
    finally:
        rt.close()
    assert sum(sum(c.values()) for c in phases.values()) <= 3 * EVENTS
    # One batch: read, written and confirmed in one call each.
    without_context = {p: +Counter({k: v for k, v in c.items() if k != "get_context"})
                       for p, c in phases.items()}
    assert without_context == {"ingest": Counter(get_records=1, read_material=1),
                               "approve": Counter(get_records=1),
                               "submit": Counter(submit_results=1, get_receipts=2)}
    assert sorted(ref.write_counts().values()) == [1] * EVENTS
    ref.close()


def test_a_host_without_batch_tools_mapped_is_asked_row_by_row(home, clock):
    rt, ref = reference_home(home, clock, "")
    try:
        assert not any(hasattr(rt.host(), op) for op in BATCH_TOOLS)
        phases = pipeline(rt)
        assert [t.status for t in Task.select()] == ["done"] * EVENTS
    finally:
        rt.close()
    assert not set().union(*phases.values()) & set(BATCH_TOOLS.values())
    assert phases["submit"]["submit_result"] == EVENTS
    assert phases["submit"]["get_receipt"] == 2 * EVENTS  # before and after each write
    assert sorted(ref.write_counts().values()) == [1] * EVENTS
    ref.close()


def test_a_wrong_shaped_batch_answer_is_a_failed_attempt_that_changes_nothing(home, clock):
    rt, ref = mcp_home(home, clock, sys.executable, ["-m", "mcp_renamed", str(home)],
                       tools_toml(RENAMED_BATCHES))
    planted = dict(ref.get("comment-1"), text="planted by a confused server")
    (home / "canned-fetch_comments.json").write_text(json.dumps(
        {"comment-1": planted, "not-asked": planted}), encoding="utf-8")
    try:
        events(rt)
        rt.run_until_idle()
        for _ in range(5):  # the row whose read failed is tried again, on its own
            clock.advance(10)  # past its retry delay, within the monitor's window
            rt.run_until_idle()
        tasks = list(Task.select())
        assert len(tasks) == EVENTS and {t.status for t in tasks} == {"ready"}
        assert all("planted" not in json.dumps(t.result) for t in tasks)
        (home / "canned-fetch_comments.json").unlink()
        approve_all(rt)
        (home / "canned-post_suggestions.json").write_text(
            json.dumps({"not-asked": "source_changed"}), encoding="utf-8")
        rt.run_until_idle()
        assert {(t.status, t.code) for t in Task.select()} == {("uncertain", "McpToolError")}
        assert ref.write_counts() == {}
        (home / "canned-post_suggestions.json").unlink()
        clock.advance(3600)
        rt.run_until_idle()
        assert {t.status for t in Task.select()} == {"done"}
    finally:
        rt.close()
    assert sorted(ref.write_counts().values()) == [1] * EVENTS
    ref.close()


def test_a_batch_windows_records_are_submitted_as_a_list_by_either_tool(served):
    _, ref, host = served
    first, second = fresh_record(ref, "w-1"), fresh_record(ref, "w-2")
    result = result_for(first)
    host.submit("wk-1", [first, second], result)
    assert host.submit_many([("wk-2", [first, second], result),
                             ("wk-3", [first, dict(second, text="changed")], result),
                             ("wk-4", [first, dict(second, document="doc-other")], result),
                             ("wk-5", [], result), ("wk-6", [first, "w-2"], result)]) == {
        "wk-3": "source_changed", "wk-4": "access", "wk-5": "invalid_arguments",
        "wk-6": "invalid_arguments"}
    assert host.receipts(["wk-1", "wk-2", "wk-3"]) == {"wk-1": result, "wk-2": result}
    for expected, code in (([first, dict(second, document="doc-other")], "access"), ([], None)):
        with pytest.raises(Blocked if code else McpToolError) as refused:
            host.submit("wk-7", expected, result)
        assert code is None or refused.value.code == code
    written = {k: n for k, n in ref.write_counts().items() if k.startswith("wk-")}
    assert written == {"wk-1": 1, "wk-2": 1}  # the server is the module's
