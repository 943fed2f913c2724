"""``python -m bench --tracing``: event → ``ready`` with tracing off and on, in one run.

Fresh homes on this machine (the reference host, SQLite files), in this
process, single-threaded: N events are enqueued in one call and ingested to
``ready`` (``run_until_idle``), timed from the enqueue to the last ``ready``.
Off is the baseline: tracing never started, as when no ``OTEL_*`` variable is
set. On: the OpenTelemetry SDK with its batch processor exporting over
OTLP/HTTP to a receiver in this process that takes every request without
decoding it (a local collector that keeps up). The two alternate for ``ROUNDS`` rounds; each figure
is the median round. ``off_hooks_ns_per_event`` times what tracing's hooks cost
an event while off (the same calls ingest makes, N times in a loop), beside the
time ingest spends on an event.

Run: ``python -m bench --tracing [--events N] [--json]``.
"""

import http.server
import statistics
import tempfile
import threading
import time
from pathlib import Path

import click

from signoff import tracing
from signoff.app import Signoff
from signoff.hosts.reference import ReferenceHost
from .backends import backend_env_set_aside

ROUNDS = 3


def run_tracing_bench(n_events=2000, as_json=False):
    """Measure both ways; the report dict (printed as lines unless ``as_json``)."""
    sink = _Sink()
    rates = {"off": [], "on": []}
    try:
        with backend_env_set_aside(), tempfile.TemporaryDirectory(prefix="signoff-bench-otel-") as tmp:
            for n in range(ROUNDS):
                for mode in ("off", "on"):
                    rates[mode].append(_round(Path(tmp) / f"{mode}-{n}", n_events, mode, sink))
    finally:
        sink.close()
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    hooks_ns = _off_hooks_ns(n_events)
    report = {"events": n_events, "rounds": ROUNDS,
              "ingest_off_per_s": round(off, 1), "ingest_on_per_s": round(on, 1),
              "on_over_off": round(on / off, 3),
              "off_hooks_ns_per_event": round(hooks_ns, 1),
              "off_hooks_share": round(hooks_ns * 1e-9 * off, 5),
              "spans_per_event": round(sink.spans / (ROUNDS * n_events), 2),
              "exported_bytes_per_event": round(sink.bytes / (ROUNDS * n_events), 1),
              "rounds_per_s": {k: [round(r, 1) for r in v] for k, v in rates.items()}}
    if not as_json:
        for line in describe(report):
            click.echo(line)
    return report


def describe(report):
    """The report as lines for people."""
    yield (f"{report['events']} events, enqueue → ready, one thread, in this process; "
           f"median of {report['rounds']} rounds")
    yield f"tracing off (baseline): {report['ingest_off_per_s']:>9}/s"
    yield (f"tracing on (OTLP/HTTP): {report['ingest_on_per_s']:>9}/s   "
           f"({report['on_over_off']} ×, {report['spans_per_event']} spans per event)")
    yield (f"off, the hooks cost {report['off_hooks_ns_per_event']:.0f} ns per event "
           f"({100 * report['off_hooks_share']:.3f} % of ingest's time)")


def _round(home, n_events, mode, sink):
    rt = Signoff.init(home)
    ref = ReferenceHost(home)
    for i in range(n_events):
        ref.put_record(f"comment-{i}", document="doc-demo")
    ref.put_material("doc-demo", "2026-11-01")
    ref.close()
    rt.bind("doc-demo", window_s=3600)
    provider = _provider(sink) if mode == "on" else None
    if provider is not None:
        tracing.start(provider)
        rt.close()
        rt = Signoff(home)  # its host and drafter are made with tracing on
    now = int(time.time())
    try:
        started = time.perf_counter()
        rt.enqueue_events([{"event_id": f"evt-{i}", "name": "comment.created",
                            "document": "doc-demo", "record_id": f"comment-{i}",
                            "occurred": now} for i in range(n_events)])
        rt.run_until_idle()
        seconds = time.perf_counter() - started
    finally:
        tracing.stop()
        if provider is not None:
            provider.shutdown()  # exports what is left (not timed)
    ready = len(rt.tasks("ready"))
    rt.close()
    if ready != n_events:
        raise RuntimeError(f"bench: {ready} of {n_events} tasks ready ({mode})")
    return n_events / seconds


def _provider(sink):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=f"{sink.url}/v1/traces")))
    provider.add_span_processor(_counter(sink))
    return provider


def _off_hooks_ns(n):
    """Nanoseconds per event of the hooks ingest and intake call while tracing is off."""
    row = {"traceparent": None}
    started = time.perf_counter_ns()
    for _ in range(n):
        with tracing.span("signoff.ingest", row, delivery=1, event_id="e", monitor="m") as span:
            tracing.annotate(span, code="ready", task_key="k")
        tracing.enabled()
    return (time.perf_counter_ns() - started) / n


class _Sink:
    """An OTLP/HTTP receiver that takes every request unread but for its size: a
    collector's decoding would otherwise compete with the measured work in this process."""

    def __init__(self):
        self.spans = 0  # counted as they end (``_counter``), not decoded here
        self.bytes = 0
        sink = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                sink.bytes += len(self.rfile.read(int(self.headers["content-length"])))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _counter(sink):
    """A span processor that counts the spans that end (for ``spans_per_event``)."""
    from opentelemetry.sdk.trace import SpanProcessor

    class Counter(SpanProcessor):
        def on_end(self, span):
            sink.spans += 1

    return Counter()
