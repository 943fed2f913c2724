"""McpHost against real MCP stdio servers, through the SDK's client.

Servers: ``signoff host mcp`` on a reference host, and ``tests/plugins/
mcp_renamed.py``, a server whose tool and argument names differ from
signoff's. A stdio spawn takes over a second, so hosts are shared by the tests
of this module where that is safe (each test uses its own record ids and
keys). Writes are counted by SQLite triggers in ``host.db`` (the
``RecordingHost`` instrumentation), not by the code under test.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from helpers import PLUGINS, ROOT, child_env, signoff_cmd, wait_for
from signoff.errors import Blocked, ConfigError
from signoff.hosts.mcp import McpHost, McpToolError, tool_map

from testhosts import RecordingHost  # noqa: E402

# A host and its MCP server: nothing here reads or writes signoff's own state or queue.
pytestmark = pytest.mark.backend_independent

CHILD_ENV = {"PYTHONPATH": os.pathsep.join([str(PLUGINS), str(ROOT)])}
RENAMED = {"context": {"name": "whoami"},
           "get": {"name": "fetch_comment", "args": {"record_id": "comment_id"}},
           "read_material": {"name": "fetch_material", "args": {"document": "doc"}},
           "submit": {"name": "post_suggestion",
                      "args": {"key": "operation_key", "expected": "expect", "result": "body"}},
           "receipt": {"name": "find_suggestion", "args": {"key": "operation_key"}}}


def reference_mcp_host(home, **options):
    """A McpHost on ``signoff host mcp`` for ``home``."""
    return McpHost(home, command=sys.executable,
                   args=["-m", "signoff", "--home", str(home), "host", "mcp"],
                   env=CHILD_ENV, **options)


def renamed_mcp_host(home, tools=RENAMED, **options):
    return McpHost(home, command=sys.executable, args=["-m", "mcp_renamed", str(home)],
                   env=CHILD_ENV, tools=tools, **options)


def patiently(call, *args, attempts=8):
    """``call(*args)``, tried again while it times out: a stdio server that is
    starting on a busy machine may take longer than a short ``timeout_s``."""
    for _ in range(attempts - 1):
        try:
            return call(*args)
        except TimeoutError:
            continue
    return call(*args)


def result_for(record, draft="a draft"):
    return {"record_id": record["id"], "version": record["version"], "draft": draft,
            "sources": [record["source"]]}


@contextlib.contextmanager
def hosted(tmp_path_factory, name, make_host):
    """A home with an instrumented reference host, and the McpHost ``make_host(home)`` on it."""
    home = tmp_path_factory.mktemp(name)
    (home / "signoff.toml").write_text("", encoding="utf-8")
    ref = RecordingHost(home)
    ref.put_material("doc-demo", "2026-11-01")
    mcp_host = make_host(home)
    try:
        yield home, ref, mcp_host
    finally:
        mcp_host.close()
        ref.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A home with an instrumented reference host, and one McpHost on it."""
    with hosted(tmp_path_factory, "mcp-host", reference_mcp_host) as served:
        yield served


def fresh_record(ref, record_id):
    return ref.put_record(record_id, document="doc-demo", text="please add the date")


def test_every_contract_call(served):
    home, ref, host = served
    record = fresh_record(ref, "c-calls")
    assert host.context() == ref.context()
    assert host.get("c-calls") == record
    assert host.read_material("doc-demo") == ref.read_material("doc-demo")
    key = "k-calls"
    assert host.receipt(key) is None
    result = result_for(record)
    assert host.submit(key, record, result) is None
    assert host.receipt(key) == result
    assert ref.write_counts() .get(key) == 1


def test_retried_submit_is_idempotent_and_another_result_conflicts(served):
    _, ref, host = served
    record = fresh_record(ref, "c-idem")
    result = result_for(record)
    host.submit("k-idem", record, result)
    host.submit("k-idem", record, result)  # the same outcome again, no second write
    with pytest.raises(Blocked) as refused:
        host.submit("k-idem", record, dict(result, draft="another"))
    assert refused.value.code == "idempotency_conflict"
    assert ref.write_counts()["k-idem"] == 1


def test_permanent_codes_become_blocked(served):
    _, ref, host = served
    with pytest.raises(Blocked) as missing:
        host.get("no-such-record")
    assert missing.value.code == "missing"
    record = fresh_record(ref, "c-changed")
    ref.put_record("c-changed", version=2)
    with pytest.raises(Blocked) as changed:
        host.submit("k-changed", record, result_for(record))
    assert changed.value.code == "source_changed"
    assert "k-changed" not in ref.write_counts()


def test_grant_is_checked_before_the_idempotency_lookup(served):
    _, ref, host = served
    record = fresh_record(ref, "c-grant")
    result = result_for(record)
    host.submit("k-grant", record, result)
    ref.put_grant(actions=["read", "draft"])
    try:
        for call in (lambda: host.submit("k-grant", record, result),
                     lambda: host.receipt("k-grant")):
            with pytest.raises(Blocked) as refused:
                call()
            assert refused.value.code == "action"
    finally:
        ref.put_grant(actions=["read", "draft", "submit_review"])
    assert host.receipt("k-grant") == result


def test_transient_codes_raise_what_signoff_retries(served):
    _, ref, host = served
    record = fresh_record(ref, "c-transient")
    ref.set_fault("read-timeout", times=1)
    with pytest.raises(TimeoutError):
        host.get("c-transient")
    assert host.get("c-transient") == record
    ref.set_fault("lose-ack", times=1)
    with pytest.raises(TimeoutError):
        host.submit("k-lost-ack", record, result_for(record))
    assert host.receipt("k-lost-ack") == result_for(record)  # written; only the ack was lost


def test_bad_receipt_fault_works_through_the_server(served):
    _, ref, host = served
    record = fresh_record(ref, "c-bad-receipt")
    result = result_for(record)
    host.submit("k-bad-receipt", record, result)
    ref.set_fault("bad-receipt")
    try:
        assert host.receipt("k-bad-receipt")["draft"] == result["draft"] + " [altered]"
    finally:
        ref.clear_faults()
    assert host.receipt("k-bad-receipt") == result


def test_server_killed_right_after_a_write(served):
    _, ref, host = served
    record = fresh_record(ref, "c-crash")
    result = result_for(record)
    # Connected first: the tests of this module that start the session may run on
    # another pytest worker.
    patiently(host.receipt, "warm-up")
    starts = host.session.starts
    dead = host.session.process
    ref.set_fault("crash-after-write", times=1)
    with pytest.raises(ConnectionError):
        host.submit("k-crash", record, result)
    wait_for(lambda: dead.returncode is not None, what="the server to be reaped")
    # The next call starts the server again and reads the receipt under the same key
    # (a start that runs out of time on a busy machine is not counted as one).
    assert patiently(host.receipt, "k-crash") == result
    assert host.session.starts == starts + 1
    host.submit("k-crash", record, result)  # a retry with the same key writes nothing
    assert ref.write_counts()["k-crash"] == 1


def test_a_restart_with_the_same_key_returns_the_original_outcome(served):
    home, ref, host = served
    record = fresh_record(ref, "c-restart")
    result = result_for(record)
    host.submit("k-restart", record, result)
    again = reference_mcp_host(home)  # another process, as after a worker restart
    try:
        assert again.receipt("k-restart") == result
        again.submit("k-restart", record, result)
        with pytest.raises(Blocked):
            again.submit("k-restart", record, dict(result, draft="changed by a model"))
    finally:
        process = again.session.process
        again.close()
    assert ref.write_counts()["k-restart"] == 1
    assert process.returncode is not None  # close() stopped (and reaped) the server
    with pytest.raises(ConnectionError):
        again.context()


def test_the_task_key_is_the_only_idempotency_key(served):
    _, ref, host = served
    record = fresh_record(ref, "c-key")
    # A result or record that carries a key of its own changes nothing.
    result = dict(result_for(record), key="k-chosen-by-a-model", operation_key="x")
    host.submit("k-task", dict(record), result)
    assert host.receipt("k-task") == result
    assert host.receipt("k-chosen-by-a-model") is None
    assert set(ref.write_counts()) >= {"k-task"} and "k-chosen-by-a-model" not in ref.write_counts()


# -- a server with other names ------------------------------------------------

@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    with hosted(tmp_path_factory, "mcp-renamed", renamed_mcp_host) as renamed:
        yield renamed


def test_mapping_to_other_tool_and_argument_names(renamed):
    _, ref, host = renamed
    record = fresh_record(ref, "r-1")
    assert host.context() == ref.context()
    assert host.get("r-1") == record  # JSON text, no structured content
    assert host.read_material("doc-demo")["demo_date"] == "2026-11-01"
    assert host.receipt("op-1") is None  # no content at all
    host.submit("op-1", record, result_for(record))
    assert host.receipt("op-1") == result_for(record)
    with pytest.raises(Blocked) as conflict:  # isError with a JSON text body
        host.submit("op-1", record, result_for(record, "other"))
    assert conflict.value.code == "idempotency_conflict"
    assert ref.write_counts()["op-1"] == 1


def test_the_server_gets_only_the_safe_variables_and_env(renamed):
    from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS
    _, _, host = renamed
    answer = host.session.call("environment", {})
    names = set(json.loads(answer.content[0].text)["names"])
    assert "PYTHONPATH" in names  # from env
    assert "PYTEST_CURRENT_TEST" in os.environ and "PYTEST_CURRENT_TEST" not in names
    # Python itself may add LC_CTYPE (locale coercion) in the child.
    assert names - set(DEFAULT_INHERITED_ENV_VARS) - {"PYTHONPATH", "LC_CTYPE"} == set()


FAULTY = dict(RENAMED, context={"name": "whoami_slowly"}, get={
    "name": "broken_fetch", "args": {"record_id": "comment_id"}},
    read_material={"name": "busy", "args": {"document": "doc"}})


@pytest.fixture(scope="module")
def faulty(renamed):
    home, ref, _ = renamed
    # Long enough for a server to start on a busy machine (connecting counts against it).
    host = renamed_mcp_host(home, tools=FAULTY, timeout_s=15)
    patiently(host.receipt, "warm-up")  # connected: the tests' calls do not pay for the start
    yield home, host
    host.close()


def test_is_error_without_a_code_and_transient_codes(faulty):
    _, host = faulty
    patiently(host.receipt, "warm-up")
    with pytest.raises(McpToolError):
        host.get("r-1")
    with pytest.raises(ConnectionError):  # `unavailable` is transient by default
        host.read_material("doc-demo")
    assert host.receipt("never-written") is None  # the session is still usable


def test_a_hung_call_times_out_and_the_server_is_replaced(renamed):
    home, _, _ = renamed
    # A host of its own, with a shorter timeout: the hung call waits all of it, and a
    # start that runs out of it on a busy machine is tried again (``patiently``).
    host = renamed_mcp_host(home, tools=FAULTY, timeout_s=5)
    try:
        patiently(host.receipt, "warm-up")
        starts, hung = host.session.starts, host.session.process
        with pytest.raises(TimeoutError):
            host.context()
        wait_for(lambda: hung.returncode is not None, what="the hung server to be killed")
        assert patiently(host.receipt, "after-timeout") is None
        # Started again (more than once if a start on a busy machine ran out of time).
        assert host.session.starts > starts and host.session.process.pid != hung.pid
    finally:
        host.close()


def test_server_killed_mid_call(faulty):
    home, host = faulty
    patiently(host.receipt, "warm-up")
    in_call = home / "in-call"
    in_call.unlink(missing_ok=True)
    process = host.session.process
    outcome = {}

    def call():
        try:
            host.context()
        except Exception as exc:
            outcome["error"] = exc

    caller = threading.Thread(target=call)
    caller.start()
    wait_for(in_call.exists, what="the call to reach the server")
    os.kill(process.pid, signal.SIGKILL)
    caller.join(10)
    assert isinstance(outcome.get("error"), ConnectionError)
    assert patiently(host.receipt, "after-kill") is None  # started again


# -- transport failures and configuration ------------------------------------

def test_transport_failures_are_transient(tmp_path):
    host = McpHost(tmp_path, command=sys.executable, args=["-c", "pass"], timeout_s=5)
    try:
        with pytest.raises(ConnectionError):  # the server exits before the handshake
            host.context()
    finally:
        host.close()
    host = McpHost(tmp_path, command=sys.executable, args=["-c", "import time; time.sleep(60)"],
                   timeout_s=1)
    try:
        with pytest.raises(TimeoutError):  # connecting counts against timeout_s
            host.context()
        wait_for(lambda: host.session.process is None or host.session.process.returncode
                 is not None, what="the server that never answered to be killed")
    finally:
        host.close()


@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of command and url"),
    ({"command": "x", "url": "http://127.0.0.1:1/mcp"}, "exactly one of command and url"),
    ({"command": "/nonexistent/server"}, "is not an executable"),
    ({"command": sys.executable, "args": "-m x"}, "args must be a list"),
    ({"command": sys.executable, "env": {"A": 1}}, "env must be a table"),
    ({"command": sys.executable, "timeout_s": 0}, "timeout_s"),
    ({"command": "x", "tools": {"approve": {"name": "y"}}}, "unknown call 'approve'"),
    ({"command": "x", "tools": {"get": {"args": {"id": "y"}}}}, "get has no argument 'id'"),
    ({"command": "x", "tools": {"submit": {"args": {"result": "key"}}}}, "share a name"),
])
def test_bad_options_are_one_line_config_errors(tmp_path, options, message):
    with pytest.raises(ConfigError) as bad:
        McpHost(tmp_path, **options)
    assert bad.value.code == "bad_config" and message in bad.value.message


def test_default_tool_names_are_signoffs():
    mapping = tool_map(None)
    assert {op: name for op, (name, _) in mapping.items()} == {
        "context": "get_context", "get": "get_record", "read_material": "read_material",
        "submit": "submit_result", "receipt": "get_receipt"}
    assert mapping["submit"][1] == {"key": "key", "expected": "expected", "result": "result"}


# -- streamable HTTP -------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http_server(home, port):
    proc = subprocess.Popen([sys.executable, "-m", "mcp_renamed", str(home), str(port)],
                            env=child_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def listening():
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0
    wait_for(listening, timeout=60, what="the HTTP server to listen")
    return proc


@pytest.mark.slow
def test_streamable_http_and_a_server_that_went_away(renamed):
    # Over HTTP a server that went away mid-session shows as a timeout.
    home, ref, _ = renamed
    record = fresh_record(ref, "h-1")
    port = free_port()
    server = start_http_server(home, port)
    host = McpHost(home, url=f"http://127.0.0.1:{port}/mcp", tools=RENAMED, timeout_s=4)
    try:
        assert patiently(host.get, "h-1") == record
        host.submit("op-http", record, result_for(record))
        server.kill()
        server.wait(10)
        with pytest.raises((ConnectionError, TimeoutError)):
            host.receipt("op-http")
        server = start_http_server(home, port)
        assert patiently(host.receipt, "op-http") == result_for(record)
        assert host.session.starts >= 2
    finally:
        host.close()
        server.kill()
        server.wait(10)
    assert ref.write_counts()["op-http"] == 1


def test_bind_on_a_host_that_cannot_be_reached_is_host_unavailable_naming_it(tmp_path):
    from signoff.config import DEFAULT_TOML
    home, url = tmp_path / "home", f"http://127.0.0.1:{free_port()}/mcp"  # nobody listens
    home.mkdir()
    (home / "signoff.toml").write_text(DEFAULT_TOML.replace(
        '"signoff.hosts.reference:ReferenceHost"', '"signoff.hosts.mcp:McpHost"').replace(
        "[host.options]\n", f'[host.options]\nurl = "{url}"\ntimeout_s = 5\n', 1),
        encoding="utf-8")
    assert subprocess.run(signoff_cmd(home, "init"), env=child_env(),
                          capture_output=True, timeout=120).returncode == 0
    done = subprocess.run(signoff_cmd(home, "monitor", "bind", "--document", "doc-demo", "--json"),
                          env=child_env(), capture_output=True, timeout=120)
    answer = json.loads(done.stdout)
    assert done.returncode == 1 and answer["error"] == "host_unavailable", answer
    assert url in answer["message"], answer
