"""``python -m bench --cli``: ingest through the CLI against plain Huey, process start included.

On SQLite files in fresh folders, N events (default 10,000):

- **signoff**: ``signoff enqueue FILE`` (one process), then ``signoff worker
  --drain`` (one process, 2 threads) until every event is ``ready``; timed
  from the first process's start to the second's exit. ``--batch-size N`` sets
  the home's ``[worker] batch_size``.
- **plain Huey**: one process that enqueues N no-op tasks (``task()`` once per
  task, as a Huey producer does), then one consumer process (2 threads,
  signoff's queue and consumer settings) that exits once the queue is empty
  and every task ran; timed likewise. Twice: with ``fsync=False`` (SQLite's
  ``synchronous=OFF``: a power cut may lose or corrupt the queue) and with
  ``fsync=True`` (``synchronous=FULL``, what signoff's state database runs with:
  each task acknowledged only once it is on disk).

- with ``--database-url`` (and ``--queue-url``): the signoff round again on those
  servers, with ``--processes`` worker processes draining at once (issue 50's target
  3 compares two of them with the one SQLite process).

The kinds alternate ``ROUNDS`` times; each figure is the median round. Then the
start-up alone: ``python -m signoff --help`` and a bare ``import huey``
process, and the import time of ``signoff.cli`` (``-X importtime``), medians
of ``STARTS`` runs each.
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from signoff.config import default_batch_size, load_config

from .backends import backend_env_set_aside
from .pipeline import DOC, MONITOR, ROOT, _signoff_home

ROUNDS = 3
STARTS = 5
# Issue 50's target 3: ingest on the servers with two worker processes against one
# process on a SQLite home.
SERVER_TARGET = 0.8

_HUEY_CHILD = r"""
import sys, threading, time
from huey import SqliteHuey
path, n, mode, fsync = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "fsync"
huey = SqliteHuey(name="bench", filename=path, fsync=fsync, results=False, timeout=30)
done = []

@huey.task(name="bench.noop")
def noop():
    done.append(1)

if mode == "enqueue":
    for _ in range(n):
        noop()
else:
    consumer = huey.create_consumer(workers=2, worker_type="thread", periodic=False,
                                    max_delay=0.1, initial_delay=0.05)
    consumer.start()
    while len(done) < n:
        time.sleep(0.005)
    consumer.stop(graceful=True)
"""


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _timed(*argvs, cwd=None):
    start = time.perf_counter()
    for argv in argvs:
        subprocess.run(argv, check=True, env=_env(), cwd=cwd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    return time.perf_counter() - start


def _signoff_round(folder, n, batch_size, backend=None, processes=1):
    """Seconds from ``signoff enqueue``'s start to the last of ``processes`` ``worker
    --drain`` processes' exit, on ``backend`` (SQLite for ``None``)."""
    rt = _signoff_home(folder, n, 0, backend, lambda msg: None)
    rt.close()
    if batch_size is not None:
        config = folder / "signoff.toml"
        # signoff.toml's [worker] batch_size line, set or commented out (the default).
        config.write_text(re.sub(r"(?m)^(# )?batch_size = \d+.*$", f"batch_size = {batch_size}",
                                 config.read_text(encoding="utf-8")), encoding="utf-8")
        if load_config(folder).batch_size != batch_size:
            raise RuntimeError(f"bench --cli: {config} does not set batch_size {batch_size}")
    events = folder / "events.jsonl"
    now = int(time.time())
    events.write_text("".join(json.dumps({"event_id": f"evt-{i}", "name": "comment.created",
                                          "document": DOC, "record_id": f"r-{i}", "occurred": now,
                                          "text": "wake only"}) + "\n" for i in range(n)))
    cli = [sys.executable, "-m", "signoff", "--home", str(folder)]
    start = time.perf_counter()
    _timed([*cli, "enqueue", "--monitor", MONITOR, str(events)])
    workers = [subprocess.Popen([*cli, "worker", "--drain", "--workers", "2"], env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for _ in range(processes)]
    for worker in workers:
        _, err = worker.communicate()
        if worker.returncode != 0:
            raise RuntimeError(f"bench --cli: a worker exited {worker.returncode}: {err[-2000:]!r}")
    seconds = time.perf_counter() - start
    _check_ready(folder, n)
    return seconds


def _check_ready(folder, n):
    from signoff import storage
    from signoff.app import Signoff
    from signoff.models import Delivery
    with Signoff(folder) as rt:
        with storage.bind(rt.database):
            ready = Delivery.select().where(Delivery.outcome == "ready").count()
    if ready != n:
        raise RuntimeError(f"bench --cli: {ready} of {n} events ready")


def _huey_round(folder, n, fsync):
    folder.mkdir(parents=True)
    path = str(folder / "queue.db")
    script = [sys.executable, "-c", _HUEY_CHILD, path, str(n)]
    sync = "fsync" if fsync else "nofsync"
    return _timed([*script, "enqueue", sync], [*script, "consume", sync])


def _import_ms(module):
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                         env=_env(), capture_output=True, text=True, check=True, cwd=str(ROOT))
    last = [line for line in out.stderr.splitlines() if line.rstrip().endswith(f"| {module}")][-1]
    return int(last.split("|")[1]) / 1000


def _top_level_import_ms(*args):
    """Milliseconds of the top-level imports of ``python -X importtime ARGS``."""
    out = subprocess.run([sys.executable, "-X", "importtime", *args], env=_env(),
                         capture_output=True, text=True, check=True, cwd=str(ROOT))
    total = 0
    for line in out.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        _, cumulative, name = line.split("|")
        # A nested import is indented two more spaces than its importer.
        if cumulative.strip().isdigit() and not name.startswith("  "):
            total += int(cumulative)
    return total / 1000


def _command_import_ms():
    """What the ``signoff`` command imports, beyond what a bare interpreter does."""
    return (_top_level_import_ms("-m", "signoff", "--help")
            - _top_level_import_ms("-c", "pass"))


def _startup():
    runs = {"signoff_help_s": [], "python_import_huey_s": [], "python_bare_s": [],
            "signoff_cli_import_ms": [], "huey_import_ms": []}
    for _ in range(STARTS):
        runs["signoff_help_s"].append(_timed([sys.executable, "-m", "signoff", "--help"],
                                             cwd=str(ROOT)))
        runs["python_import_huey_s"].append(_timed([sys.executable, "-c", "import huey"]))
        runs["python_bare_s"].append(_timed([sys.executable, "-c", "pass"]))
        runs["signoff_cli_import_ms"].append(_command_import_ms())
        runs["huey_import_ms"].append(_import_ms("huey"))
    return {key: round(statistics.median(values), 3) for key, values in runs.items()}


def run_cli_bench(n_events=10_000, as_json=False, batch_size=None, backend=None,
                  processes=2):
    """Both ways through processes, then the start-up alone; the report.

    ``batch_size``: the signoff home's ``[worker] batch_size`` (its default when ``None``).
    ``backend`` (a ``BenchBackend`` on a server): also each round on it with
    ``processes`` worker processes, against the SQLite round (one process).
    """
    say = (lambda msg: None) if as_json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    tmp = Path(tempfile.mkdtemp(prefix="signoff-bench-cli-"))
    rounds = {"signoff": [], "huey": [], "huey_fsync": [], "server": []}
    try:
        with backend_env_set_aside():
            for r in range(ROUNDS):
                say(f"({r + 1}/{ROUNDS}) {n_events} events: signoff enqueue + worker --drain;"
                    " plain Huey producer + consumer, without and with fsync"
                    + (f"; signoff on {backend.label}, {processes} workers" if backend else ""))
                rounds["signoff"].append(
                    n_events / _signoff_round(tmp / f"signoff-{r}", n_events, batch_size))
                rounds["huey"].append(n_events / _huey_round(tmp / f"huey-{r}", n_events, False))
                rounds["huey_fsync"].append(
                    n_events / _huey_round(tmp / f"huey-fsync-{r}", n_events, True))
                if backend is not None:
                    rounds["server"].append(n_events / _signoff_round(
                        tmp / f"server-{r}", n_events, batch_size, backend, processes))
            say("start-up: signoff --help, import huey, python -c pass")
            startup = _startup()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    signoff_rate, huey_rate, durable_rate = (statistics.median(rounds[k])
                                             for k in ("signoff", "huey", "huey_fsync"))
    # The homes are SQLite (database_url None) whatever the environment says.
    report = {"events": n_events, "batch_size": batch_size or default_batch_size(None),
              "signoff_cli_ingest_per_s": round(signoff_rate, 1),
              "huey_cli_noop_per_s": round(huey_rate, 1),
              "huey_cli_noop_fsync_per_s": round(durable_rate, 1),
              "cli_ingest_ratio": round(signoff_rate / huey_rate, 3),
              "cli_ingest_ratio_fsync": round(signoff_rate / durable_rate, 3),
              "rounds_per_s": {k: [round(v, 1) for v in vs] for k, vs in rounds.items() if vs},
              "startup": startup}
    if backend is not None:
        server_rate = statistics.median(rounds["server"])
        report["server"] = {"backends": backend.label, "processes": processes,
                            "ingest_per_s": round(server_rate, 1),
                            "ratio_to_sqlite": round(server_rate / signoff_rate, 3)}
    if not as_json:
        print("\n".join(describe(report)))
    return report


def describe(r):
    """The report as lines of text."""
    s = r["startup"]
    return [
        f"bench --cli: {r['events']} events, sqlite, process start included,"
        f" batch_size {r['batch_size']}", "",
        f"signoff enqueue + worker --drain (→ ready)   {r['signoff_cli_ingest_per_s']:,.0f} events/s",
        f"plain Huey producer + consumer (no-op)       {r['huey_cli_noop_per_s']:,.0f} tasks/s",
        f"  ratio                                      {r['cli_ingest_ratio']:.2f}"
        f" (rounds: signoff {r['rounds_per_s']['signoff']}, Huey {r['rounds_per_s']['huey']})",
        f"plain Huey, fsync=True (as durable)          {r['huey_cli_noop_fsync_per_s']:,.0f} tasks/s",
        f"  ratio                                      {r['cli_ingest_ratio_fsync']:.2f}"
        f" (rounds: Huey {r['rounds_per_s']['huey_fsync']})",
        f"python -m signoff --help                     {s['signoff_help_s'] * 1000:,.0f} ms"
        f" (python -c 'import huey' {s['python_import_huey_s'] * 1000:,.0f} ms,"
        f" python -c pass {s['python_bare_s'] * 1000:,.0f} ms)",
        f"imports of the signoff command               {s['signoff_cli_import_ms']:,.0f} ms"
        f" (import huey {s['huey_import_ms']:,.0f} ms)",
        "", "targets",
        f"  {'pass' if r['cli_ingest_ratio'] >= 1.0 else 'MISS'}  cli_ingest_ratio "
        f"{r['cli_ingest_ratio']:>7}  >= 1.0 x plain Huey no-op through processes",
        f"  {'pass' if r['cli_ingest_ratio_fsync'] >= 1.0 else 'MISS'}  cli_ingest_ratio_fsync "
        f"{r['cli_ingest_ratio_fsync']:>7}  >= 1.0 x plain Huey no-op, fsync=True",
        *_describe_server(r.get("server"), r["rounds_per_s"].get("server"))]


def _describe_server(server, rounds):
    if server is None:
        return []
    ratio = server["ratio_to_sqlite"]
    return [f"  {'pass' if ratio >= SERVER_TARGET else 'MISS'}  server_ingest_ratio "
            f"{ratio:>7}  >= {SERVER_TARGET} x one SQLite worker process: {server['backends']}, "
            f"{server['processes']} worker processes, {server['ingest_per_s']:,.0f} events/s "
            f"(rounds {rounds})"]
