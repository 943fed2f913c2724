"""Test-only host plug-ins (configured as ``testhosts:NAME`` in ``signoff.toml``).

Every host here is the honest reference host plus instrumentation:

* every write to the ``results`` table is counted by a SQLite trigger in
  ``host.db`` (``result_writes``), so "no key written twice" is checked by the
  database, not by the code under test;
* every ``submit`` call is logged in ``submit_calls`` with what it did:
  ``wrote``, ``idempotent`` (the key held this result already: a redundant
  submit), ``lost_ack`` (wrote, then the acknowledgement was dropped),
  ``blocked:<code>`` or ``error:<class>``;
* a crash point: when ``<home>/crash-at`` names a point, the process that
  reaches that point first removes the file (so it fires once) and SIGKILLs
  itself. Points: ``after-get`` (``get`` returned the record),
  ``after-submit-write`` (``submit`` committed the result, nothing returned yet);
* a hang: when ``<home>/hang-submit`` exists, the first ``submit`` call to
  remove it hangs before writing until another worker has written the same key
  (at most the number of seconds in the file): a call that hangs past its lease.
"""

import os
import random
import signal
import time
from pathlib import Path

from signoff.errors import Blocked
from signoff.hosts.reference import ReferenceHost

CRASH_FILE = "crash-at"

INSTRUMENTATION = """
CREATE TABLE IF NOT EXISTS result_writes (id INTEGER PRIMARY KEY, key TEXT NOT NULL, at REAL NOT NULL);
CREATE TRIGGER IF NOT EXISTS count_result_writes AFTER INSERT ON results
    BEGIN INSERT INTO result_writes (key, at) VALUES (new.key, julianday('now')); END;
CREATE TRIGGER IF NOT EXISTS count_result_updates AFTER UPDATE ON results
    BEGIN INSERT INTO result_writes (key, at) VALUES (new.key, julianday('now')); END;
CREATE TABLE IF NOT EXISTS submit_calls (id INTEGER PRIMARY KEY, key TEXT NOT NULL,
    pid INTEGER NOT NULL, outcome TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS read_calls (id INTEGER PRIMARY KEY, pid INTEGER NOT NULL,
    outcome TEXT NOT NULL, at REAL NOT NULL);
"""


def arm_crash(home, point):
    """Make the next process that reaches ``point`` kill itself with SIGKILL."""
    Path(home, CRASH_FILE).write_text(point, encoding="utf-8")


def crash_armed(home):
    """The armed crash point, or ``None`` once it fired."""
    path = Path(home, CRASH_FILE)
    return path.read_text(encoding="utf-8") if path.exists() else None


class RecordingHost(ReferenceHost):
    """The reference host, with submit calls logged and crash points."""

    def __init__(self, home, **options):
        super().__init__(home, **options)
        self.home = Path(home)
        with self._write():
            for statement in filter(str.strip, INSTRUMENTATION.split(";\n")):
                self.conn.execute(statement)

    # -- crash points --------------------------------------------------------

    def _maybe_crash(self, point):
        path = self.home / CRASH_FILE
        try:
            if path.read_text(encoding="utf-8") != point:
                return
            path.unlink()  # only one process wins the unlink: the crash fires once
        except FileNotFoundError:
            return
        os.kill(os.getpid(), signal.SIGKILL)

    # -- the host protocol, instrumented -------------------------------------

    def get(self, record_id):
        record = super().get(record_id)
        self._maybe_crash("after-get")
        return record

    def _maybe_hang(self, key):
        path = self.home / "hang-submit"
        try:
            deadline = time.monotonic() + float(path.read_text(encoding="utf-8"))
            path.unlink()  # only one caller hangs
        except (FileNotFoundError, ValueError):
            return
        while self._writes(key) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)

    def submit(self, key, expected, result):
        self._maybe_hang(key)
        before = self._writes(key)
        try:
            super().submit(key, expected, result)
        except Blocked as exc:
            self._log_submit(key, f"blocked:{exc.code}")
            raise
        except Exception as exc:
            wrote = self._writes(key) > before
            self._log_submit(key, "lost_ack" if wrote else f"error:{type(exc).__name__}")
            self._maybe_crash("after-submit-write")
            raise
        self._log_submit(key, "wrote" if self._writes(key) > before else "idempotent")
        self._maybe_crash("after-submit-write")

    # -- the batch calls, an item at a time through the calls above (so every
    # subclass's instrumentation sees each item); a failure that is no refusal
    # fails the whole call, as one batch call's failure would.

    def get_many(self, record_ids):
        records = {}
        for record_id in record_ids:
            try:
                records[record_id] = self.get(record_id)
            except Blocked:
                pass  # left out: signoff asks ``get`` again, which names the refusal
        return records

    def receipts(self, keys):
        return {key: found for key in keys if (found := self.receipt(key)) is not None}

    def submit_many(self, items):
        refused = {}
        for key, expected, result in items:
            try:
                self.submit(key, expected, result)
            except Blocked as exc:
                refused[key] = exc.code
        return refused

    # -- instrumentation ------------------------------------------------------

    def _writes(self, key):
        return self.conn.execute("SELECT count(*) FROM result_writes WHERE key = ?",
                                 (key,)).fetchone()[0]

    def _log_submit(self, key, outcome):
        with self._write():
            self.conn.execute("INSERT INTO submit_calls (key, pid, outcome, at) VALUES (?, ?, ?, ?)",
                              (key, os.getpid(), outcome, time.time()))

    def submit_log(self):
        """Every submit call: dicts of key, pid, outcome, at."""
        return [{"key": k, "pid": p, "outcome": o, "at": a} for k, p, o, a in self.conn.execute(
            "SELECT key, pid, outcome, at FROM submit_calls ORDER BY id")]

    def write_counts(self):
        """How many times each key was written to the results table."""
        return dict(self.conn.execute("SELECT key, count(*) FROM result_writes GROUP BY key"))


class KeyErrorHost(RecordingHost):
    """A host with a bug: ``get`` raises ``KeyError`` (not a host error at all)."""

    def get(self, record_id):
        raise KeyError(record_id)


class FlakyReceiptHost(RecordingHost):
    """``receipt`` raises ``TimeoutError`` while the ``receipt-timeout`` fault is armed.

    The fault lives in the reference host's persistent ``faults`` table, so
    tests arm it with :func:`arm_receipt_timeouts`.
    """

    def receipt(self, key):
        if self._fire("receipt-timeout"):
            raise TimeoutError("test host: simulated receipt timeout")
        return super().receipt(key)


def arm_receipt_timeouts(host, times):
    """Arm ``receipt-timeout`` on a reference host's fault table for ``times`` calls."""
    with host._write():
        host.conn.execute("INSERT OR REPLACE INTO faults VALUES ('receipt-timeout', ?)", (times,))


class ChaosHost(RecordingHost):
    """Reads time out and acknowledgements get lost at random (seeded per process).

    Options (``[host.options]``): ``seed``, ``read_timeout_p``, ``lose_ack_p``,
    ``latency_s`` (each call sleeps up to this long, so work takes time and a
    SIGKILL lands mid-batch), ``submit_latency_s`` (the same for ``submit`` alone;
    ``latency_s`` when not given).
    """

    def __init__(self, home, seed=0, read_timeout_p=0.15, lose_ack_p=0.15, latency_s=0.0,
                 submit_latency_s=None, **options):
        super().__init__(home, **options)
        self.rng = random.Random(f"{seed}:{os.getpid()}:{id(self)}")
        self.read_timeout_p = read_timeout_p
        self.lose_ack_p = lose_ack_p
        self.latency_s = latency_s
        self.submit_latency_s = latency_s if submit_latency_s is None else submit_latency_s

    def _latency(self, most=None):
        most = self.latency_s if most is None else most
        if most:
            time.sleep(self.rng.uniform(0, most))

    def get(self, record_id):
        self._latency()
        if self.rng.random() < self.read_timeout_p:
            self._log_read("timeout")
            raise TimeoutError("chaos host: read timed out")
        return super().get(record_id)

    def submit(self, key, expected, result):
        self._latency(self.submit_latency_s)
        lose = self.rng.random() < self.lose_ack_p
        super().submit(key, expected, result)
        if lose:
            # The write committed; only the acknowledgement is lost.
            self._log_submit(key, "ack_dropped")
            raise TimeoutError("chaos host: acknowledgement lost")

    def _log_read(self, outcome):
        with self._write():
            self.conn.execute("INSERT INTO read_calls (pid, outcome, at) VALUES (?, ?, ?)",
                              (os.getpid(), outcome, time.time()))


class WorkerDied(BaseException):
    """Stands in for a crash inside the worker process (not an ``Exception``: nothing catches it)."""


class PoisonHost(RecordingHost):
    """Reading a record listed in ``<home>/poison`` (one id a line) crashes the worker.

    So does submitting a result for a record listed in ``<home>/poison-submit``.

    In-process tests get :class:`WorkerDied`, which escapes the worker's step and
    leaves its leases held, as a crash would. With ``sigkill = true`` in
    ``[host.options]`` the process SIGKILLs itself instead, every time.
    """

    def __init__(self, home, sigkill=False, **options):
        super().__init__(home, **options)
        self.sigkill = sigkill

    def _poisoned(self, record_id, name):
        path = self.home / name
        return path.exists() and record_id in path.read_text(encoding="utf-8").split()

    def _die(self, record_id):
        if self.sigkill:
            os.kill(os.getpid(), signal.SIGKILL)
        raise WorkerDied(record_id)

    def get(self, record_id):
        if self._poisoned(record_id, "poison"):
            self._die(record_id)
        return super().get(record_id)

    def submit(self, key, expected, result):
        """Records listed in ``<home>/poison-submit`` crash the worker inside ``submit``."""
        if self._poisoned(expected.get("id"), "poison-submit"):
            self._die(expected.get("id"))
        return super().submit(key, expected, result)


# Called (when set) at the start of SlowHost's get, receipt and submit: in-process
# tests use it to move a fake clock and run another worker's reaper mid-call.
SLOW_HOOK = None


class SlowHost(RecordingHost):
    """Every record read, receipt read and submit first calls :data:`SLOW_HOOK`.

    It has no batch calls: each call is one slow call, between which a batch
    renews its lease.
    """

    get_many = receipts = submit_many = None

    def _slow(self):
        if SLOW_HOOK is not None:
            SLOW_HOOK()

    def get(self, record_id):
        self._slow()
        return super().get(record_id)

    def receipt(self, key):
        self._slow()
        return super().receipt(key)

    def submit(self, key, expected, result):
        self._slow()
        return super().submit(key, expected, result)


# Called (when set) with the task key at the start of HookHost's submit: in-process
# tests use it to act (cancel a monitor, say) while a write is in flight.
BEFORE_SUBMIT = None


class HookHost(RecordingHost):
    """Every ``submit`` first calls :data:`BEFORE_SUBMIT` with the key.

    It has no batch calls: each task's write is a call of its own, so a cancel
    made during one write finds the batch's other writes not yet started.
    """

    get_many = receipts = submit_many = None

    def submit(self, key, expected, result):
        if BEFORE_SUBMIT is not None:
            BEFORE_SUBMIT(key)
        return super().submit(key, expected, result)


# Record id -> a function of the record ``OddHost.get`` returns instead; the key
# ``"material"``: a function of the material. In-process tests fill it to hand
# signoff answers JSON cannot carry (tuples, non-string keys, sets).
ODD = {}


class OddHost(RecordingHost):
    """The reference host whose answers :data:`ODD` may change."""

    def get(self, record_id):
        record = super().get(record_id)
        return ODD[record_id](record) if record_id in ODD else record

    def read_material(self, document):
        material = super().read_material(document)
        return ODD["material"](material) if "material" in ODD else material


def put_raw_record(host, record):
    """Store ``record`` as JSON text, unchecked: the reference host returns what it parses."""
    import json
    with host._write():
        host.conn.execute("INSERT OR REPLACE INTO records VALUES (?, ?)",
                          (record["id"], json.dumps(record)))


class NoChangesHost(ReferenceHost):
    """The reference host without the optional ``changes`` method, as an older host is."""

    changes = None
