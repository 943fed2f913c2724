"""``python -m bench --mcp``: the same work with the host in-process and over MCP.

Pairs of fresh homes in one run on this machine (``ROUNDS`` pairs in turn, the
median pair reported): one whose host is the reference
host in the process, one whose host is ``McpHost`` on ``signoff host mcp``
(one stdio session, started before the clock runs; its start is reported
apart), with its batch tools named, so a claimed batch is read, written and
confirmed in one call each. Each runs N events through ingest (event →
``ready``), bulk approval and submit (→ ``done``, receipt confirmed) in this
process, single-threaded, so the difference is the host calls. MCP calls are
counted by the session; the targets (issue 23: at most 3 MCP calls per event,
the pipeline over MCP at least half as fast as in-process) are reported pass
or MISS.
Both homes keep their state and queue in SQLite files, whatever the
environment's backend overrides say.

Run: ``python -m bench --mcp [--events N] [--json]``.
"""

import json
import sys
import tempfile
import time
from pathlib import Path

import click

from signoff.app import Signoff
from .backends import backend_env_set_aside
from signoff.hosts.mcp import batch_tools_toml
from signoff.hosts.reference import ReferenceHost

PHASES = ("ingest", "approve", "submit")
# Issue 23, target 5.
MAX_CALLS_PER_EVENT = 3
MIN_PIPELINE_RATIO = 0.5
# Pairs of runs in turn, each in fresh homes; the pair whose pipeline ratio is
# the median gives the figures. One pair of 500 events lasts about a second,
# and single pairs ranged from 0.39 to 0.67 on one quiet machine.
ROUNDS = 3


def run_mcp_bench(n_events=200, as_json=False):
    """Measure both homes; the report dict (printed as lines unless ``as_json``)."""
    pairs = []
    with backend_env_set_aside(), tempfile.TemporaryDirectory(prefix="signoff-bench-mcp-") as tmp:
        for r in range(ROUNDS):
            reference = measure(Path(tmp) / f"reference-{r}", n_events, over_mcp=False)
            over_mcp = measure(Path(tmp) / f"mcp-{r}", n_events, over_mcp=True)
            pairs.append((over_mcp["pipeline_per_s"] / reference["pipeline_per_s"],
                          reference, over_mcp))
    pairs.sort(key=lambda pair: pair[0])
    _, reference, over_mcp = pairs[len(pairs) // 2]
    ratios = {f"{p}_per_s": round(over_mcp[f"{p}_per_s"] / reference[f"{p}_per_s"], 3)
              for p in (*PHASES, "pipeline")}
    calls = over_mcp["calls_per_event"]["total"]
    report = {"events": n_events, "reference": reference, "mcp": over_mcp,
              "mcp_over_reference": ratios,
              "pipeline_ratios": [round(pair[0], 3) for pair in pairs], "targets": {
                  "calls_per_event": {"target": f"<= {MAX_CALLS_PER_EVENT} MCP calls per event",
                                      "value": calls, "pass": calls <= MAX_CALLS_PER_EVENT},
                  "pipeline_ratio": {"target": f">= {MIN_PIPELINE_RATIO} x in-process",
                                     "value": ratios["pipeline_per_s"],
                                     "pass": ratios["pipeline_per_s"] >= MIN_PIPELINE_RATIO}}}
    if not as_json:
        for line in describe(report):
            click.echo(line)
    return report


def measure(home, n_events, over_mcp):
    """Events per second of each phase in a fresh ``home`` (and MCP calls per event)."""
    home.mkdir(parents=True)
    if over_mcp:
        _configure_mcp(home)
    rt = Signoff.init(home)
    _records(home, n_events)
    host = rt.host()
    started = time.monotonic()
    host.context()  # an MCP session starts here, before any phase is timed
    out = {"connect_s": round(time.monotonic() - started, 3)} if over_mcp else {}
    rt.bind("doc-demo", window_s=3600)
    now = int(time.time())
    phases = {
        "ingest": lambda: (rt.enqueue_events([_event(i, now) for i in range(n_events)]),
                           rt.run_until_idle()),
        "approve": lambda: rt.approve_many([(t["key"], t["digest"]) for t in rt.tasks("ready")]),
        "submit": rt.run_until_idle,
    }
    seconds = {}
    for name, run in phases.items():
        calls = _calls(host)
        started = time.monotonic()
        run()
        seconds[name] = time.monotonic() - started
        if over_mcp:
            out.setdefault("calls_per_event", {})[name] = round(
                (_calls(host) - calls) / n_events, 3)
    done = len(rt.tasks("done"))
    if done != n_events:
        raise RuntimeError(f"bench: {done} of {n_events} tasks done")
    for name, s in seconds.items():
        out[f"{name}_per_s"] = round(n_events / s, 1)
    out["pipeline_per_s"] = round(n_events / sum(seconds.values()), 1)
    if over_mcp:
        out["calls_per_event"]["total"] = round(sum(out["calls_per_event"].values()), 3)
        host.close()
    rt.database.close()
    return out


def describe(report):
    """The report as lines for people."""
    ref, mcp = report["reference"], report["mcp"]
    ratio = report["mcp_over_reference"]
    yield (f"{report['events']} events, one thread, in this process; the median of "
           f"{len(report['pipeline_ratios'])} pairs (pipeline ratios "
           + ", ".join(map(str, report["pipeline_ratios"])) + ")")
    yield f"MCP session start: {mcp['connect_s']}s (not in the figures below)"
    for phase in (*PHASES, "pipeline"):
        yield (f"{phase:>8}: reference {ref[phase + '_per_s']:>8}/s   over MCP "
               f"{mcp[phase + '_per_s']:>8}/s   ({ratio[phase + '_per_s']} ×)")
    calls = mcp["calls_per_event"]
    yield ("MCP calls per event: " + ", ".join(f"{k} {v}" for k, v in calls.items()))
    yield "targets"
    for key, t in report["targets"].items():
        yield f"  {'pass' if t['pass'] else 'MISS'}  {key:<15} {t['value']:>7}  {t['target']}"


def _configure_mcp(home):
    # The checkout this module is in: the server runs the code being measured.
    package_root = str(Path(__file__).resolve().parent.parent)
    args = ["-m", "signoff", "--home", str(home), "host", "mcp"]
    (home / "signoff.toml").write_text(
        f'[host]\nfactory = "signoff.hosts.mcp:McpHost"\n[host.options]\n'
        f"command = {json.dumps(sys.executable)}\nargs = {json.dumps(args)}\n"
        f"env = {{ PYTHONPATH = {json.dumps(package_root)} }}\ntimeout_s = 30\n"
        f"{batch_tools_toml()}", encoding="utf-8")


def _records(home, n_events):
    ref = ReferenceHost(home)
    for i in range(n_events):
        ref.put_record(f"comment-{i}", document="doc-demo", text="add the date")
    ref.put_material("doc-demo", "2026-11-01")
    ref.close()


def _event(i, now):
    return {"event_id": f"evt-{i}", "name": "comment.created", "document": "doc-demo",
            "record_id": f"comment-{i}", "occurred": now}


def _calls(host):
    session = getattr(host, "session", None)
    return session.calls if session is not None else 0

