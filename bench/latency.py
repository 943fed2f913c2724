"""``python -m bench --latency``: the two delays a reviewer feels, against plain Huey's.

A fresh home on the flags' backends (SQLite by default) and one real worker
process (``signoff worker --workers 2``, the CLI's own). Events arrive one API
call at a time (``enqueue_events`` with one event), at a fixed spacing; once
they are all ``ready``, their tasks are approved one call at a time
(``approve``) at the same spacing. The two delays come from the timestamps the
rows carry: a delivery's acceptance to its ``ready`` (event → ready), a task's
approval to its ``done`` (approve → done).

Two spacings, each a pass of its own in a fresh home:

- **idle**: ``IDLE_SPACING_S`` apart, a worker idle between arrivals;
- **half**: at 50 % of capacity. Capacity is measured first in the same run: as
  many events as the pass sends, one call each as fast as one caller goes, from
  the first call to the last ``ready``; then their approvals the same way, to
  the last ``done``. Each step is then paced at half its own rate.

Beside each spacing, plain Huey: a consumer of its own (in a child process,
signoff's consumer settings, the same queue kind) runs a no-op task that stamps
the time it ran; the task is enqueued one call at a time at the same spacing,
and enqueue → run is its delay. The target (issue 50): each signoff p50 at most
``P50_OF_HUEY`` of Huey's p50 and each p99 at most ``P99_OF_HUEY`` of Huey's p99.
"""

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from . import reads
from .backends import BenchBackend, backend_env_set_aside
from .pipeline import (MONITOR, SETTLE_S, _Child, _Group, _baseline_spec, _close_queue,
                       _percentile, _signoff_home, _wait)

IDLE_SPACING_S = 0.05
IDLE_EVENTS = 200
HALF_EVENTS = 400
P50_OF_HUEY = 0.25
P99_OF_HUEY = 0.5


def run_latency_bench(database_url=None, queue_url=None, as_json=False, idle_events=IDLE_EVENTS,
                      half_events=HALF_EVENTS):
    """Both spacings against plain Huey's; the report (printed unless ``as_json``)."""
    say = (lambda msg: None) if as_json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    tmp = Path(tempfile.mkdtemp(prefix="signoff-bench-latency-"))
    backend = BenchBackend(database_url, queue_url)
    try:
        with backend_env_set_aside():
            say(f"[{backend.label}] capacity: {half_events} events, one call each, as fast as "
                "one caller goes; then their approvals")
            capacity = _signoff_pass(tmp / "capacity", backend, half_events, None, None, say)
            spacings = {"idle": (IDLE_SPACING_S, IDLE_SPACING_S, idle_events),
                        "half": (2 / capacity["ready_per_s"], 2 / capacity["done_per_s"],
                                 half_events)}
            passes = {}
            for name, (ingest_s, approve_s, n) in spacings.items():
                say(f"[{backend.label}] {name}: {n} events {1000 * ingest_s:.1f} ms apart, "
                    f"approvals {1000 * approve_s:.1f} ms apart; plain Huey at both spacings")
                passes[name] = {
                    "spacing_ms": (round(1000 * ingest_s, 2), round(1000 * approve_s, 2)),
                    "signoff": _signoff_pass(tmp / name, backend, n, ingest_s, approve_s, say),
                    "huey_ingest": _huey_pass(tmp / f"huey-{name}-ingest", backend, n, ingest_s),
                    "huey_approve": _huey_pass(tmp / f"huey-{name}-approve", backend, n,
                                               approve_s)}
    finally:
        backend.close()
        shutil.rmtree(tmp, ignore_errors=True)
    report = _report(backend, capacity, passes)
    if not as_json:
        print("\n".join(describe(report)))
    return report


def _signoff_pass(folder, backend, n, ingest_s, approve_s, say):
    """``n`` events one call each, ``ingest_s`` apart (None: back to back), then their
    approvals ``approve_s`` apart; the delays from the rows and each step's rate."""
    rt = _signoff_home(folder, n, 0, backend, say)
    group = _Group([_Child(["worker", str(folder / "worker.json"), "--home", str(folder),
                            "worker", "--workers", "2"], folder / "worker.json", False,
                           ready_line="worker started")])
    try:
        group.wait_ready()
        time.sleep(SETTLE_S)  # the worker idle, as between arrivals
        start = time.perf_counter()
        _paced(n, ingest_s, lambda i: rt.enqueue_events([_event(i)], MONITOR))
        ready = _await(rt, group, n, "ready")
        ready_s = time.perf_counter() - start
        items = _ready_tasks(rt)
        start = time.perf_counter()
        _paced(n, approve_s, lambda i: rt.approve(*items[i], by="bench"))
        done = _await(rt, group, n, "done")
        done_s = time.perf_counter() - start
        synced = group.stop()["extra"].get("clock", [])
        mine = getattr(rt.clock, "offset", None) or 0.0
    finally:
        group.kill()
        rt.close()
    return {"events": n, "ready_ms": _delays(ready, mine, synced),
            "done_ms": _delays(done, mine, synced),
            "ready_per_s": n / ready_s, "done_per_s": n / done_s}


def _delays(stamps, mine, synced):
    """Milliseconds from each ``(begin, end)`` pair's begin (stamped here, our clock's
    ``mine`` offset) to its end (stamped by the worker), sorted.

    On a PostgreSQL home each process keeps the server's time as its own clock
    plus an offset it measures; the offsets of two processes differ by their
    round trips' noise, several milliseconds on a busy machine. Both ends are
    turned back into this machine's time first, the worker's with the offset in
    force when it stamped (``synced``: its syncs' local times and offsets).
    """
    syncs = sorted((at, offset) for at, offset in synced if offset is not None)
    delays = []
    for begin, end in stamps:
        offset = 0.0
        for at, value in syncs:
            if at > end - value:
                break
            offset = value
        delays.append((end - offset - (begin - mine)) * 1000)
    return sorted(delays)


def _paced(n, spacing_s, call):
    """``call(i)`` for ``i`` below ``n``, the i-th at ``i * spacing_s`` from now (back to
    back when ``spacing_s`` is None; a late call is not made up for by crowding)."""
    start = time.perf_counter()
    for i in range(n):
        if spacing_s:
            delay = start + i * spacing_s - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        call(i)


def _event(i):
    return {"event_id": f"lat-{i}", "name": "comment.created", "document": "doc-demo",
            "record_id": f"r-{i}", "occurred": int(time.time()), "text": "wake only"}


@reads
def _await(rt, group, n, step):
    """Wait for ``n`` deliveries ``ready`` (or tasks ``done``); their ``(begin, end)`` stamps."""
    from signoff.models import Delivery, Task
    if step == "ready":
        query = Delivery.select(Delivery.accepted_at, Delivery.updated_at).where(
            Delivery.outcome == "ready")
    else:
        query = Task.select(Task.approved_at, Task.updated_at).where(Task.status == "done")
    _wait(lambda: query.count() >= n, 60 + n / 10, f"{n} {step}", group.children)
    return list(query.tuples())


@reads
def _ready_tasks(rt):
    from signoff.models import Task
    return list(Task.select(Task.key, Task.digest).where(Task.status == "ready")
                .order_by(Task.created_at).tuples())


def _huey_pass(folder, backend, n, spacing_s):
    """Plain Huey's no-op, enqueued one call at a time ``spacing_s`` apart: its
    enqueue → run delays in ms, sorted."""
    from .pipeline import plain_huey
    folder.mkdir(parents=True)
    spec = _baseline_spec(folder, backend)
    huey, tasks = plain_huey(dict(spec, create_tables=True))
    cfg = {"queue": spec, "workers": 2}
    child = _Child(["huey", str(folder / "stats.json"), json.dumps(cfg)], folder / "stats.json",
                   False)
    try:
        child.wait_ready()
        time.sleep(SETTLE_S)
        _paced(n, spacing_s, lambda i: tasks["stamp"](time.time()))
        _wait(lambda: len(child.snapshot()["extra"]["stamp"]) >= n, 60 + n / 10,
              "plain Huey's no-ops", [child])
        final = child.stop()
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
        _close_queue(huey)
    return sorted((ran - sent) * 1000 for sent, ran in final["extra"]["stamp"])


def _figures(ms):
    return {"p50_ms": round(_percentile(ms, 50), 2), "p99_ms": round(_percentile(ms, 99), 2)}


def _report(backend, capacity, passes):
    report = {"backend": backend.label, "workers": 2,
              "capacity": {"ready_per_s": round(capacity["ready_per_s"], 1),
                           "done_per_s": round(capacity["done_per_s"], 1)},
              "spacings": {}, "targets": {}}
    for name, p in passes.items():
        s = p["signoff"]
        rows = {"event_ready": (_figures(s["ready_ms"]), _figures(p["huey_ingest"])),
                "approve_done": (_figures(s["done_ms"]), _figures(p["huey_approve"]))}
        spacing = report["spacings"][name] = {
            "events": s["events"], "ingest_spacing_ms": p["spacing_ms"][0],
            "approve_spacing_ms": p["spacing_ms"][1]}
        for step, (mine, huey) in rows.items():
            spacing[step] = {"signoff": mine, "huey": huey}
            for q, limit in (("p50_ms", P50_OF_HUEY), ("p99_ms", P99_OF_HUEY)):
                ratio = mine[q] / max(huey[q], 1e-3)
                report["targets"][f"{name}_{step}_{q[:3]}"] = {
                    "value": round(ratio, 3), "target": f"<= {limit} x plain Huey",
                    "pass": ratio <= limit}
    return report


def describe(r):
    """The report as lines of text."""
    cap = r["capacity"]
    lines = [f"bench --latency: {r['backend']}, one worker process x {r['workers']} threads; "
             f"capacity one call at a time: {cap['ready_per_s']:,.0f} events/s to ready, "
             f"{cap['done_per_s']:,.0f} approvals/s to done", "",
             f"{'':<22}{'signoff p50':>12}{'p99':>9}{'Huey p50':>11}{'p99':>9}"
             f"{'p50 ratio':>11}{'p99 ratio':>11}"]
    for name, spacing in r["spacings"].items():
        lines.append(f"{name}: {spacing['events']} events {spacing['ingest_spacing_ms']} ms apart, "
                     f"approvals {spacing['approve_spacing_ms']} ms apart")
        for step in ("event_ready", "approve_done"):
            mine, huey = spacing[step]["signoff"], spacing[step]["huey"]
            t50 = r["targets"][f"{name}_{step}_p50"]
            t99 = r["targets"][f"{name}_{step}_p99"]
            label = f"{name} {step.replace('_', ' → ')}"
            lines.append(
                f"{label:<22}{mine['p50_ms']:>9.1f} ms{mine['p99_ms']:>6.1f} ms"
                f"{huey['p50_ms']:>8.1f} ms{huey['p99_ms']:>6.1f} ms"
                f"{t50['value']:>6.2f} {'pass' if t50['pass'] else 'MISS'}"
                f"{t99['value']:>6.2f} {'pass' if t99['pass'] else 'MISS'}")
    lines += ["", f"target: p50 <= {P50_OF_HUEY} x plain Huey's, p99 <= {P99_OF_HUEY} x plain "
              "Huey's (no-op enqueue → run at the same spacing, its own consumer on the same "
              "queue kind)"]
    return lines
