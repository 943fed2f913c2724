"""``python -m bench --concurrent``: concurrent API callers against the batch run, in one run.

Fresh homes on the flags' backends (SQLite by default), ``PROCESSES`` worker
processes each. The batch run enqueues N events in one API call; the
concurrent run has ``CALLERS`` threads of this process call
``Signoff.enqueue_events`` with one event each, each call durable before it
answers, until the N are in. Both then go through the whole pipeline (ingest,
one bulk approval, submit, receipt confirmed) and are timed from the first
enqueue call to the last ``done``. The two alternate ``--pairs`` times (3 by
default), each in a fresh home; the pair whose ratio is the median gives the figures.

Then one sequential caller, with no worker running: ``SEQUENTIAL_CALLS``
``enqueue_events`` calls of one event each against the bare commits one caller
gets from the same database (single-row inserts into a scratch table, each
committed alone), alternated as many times; the median round gives the ratio.
Each round also has ``CALLERS`` threads make as many calls, still with no worker
running: what the API itself costs a concurrent caller (calls a second, CPU and
context switches a call), the round of median CPU reported.

The report also has the concurrent callers' call times (p50, p99) in the median
pair: what a caller waits while the workers drain what came before, which a
larger ``[worker] batch_size`` lengthens on SQLite (each batch holds the one
write lock longer).

Run: ``python -m bench --concurrent [--pairs N] [--events N] [--database-url URL]
[--queue-url URL]``.
"""

import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import cpu_s
from .backends import BenchBackend, backend_env_set_aside
from .pipeline import MONITOR, _signoff_home, bench_signoff, commit_floor

CALLERS = 8
PROCESSES = 2
SEQUENTIAL_CALLS = 1000


def run_concurrent_bench(n_events=2000, workers=2, database_url=None, queue_url=None,
                         as_json=False, pairs=3):
    """Measure both runs and the sequential caller; the report (printed unless ``as_json``)."""
    say = (lambda msg: None) if as_json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    tmp = Path(tempfile.mkdtemp(prefix="signoff-bench-concurrent-"))
    backend = BenchBackend(database_url, queue_url)
    try:
        with backend_env_set_aside():
            runs = _pairs(tmp, backend, n_events, workers, say, pairs)
            say(f"one sequential caller: {SEQUENTIAL_CALLS} calls against bare commits; "
                f"then {CALLERS} callers, no worker running")
            sequential = _sequential(tmp / "sequential", backend, say, pairs)
    finally:
        backend.close()
        shutil.rmtree(tmp, ignore_errors=True)
    report = _report(n_events, workers, backend, runs, sequential)
    if not as_json:
        print("\n".join(describe(report)))
    return report


def _pairs(tmp, backend, n, workers, say, count):
    pairs = []
    for r in range(count):
        say(f"[{backend.label}] ({r + 1}/{count}) {n} events in one call, then from {CALLERS}"
            f" concurrent callers, one event per call; {PROCESSES} worker processes")
        batch = bench_signoff(tmp / f"batch-{r}", n, workers, say=say, processes=PROCESSES,
                              backend=backend)
        concurrent = bench_signoff(tmp / f"concurrent-{r}", n, workers, say=say,
                                   processes=PROCESSES, per_event=CALLERS, backend=backend)
        pairs.append((concurrent["flow_per_s"] / batch["flow_per_s"], batch, concurrent))
    pairs.sort(key=lambda pair: pair[0])
    return pairs


def _sequential(folder, backend, say, count):
    """Rounds of (bare commits/s, one caller's calls/s, ``_alone``'s figures), taken in
    turn on one home."""
    rt = _signoff_home(folder, 0, 0, backend, say)
    rounds = []
    try:
        for r in range(count):
            floor = commit_floor(rt, SEQUENTIAL_CALLS)
            start = time.perf_counter()
            for event in _events(f"seq-{r}"):
                rt.enqueue_events([event], MONITOR)
            rounds.append((floor, SEQUENTIAL_CALLS / (time.perf_counter() - start),
                           _alone(rt, f"alone-{r}")))
    finally:
        rt.close()
    return rounds


def _events(prefix):
    return [{"event_id": f"{prefix}-{i}", "name": "comment.created", "document": "doc-demo",
             "record_id": f"r-{i}", "occurred": int(time.time()), "text": "wake only"}
            for i in range(SEQUENTIAL_CALLS)]


def _alone(rt, prefix):
    """``CALLERS`` threads making ``SEQUENTIAL_CALLS`` one-event calls with no worker
    running: ``{calls_per_s, cpu_us_per_call, switches_per_call}``.

    What the API itself costs a concurrent caller, with nothing else on the cores:
    the CPU of its checks, its share of a group commit, and handing each call to
    the writer thread and back (voluntary context switches, from ``getrusage``).
    """
    events, failed = _events(prefix), []

    def call(part):
        try:
            for event in part:
                rt.enqueue_events([event], MONITOR)
        except Exception as exc:  # reported below: a lost call is no figure
            failed.append(exc)

    threads = [threading.Thread(target=call, args=(events[i::CALLERS],)) for i in range(CALLERS)]
    usage, cpu0, start = resource.getrusage(resource.RUSAGE_SELF), cpu_s(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds, cpu = time.perf_counter() - start, cpu_s() - cpu0
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - usage.ru_nvcsw
    if failed:
        raise RuntimeError(f"bench: {len(failed)} callers failed: {failed[0]!r}")
    n = len(events)
    return {"calls_per_s": round(n / seconds, 1), "cpu_us_per_call": round(1e6 * cpu / n, 1),
            "switches_per_call": round(switches / n, 2)}


def _report(n, workers, backend, pairs, sequential):
    ratio, batch, concurrent = pairs[len(pairs) // 2]
    floor, calls, _ = sorted(sequential, key=lambda r: r[1] / r[0])[len(sequential) // 2]
    alone = sorted((r[2] for r in sequential), key=lambda a: a["cpu_us_per_call"])
    batches = concurrent["writer_batches"]
    return {
        "events": n, "workers": workers, "processes": PROCESSES, "callers": CALLERS,
        "backend": backend.label,
        "batch_flow_per_s": round(batch["flow_per_s"], 1),
        "concurrent_flow_per_s": round(concurrent["flow_per_s"], 1),
        "concurrent_ratio": round(ratio, 3),
        "concurrent_ratios": [round(p[0], 3) for p in pairs],
        # Each pair's two rates, in the order of its ratio; and the two medians' ratio,
        # which one slow pick-up in a single run moves less than it moves that pair's.
        "batch_flows_per_s": [round(p[1]["flow_per_s"], 1) for p in pairs],
        "concurrent_flows_per_s": [round(p[2]["flow_per_s"], 1) for p in pairs],
        "ratio_of_medians": round(statistics.median(p[2]["flow_per_s"] for p in pairs)
                                  / statistics.median(p[1]["flow_per_s"] for p in pairs), 3),
        "concurrent_enqueue_per_s": round(concurrent["enqueue_per_s"], 1),
        "batch_enqueue_per_s": round(batch["enqueue_per_s"], 1),
        "concurrent_writer_batches": batches,
        "concurrent_call_p50_ms": round(concurrent["call_p50_ms"], 2),
        "concurrent_call_p99_ms": round(concurrent["call_p99_ms"], 2),
        "concurrent_commit_floor_per_s": round(concurrent["commit_floor_per_s"], 1),
        "cpu": _cpu_bill(n, batch, concurrent, one_writer=backend.state == "sqlite"),
        "sequential_calls_per_s": round(calls, 1),
        "sequential_commit_floor_per_s": round(floor, 1),
        "sequential_ratio": round(calls / floor, 3),
        "sequential_ratios": [round(c / f, 3) for f, c, _ in sequential],
        # The same callers with no worker running, the round of median CPU a call.
        "alone": alone[len(alone) // 2],
        "alone_cpu_us_per_call": [a["cpu_us_per_call"] for a in alone],
        "targets": {
            "concurrent_ratio": {"target": ">= 0.9 x batch, enqueue → done",
                                 "value": round(ratio, 3), "pass": ratio >= 0.9},
            "sequential_ratio": {"target": ">= 0.5 x bare commits/s",
                                 "value": round(calls / floor, 3), "pass": calls / floor >= 0.5},
        },
    }


def _cpu_bill(n, batch, concurrent, one_writer):
    """Where the concurrent run's extra time goes, against the batch run.

    Two costs come with one durable call per event. The callers' own CPU,
    beyond the batch call's, is taken from the cores the workers use: spread
    over them at best. And on a database with ``one_writer`` (SQLite) each of
    the callers' group commits holds the write lock for a commit's time, which
    the workers' batches wait out: ``commit_lock_s`` is their commits at the
    bare commit rate of the same database (0 elsewhere). ``estimate`` is the
    ratio the concurrent run would reach if those two were its only extra
    costs, paid in full, the workers spending what they spent on the batch
    run. It is an estimate for cores kept busy, not a bound: ``batch_busy``
    says how busy the batch run kept them (the workers' and the enqueue call's
    CPU over the run's time on all cores), and their idle rest can absorb part
    of the callers' CPU.
    """
    if batch.get("workers_cpu_s") is None or concurrent.get("workers_cpu_s") is None:
        return None
    cores = os.cpu_count() or 1
    callers = concurrent["enqueue_cpu_s"] - batch["enqueue_cpu_s"]
    workers = concurrent["workers_cpu_s"] - batch["workers_cpu_s"]
    commits = concurrent["enqueue_commits"]
    lock_s = commits / concurrent["commit_floor_per_s"] if one_writer else 0.0
    batch_s = n / batch["flow_per_s"]
    return {
        "cores": cores,
        "call_us": round(1e6 * concurrent["enqueue_cpu_s"] / n),
        "batch_call_us_per_event": round(1e6 * batch["enqueue_cpu_s"] / n),
        "workers_us_per_event": [round(1e6 * run["workers_cpu_s"] / n) for run in (batch, concurrent)],
        "extra_callers_s": round(callers, 3), "extra_workers_s": round(workers, 3),
        "commits": commits, "commit_lock_s": round(lock_s, 3),
        "gap_s": round(n / concurrent["flow_per_s"] - batch_s, 3),
        "batch_busy": round((batch["enqueue_cpu_s"] + batch["workers_cpu_s"]) / (batch_s * cores), 2),
        "estimate": round(batch_s / (batch_s + max(callers, 0.0) / cores + lock_s), 3),
    }


def describe(r):
    """The report as lines of text."""
    lines = [
        f"bench --concurrent: {r['events']} events, {r['backend']}, {r['processes']} worker "
        f"processes x {r['workers']} threads, {r['callers']} callers", "",
        f"enqueue → done, one call for all                {r['batch_flow_per_s']:,.0f} events/s",
        f"enqueue → done, {r['callers']} callers, one event a call    "
        f"{r['concurrent_flow_per_s']:,.0f} events/s ({r['concurrent_ratio']:.2f} of batch; "
        f"pairs {', '.join(f'{x:.2f}' for x in r['concurrent_ratios'])}; ratio of the "
        f"runs' medians {r['ratio_of_medians']:.2f})",
        f"  enqueue calls, {r['callers']} callers                    "
        f"{r['concurrent_enqueue_per_s']:,.0f}/s (batch call {r['batch_enqueue_per_s']:,.0f}"
        f" events/s; bare commits {r['concurrent_commit_floor_per_s']:,.0f}/s; "
        f"the writer thread wrote {r['concurrent_writer_batches']} group commits)",
        f"  a call's time, {r['callers']} callers beside the workers    "
        f"p50 {r['concurrent_call_p50_ms']:.1f} ms, p99 {r['concurrent_call_p99_ms']:.1f} ms",
        f"one sequential caller                           {r['sequential_calls_per_s']:,.0f}"
        f" calls/s against {r['sequential_commit_floor_per_s']:,.0f} bare commits/s "
        f"({r['sequential_ratio']:.2f}; rounds {', '.join(f'{x:.2f}' for x in r['sequential_ratios'])})",
        f"{r['callers']} callers, no worker running                    "
        f"{r['alone']['calls_per_s']:,.0f} calls/s, {r['alone']['cpu_us_per_call']:.0f} µs of "
        f"CPU a call (rounds {', '.join(f'{x:.0f}' for x in r['alone_cpu_us_per_call'])}), "
        f"{r['alone']['switches_per_call']:.1f} context switches a call",
        *_describe_cpu(r["cpu"], r["callers"]),
        "", "targets"]
    for key, t in r["targets"].items():
        lines.append(f"  {'pass' if t['pass'] else 'MISS'}  {key:<17} {t['value']:>7}  {t['target']}")
    return lines


def _describe_cpu(cpu, callers):
    if cpu is None:
        return []
    return [
        f"  CPU, the median pair: {callers} callers {cpu['call_us']} µs a call (the batch call "
        f"{cpu['batch_call_us_per_event']} µs an event); workers {cpu['workers_us_per_event'][0]}"
        f" then {cpu['workers_us_per_event'][1]} µs an event",
        f"  the concurrent run spent {cpu['extra_callers_s']:+.2f} s in its callers and "
        f"{cpu['extra_workers_s']:+.2f} s in its workers beyond the batch run's, over "
        f"{cpu['cores']} cores; it took {cpu['gap_s']:+.2f} s longer",
        f"  the callers made {cpu['commits']} commits"
        + (f", holding the write lock about {cpu['commit_lock_s']:.2f} s (at the bare commit rate)"
           if cpu["commit_lock_s"] else ""),
        f"  ratio if these extra costs were paid in full (estimate)  {cpu['estimate']:.2f}; the "
        f"batch run kept the cores {cpu['batch_busy']:.2f} busy",
    ]
