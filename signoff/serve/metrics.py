"""``/metrics`` and ``/healthz``: numbers read from the database at scrape time.

The collector asks the database on every scrape, so several ``signoff serve``
and worker processes agree without a shared metrics directory, and the figures
are those ``signoff stats --json`` prints.
"""

from prometheus_client.core import (CollectorRegistry, CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)
from prometheus_client.exposition import generate_latest

from ..views.health import probe_database, probe_queue
from ..state.heartbeats import LIVE_S

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _gauge_by(name, doc, label, counts):
    family = GaugeMetricFamily(name, doc, labels=[label])
    for value, n in sorted(counts.items()):
        family.add_metric([str(value)], n)
    return family


def _counter(name, doc, value):
    family = CounterMetricFamily(name, doc)
    family.add_metric([], value)
    return family


class SignoffCollector:
    """A Prometheus collector over one signoff home's database."""

    def __init__(self, rt):
        self.rt = rt

    def describe(self):
        """Nothing up front: the families are only known at scrape time."""
        return []

    def collect(self):
        """Every family, from one ``stats`` snapshot plus a few grouped counts."""
        s = self.rt.metrics()
        yield _gauge_by("signoff_deliveries", "Deliveries by status.", "status", s["deliveries"])
        yield _gauge_by("signoff_tasks", "Tasks by status.", "status", s["tasks"])
        attempts = CounterMetricFamily("signoff_attempts", "Attempts by step and code.",
                                       labels=["step", "code"])
        for step, code, n in s["attempts"]:
            attempts.add_metric([step, code], n)
        yield attempts
        yield GaugeMetricFamily("signoff_dead_letters", "Dead letters.",
                                value=s["dead_letters"]["total"])
        yield GaugeMetricFamily("signoff_dead_letters_not_replayed", "Dead letters not replayed.",
                                value=s["dead_letters"]["not_replayed"])
        yield _counter("signoff_lease_takeovers", "Leases that expired and were taken over.",
                       s["lease_expiries"])
        yield _counter("signoff_uncertain_recovered", "Uncertain tasks confirmed done.",
                       s["uncertain"]["recovered"])
        yield _counter("signoff_stale_events", "Events that arrived too late (gaps).",
                       s["stale_event_gaps"])
        yield GaugeMetricFamily("signoff_oldest_ready_seconds",
                                "Age of the oldest task waiting for approval.",
                                value=s["oldest_ready_s"])
        refusals = CounterMetricFamily("signoff_webhook_refusals", "Refused webhook requests.",
                                       labels=["code"])
        for code, n in s["refusals"]:
            refusals.add_metric([code], n)
        yield refusals
        yield GaugeMetricFamily("signoff_workers", f"Workers whose loop beat within {LIVE_S:g} s.",
                                value=s["workers"]["live"])
        if s["workers"]["freshest_age_s"] is not None:  # absent with no worker at all
            yield GaugeMetricFamily("signoff_worker_heartbeat_age_seconds",
                                    "Age of the freshest worker heartbeat.",
                                    value=s["workers"]["freshest_age_s"])
        subscribed = s["subscriptions"]
        yield _gauge_by("signoff_subscriptions", "MCP Events subscriptions by state.", "state",
                        subscribed["states"])
        deliveries = CounterMetricFamily("signoff_event_deliveries",
                                         "Requests of MCP Events subscriptions by answer.",
                                         labels=["code"])
        for code, n in sorted(subscribed["requests"].items()):
            deliveries.add_metric([code], n)
        yield deliveries
        calls = CounterMetricFamily("signoff_drafter_calls", "Drafter calls by outcome "
                                    "(ok, or the failed attempt's code).", labels=["outcome"])
        for outcome, n in sorted(s["drafter"]["calls"].items()):
            calls.add_metric([outcome], n)
        yield calls
        spent = CounterMetricFamily("signoff_drafter_tokens", "Tokens the drafter spent, "
                                    "by kind (input, output).", labels=["kind"])
        for kind, n in sorted(s["drafter"]["tokens"].items()):
            spent.add_metric([kind], n)
        yield spent
        yield _gauge_by("signoff_notifications", "task.ready notifications by status.", "status",
                        s["notifications"])
        yield _decisions(s["decision_seconds"])


def _decisions(rows):
    """``signoff_decision_seconds``: from ready to each human decision, by monitor and channel."""
    family = HistogramMetricFamily(
        "signoff_decision_seconds", "Seconds from a task becoming ready to each human decision "
        "(an approval, the one completing a quorum, an edit, a reject).",
        labels=["monitor", "channel"])
    for row in rows:
        buckets = [(f"{bound:g}", n) for bound, n in row["buckets"]] + [("+Inf", row["count"])]
        family.add_metric([row["monitor"], row["channel"]], buckets, row["sum"])
    return family


def registry_for(rt, *collectors):
    """A registry holding the signoff collector and ``collectors`` (no process or GC metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in (SignoffCollector(rt), *collectors):
        registry.register(collector)
    return registry


def render(registry):
    """The exposition text of ``registry``."""
    return generate_latest(registry)


def health(rt):
    """``(ok, {"database": ..., "queue": ...})``: each "ok" or "error: CODE".

    Only the code: the page answers without a login, and a message would name
    the servers.
    """
    report = {}
    for name, failure in (("database", probe_database(rt.database)),
                          ("queue", probe_queue(rt.queue))):
        report[name] = "ok" if failure is None else f"error: {failure[0]}"
    return all(v == "ok" for v in report.values()), report
