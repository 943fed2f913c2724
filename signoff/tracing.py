"""OpenTelemetry traces: one trace per event, from the producer to the receipt.

The only module that imports ``opentelemetry``. Tracing is off unless
``start`` turned it on: the CLI calls it at start, and it does so when the
standard variables ask for traces (``OTEL_TRACES_EXPORTER``, or an
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``);
an application embedding signoff passes its own tracer provider. While it is
off every hook below returns at its first line, and nothing is imported.

A span's W3C context (``traceparent``, ``tracestate``) is kept on the rows
it leads to: the span that accepted an event (``signoff.enqueue``, or
``signoff.webhook`` continuing the sender's ``traceparent``) on the delivery,
the ``signoff.ingest`` span that drafted a task on the task. A worker in
another process, hours later, continues the trace from the row.

Attributes are ids, statuses and codes only (``ATTRIBUTES``); anything else
is refused, so record text, drafts, names and secrets cannot reach a span.
"""

import atexit
import logging
import os
import sys
import threading
from contextlib import contextmanager

log = logging.getLogger("signoff.tracing")

# What a hook may record, and the attribute name it is recorded under.
ATTRIBUTES = {
    "event_id": "signoff.event_id", "delivery": "signoff.delivery_id",
    "task_key": "signoff.task_key", "monitor": "signoff.monitor",
    "record_id": "signoff.record_id", "version": "signoff.record_version",
    "status": "signoff.status", "code": "signoff.code", "count": "signoff.count",
    "http_status": "http.response.status_code",
}
FINAL_EXPORT_S = 2.0  # the most a process waits at exit for its last spans to leave
ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_tracer = None  # None: tracing is off
_provider = None  # the provider ``start`` made from the environment (shut down at exit)


def wanted():
    """True when the standard ``OTEL_*`` variables ask for traces."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return any(os.environ.get(name) for name in ENDPOINTS)


def start(provider=None):
    """Turn tracing on: with ``provider`` (an SDK ``TracerProvider``), or from the
    ``OTEL_*`` variables when they ask for it. Returns True when tracing is on.

    Without the ``otel`` extra the variables get one warning line, never a failure.
    """
    global _tracer, _provider
    if provider is None:
        if _tracer is not None or not wanted():
            return _tracer is not None
        try:
            provider = _provider = _from_environment()
        except ImportError as exc:
            log.warning("tracing_unavailable: OTEL_* asks for traces but the otel extra is "
                        "missing (pip install 'signoff[otel]'): %s", exc)
            return False
        atexit.register(shutdown)
    _tracer = provider.get_tracer("signoff")
    return True


def stop():
    """Turn tracing off (spans already ended are left to their provider)."""
    global _tracer
    _tracer = None


def enabled():
    """True while spans are recorded."""
    return _tracer is not None


def shutdown(timeout_s=FINAL_EXPORT_S):
    """Export what is left and stop, waiting at most ``timeout_s``: a collector
    that does not answer never holds the process."""
    global _provider
    provider, _provider = _provider, None
    stop()
    if provider is None:
        return
    done = threading.Thread(target=provider.shutdown, name="signoff-trace-export", daemon=True)
    done.start()
    done.join(timeout_s)


def _from_environment():
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": "signoff"}),
                              shutdown_on_exit=False)  # ``shutdown`` bounds the final export
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if kind == "console":
        # Standard error: standard output is the command's answer (one JSON document
        # under --json), which a span printed there would break.
        exporter = ConsoleSpanExporter(out=sys.stderr)
    else:
        if kind != "otlp" or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf") not in (
                "http/protobuf", ""):
            log.warning("tracing_unavailable: signoff exports OTLP over HTTP (protobuf) or to "
                        "the console; exporting OTLP over HTTP")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


# -- spans ---------------------------------------------------------------------------

class _Off:
    """The context manager every hook returns while tracing is off."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


OFF = _Off()


def span(name, parent=None, links=(), root=False, **attributes):
    """A context manager running the block in span ``name`` (yields the span, or
    ``None`` when off): a child of ``parent`` when given (a carrier dict, see
    ``carrier``, or a delivery or task row that keeps one), else of the current
    span, else (``root``) the first of a trace of its own; ``links`` are carriers
    or rows of other traces.
    An exception leaving the block marks the span failed with its class name only.
    """
    if _tracer is None:
        return OFF
    return _current(begin(name, parent, links, root, **attributes), end_on_exit=True)


def begin(name, parent=None, links=(), root=False, **attributes):
    """Start span ``name`` without making it current; ``end`` it. ``None`` when off."""
    if _tracer is None:
        return None
    from opentelemetry import context as contexts, trace
    parent = _row_carrier(parent) if parent is not None else None
    links = [trace.Link(c) for c in map(_span_context, map(_row_carrier, links))
             if c is not None and c.is_valid]
    context = _extract(parent) if parent else contexts.Context() if root else None
    return _tracer.start_span(name, context=context, links=links,
                              attributes=_attributes(attributes), record_exception=False,
                              set_status_on_exception=False)


def current(handle):
    """A context manager making ``handle`` (from ``begin``) the current span for the block."""
    if handle is None:
        return OFF
    return _current(handle, end_on_exit=False)


@contextmanager
def _current(handle, end_on_exit):
    from opentelemetry import trace
    with trace.use_span(handle, end_on_exit=False, record_exception=False,
                        set_status_on_exception=False):
        try:
            yield handle
        except BaseException as exc:
            _failed(handle, exc)
            raise
        finally:
            if end_on_exit:
                handle.end()


def annotate(handle, **attributes):
    """Add attributes (ids, statuses, codes) to a span; nothing when ``handle`` is None."""
    if handle is not None:
        handle.set_attributes(_attributes(attributes))


def end(handle, **attributes):
    """End a span from ``begin``, adding ``attributes``; nothing when ``handle`` is None."""
    if handle is not None:
        annotate(handle, **attributes)
        handle.end()


def _failed(handle, exc):
    from opentelemetry.trace import Status, StatusCode
    code = getattr(exc, "code", None)
    handle.set_attributes(_attributes({"code": code if isinstance(code, str) else
                                       type(exc).__name__}))
    handle.set_status(Status(StatusCode.ERROR, type(exc).__name__))


def _attributes(attributes):
    unknown = set(attributes) - set(ATTRIBUTES)
    if unknown:
        raise TypeError(f"not a traced attribute: {sorted(unknown)[0]} (ids, statuses and "
                        "codes only: see signoff.tracing.ATTRIBUTES)")
    return {ATTRIBUTES[k]: v for k, v in attributes.items() if v is not None}


# -- carriers: a span's context as it is kept on a row or sent in a header ---------------

def carrier(handle=None):
    """``{"traceparent", "tracestate"}`` of ``handle`` (default: the current span);
    ``{}`` when off or when there is no span."""
    if _tracer is None:
        return {}
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    out = {}
    context = trace.set_span_in_context(handle) if handle is not None else None
    TraceContextTextMapPropagator().inject(out, context=context)
    if "traceparent" not in out:
        return {}
    return {"traceparent": out["traceparent"], "tracestate": out.get("tracestate")}


def _row_carrier(row):
    """The carrier kept on a delivery or task row (a model, a row dict or a carrier), or
    ``None``."""
    get = row.get if isinstance(row, dict) else lambda name: getattr(row, name, None)
    parent = get("traceparent")
    return {"traceparent": parent, "tracestate": get("tracestate")} if parent else None


def incoming(headers):
    """The carrier an HTTP request brought (``traceparent`` / ``tracestate`` headers)."""
    if _tracer is None or not headers.get("traceparent"):
        return None
    return {"traceparent": headers.get("traceparent"), "tracestate": headers.get("tracestate")}


def _extract(parent):
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    return TraceContextTextMapPropagator().extract(
        {k: v for k, v in parent.items() if isinstance(v, str)})


def _span_context(parent):
    from opentelemetry import trace
    return trace.get_current_span(_extract(parent)).get_span_context() if parent else None


# -- plug-ins ------------------------------------------------------------------------

def traced_host(host, calls):
    """``host`` with each of its ``calls`` (the contract's, hosts.contract.CALLS) a
    ``signoff.host.<method>`` span (``host`` itself when off). A call made outside any
    signoff span (a batch's grant read) is not traced."""
    return host if _tracer is None else _TracedHost(host, frozenset(calls))


def traced_drafter(draft):
    """``draft`` with each call a ``signoff.draft`` span (``draft`` itself when off)."""
    return draft if _tracer is None else _traced("signoff.draft", draft)


class _TracedHost:
    """A host whose contract calls are spans; every other attribute is the host's own."""

    def __init__(self, host, calls):
        object.__setattr__(self, "_host", host)
        object.__setattr__(self, "_calls", calls)

    def __setattr__(self, name, value):
        setattr(self._host, name, value)  # the host's own, as if there were no wrapper

    def __getattr__(self, name):
        value = getattr(self._host, name)
        if name in self._calls and callable(value):
            return _traced(f"signoff.host.{name}", value, host_call=True)
        return value


def _traced(name, call, host_call=False):
    def run(*args, **kwargs):
        if _tracer is None or (host_call and not _in_span()):
            return call(*args, **kwargs)
        with span(name, **_call_ids(name, args)):
            return call(*args, **kwargs)
    return run


def _in_span():
    from opentelemetry import trace
    return trace.get_current_span().get_span_context().is_valid


def _call_ids(name, args):
    # The ids a host call is about (the task key of submit and receipt, the record
    # id of get): never its other arguments, which hold records and results.
    if name in ("signoff.host.submit", "signoff.host.receipt") and args:
        return {"task_key": args[0]}
    if name == "signoff.host.get" and args:
        return {"record_id": args[0]}
    return {}
