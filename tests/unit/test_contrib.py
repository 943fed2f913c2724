"""contrib/: the Grafana dashboard and the Prometheus alerts use only names /metrics exports;
the nginx example lets through every body signoff takes, and the docs show it as it is.

`.ci/run` also checks the rules with `promtool check rules` and runs their unit
tests (`promtool test rules`).
"""

import json
import re

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from helpers import ROOT, make_event
from signoff import storage
from signoff.serve.metrics import registry_for, render
from signoff.state import heartbeats

DASHBOARD = ROOT / "contrib" / "grafana" / "signoff.json"
ALERTS = ROOT / "contrib" / "prometheus" / "alerts.yml"
METRIC = re.compile(r"\bsignoff_[a-z0-9_]+\b")
# The series a family of each type is exposed as.
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count"),
            "summary": ("_sum", "_count")}


def dashboard_queries():
    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [t["expr"] for p in panels(board["panels"]) for t in p.get("targets", [])]


def rules():
    return [r for g in yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
            for r in g["rules"]]


def exported(site):
    """Every series name a real scrape of ``site`` can show, by family type."""
    names = set()
    for family in text_string_to_metric_families(render(registry_for(site)).decode()):
        names.add(family.name)
        names.update(family.name + s for s in SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def test_every_metric_the_dashboard_and_the_alerts_use_is_exported(rt, site, clock):
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    with storage.session(rt.database):
        heartbeats.Heartbeat(clock, threads=2).beat()  # the worker series exist with a worker
    names = exported(site)
    assert {"signoff_attempts_total", "signoff_workers",
            "signoff_worker_heartbeat_age_seconds"} <= names
    used = {}
    for where, expr in ([("dashboard", q) for q in dashboard_queries()]
                        + [(f"alert {r['alert']}", r["expr"]) for r in rules()]):
        for name in METRIC.findall(expr):
            used.setdefault(name, where)
    assert len(used) >= 10  # the checks below are not vacuous
    unknown = {name: where for name, where in used.items() if name not in names}
    assert not unknown, f"metrics /metrics does not export: {unknown}"


@pytest.mark.backend_independent
def test_the_dashboard_imports_with_a_prometheus_datasource():
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert [i["pluginId"] for i in board["__inputs"]] == ["prometheus"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        assert p["title"] and p["targets"], p
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}"


@pytest.mark.backend_independent
def test_the_alerts_cover_what_an_operator_must_hear_of():
    found = {r["alert"]: r for r in rules()}
    assert set(found) == {"SignoffWorkerSilent", "SignoffOldestReadyTaskWaiting",
                          "SignoffDeadLettersGrowing", "SignoffUncertainTasksWaiting",
                          "SignoffDrafterFailing"}
    for rule in found.values():
        assert rule["labels"]["severity"] in {"critical", "warning"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    assert "signoff_worker_heartbeat_age_seconds" in found["SignoffWorkerSilent"]["expr"]
    assert "signoff_drafter_calls_total" in found["SignoffDrafterFailing"]["expr"]


NGINX = ROOT / "contrib" / "nginx" / "signoff.conf"
SIZE_UNITS = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}


def test_the_nginx_example_lets_every_body_signoff_takes_through():
    from signoff.serve.bodies import LIMITS
    size, unit = re.search(r"^\s*client_max_body_size (\d+)([kmg]?);", NGINX.read_text(),
                           re.M | re.I).groups()
    assert int(size) * SIZE_UNITS[unit.lower()] >= max(LIMITS)


def test_the_docs_show_the_nginx_example_as_it_is():
    docs = (ROOT / "docs" / "serve.md").read_text(encoding="utf-8")
    assert "```nginx\n" + NGINX.read_text(encoding="utf-8") + "```\n" in docs
