"""``python -m bench``: signoff against plain Huey on this machine, in one run.

Everything runs in a fresh temporary folder with the reference host (a local
SQLite file: no network, no waits) and real worker processes:

- **plain Huey**: a Huey consumer in a child process, on a ``SqliteHuey`` file
  with signoff's queue settings (``fsync=False``) and signoff's consumer
  settings (thread workers, same count, same idle polling). It runs N no-op
  tasks, then (in a second child) N three-task chains read → draft → submit
  that do the same host work: SELECT the record from a SQLite host file, format
  the draft with the same drafter, INSERT OR IGNORE the result under the key.
- **signoff**: ``signoff --home H worker --workers K`` in a child process (the
  CLI's own ``main``, started through this module so that it can count commits
  and time each batch call). N events are
  enqueued through the API in one call (timed), ingested to ``ready``, approved
  in bulk through ``approve_many`` (timed), submitted and confirmed.

How the figures are taken:

- Work is handed over in one commit while the consumer is already running
  (Huey messages are bulk-inserted the way ``SqliteHuey.enqueue`` inserts one).
  Each plain-Huey figure is the median of three batches of N in one consumer
  (``huey_rounds_per_s`` has all three): two threads on one SqliteHuey
  connection convoy on its lock, and a single batch lands at either about half
  or about the whole one-thread rate.
- A throughput is N divided by the time from the start of the first unit of
  work to the end of the last one, timed inside the child (Huey task bodies;
  signoff's batch calls). Idle-polling pick-up delay is therefore not in the
  rates; it is in the latencies, which come from the rows (acceptance →
  ``ready``, approval → ``done``).
- ``pipeline_per_s`` is event → ``done`` with every step paid for once:
  ``1 / (1/ingest + 1/approve + 1/submit)``, the rate a steady flow would get
  on the same worker. The plain-Huey chain is measured the same way, from the
  first read to the last submit.
- Commits are counted, not estimated, in a second pass of the same signoff
  run (and one batch of each plain-Huey kind): every process (the enqueuing
  and approving process, and each worker child) wraps ``sqlite3.connect`` and
  traces each connection's statements. Tracing costs signoff 10-15 % (batch
  enqueue a third), so the timed passes run untraced. A commit is a ``COMMIT`` or a write
  statement run outside a transaction (autocommit), on any SQLite file (state,
  queue, host). ``commits_per_event`` counts them all, including commits whose
  transaction changed no row (Huey's revoke-key delete, a claim that found
  nothing); ``commits_breakdown["with_changes"]`` counts only the ones that
  wrote. The window runs from before the enqueue to after the last ``done``,
  once the queue is empty again.
- Worker peak RSS is the worker child's ``VmHWM`` in the timed pass. The child
  imports Huey and Peewee as the ``signoff`` command does, with psycopg and redis
  held back unless the home's backend needs them.

- ``--processes 1,2,4`` measures each count in turn: that many worker
  processes on one home, and plain Huey with that many consumer processes.
- Each count also runs signoff with one enqueue call per event (as webhooks
  send them); ``per_event_ratio`` is its enqueue → done rate over the batch
  run's, both timed in this process from the first enqueue call to the last
  ``done`` with one bulk approval in between. The two runs are made
  ``PER_EVENT_PAIRS`` times in turn, each in a fresh home, and the pair whose
  ratio is the median gives the figures (``per_event_ratios`` has them all):
  two runs a minute apart on a shared machine differ by more than the two ways
  of enqueueing do. Each call commits its delivery
  before it answers, so one caller can go no faster than the database commits
  for it: ``commit_floor_per_s`` measures that on the same database before the
  workers start, and ``per_event_ratio_ceiling`` is the ratio a caller paying
  only that would reach (its calls at the floor, then approval and submit as
  long as after the batch run's ingest). It leaves out that on SQLite the
  caller's commits and the workers' batches take turns on the one write lock,
  which the batch run's workers have to themselves.
  ``per_event_ingest_lag_s`` is how long the one-call run's ingest trails its
  last call, and ``batch_after_ingest_s`` / ``per_event_after_ingest_s`` how
  long approval and submit take after each run's ingest: what the way events
  arrive costs the rest of the pipeline.
- ``--database-url`` / ``--queue-url`` put state and queue on PostgreSQL and
  Redis or PostgreSQL (see ``bench.backends``): a database per home, created
  and dropped by the run, and a queue name per home and baseline. Commits are
  counted on SQLite only (the counter traces SQLite connections).
- ``--growth`` runs ingest again with ``--growth-rows`` finished tasks present
  and compares the median claim of a full batch (``claim_probe``, timed
  before the workers start) with an empty database's, claimed from in
  alternate rounds. Ingest is timed once the workers' first retention pass
  (run as a worker starts, then hourly) has read the history, and the load is
  on disk (``os.sync``), as in a home that gathered it over weeks.

``python -m bench.pipeline ...`` is the child side (worker and Huey
consumers); it is not meant to be run by hand.
"""

import io
import json
import math
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import busy_share, cpu_s, hosts, machine_ticks, reads
from .backends import BenchBackend, backend_env_set_aside, kind_of, vacuum

DOC = "doc-demo"
MONITOR = "bench"
HISTORY = 100_000
SETTLE_S = 1.0  # let a freshly started consumer reach its idle polling first
BASELINE_ROUNDS = 3
PER_EVENT_PAIRS = 3  # batch and one-call-per-event runs, in turn (see _timed_run)
COUNTED_HUEY_ITEMS = 1000
CLAIM_ROUNDS = 40
COMMIT_FLOOR_ROWS = 1000
POLL_S = 0.01
ROOT = Path(__file__).resolve().parent.parent

KEYS = ("events", "workers", "backend", "processes", "host", "huey_noop_per_s", "huey_chain_per_s",
        "huey_job_per_s", "job_ratio",
        "enqueue_per_s", "ingest_per_s", "ingest_p50_ms", "ingest_p99_ms", "pipeline_per_s",
        "approve_done_p50_ms", "approve_done_p99_ms", "commits_per_event",
        "commits_breakdown", "worker_peak_rss_mb", "ingest_ratio", "pipeline_ratio",
        "batch_flow_per_s", "per_event_enqueue_per_s", "per_event_flow_per_s",
        "per_event_ratio", "commit_floor_per_s", "per_event_calls_of_floor",
        "per_event_ratio_ceiling", "by_processes")
GROWTH_KEYS = ("growth_rows", "ingest_growth_per_s", "ingest_growth_ratio", "claim_ms_p50",
               "claim_growth_ms_p50", "claim_growth_ratio")


# -- counting commits ---------------------------------------------------------

_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")


class _Conn:
    """Commit counts of one SQLite connection (used by one thread at a time)."""

    __slots__ = ("conn", "file", "commits", "with_changes", "rollbacks", "begin", "auto")

    def __init__(self, conn, file):
        self.conn, self.file = conn, file
        self.commits = self.with_changes = self.rollbacks = 0
        self.begin = None  # total_changes when the open transaction began
        self.auto = None  # total_changes before an autocommit write not yet settled

    def trace(self, sql):
        conn = self.conn
        if self.auto is not None:
            if conn.total_changes != self.auto:
                self.with_changes += 1
            self.auto = None
        head = sql.lstrip()[:16].upper()
        if head.startswith(("COMMIT", "END")):
            self.commits += 1
            if self.begin is None or conn.total_changes != self.begin:
                self.with_changes += 1
            self.begin = None
        elif head.startswith("BEGIN"):
            self.begin = conn.total_changes
        elif head.startswith("ROLLBACK") and not head[8:].lstrip().startswith("TO"):
            self.rollbacks += 1
            self.begin = None
        elif head.startswith(_WRITES) and not conn.in_transaction:
            self.commits += 1
            self.auto = conn.total_changes

    def settle(self):
        """Count an autocommit write whose effect is not known yet."""
        if self.auto is None:
            return 0
        try:
            return int(self.conn.total_changes != self.auto)
        except Exception:  # another thread's connection: assume it wrote
            return 1


class CommitCounter:
    """Counts the commits of every SQLite connection opened while installed."""

    def __init__(self):
        self.conns = []
        self._original = None

    def install(self):
        if self._original is not None:
            return
        original = self._original = sqlite3.connect

        def connect(database, *args, **kwargs):
            conn = original(database, *args, **kwargs)
            stats = _Conn(conn, Path(str(database).split("?")[0]).name or str(database))
            conn.set_trace_callback(stats.trace)
            self.conns.append(stats)
            return conn

        sqlite3.connect = sqlite3.dbapi2.connect = connect

    def uninstall(self):
        if self._original is None:
            return
        sqlite3.connect = sqlite3.dbapi2.connect = self._original
        self._original = None
        for stats in self.conns:
            try:
                stats.conn.set_trace_callback(None)
            except Exception:
                pass  # closed, or owned by another thread
        self.conns = []

    def snapshot(self):
        """``{file: {"commits", "with_changes", "rollbacks"}}`` so far."""
        out = {}
        for stats in list(self.conns):
            row = out.setdefault(stats.file, {"commits": 0, "with_changes": 0, "rollbacks": 0})
            row["commits"] += stats.commits
            row["with_changes"] += stats.with_changes + stats.settle()
            row["rollbacks"] += stats.rollbacks
        return out


class _NoCounter:
    """Stands in for ``CommitCounter`` in a timed pass, where nothing is traced."""

    def snapshot(self):
        return {}


def _minus(after, before):
    out = {}
    for name, row in after.items():
        base = before.get(name, {})
        out[name] = {k: v - base.get(k, 0) for k, v in row.items()}
    return out


def _plus(*snapshots):
    out = {}
    for snap in snapshots:
        for name, row in snap.items():
            acc = out.setdefault(name, {"commits": 0, "with_changes": 0, "rollbacks": 0})
            for k, v in row.items():
                acc[k] += v
    return out


def _total(snap, key="commits"):
    return sum(row[key] for row in snap.values())


# -- the child side ---------------------------------------------------------------

def _memory():
    """This process's VmHWM and VmRSS in kB (``None`` where /proc is missing)."""
    out = {"peak_kb": None, "rss_kb": None}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    out["peak_kb"] = int(line.split()[1])
                elif line.startswith("VmRSS:"):
                    out["rss_kb"] = int(line.split()[1])
    except OSError:
        import resource
        out["peak_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


class _Reporter:
    """Writes the child's counts and timings to a file (on SIGUSR1 and at exit)."""

    def __init__(self, path, counter):
        self.path, self.counter = Path(path), counter
        self.seq = 0
        self.extra = {}
        self.lock = threading.RLock()

    def write(self, final=False):
        with self.lock:
            data = {"seq": self.seq, "final": final, "pid": os.getpid(), "time": time.time(),
                    "commits": self.counter.snapshot(), "memory": _memory(),
                    "extra": {k: list(v) for k, v in self.extra.items()}}
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{self.seq}.tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.path)
            self.seq += 1


def _child(argv):
    """``python -m bench.pipeline worker|huey STATS ARGS...``"""
    import atexit
    mode, stats_path, args = argv[0], argv[1], argv[2:]
    counter = CommitCounter()
    if os.environ.get("SIGNOFF_BENCH_COUNT") == "1":
        counter.install()
    reporter = _Reporter(stats_path, counter)
    signal.signal(signal.SIGUSR1, lambda signum, frame: reporter.write())
    if mode == "worker":
        from signoff.commands.libraries import import_libraries
        import_libraries(args[args.index("--home") + 1])  # as the command starts a worker
        _time_batches(reporter)
        _record_clock(reporter)
        atexit.register(reporter.write, True)
        from signoff.cli import main
        main(args, prog_name="signoff")
    elif mode == "huey":
        _huey_child(json.loads(args[0]), reporter)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


def _time_batches(reporter):
    """Record (start, end, claimed) of every batch call that claimed something."""
    from signoff.engine import Engine
    for step in ("ingest", "submit"):
        done = reporter.extra[step] = []
        original = getattr(Engine, f"{step}_batch")

        def timed(self, owner, _original=original, _done=done):
            start = time.time()
            claimed, full = _original(self, owner)
            if claimed:
                _done.append((start, time.time(), claimed))
            return claimed, full

        setattr(Engine, f"{step}_batch", timed)


def _record_clock(reporter):
    """Record (local time, offset) of every sync of a server clock: what turns the
    worker's server-clock stamps back into this machine's time (``bench.latency``)."""
    from signoff.clock import ServerClock
    synced = reporter.extra["clock"] = []
    original = ServerClock.sync

    def sync(self):
        original(self)
        synced.append((time.time(), self.offset))

    ServerClock.sync = sync


def _host_conn(path):
    """A host connection with the reference host's settings."""
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def baseline_queue(spec):
    """The plain-Huey queue for ``spec``: signoff's settings on the same backend."""
    from huey import RedisHuey, SqliteHuey
    from huey.api import PostgresHuey
    url = spec.get("url")
    if url is None:
        return SqliteHuey(name="bench", filename=spec["path"], fsync=False, results=False,
                          timeout=30)
    if kind_of(url) == "redis":
        return RedisHuey(name=spec["name"], url=url, results=False)
    return PostgresHuey(name=spec["name"], dsn=url, results=False,
                        create_tables=spec.get("create_tables", False))


def plain_huey(queue_spec, host_path=None, times=None):
    """The plain-Huey baseline: a queue with signoff's settings and its tasks."""
    from signoff.rules.canonical import canonical
    from signoff.drafters.template import template

    huey = baseline_queue(queue_spec)
    times = times if times is not None else {}
    noop_done = times.setdefault("noop", [])
    stamped = times.setdefault("stamp", [])
    chain_start = times.setdefault("chain_start", [])
    chain_done = times.setdefault("chain", [])
    local = threading.local()
    drafter = template()
    material = {}

    def host():
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = _host_conn(str(host_path))
            if not material:
                row = conn.execute("SELECT body FROM materials WHERE document = ?", (DOC,)).fetchone()
                material.update(json.loads(row[0]))
        return conn

    def materials():
        # A draft may run in a process that has not run a read yet.
        host()
        return material

    @huey.task(name="bench.noop")
    def noop():
        noop_done.append(time.time())

    @huey.task(name="bench.stamp")
    def stamp(sent):
        # A no-op that says when it ran: enqueue → run, for ``bench.latency``.
        stamped.append((sent, time.time()))

    @huey.task(name="bench.read")
    def read(key, record_id):
        chain_start.append(time.time())
        row = host().execute("SELECT body FROM records WHERE id = ?", (record_id,)).fetchone()
        draft(key, json.loads(row[0]))

    @huey.task(name="bench.draft")
    def draft(key, record):
        drafted = drafter(record, materials())
        submit(key, {"record_id": record["id"], "version": record["version"],
                     "draft": drafted["draft"], "sources": list(drafted["sources"])})

    @huey.task(name="bench.submit")
    def submit(key, result):
        host().execute("INSERT OR IGNORE INTO results VALUES (?, ?, strftime('%s','now'))",
                       (key, canonical(result)))
        chain_done.append(time.time())

    @huey.task(name="bench.job")
    def job(key, record_id):
        # The same work as one task: nothing kept between steps, so a crash loses it.
        chain_start.append(time.time())
        row = host().execute("SELECT body FROM records WHERE id = ?", (record_id,)).fetchone()
        record = json.loads(row[0])
        drafted = drafter(record, materials())
        host().execute("INSERT OR IGNORE INTO results VALUES (?, ?, strftime('%s','now'))",
                       (key, canonical({"record_id": record["id"], "version": record["version"],
                                        "draft": drafted["draft"],
                                        "sources": list(drafted["sources"])})))
        chain_done.append(time.time())

    return huey, {"noop": noop, "stamp": stamp, "chain": read, "job": job}


def _hand_over(huey, messages):
    """Put ``messages`` on the queue the cheapest way its storage allows."""
    from huey.storage import PostgresStorage, RedisStorage, SqliteStorage
    storage = huey.storage
    if isinstance(storage, SqliteStorage):
        with storage.db(commit=True) as curs:  # one commit, as signoff's batch enqueue
            curs.executemany("INSERT INTO task (queue, data, priority) VALUES (?, ?, ?)",
                             [(storage.name, m, 0) for m in messages])
    elif isinstance(storage, PostgresStorage):
        # One commit and one notify too: a commit per message would time the
        # producer's commits, not the consumers (about 300 no-ops/s here).
        with storage.db(commit=True) as curs:
            curs.executemany(f"INSERT INTO {storage.table_task} (queue, data, priority) "
                             "VALUES (%s, %s, 0)", [(storage.name, m) for m in messages])
            curs.execute("SELECT pg_notify(%s, '')", (storage.channel,))
    elif isinstance(storage, RedisStorage):
        storage.conn.lpush(storage.queue_key, *messages)
    else:
        for message in messages:
            storage.enqueue(message)


def _huey_child(cfg, reporter):
    from signoff.worker import IDLE_POLL_S, SignalStop, start_consumer
    huey, _ = plain_huey(cfg["queue"], cfg.get("host"), reporter.extra)
    consumer = huey.create_consumer(workers=cfg["workers"], worker_type="thread", periodic=False,
                                    max_delay=IDLE_POLL_S, initial_delay=0.05)
    stop = SignalStop()  # as the worker stops: a handler that takes no lock
    stop.install()
    start_consumer(consumer, stop)
    reporter.write()  # ready
    while not stop.wait(1.0):
        pass
    consumer.stop(graceful=True)
    reporter.write(final=True)


# -- the parent side: children --------------------------------------------------

class _Child:
    """A bench child process and the stats file it writes."""

    def __init__(self, argv, stats_path, count, ready_line=None):
        self.stats_path = Path(stats_path)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env["SIGNOFF_BENCH_COUNT"] = "1" if count else "0"
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.pipeline", *argv],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=env, cwd=str(self.stats_path.parent))
        self.lines = []
        self.ready = threading.Event()
        self.ready_line = ready_line
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.seq = -1

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            self.lines = (self.lines + [line])[-40:]
            if self.ready_line and self.ready_line in line:
                self.ready.set()

    def _fail(self, what):
        tail = "\n".join(self.lines[-15:])
        raise RuntimeError(f"bench child {what} (exit {self.proc.poll()}):\n{tail}")

    def _load(self):
        try:
            return json.loads(self.stats_path.read_text())
        except (OSError, ValueError):
            return None

    def wait_ready(self, timeout=60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._fail("exited early")
            if self.ready_line is None:
                data = self._load()
                if data is not None:
                    self.seq = data["seq"]
                    return data
            elif self.ready.is_set():
                return None
            time.sleep(POLL_S)
        self._fail("did not start")

    def snapshot(self, timeout=30.0):
        """Ask the child for its counts now."""
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = self._load()
            if data is not None and data["seq"] > self.seq:
                self.seq = data["seq"]
                return data
            if self.proc.poll() is not None:
                self._fail("exited")
            time.sleep(POLL_S)
        self._fail("did not answer a snapshot request")

    def memory_now(self):
        try:
            with open(f"/proc/{self.proc.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except OSError:
            return None

    def stop(self, timeout=60.0):
        """SIGTERM, wait, and return the child's final report."""
        peak = self.memory_now()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._fail("did not stop")
        self._reader.join(5)
        data = self._load()
        if data is None or not data.get("final"):
            self._fail("left no final report")
        if data["memory"]["peak_kb"] is None:
            data["memory"]["peak_kb"] = peak
        return data


def _wait(predicate, timeout, what, children=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        for child in children:
            if child.proc.poll() is not None:
                child._fail(f"exited while waiting for {what}")
        time.sleep(POLL_S)
    said = "\n".join(line for child in children for line in child.lines[-5:])
    raise RuntimeError(f"bench: timed out after {timeout:.0f}s waiting for {what}"
                       + (f"; the children said:\n{said}" if said else ""))


def _budget(n):
    return 60.0 + n / 50.0


def _merged(reports):
    """One report for several children: their timings joined, commits summed, peak RSS the max."""
    extra = {}
    for report in reports:
        for key, values in report["extra"].items():
            extra.setdefault(key, []).extend(values)
    peaks = [r["memory"]["peak_kb"] for r in reports if r["memory"]["peak_kb"] is not None]
    return {"extra": extra, "commits": _plus(*(r["commits"] for r in reports)),
            "memory": {"peak_kb": max(peaks) if peaks else None}}


class _Group:
    """Bench children started together and read as one."""

    def __init__(self, children):
        self.children = children

    def wait_ready(self):
        """Wait for every child to start; returns their merged first report (or None)."""
        firsts = [c.wait_ready() for c in self.children]
        return None if None in firsts else _merged(firsts)

    def snapshot(self):
        """Every child's counts now, merged."""
        return _merged([c.snapshot() for c in self.children])

    def cpu_s(self):
        """The children's CPU seconds so far, summed (``None`` where unreadable)."""
        seconds = [cpu_s(c.proc.pid) for c in self.children]
        return None if None in seconds else sum(seconds)

    def stop(self):
        """Stop every child; their merged final reports."""
        return _merged([c.stop() for c in self.children])

    def kill(self):
        """Kill whatever is still running (after a failure)."""
        for child in self.children:
            if child.proc.poll() is None:
                child.proc.kill()


# -- figures -----------------------------------------------------------------------

def _percentile(values, p):
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _rate(n, start, end):
    return n / max(end - start, 1e-6)


def _batch_rate(batches, n):
    """N over the first batch's start to the last batch's end."""
    return _rate(n, min(b[0] for b in batches), max(b[1] for b in batches))


# -- host records and history ---------------------------------------------------------

def _records(n, tenant):
    for i in range(n):
        rid = f"r-{i}"
        yield {"id": rid, "document": DOC, "version": 1, "status": "open", "kind": "review",
               "tenant": tenant, "text": "please add the demo date",
               "source": f"reference://{DOC}/{rid}"}


def _fill_host(host, n):
    """Records ``r-0`` … and the material, in one transaction."""
    from signoff.rules.canonical import canonical
    tenant = host.context()["tenant"]
    host.conn.execute("BEGIN IMMEDIATE")
    host.conn.executemany("INSERT OR REPLACE INTO records VALUES (?, ?)",
                          ((r["id"], canonical(r)) for r in _records(n, tenant)))
    host.conn.execute("COMMIT")
    host.put_material(DOC, "2026-11-01")


def _finished_task(i, at, tenant, draft, material, grant_digest):
    """The delivery, inbox, task and audit rows one finished task leaves behind."""
    from signoff.rules.canonical import digest, task_key
    record = {"id": f"old-{i}", "document": DOC, "version": 1, "status": "open",
              "kind": "review", "tenant": tenant, "text": "please add the demo date",
              "source": f"reference://{DOC}/old-{i}"}
    drafted = draft(record, material)
    result = {"record_id": record["id"], "version": 1, "draft": drafted["draft"],
              "sources": list(drafted["sources"])}
    key = task_key(MONITOR, grant_digest, record["id"], 1)
    event_id = f"old-evt-{i}"
    delivery = {
        "monitor": MONITOR, "event_id": event_id, "name": "comment.created", "document": DOC,
        "record_id": record["id"], "occurred": int(at), "status": "done", "outcome": "ready",
        "task_key": key, "attempts": 1, "failures": {}, "last_code": "ready", "next_at": at,
        "lease_owner": None, "lease_until": None, "lease_token": None, "accepted_at": at,
        "updated_at": at + 0.1}
    inbox = {"monitor": MONITOR, "event_id": event_id, "outcome": "ready", "task_key": key,
             "at": at + 0.1}
    result_digest = digest(result)
    task = {
        "key": key, "monitor": MONITOR, "record_id": record["id"], "version": 1,
        "status": "done", "code": None, "parked": False, "outcome_unknown": False,
        "write_possible": True, "record": record, "result": result, "digest": result_digest,
        "approved_digest": result_digest, "approved_by": "operator", "approved_at": at + 60,
        "approval_deadline": None, "attempts": 1, "failures": {}, "next_at": at + 60,
        "lease_owner": None, "lease_until": None, "lease_token": None,
        "created_at": at + 0.1, "updated_at": at + 61}
    audits = [{"at": at + t, "monitor": MONITOR, "event_id": e, "task_key": key, "code": c}
              for t, e, c in ((0.1, event_id, "ready"), (60, None, "approved"), (61, None, "done"))]
    return delivery, inbox, task, audits


@reads
def add_history(rt, count=HISTORY):
    """``count`` finished tasks with the rows a real one leaves behind.

    Per task: a done delivery, its inbox row, a done task with record and
    result, a delivery and a task attempt, and three audit rows.
    """
    from signoff.models import Attempt, Audit, Delivery, Inbox, Monitor, Task, db, insert_rows
    from signoff.storage import analyze, checkpoint, recount_tallies
    grant_digest = Monitor.get_by_id(MONITOR).grant_digest
    tenant = rt.host().context()["tenant"]
    draft = rt.drafter()
    material = {"document": DOC, "demo_date": "2026-11-01", "source": f"reference://materials/{DOC}"}
    t0 = rt.clock.now() - 86_400
    step = 1000
    with db.atomic():
        for lo in range(0, count, step):
            made = [_finished_task(i, t0 + i * 0.5, tenant, draft, material, grant_digest)
                    for i in range(lo, min(count, lo + step))]
            ids = insert_rows(Delivery, [m[0] for m in made], returning=("id",))
            insert_rows(Inbox, [m[1] for m in made])
            insert_rows(Task, [m[2] for m in made])
            insert_rows(Audit, [a for m in made for a in m[3]])
            attempts = []
            for (did,), (delivery, _, task, _) in zip(ids, made):
                attempts.append({"kind": "delivery", "ref": str(did), "at": delivery["updated_at"],
                                 "step": "draft", "code": "ready", "worker": "bench:1:Worker"})
                attempts.append({"kind": "task", "ref": task["key"], "at": task["updated_at"],
                                 "step": "confirm", "code": "done", "worker": "bench:1:Worker"})
            insert_rows(Attempt, attempts)
    recount_tallies(db.obj)  # the rows were written around the writers that keep them
    checkpoint(db.obj, "TRUNCATE")
    if rt.config.database_url:
        vacuum(rt.config.database_url)
    else:
        analyze(db.obj)
    os.sync()  # a load still in the page cache would be written back during the timing


# -- the measurements -----------------------------------------------------------------------

def bench_huey(folder, kind, n, workers, counter=None, rounds=BASELINE_ROUNDS, processes=1,
               backend=None):
    """Plain Huey: ``kind`` is ``noop``, ``chain`` (read → draft → submit, three tasks)
    or ``job`` (the same work as one task); ``rounds`` batches of ``n``.

    Two thread workers on one SqliteHuey connection contend for its lock and the
    GIL: a batch runs at about 6,000 no-ops a second, or at the one-thread rate
    (about 13,000) when one thread happens to sleep through most of it. The
    baseline is the median of ``rounds`` batches run one after the other, by
    ``processes`` consumer processes on the queue backend of ``backend``.
    With a ``counter`` (installed) the child and this process count commits.
    """
    count, counter = counter is not None, counter or _NoCounter()
    folder.mkdir(parents=True)
    host_path = folder / "host.db"
    if kind != "noop":
        from signoff.hosts.reference import ReferenceHost
        ref = ReferenceHost(None, path=host_path)
        _fill_host(ref, n)
        ref.close()
    spec = _baseline_spec(folder, backend)
    huey, tasks = plain_huey(dict(spec, create_tables=True), host_path)
    cfg = {"queue": spec, "host": str(host_path), "workers": workers}
    group = _Group([_Child(["huey", str(folder / f"stats-{i}.json"), json.dumps(cfg)],
                           folder / f"stats-{i}.json", count) for i in range(processes)])
    probe = _host_conn(str(host_path)) if kind != "noop" else None
    try:
        first = group.wait_ready()
        time.sleep(SETTLE_S)
        handed = _huey_rounds(huey, tasks, kind, n, rounds, counter, probe, group)
        final = group.stop()
    finally:
        group.kill()
        _close_queue(huey)
        if probe is not None:
            probe.close()
    return _huey_figures(kind, n, rounds, first, final, handed)


def _baseline_spec(folder, backend):
    if backend is None or backend.queue == "sqlite":
        return {"path": str(folder / "queue.db")}
    return {"url": backend.queue_url_for_run(), "name": backend.queue_name(folder.name)}


def _close_queue(huey):
    close = getattr(huey.storage, "close", None)
    if close is not None:
        close()


def _huey_rounds(huey, tasks, kind, n, rounds, counter, probe, group):
    """Hand ``rounds`` batches of ``n`` over, one after the other; the commits that took."""
    from signoff.rules.canonical import task_key
    handed = {}
    for r in range(rounds):
        if kind == "noop":
            messages = [huey.serialize_task(tasks["noop"].s()) for _ in range(n)]
        else:
            messages = [huey.serialize_task(tasks[kind].s(
                task_key("plain", str(r), f"r-{i}", 1), f"r-{i}")) for i in range(n)]
        before = counter.snapshot()
        _hand_over(huey, messages)
        handed = _plus(handed, _minus(counter.snapshot(), before))
        if kind != "noop":
            _wait(lambda: probe.execute("SELECT count(*) FROM results").fetchone()[0]
                  >= (r + 1) * n, _budget(n), f"the {kind}s", group.children)
        _wait(lambda: huey.storage.queue_size() == 0, _budget(n), "the tasks", group.children)
        time.sleep(0.1)  # the last task of the batch finishes
    return handed


def _huey_figures(kind, n, rounds, first, final, handed):
    times = final["extra"]
    done = sorted(times["noop" if kind == "noop" else "chain"])
    starts = sorted(done if kind == "noop" else times["chain_start"])
    if len(done) != rounds * n:
        raise RuntimeError(f"plain Huey {kind}: {len(done)} of {rounds * n} finished")
    # Batches ran one after the other, so the sorted times split into batches.
    per_round = [_rate(n, starts[r * n], done[r * n + n - 1]) for r in range(rounds)]
    commits = _plus(_minus(final["commits"], first["commits"]), handed)
    return {"per_s": statistics.median(per_round), "rounds": per_round, "items": rounds * n,
            "commits": commits, "peak_kb": final["memory"]["peak_kb"]}


def bench_signoff(folder, n, workers, counter=None, history=0, pipeline=True, say=None,
                  processes=1, per_event=False, backend=None, reference=None):
    """signoff end to end (or ingest only): figures and memory.

    ``processes`` worker processes of ``workers`` threads each share the home;
    ``per_event`` enqueues one API call per event (as webhooks send them)
    instead of one call for all. With a ``counter`` (installed before this
    call, so the connections opened here are traced) the worker children count
    too, and ``steps`` has the commits. With a ``reference`` home (an empty
    one), ``claim_ms`` and ``claim_reference_ms`` are the claim probe's medians.
    A ``per_event`` run also has ``commit_floor_per_s`` (see ``commit_floor``).
    """
    say = say or (lambda msg: None)
    count, counter = counter is not None, counter or _NoCounter()
    rt = _signoff_home(folder, n, history, backend, say)
    try:
        claims = claim_probe(rt, reference) if reference is not None else None
        floor = commit_floor(rt) if per_event else None
        group = _Group([_Child(["worker", str(folder / f"worker-{i}.json"), "--home", str(folder),
                                "worker", "--workers", str(workers)],
                               folder / f"worker-{i}.json", count, ready_line="worker started")
                        for i in range(processes)])
        try:
            group.wait_ready()
            if history:
                _wait_for_first_purge(rt)
            time.sleep(SETTLE_S)
            out = _run_events(rt, group, n, counter, pipeline, per_event)
            # Batches the API's group commit wrote for other threads.
            out["writer_batches"] = rt.commits.batches
            final = group.stop()
        finally:
            group.kill()
        out["peak_kb"] = final["memory"]["peak_kb"]
        if claims:
            out["claim_ms"], out["claim_reference_ms"] = claims
        if floor:
            out["commit_floor_per_s"] = floor
    finally:
        rt.close()
    return out


def _wait_for_first_purge(rt, timeout=900.0):
    """Wait for the workers' first retention pass to end.

    A worker starts the hourly purge (``chores.retention``) as it starts, and at a
    million tasks that pass reads them all for a few seconds of CPU. A home
    keeping its history runs it once an hour; measured beside it, ingest would
    show the purge's hour, not the history's cost.
    """
    from signoff import storage
    from signoff.models import Chore
    deadline = time.monotonic() + timeout
    with storage.bind(rt.database):
        while time.monotonic() < deadline:
            row = Chore.get_or_none(Chore.name == "purge")
            if row is not None and row.last_summary is not None:
                return
            time.sleep(POLL_S)
    raise RuntimeError(f"bench: the workers' first purge did not end within {timeout:g} s")


def commit_floor(rt, rows=COMMIT_FLOOR_ROWS):
    """Single-row inserts per second that one caller gets from the home's database.

    Each insert is one statement committed on its own, into a scratch table of
    the same database, before any worker runs: what the engine and its disk allow
    one caller, with nothing of signoff's in the way. One enqueue call per
    event cannot beat it, since each call commits one delivery before it
    answers.
    """
    from peewee import Model, TextField

    class CommitProbe(Model):
        value = TextField()

        class Meta:
            database = rt.database
            table_name = "bench_commit_probe"

    CommitProbe.create_table()
    database = rt.database
    sql = f'INSERT INTO "bench_commit_probe" ("value") VALUES ({database.param})'
    try:
        # Timed once the log has grown: appending to a growing file costs each
        # commit a metadata write too, which a busy home's log no longer does.
        for i in range(rows):
            database.execute_sql(sql, (f"warm-{i}",))
        start = time.perf_counter()
        for i in range(rows):
            database.execute_sql(sql, (f"probe-{i}",))
        return rows / (time.perf_counter() - start)
    finally:
        CommitProbe.drop_table()


def claim_probe(rt, reference):
    """Median milliseconds of one claim of a full batch in ``rt`` and in ``reference``.

    Claims ``CLAIM_ROUNDS`` batches of probe deliveries, before any worker
    runs, with nothing else writing, then deletes the probe rows: the claim
    statement's own cost as the tables grow, without lock waits in it. The two
    homes are claimed from in alternate rounds: a busy moment on the machine
    then weighs on both alike, where two runs minutes apart differ by more
    than the tables do.
    """
    from signoff import storage
    from signoff.models import Delivery
    homes = (rt, reference)
    probes = [_probe_rows(home) for home in homes]
    rounds = [[_timed_claim(home) for home in homes] for _ in range(CLAIM_ROUNDS)]
    for home, ids in zip(homes, probes):
        with storage.bind(home.database):
            Delivery.delete().where(Delivery.id.in_(ids)).execute()
    return tuple(statistics.median(times) for times in zip(*rounds))


def _probe_rows(rt):
    size, now = rt.config.batch_size, int(time.time())
    lines = b"".join(json.dumps({"event_id": f"probe-{i}", "name": "comment.created",
                                 "document": DOC, "record_id": f"probe-{i}",
                                 "occurred": now}).encode() + b"\n"
                     for i in range(size * CLAIM_ROUNDS))
    return [r.delivery for r in rt.enqueue(io.BytesIO(lines), MONITOR)]


def _timed_claim(rt):
    from signoff import storage
    from signoff.state.leases import claim_deliveries
    with storage.bind(rt.database):
        start = time.perf_counter()
        claim_deliveries(rt.clock.now(), "bench-probe", 60.0, rt.config.batch_size)
        return (time.perf_counter() - start) * 1000


def _signoff_home(folder, n, history, backend, say):
    from signoff.app import Signoff
    (backend or BenchBackend()).write_config(folder, folder.name)
    rt = Signoff.init(folder)
    _fill_host(rt.host(), n)
    rt.bind(DOC, MONITOR, window_s=24 * 3600)
    if history:
        say(f"  adding {history:,} finished tasks")
        add_history(rt, history)
    return rt


def _event_lines(n):
    now = int(time.time())
    return [json.dumps({"event_id": f"evt-{i}", "name": "comment.created", "document": DOC,
                        "record_id": f"r-{i}", "occurred": now, "text": "wake only"}).encode()
            + b"\n" for i in range(n)]


def _enqueue(rt, lines, per_event):
    """Accept ``lines`` through the API: ``(accepted, wake-ups this process sent,
    transactions the API's group commit wrote, each concurrent call's milliseconds)``.

    ``per_event``: one call per event, from this thread (True) or from
    ``per_event`` threads at once (a number above 1: concurrent callers of
    ``enqueue_events``, each call one event).
    """
    sent, send = [], rt.wakers.send
    rt.wakers.send = lambda kind, count: (sent.append(count), send(kind, count))
    writes, write = [], rt.commits.write  # each call of its writer is one transaction
    rt.commits.write = lambda jobs: (writes.append(len(jobs)), write(jobs))[1]
    call_ms = []
    try:
        if per_event is not True and per_event > 1:
            accepted = _enqueue_concurrently(rt, [json.loads(line) for line in lines], per_event,
                                             call_ms)
        elif per_event:
            accepted = sum(r.accepted for line in lines
                           for r in rt.enqueue(io.BytesIO(line), MONITOR))
        else:
            accepted = sum(r.accepted for r in rt.enqueue(io.BytesIO(b"".join(lines)), MONITOR))
    finally:
        del rt.wakers.send  # the class's own again
        rt.commits.write = write
    return accepted, sum(sent), len(writes), call_ms


def _enqueue_concurrently(rt, events, threads, call_ms):
    """``threads`` callers take the next event and enqueue it alone, until none is left;
    each call's milliseconds go to ``call_ms``."""
    todo, accepted, failed = iter(events), [], []
    lock = threading.Lock()

    def caller():
        count = 0
        try:
            while True:
                with lock:
                    event = next(todo, None)
                if event is None:
                    break
                start = time.perf_counter()
                count += sum(r.accepted for r in rt.enqueue_events([event], MONITOR))
                call_ms.append((time.perf_counter() - start) * 1000)
        except Exception as exc:
            failed.append(exc)
        accepted.append(count)

    workers = [threading.Thread(target=caller) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failed:
        raise failed[0]
    return sum(accepted)


@reads
def _run_events(rt, group, n, counter, pipeline, per_event):
    """Enqueue, ingest and (with ``pipeline``) approve and submit ``n`` events; the figures."""
    from signoff.models import Delivery
    first_id = (Delivery.select(Delivery.id).order_by(Delivery.id.desc()).limit(1).scalar() or 0) + 1
    lines = _event_lines(n)
    w0 = group.snapshot()
    p0 = counter.snapshot()
    cpu0 = (cpu_s(), group.cpu_s())
    t0 = time.perf_counter()
    accepted, wakeups, commits, call_ms = _enqueue(rt, lines, per_event)
    out = {"events": n, "enqueue_s": time.perf_counter() - t0, "enqueue_wakeups": wakeups,
           "enqueue_cpu_s": cpu_s() - cpu0[0], "enqueue_commits": commits}
    if call_ms:  # concurrent callers, beside workers draining what came before
        out["call_p50_ms"], out["call_p99_ms"] = _percentile(call_ms, 50), _percentile(call_ms, 99)
    c_enqueue = _minus(counter.snapshot(), p0)
    if accepted != n:
        raise RuntimeError("bench: not every event was accepted")
    out["enqueue_per_s"] = n / out["enqueue_s"]
    w1 = _await_ingest(rt, group, n, first_id, out)
    ingested_at = time.perf_counter()
    out["steps"] = {"enqueue": c_enqueue, "ingest": _minus(w1["commits"], w0["commits"])}
    if pipeline:
        _approve_and_submit(rt, group, n, counter, w1, out)
        # Event to done as the producer sees it: enqueue, ingest, one bulk approval, submit.
        done_at = out.pop("done_at")
        out["flow_s"], out["flow_per_s"] = done_at - t0, n / (done_at - t0)
        out["after_enqueue_s"] = done_at - t0 - out["enqueue_s"]  # what waiting wake-ups delay
        out["after_ingest_s"] = done_at - ingested_at  # bulk approval, submit and confirmation
        workers = group.cpu_s()
        out["workers_cpu_s"] = None if workers is None else workers - cpu0[1]
    return out


@reads
def _await_ingest(rt, group, n, first_id, out):
    from signoff.state.statuses import DELIVERY_PENDING
    from signoff.models import Delivery
    mine = Delivery.id >= first_id
    ticks = machine_ticks()
    _wait(lambda: not Delivery.select().where(mine, Delivery.status.in_(list(DELIVERY_PENDING))).exists(),
          _budget(n), "ingest", group.children)
    # How busy the machine's cores were: where the workers and their servers share
    # the cores, a second process can add at most what the first left idle.
    out["ingest_busy"] = busy_share(ticks, machine_ticks())
    w1 = _snapshot_covering(group, "ingest", n)
    rows = list(Delivery.select(Delivery.accepted_at, Delivery.updated_at,
                                Delivery.outcome).where(mine).tuples())
    bad = [o for _, _, o in rows if o != "ready"]
    if bad or len(rows) != n:
        raise RuntimeError(f"bench: ingest ended with {sorted(set(bad))} for {len(bad)} events")
    lat = [(u - a) * 1000 for a, u, _ in rows]
    out["ingest_per_s"] = _batch_rate(w1["extra"]["ingest"], n)
    out["ingest_p50_ms"], out["ingest_p99_ms"] = _percentile(lat, 50), _percentile(lat, 99)
    out["ingest_batches"] = len(w1["extra"]["ingest"])
    return w1


def _snapshot_covering(group, step, n, timeout=10.0):
    """The children's counts once their ``step`` batches account for ``n`` rows.

    A batch's rows are committed before the child records its timing, so a
    snapshot taken as soon as the rows look done may miss the last batch.
    """
    deadline = time.monotonic() + timeout
    while True:
        snap = group.snapshot()
        if sum(b[2] for b in snap["extra"][step]) >= n or time.monotonic() >= deadline:
            return snap
        time.sleep(POLL_S)


@reads
def _approve_and_submit(rt, group, n, counter, w1, out):
    from signoff.state.statuses import TASK_ACTIVE
    from signoff.models import Task
    items = [(k, d) for k, d in Task.select(Task.key, Task.digest).where(
        Task.status == "ready").tuples()]
    p1 = counter.snapshot()
    t0 = time.perf_counter()
    answers = rt.approve_many(items, by="bench")
    out["approve_s"] = time.perf_counter() - t0
    c_approve = _minus(counter.snapshot(), p1)
    refused = [a for a in answers if not isinstance(a, dict)]
    if refused or len(items) != n:
        raise RuntimeError(f"bench: {len(refused)} approvals refused, {len(items)} tasks ready")
    _wait(lambda: not Task.select().where(Task.status.in_(list(TASK_ACTIVE))).exists(),
          _budget(n), "submit", group.children)
    out["done_at"] = time.perf_counter()
    _wait(lambda: rt.wakers.pending() == 0, 30, "an empty queue", group.children)
    time.sleep(0.2)
    w2 = _snapshot_covering(group, "submit", n)
    rows = list(Task.select(Task.status, Task.approved_at, Task.updated_at).tuples())
    bad = [s for s, _, _ in rows if s != "done"]
    if bad:
        raise RuntimeError(f"bench: submit ended with {sorted(set(bad))} for {len(bad)} tasks")
    lat = [(u - a) * 1000 for _, a, u in rows]
    out["submit_per_s"] = _batch_rate(w2["extra"]["submit"], n)
    out["approve_per_s"] = n / out["approve_s"]
    out["approve_done_p50_ms"] = _percentile(lat, 50)
    out["approve_done_p99_ms"] = _percentile(lat, 99)
    out["steps"].update(approve=c_approve, submit=_minus(w2["commits"], w1["commits"]))
    out["pipeline_per_s"] = 1 / (1 / out["ingest_per_s"] + 1 / out["approve_per_s"]
                                 + 1 / out["submit_per_s"])
# -- the run ------------------------------------------------------------------------------------

def _per_event(snap, n, key="commits"):
    return {name: round(row[key] / n, 3) for name, row in sorted(snap.items()) if row[key]}


def run_bench(n_events=2000, workers=2, growth=False, as_json=False, processes=(1,),
              database_url=None, queue_url=None, growth_rows=HISTORY, one_write_host=False):
    """Run every measurement once; print a table unless ``as_json``; return the figures.

    ``processes`` lists worker-process counts to measure (plain Huey with as
    many consumer processes each time); the top-level figures are the first's.
    ``one_write_host``: signoff's homes use ``bench.hosts.OneWriteHost``, a host
    commit per result as in plain Huey's job, instead of the reference host's
    batch write.
    """
    n, processes = int(n_events), [int(p) for p in processes]
    say = (lambda msg: None) if as_json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    tmp = Path(tempfile.mkdtemp(prefix="signoff-bench-"))
    backend = BenchBackend(database_url, queue_url, hosts.FACTORY if one_write_host else None)
    try:
        with backend_env_set_aside():
            runs = {p: _timed_run(tmp, backend, n, workers, p, say) for p in processes}
            grown = None
            if growth:
                say(f"signoff: ingest of {n} events with {growth_rows:,} finished tasks present")
                grown = _grown_run(tmp, backend, n, workers, growth_rows, processes[0], say)
            # SQLite files are what the commit counter traces.
            counted = (_counted_run(tmp, backend, n, workers, say)
                       if backend.label == "sqlite/sqlite" else None)
    finally:
        backend.close()
        shutil.rmtree(tmp, ignore_errors=True)
    report = _report(n, workers, backend, runs, counted)
    if grown is not None:
        _add_growth(report, grown, runs[processes[0]]["main"], growth_rows)
    report["targets"] = _targets(report)
    if not as_json:
        print(render(report))
    return report


def _timed_run(tmp, backend, n, workers, processes, say):
    # Timed passes first, with nothing traced (tracing every statement costs
    # signoff 10-15 % and batch enqueue a third); the counted pass comes later.
    tag = f"{processes}p"
    say(f"[{backend.label}, {processes} worker process(es) x {workers} threads]")
    say(f"plain Huey: {BASELINE_ROUNDS} x {n} no-op tasks")
    noop = bench_huey(tmp / f"huey-noop-{tag}", "noop", n, workers, processes=processes,
                      backend=backend)
    say(f"plain Huey: {BASELINE_ROUNDS} x {n} read → draft → submit chains")
    chain = bench_huey(tmp / f"huey-chain-{tag}", "chain", n, workers, processes=processes,
                       backend=backend)
    say(f"plain Huey: {BASELINE_ROUNDS} x {n} one-task jobs (read, draft, submit in one task)")
    job = bench_huey(tmp / f"huey-job-{tag}", "job", n, workers, processes=processes,
                     backend=backend)
    pairs = []
    for r in range(PER_EVENT_PAIRS):
        say(f"signoff ({r + 1}/{PER_EVENT_PAIRS}): {n} events in one enqueue call → ready →"
            " approved → done, then the same with one enqueue call per event")
        main = bench_signoff(tmp / f"home-{tag}-{r}", n, workers, say=say, processes=processes,
                             backend=backend)
        single = bench_signoff(tmp / f"home-single-{tag}-{r}", n, workers, say=say,
                               processes=processes, per_event=True, backend=backend)
        pairs.append((single["flow_per_s"] / main["flow_per_s"], main, single))
    # Two runs a minute apart differ by more than the two ways of enqueueing do: the
    # pair whose ratio is the median stands for all (its batch run gives the figures).
    pairs.sort(key=lambda pair: pair[0])
    _, main, single = pairs[len(pairs) // 2]
    return {"noop": noop, "chain": chain, "job": job, "main": main, "per_event": single,
            "per_event_ratios": [round(ratio, 3) for ratio, _, _ in pairs]}


def _counted_run(tmp, backend, n, workers, say):
    say("counting commits: the same signoff run again, and plain Huey")
    counter = CommitCounter()
    counter.install()
    try:
        counted = bench_signoff(tmp / "home-counted", n, workers, counter, backend=backend)
        few = min(n, COUNTED_HUEY_ITEMS)  # a Huey task's commits do not depend on load
        noop = bench_huey(tmp / "huey-noop-counted", "noop", few, workers, counter, 1)
        chain = bench_huey(tmp / "huey-chain-counted", "chain", few, workers, counter, 1)
    finally:
        counter.uninstall()
    return {"signoff": counted, "noop": noop, "chain": chain}


def _per_busy_share(figures, one):
    """Ingest per busy share of the machine, against one process's: near 1 when the
    processes add what the cores allow (no lock between them), lower when they wait."""
    if not figures["ingest_busy"] or not one["ingest_busy"]:
        return None
    return round(figures["ingest_per_s"] / figures["ingest_busy"]
                 / (one["ingest_per_s"] / one["ingest_busy"]), 3)


def _figures(run):
    """The figures of one process count, rounded."""
    main, noop, chain, single = run["main"], run["noop"], run["chain"], run["per_event"]
    return {
        "huey_noop_per_s": round(noop["per_s"], 1),
        "huey_chain_per_s": round(chain["per_s"], 1),
        "huey_job_per_s": round(run["job"]["per_s"], 1),
        "huey_rounds_per_s": {kind: [round(v, 1) for v in run[kind]["rounds"]]
                              for kind in ("noop", "chain", "job")},
        "enqueue_per_s": round(main["enqueue_per_s"], 1),
        "ingest_per_s": round(main["ingest_per_s"], 1),
        "ingest_p50_ms": round(main["ingest_p50_ms"], 1),
        "ingest_p99_ms": round(main["ingest_p99_ms"], 1),
        "ingest_busy": None if main["ingest_busy"] is None else round(main["ingest_busy"], 3),
        "approve_per_s": round(main["approve_per_s"], 1),
        "submit_per_s": round(main["submit_per_s"], 1),
        "pipeline_per_s": round(main["pipeline_per_s"], 1),
        "approve_done_p50_ms": round(main["approve_done_p50_ms"], 1),
        "approve_done_p99_ms": round(main["approve_done_p99_ms"], 1),
        "worker_peak_rss_mb": round(main["peak_kb"] / 1024, 1),
        "huey_worker_peak_rss_mb": round(noop["peak_kb"] / 1024, 1),
        "ingest_ratio": round(main["ingest_per_s"] / noop["per_s"], 3),
        "pipeline_ratio": round(main["pipeline_per_s"] / chain["per_s"], 3),
        "job_ratio": round(main["pipeline_per_s"] / run["job"]["per_s"], 3),
        "batch_flow_per_s": round(main["flow_per_s"], 1),
        "per_event_enqueue_per_s": round(single["enqueue_per_s"], 1),
        "per_event_ingest_batches": single["ingest_batches"],
        "per_event_enqueue_wakeups": single["enqueue_wakeups"],
        "per_event_flow_per_s": round(single["flow_per_s"], 1),
        "per_event_ratio": round(single["flow_per_s"] / main["flow_per_s"], 3),
        "per_event_ratios": run["per_event_ratios"],
        "commit_floor_per_s": round(single["commit_floor_per_s"], 1),
        "per_event_calls_of_floor": round(single["enqueue_per_s"] / single["commit_floor_per_s"], 3),
        # The best ratio one caller could reach: every call costs one bare commit,
        # ingest keeps up, and approval and submit take what they took after batch ingest.
        "per_event_ratio_ceiling": round(main["flow_s"] / (
            single["events"] / single["commit_floor_per_s"] + main["after_ingest_s"]), 3),
        "batch_after_enqueue_s": round(main["after_enqueue_s"], 3),
        "per_event_after_enqueue_s": round(single["after_enqueue_s"], 3),
        # How the events arrived should not slow what follows their ingest: the
        # one-call run's ingest trails its last call by this much, and approval
        # and submit then take as long as after the batch run's ingest.
        "per_event_ingest_lag_s": round(
            single["flow_s"] - single["enqueue_s"] - single["after_ingest_s"], 3),
        "batch_after_ingest_s": round(main["after_ingest_s"], 3),
        "per_event_after_ingest_s": round(single["after_ingest_s"], 3),
    }


def _report(n, workers, backend, runs, counted):
    first = next(iter(runs))
    report = {"events": n, "workers": workers, "backend": backend.label, "processes": first,
              "host": "one write per result" if backend.host_factory else "batch write"}
    report.update(_figures(runs[first]))
    report["by_processes"] = {str(p): _figures(run) for p, run in runs.items()}
    if 1 in runs:
        for p, figures in report["by_processes"].items():
            figures["ingest_scaling"] = round(figures["ingest_per_s"]
                                              / report["by_processes"]["1"]["ingest_per_s"], 3)
            figures["pipeline_scaling"] = round(figures["pipeline_per_s"]
                                                / report["by_processes"]["1"]["pipeline_per_s"], 3)
            figures["ingest_per_busy_share"] = _per_busy_share(figures, report["by_processes"]["1"])
    report["commits_per_event"] = report["commits_breakdown"] = None
    if counted is not None:
        _add_commits(report, counted, n)
    return report


def _add_commits(report, counted, n):
    steps = counted["signoff"]["steps"]
    total = _plus(*steps.values())
    report["commits_per_event"] = round(_total(total) / n, 3)
    report["commits_breakdown"] = {
        "by_file": _per_event(total, n),
        "by_step": {step: round(_total(snap) / n, 3) for step, snap in steps.items()},
        "with_changes": round(_total(total, "with_changes") / n, 3),
        "huey_chain_per_item": round(_total(counted["chain"]["commits"]) / counted["chain"]["items"], 3),
        "huey_noop_per_item": round(_total(counted["noop"]["commits"]) / counted["noop"]["items"], 3),
    }


def _grown_run(tmp, backend, n, workers, rows, processes, say):
    """Ingest with ``rows`` finished tasks present; the claim probe alternates with an
    empty home's, so the claim ratio compares two figures taken side by side."""
    reference = _signoff_home(tmp / "home-claim-reference", n, 0, backend, say)
    try:
        return bench_signoff(tmp / "home-grown", n, workers, history=rows, pipeline=False,
                             say=say, processes=processes, backend=backend, reference=reference)
    finally:
        reference.close()


def _add_growth(report, grown, main, rows):
    report["growth_rows"] = rows
    report["ingest_growth_per_s"] = round(grown["ingest_per_s"], 1)
    report["ingest_growth_ratio"] = round(grown["ingest_per_s"] / main["ingest_per_s"], 3)
    report["claim_ms_p50"] = round(grown["claim_reference_ms"], 3)
    report["claim_growth_ms_p50"] = round(grown["claim_ms"], 3)
    report["claim_growth_ratio"] = round(grown["claim_ms"] / max(grown["claim_reference_ms"], 1e-6),
                                         3)
    report["growth_worker_peak_rss_mb"] = round(grown["peak_kb"] / 1024, 1)


def _check(value, op, limit, label):
    ok = value >= limit if op == ">=" else value <= limit
    return {"target": label, "value": value, "pass": bool(ok)}


def _targets(r):
    out = {
        "ingest_ratio": _check(r["ingest_ratio"], ">=", 0.5, ">= 0.5 x plain Huey no-op (aim >= 1.0)"),
        "pipeline_ratio": _check(r["pipeline_ratio"], ">=", 0.7, ">= 0.7 x plain Huey 3-task chain"),
        "job_ratio": _check(r["job_ratio"], ">=", 1.0, ">= 1.0 x Huey's lossy one-task job"),
        "enqueue_per_s": _check(r["enqueue_per_s"], ">=", 20_000, ">= 20,000 events/s"),
        "worker_peak_rss_mb": _check(r["worker_peak_rss_mb"], "<=", 60, "<= 60 MB"),
    }
    if r["commits_per_event"] is not None:
        out["commits_per_event"] = _check(r["commits_per_event"], "<=", 8,
                                          "<= 8 SQLite commits per event")
    for p, figures in r["by_processes"].items():
        out[f"per_event_ratio_{p}p"] = _check(figures["per_event_ratio"], ">=", 0.8,
                                              ">= 0.8 x batch enqueue, event → done")
    if "2" in r["by_processes"] and "ingest_scaling" in r["by_processes"]["2"] \
            and not r["backend"].startswith("sqlite"):
        out["ingest_scaling_2p"] = _check(r["by_processes"]["2"]["ingest_scaling"], ">=", 1.4,
                                          ">= 1.4 x one worker process")
    if "ingest_growth_ratio" in r:
        out["ingest_growth_ratio"] = _check(r["ingest_growth_ratio"], ">=", 0.9,
                                            ">= 0.9 x empty-database ingest")
        out["claim_growth_ratio"] = _check(r["claim_growth_ratio"], "<=", 1.25,
                                           "<= 1.25 x empty-database claim time")
    return out


def _rows(r):
    rows = [
        ("plain Huey no-op", f"{r['huey_noop_per_s']:,.0f} tasks/s"),
        ("plain Huey 3-task chain", f"{r['huey_chain_per_s']:,.0f} items/s"),
        ("plain Huey one-task job (lossy)", f"{r['huey_job_per_s']:,.0f} items/s"),
        ("enqueue (API, batch)", f"{r['enqueue_per_s']:,.0f} events/s"),
        ("enqueue (API, one call per event)", f"{r['per_event_enqueue_per_s']:,.0f} events/s"),
        ("ingest: event → ready", f"{r['ingest_per_s']:,.0f} events/s"),
        ("  acceptance → ready p50 / p99", f"{r['ingest_p50_ms']:,.0f} / {r['ingest_p99_ms']:,.0f} ms"),
        ("approve_many", f"{r['approve_per_s']:,.0f} tasks/s"),
        ("submit + confirm", f"{r['submit_per_s']:,.0f} tasks/s"),
        ("pipeline: event → done", f"{r['pipeline_per_s']:,.0f} events/s "
                                   f"({r['pipeline_ratio']:.2f} x the chain, {r['job_ratio']:.2f} x the job)"),
        ("  approve → done p50 / p99",
         f"{r['approve_done_p50_ms']:,.0f} / {r['approve_done_p99_ms']:,.0f} ms"),
        ("enqueue → done, batch / one call per event",
         f"{r['batch_flow_per_s']:,.0f} / {r['per_event_flow_per_s']:,.0f} events/s"
         f" ({r['per_event_enqueue_wakeups']} wake-ups sent by the one-call enqueuer,"
         f" {r['per_event_ingest_batches']} ingest batches)"),
        ("  last enqueue call → all done, batch / per event",
         f"{r['batch_after_enqueue_s']:.2f} / {r['per_event_after_enqueue_s']:.2f} s"),
        ("  last call → all ingested, per event", f"{r['per_event_ingest_lag_s']:.2f} s"),
        ("  all ingested → all done, batch / per event",
         f"{r['batch_after_ingest_s']:.2f} / {r['per_event_after_ingest_s']:.2f} s"),
        ("  one caller's bare commits (the floor of a call)",
         f"{r['commit_floor_per_s']:,.0f}/s; one-call enqueue runs at "
         f"{r['per_event_calls_of_floor']:.2f} of it"),
        ("  per-event ratio at that floor (ceiling)", f"{r['per_event_ratio_ceiling']:.2f}"),
        ("  per-event ratio of each pair of runs",
         ", ".join(f"{ratio:.2f}" for ratio in r["per_event_ratios"])),
    ]
    bd = r["commits_breakdown"]
    if bd is not None:
        rows += [
            ("commits per event", f"{r['commits_per_event']:.2f} ({bd['with_changes']:.2f} changed rows)"),
            ("  by file", ", ".join(f"{k} {v:.2f}" for k, v in bd["by_file"].items())),
            ("  by step", ", ".join(f"{k} {v:.2f}" for k, v in bd["by_step"].items())),
            ("  plain Huey, per item", f"no-op {bd['huey_noop_per_item']:.2f}, "
                                       f"chain {bd['huey_chain_per_item']:.2f}"),
        ]
    rows.append(("worker peak RSS", f"{r['worker_peak_rss_mb']:.1f} MB "
                                    f"(plain Huey {r['huey_worker_peak_rss_mb']:.1f} MB)"))
    if "ingest_growth_per_s" in r:
        rows.append((f"ingest, {r['growth_rows']:,} finished tasks present",
                     f"{r['ingest_growth_per_s']:,.0f} events/s; claim p50 "
                     f"{r['claim_growth_ms_p50']:.2f} ms (empty {r['claim_ms_p50']:.2f} ms)"))
    return rows


def _process_table(r):
    lines = ["", "processes  huey no-op  signoff ingest (cores busy)  ratio  huey chain  "
                 "signoff pipeline  ratio  enqueue→done batch / per event (ceiling)"]
    for p, f in r["by_processes"].items():
        busy = "" if f["ingest_busy"] is None else f"{f['ingest_busy']:.0%}"
        lines.append(f"{p:>9}  {f['huey_noop_per_s']:>10,.0f}  {f['ingest_per_s']:>14,.0f}"
                     f" {busy:>13}  "
                     f"{f['ingest_ratio']:>5.2f}  {f['huey_chain_per_s']:>10,.0f}  "
                     f"{f['pipeline_per_s']:>16,.0f}  {f['pipeline_ratio']:>5.2f}  "
                     f"{f['batch_flow_per_s']:,.0f} / {f['per_event_flow_per_s']:,.0f}"
                     f" ({f['per_event_ratio']:.2f}; {f['per_event_ratio_ceiling']:.2f})")
    for p, f in r["by_processes"].items():
        if f.get("ingest_per_busy_share") is not None and p != "1":
            lines.append(f"  ingest per busy share of the cores, {p} processes against 1: "
                         f"{f['ingest_per_busy_share']:.2f}")
    return lines


def render(r):
    """The human table: figures, then each target with pass or MISS."""
    rows = _rows(r)
    width = max(len(label) for label, _ in rows)
    lines = [f"bench: {r['events']} events, {r['backend']}, {r['processes']} worker "
             f"process(es) x {r['workers']} threads, host: {r['host']}", ""]
    lines += [f"{label.ljust(width)}  {value}" for label, value in rows]
    lines += _process_table(r)
    lines += ["", "targets"]
    kwidth = max(len(k) for k in r["targets"])
    for key, t in r["targets"].items():
        lines.append(f"  {'pass' if t['pass'] else 'MISS'}  {key.ljust(kwidth)}  "
                     f"{str(t['value']).rjust(9)}  {t['target']}")
    return "\n".join(lines)


if __name__ == "__main__":
    from bench import pipeline  # run the child from the importable module, not __main__
    pipeline._child(sys.argv[1:])
