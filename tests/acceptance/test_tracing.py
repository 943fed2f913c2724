"""OpenTelemetry traces across real processes, exported over OTLP/HTTP to a receiver here.

The receiver is a small HTTP server taking ``POST /v1/traces`` and decoding the
protobuf ``ExportTraceServiceRequest`` the way a collector does.
"""

import http.server
import json
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from helpers import LOCAL_TLS, child_env, make_event, signoff_cmd, wait_for
from servekit import SECRET_TEXT, Server, event, make_home, signed
from signoff import tracing

ALLOWED = set(tracing.ATTRIBUTES.values())
APPROVER = "Ada Approver"


class Receiver:
    """An OTLP/HTTP trace receiver on a free port; ``spans`` holds what arrived."""

    def __init__(self):
        self.spans = []
        received = self.spans

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["content-length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        received.extend(_decoded(s) for s in scope.spans)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def env(self, **extra):
        # Export at once rather than every 5 s: the test waits on what arrived.
        return child_env(OTEL_EXPORTER_OTLP_ENDPOINT=self.url, OTEL_BSP_SCHEDULE_DELAY="50",
                         **extra)

    def named(self, name):
        return [s for s in self.spans if s["name"] == name]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _decoded(span):
    attributes = {}
    for kv in span.attributes:
        value = kv.value
        attributes[kv.key] = getattr(value, value.WhichOneof("value"))
    return {"name": span.name, "trace": span.trace_id.hex(), "id": span.span_id.hex(),
            "parent": span.parent_span_id.hex() or None, "attributes": attributes,
            "links": [(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
            "error": span.status.code == 2}


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def run(home, env, *args, stdin=None):
    done = subprocess.run(signoff_cmd(home, *args), env=env, input=stdin, capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return done


def only(spans, what):
    assert len(spans) == 1, (what, spans)
    return spans[0]


def test_one_trace_from_enqueue_to_receipt_across_processes(home, receiver):
    rt = make_home(home)
    env = receiver.env()
    line = json.dumps(event()).encode() + b"\n"
    run(home, env, "enqueue", "-", stdin=line)
    run(home, env, "worker", "--drain")
    key = rt.tasks()[0]["key"]
    run(home, env, "approve", key, "--digest", rt.task(key)["digest"], "--by", APPROVER)
    run(home, env, "worker", "--drain")
    assert rt.task(key)["status"] == "done"
    names = ["signoff.enqueue", "signoff.ingest", "signoff.host.get", "signoff.host.read_material",
             "signoff.draft", "signoff.approve", "signoff.submit", "signoff.receipt",
             "signoff.host.submit", "signoff.host.receipt"]
    wait_for(lambda: all(receiver.named(n) for n in names), what="every span exported")

    enqueue = only(receiver.named("signoff.enqueue"), "enqueue")
    trace = enqueue["trace"]
    spans = [s for s in receiver.spans if s["trace"] == trace]
    by_name = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    assert set(names) <= set(by_name), sorted(by_name)
    ingest = only(by_name["signoff.ingest"], "ingest")
    approve = only(by_name["signoff.approve"], "approve")
    submit = only(by_name["signoff.submit"], "submit")
    # The tree: enqueue -> ingest -> (host.get, host.read_material, draft, approve, submit);
    # submit -> receipt (before the write, and its read-back) and host.submit.
    assert enqueue["parent"] is None
    assert ingest["parent"] == enqueue["id"]
    for child in ("signoff.host.read_material", "signoff.draft"):
        assert only(by_name[child], child)["parent"] == ingest["id"]
    # host.get: the read-back of ingest, and approve's re-read of the source.
    assert sorted(h["parent"] for h in by_name["signoff.host.get"]) == sorted(
        [ingest["id"], approve["id"]])
    assert approve["parent"] == ingest["id"] and submit["parent"] == ingest["id"]
    receipts = by_name["signoff.receipt"]
    assert len(receipts) == 2 and {r["parent"] for r in receipts} == {submit["id"]}
    assert sorted(r["attributes"]["signoff.status"] for r in receipts) == ["found", "none"]
    assert only(by_name["signoff.host.submit"], "host.submit")["parent"] == submit["id"]
    assert {h["parent"] for h in by_name["signoff.host.receipt"]} == {r["id"] for r in receipts}
    # What the spans say: ids, statuses and codes.
    assert enqueue["attributes"]["signoff.event_id"] == "evt-1"
    delivery = rt.events()[0]["delivery"]
    assert ingest["attributes"]["signoff.delivery_id"] == delivery
    assert ingest["attributes"]["signoff.code"] == "ready"
    assert ingest["attributes"]["signoff.task_key"] == key
    assert approve["attributes"]["signoff.status"] == "approved"
    assert submit["attributes"]["signoff.code"] == "done"
    # Never record text, drafts, material, names of people: only the allowed attributes.
    result = rt.task(key)["result"]
    forbidden = ["please add the demo date", SECRET_TEXT, result["draft"], "2026-11-01",
                 APPROVER]
    for s in receiver.spans:
        assert set(s["attributes"]) <= ALLOWED, s
        for value in s["attributes"].values():
            assert not any(text in str(value) for text in forbidden), s
    rt.close()


def test_a_webhook_continues_the_senders_trace(home, receiver):
    rt = make_home(home)
    secret = rt.add_secret("default")["secret"]
    server = Server(home, env=receiver.env())
    sender_trace, sender_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    try:
        body = json.dumps(event())
        headers = dict(signed(secret, body, "msg-traced"),
                       traceparent=f"00-{sender_trace}-{sender_span}-01")
        answer = httpx.post(server.url + "/hooks/default", verify=LOCAL_TLS, content=body,
                            headers=headers, timeout=30)
        assert answer.status_code == 202, answer.text
    finally:
        assert server.stop() == 0, server.stderr()
    run(home, receiver.env(), "worker", "--drain")
    wait_for(lambda: receiver.named("signoff.webhook") and receiver.named("signoff.ingest"),
             what="the webhook and ingest spans")
    webhook = only(receiver.named("signoff.webhook"), "webhook")
    assert (webhook["trace"], webhook["parent"]) == (sender_trace, sender_span)
    assert webhook["attributes"]["http.response.status_code"] == 202
    assert webhook["attributes"]["signoff.delivery_id"] == answer.json()["delivery"]
    ingest = only(receiver.named("signoff.ingest"), "ingest")
    assert (ingest["trace"], ingest["parent"]) == (sender_trace, webhook["id"])
    rt.close()


@pytest.fixture
def in_memory():
    """Tracing on in this process, its spans kept in memory (``get_finished_spans``)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.start(provider)
    try:
        yield exporter
    finally:
        tracing.stop()


def test_a_batch_task_links_the_traces_of_its_events(rt, clock, in_memory):
    rt.bind("doc-demo", "batched", batch_window_s=10)
    rt.host().put_record("comment-2", document="doc-demo")
    events = [{"event_id": f"evt-{n}", "name": "comment.created", "document": "doc-demo",
               "record_id": f"comment-{n}", "occurred": int(clock.now())} for n in (1, 2)]
    rt.enqueue_events(events, "batched")
    rt.run_until_idle()
    clock.advance(11)
    from signoff.steps import recordbatches
    from signoff import storage
    with storage.session(rt.database):
        assert recordbatches.close_due(rt) == 1
    spans = in_memory.get_finished_spans()
    enqueues = {s.context.trace_id for s in spans if s.name == "signoff.enqueue"}
    [batch] = [s for s in spans if s.name == "signoff.batch"]
    assert {link.context.trace_id for link in batch.links} == enqueues and len(enqueues) == 2
    drafts = [s for s in spans if s.name == "signoff.draft"]
    assert [d.parent.span_id for d in drafts] == [batch.context.span_id]
    task = rt.task([t for t in rt.tasks() if t["monitor"] == "batched"][0]["key"])
    assert task["status"] == "ready"


def test_a_batch_of_tasks_submits_with_tracing_on_and_its_batch_calls_link_every_trace(
        rt, in_memory):
    rt.host().put_record("comment-2", document="doc-demo")
    rt.enqueue_events([make_event(), make_event(event_id="evt-2", record_id="comment-2")])
    rt.run_until_idle()
    for task in rt.tasks("ready"):
        rt.approve(task["key"], task["digest"])
    rt.run_until_idle()
    assert [t["status"] for t in rt.tasks()] == ["done", "done"]
    spans = in_memory.get_finished_spans()
    traces = {s.context.trace_id for s in spans if s.name == "signoff.enqueue"}
    assert len(traces) == 2
    # The host's batch calls are spans of their own (no parent), linked to both traces.
    for name in ("signoff.reads", "signoff.receipts", "signoff.submits"):
        for batch in [s for s in spans if s.name == name]:
            assert batch.parent is None and batch.context.trace_id not in traces, name
            assert {link.context.trace_id for link in batch.links} == traces, name
            assert batch.attributes["signoff.count"] == 2, name
    assert len([s for s in spans if s.name == "signoff.receipts"]) == 2  # before, and after
    assert {s.name for s in spans} >= {"signoff.reads", "signoff.submits"}


def test_a_collector_that_never_answers_does_not_hold_a_command(home):
    rt = make_home(home)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    env = child_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{silent.getsockname()[1]}")
    try:
        started = time.monotonic()
        run(home, env, "enqueue", "-", stdin=json.dumps(event()).encode())
        took = time.monotonic() - started
    finally:
        silent.close()
    assert took < 15  # the final export waits 2 s at most; the rest is a child's start-up
    assert rt.events()[0]["event_id"] == "evt-1"
    rt.close()


def test_console_spans_go_to_standard_error_and_leave_the_json_answer_alone(home):
    rt = make_home(home)
    env = child_env(OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="50")
    done = run(home, env, "enqueue", "-", "--json", stdin=json.dumps(event()).encode())
    [answer] = json.loads(done.stdout)  # the answer alone: no span mixed into it
    assert answer["accepted"] is True
    assert '"name": "signoff.enqueue"' in done.stderr.decode()
    rt.close()


def test_without_the_extra_tracing_is_a_warning_and_nothing_else(home, tmp_path):
    rt = make_home(home)
    # A package shadowing the SDK that refuses to import: as when the extra is missing.
    blocker = tmp_path / "blocker" / "opentelemetry" / "sdk"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no SDK here')\n")
    env = child_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    env["PYTHONPATH"] = f"{tmp_path / 'blocker'}:{env['PYTHONPATH']}"
    done = run(home, env, "enqueue", "-", stdin=json.dumps(event()).encode())
    warnings = [line for line in done.stderr.decode().splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and "tracing_unavailable" in warnings[0]
    assert rt.events()[0]["event_id"] == "evt-1"
    rt.close()


def test_off_by_default_without_loading_the_sdk(home):
    make_home(home).close()
    line = json.dumps({"event_id": "e", "name": "comment.created", "document": "doc-demo",
                       "record_id": "comment-1", "occurred": 1})
    code = "\n".join([
        "import io, sys",
        "from signoff.cli import main",
        f"sys.stdin = io.TextIOWrapper(io.BytesIO({line.encode()!r}))",
        "try:",
        f"    main(['--home', {str(home)!r}, 'enqueue', '-'])",
        "except SystemExit:",
        "    pass",
        "from signoff import tracing",
        # redis imports parts of the OpenTelemetry API for itself; the SDK is signoff's alone.
        "print('on' if tracing.enabled() or 'opentelemetry.sdk.trace' in sys.modules else 'off')",
    ])
    env = child_env()
    for name in list(env):
        if name.startswith("OTEL_"):
            del env[name]
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          timeout=120)
    assert done.stdout.decode().split()[-1] == "off", done.stderr.decode()


@pytest.mark.backend_independent
def test_attributes_are_ids_statuses_and_codes_only():
    from opentelemetry.sdk.trace import TracerProvider
    tracing.start(TracerProvider())
    try:
        with pytest.raises(TypeError, match="not a traced attribute: text"):
            tracing.begin("signoff.ingest", text="a record's words")
    finally:
        tracing.stop()


def test_callers_sharing_a_commit_each_keep_their_own_trace(rt, in_memory):
    # Three callers' jobs in one group commit, one with a bad line beside its event.
    from signoff.models import Delivery
    from signoff.rules.events import check_value
    jobs = [("default", [(1, check_value(make_event(event_id="evt-a")))]),
            ("default", [(1, check_value({"event_id": "bad"})),
                         (2, check_value(make_event(event_id="evt-b")))]),
            ("default", [(1, check_value(make_event(event_id="evt-c")))])]
    answers = rt._store_chunks(jobs)
    assert [[(r.event_id, r.accepted) for r in a] for a in answers] == [
        [("evt-a", True)], [(None, False), ("evt-b", True)], [("evt-c", True)]]
    spans = {s.attributes["signoff.event_id"]: s for s in in_memory.get_finished_spans()
             if s.name == "signoff.enqueue"}
    assert set(spans) == {"evt-a", "evt-b", "evt-c"}
    for result in (answers[0][0], answers[1][1], answers[2][0]):
        span = spans[result.event_id]
        assert span.attributes["signoff.delivery_id"] == result.delivery
        row = Delivery.get_by_id(result.delivery)
        assert row.event_id == result.event_id
        assert row.traceparent.split("-")[1] == format(span.context.trace_id, "032x")
