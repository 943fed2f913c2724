"""Testing drafters, policies and settings without files or processes (docs/testing.md).

``MemoryHost`` keeps its records, materials, grant and results in memory and
answers the host contract (``signoff.hosts.contract``) as the reference host
does, with hooks that inject the faults a real host has: submits that fail, an
acknowledgement lost after the write, a permission revoked, a record changed
under a reviewer. ``memory_home`` opens a ready home over it::

    from signoff.testing import memory_home

    def test_my_drafter(tmp_path):
        with memory_home(tmp_path, drafter="mypkg.drafts:make") as rt:
            rt.enqueue_events([event("evt-1")])
            rt.run_until_idle()
            ...

Configured as ``[host] factory = "signoff.testing:MemoryHost"``, every host the
home makes in this process (one per thread) shares one store, keyed by the home's
folder; another process sees a store of its own, so run the pipeline in process
(``Signoff.run_until_idle``), not with ``signoff worker``.
"""

import contextlib
import copy
import json
import threading
import time
from pathlib import Path

from .app import Signoff
from .config import CONFIG_NAME, Config, write_default
from .errors import Blocked, ConfigError, Refused
from .hosts.contract import covered, verdict
from .hosts.reference import DEFAULT_GRANT, readable

FACTORY = "signoff.testing:MemoryHost"
# The reference host's fault names (tests run against either host), and one of its own.
FAULTS = ("read-timeout", "lose-ack", "bad-receipt", "submit-fails")

_OUTCOMES = {"write": "wrote", "held": "idempotent"}  # a submit's item that was not refused
_stores = {}  # the store of each home in this process, by its folder
_stores_lock = threading.Lock()


class MemoryStore:
    """What a home's memory hosts share: records, materials, grant, results, faults."""

    def __init__(self):
        self.lock = threading.RLock()
        self.records, self.materials, self.results = {}, {}, {}
        self.changed = {}  # record id -> (document, when it last changed)
        self.grant = copy.deepcopy(DEFAULT_GRANT)
        self.faults = {}  # name -> calls left (-1: until cleared)
        self.writes = {}  # key -> how many times a result was written under it
        self.calls = []  # every submit: {key, outcome, at}
        self.submit_error = TimeoutError


def store_of(home):
    """The memory store of ``home`` in this process, made on first use."""
    key = str(Path(home).resolve())
    with _stores_lock:
        return _stores.setdefault(key, MemoryStore())


def forget(home):
    """Drop ``home``'s memory store (``memory_home`` does at its end)."""
    with _stores_lock:
        _stores.pop(str(Path(home).resolve()), None)


class MemoryHost:
    """An in-memory host: the host contract, honest, with fault hooks for tests.

    ``batch`` (default true) offers the optional batch calls (``get_many``,
    ``receipts``, ``submit_many``); ``changes`` (default true) offers
    ``changes(document, since)``. Thread-safe: one lock per home's store.
    """

    def __init__(self, home, batch=True, changes=True):
        self.store = store_of(home)
        self.now = time.time  # when a record changed; a test may put its fake clock here
        if batch:  # a host without them has no such attributes (hosts.contract.supports)
            self.get_many, self.receipts, self.submit_many = (
                self._get_many, self._receipts, self._submit_many)
        if changes:
            self.changes = self._changes

    # -- the host contract ---------------------------------------------------

    def context(self):
        """The grant of the current principal."""
        with self.store.lock:
            return copy.deepcopy(self.store.grant)

    def get(self, record_id):
        """The record, as the grant allows it to be read."""
        with self.store.lock:
            if self._fire("read-timeout"):
                raise TimeoutError("memory host: simulated read timeout")
            record = self.store.records.get(record_id)
            if record is None:
                raise Blocked("missing", f"no record {record_id!r}")
            if not readable(record, self.store.grant):
                raise Blocked("access", "the grant does not cover this record")
            return copy.deepcopy(record)

    def read_material(self, document):
        """The material of ``document``."""
        with self.store.lock:
            if document not in self.store.grant["docs"]:
                raise Blocked("access", "the grant does not cover this document")
            if document not in self.store.materials:
                raise Blocked("missing", f"no material for {document!r}")
            return copy.deepcopy(self.store.materials[document])

    def submit(self, key, expected, result):
        """Write ``result`` once under ``key``; the same result again writes nothing."""
        refused = self._submit_many([(key, expected, result)])
        if refused:
            raise Blocked(refused[key], f"the host refused the write: {refused[key]}")

    def receipt(self, key):
        """The result stored under ``key``, or ``None``."""
        return self._receipts([key]).get(key)

    def _get_many(self, record_ids):
        with self.store.lock:
            if self._fire("read-timeout"):
                raise TimeoutError("memory host: simulated read timeout")
            return {rid: copy.deepcopy(self.store.records[rid]) for rid in record_ids
                    if rid in self.store.records
                    and readable(self.store.records[rid], self.store.grant)}

    def _receipts(self, keys):
        with self.store.lock:
            found = {k: copy.deepcopy(self.store.results[k]) for k in keys
                     if k in self.store.results}
            if found and self.store.faults.get("bad-receipt"):
                found = {k: dict(r, draft=f"{r.get('draft')} [altered]") for k, r in found.items()}
            return found

    def _submit_many(self, items):
        with self.store.lock:
            if "submit_review" not in self.store.grant["actions"]:
                raise Blocked("action", "the grant does not allow submit_review")
            if self._fire("submit-fails"):
                self._log([(key, "error") for key, _, _ in items])
                raise self.store.submit_error("memory host: simulated submit failure")
            answers = [(key, self._write(key, expected, result)) for key, expected, result in items]
            lost = any(a == "write" for _, a in answers) and self._fire("lose-ack")
            self._log([(key, _OUTCOMES.get(a, f"blocked:{a}") if not (lost and a == "write")
                        else "lost_ack") for key, a in answers])
            if lost:
                raise TimeoutError("memory host: simulated lost acknowledgement")
            return {key: a for key, a in answers if a not in _OUTCOMES}

    def _write(self, key, expected, result):
        """One item of a submit, under the store's lock: what ``verdict`` said."""
        answer = verdict(self.store.results.get(key), expected, result, self.store.records)
        if answer == "write":
            self.store.results[key] = copy.deepcopy(result)
            self.store.writes[key] = self.store.writes.get(key, 0) + 1
        return answer

    def _changes(self, document, since):
        with self.store.lock:
            grant = self.store.grant
            if document not in grant["docs"] or "read" not in grant["actions"]:
                raise Blocked("access", "the grant does not cover this document")
            found = sorted((at, rid) for rid, (doc, at) in self.store.changed.items()
                           if doc == document and at >= since
                           and self.store.records[rid]["tenant"] == grant["tenant"])
            return [rid for _, rid in found]

    # -- what a test sets up -------------------------------------------------

    def put_record(self, record_id, document=None, version=None, status=None, kind=None,
                   tenant=None, text=None, **fields):
        """Insert or update a record; arguments left ``None`` keep their value.

        A new record needs ``document``; it starts at version 1, ``open``, a
        ``review`` of the grant's tenant. ``fields`` are further keys of the record.
        """
        with self.store.lock:
            old = self.store.records.get(record_id)
            if old is None and document is None:
                raise Refused("missing_option", "a new record needs a document")
            record = copy.deepcopy(old) or {"id": record_id, "version": 1, "status": "open",
                                            "kind": "review", "tenant": self.store.grant["tenant"],
                                            "text": ""}
            given = {"document": document, "version": version, "status": status, "kind": kind,
                     "tenant": tenant, "text": text, **fields}
            record.update({k: v for k, v in given.items() if v is not None})
            record.setdefault("source", f"memory://{record['document']}/{record_id}")
            self.store.records[record_id] = record
            self.store.changed[record_id] = (record["document"], self.now())
            return copy.deepcopy(record)

    def change_record(self, record_id, **changes):
        """The record changed at the host: its version goes up by one, with ``changes``."""
        with self.store.lock:
            version = self.store.records[record_id]["version"] + 1
            return self.put_record(record_id, version=version, **changes)

    def put_material(self, document, demo_date=None, **fields):
        """Set the material of ``document`` (``demo_date`` and any other fields)."""
        material = {"document": document, "source": f"memory://materials/{document}", **fields}
        if demo_date is not None:
            material["demo_date"] = demo_date
        with self.store.lock:
            self.store.materials[document] = material
        return copy.deepcopy(material)

    def put_grant(self, **changes):
        """Change the grant; ``None`` values keep their value."""
        with self.store.lock:
            self.store.grant.update({k: v for k, v in changes.items() if v is not None})
            return self.context()

    def revoke(self, *actions):
        """Take ``actions`` (e.g. ``submit_review``) out of the grant: permission revoked."""
        with self.store.lock:
            kept = [a for a in self.store.grant["actions"] if a not in actions]
            return self.put_grant(actions=kept)

    # -- faults ----------------------------------------------------------------

    def fail_reads(self, times=1):
        """The next ``times`` record reads raise ``TimeoutError``."""
        return self.set_fault("read-timeout", times)

    def fail_submits(self, times=1, error=TimeoutError):
        """The next ``times`` submit calls raise ``error`` before writing anything."""
        with self.store.lock:
            self.store.submit_error = error
            return self.set_fault("submit-fails", times)

    def lose_acks(self, times=1):
        """The next ``times`` submit calls that write raise ``TimeoutError`` afterwards."""
        return self.set_fault("lose-ack", times)

    def alter_receipts(self):
        """Receipts come back altered until ``clear_faults``."""
        return self.set_fault("bad-receipt", -1)

    def set_fault(self, name, times=1):
        """Arm fault ``name`` (``FAULTS``, the reference host's names) for ``times`` calls."""
        if name not in FAULTS:
            raise Refused("unknown_fault", f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
        with self.store.lock:
            self.store.faults[name] = -1 if name == "bad-receipt" else times
            return self.faults()

    def clear_faults(self):
        """Turn every fault off."""
        with self.store.lock:
            self.store.faults.clear()
            return self.faults()

    def faults(self):
        """Armed faults and how many calls each has left (-1: until cleared)."""
        with self.store.lock:
            return {k: v for k, v in self.store.faults.items() if v != 0}

    # -- what a test looks at --------------------------------------------------

    def has_record(self, record_id):
        """True when a record ``record_id`` exists (whatever the grant says)."""
        with self.store.lock:
            return record_id in self.store.records

    def results(self):
        """Every result written, in key order: ``[{key, result}]``."""
        with self.store.lock:
            return [{"key": k, "result": copy.deepcopy(r)}
                    for k, r in sorted(self.store.results.items())]

    def write_counts(self):
        """How many times a result was written under each key (never more than once)."""
        with self.store.lock:
            return dict(self.store.writes)

    def submit_log(self):
        """Every item submitted, in order: ``{key, outcome, at}``, the outcome ``wrote``,
        ``idempotent`` (held already), ``lost_ack`` (written, then the call failed),
        ``blocked:<code>`` or ``error`` (failed before writing)."""
        with self.store.lock:
            return [dict(call) for call in self.store.calls]

    def _log(self, outcomes):
        self.store.calls.extend({"key": key, "outcome": outcome, "at": self.now()}
                                for key, outcome in outcomes)

    def _fire(self, name):
        left = self.store.faults.get(name, 0)
        if left == 0:
            return False
        if left > 0:
            self.store.faults[name] = left - 1
        return True


@contextlib.contextmanager
def memory_home(path, clock=None, drafter=None, drafter_options=None, document="doc-demo",
                **monitor_options):
    """A ``Signoff`` home in ``path``/home over a ``MemoryHost``, bound and ready.

    The home's state and queue are SQLite files in ``path``; the host holds one
    open record ``comment-1`` of ``document`` and its material, and the monitor
    ``default`` is bound on ``document`` with ``monitor_options`` (``Signoff.bind``:
    ``approval_ttl_s``, ``approvals``, ``batch_window_s``, ...). ``drafter`` (``"module:callable"``) and
    ``drafter_options`` replace the template drafter. Closed, and its store
    forgotten, at the end of the ``with``.
    """
    home = Path(path) / "home"
    write_config(home, drafter, drafter_options)
    rt = Signoff.init(home, clock=clock)
    try:
        host = rt.host()
        if clock is not None:
            host.now = clock.now
        host.put_record("comment-1", document=document, text="please add the demo date")
        host.put_material(document, "2026-11-01")
        rt.bind(document, **monitor_options)
        yield rt
    finally:
        rt.close()
        forget(home)


def write_config(home, drafter=None, drafter_options=None):
    """Point ``home``'s ``signoff.toml`` (the default one, made when missing) at the
    memory host, and at ``drafter`` with ``drafter_options`` when given. Its other
    keys (a test's backend URLs) stay."""
    write_default(Path(home))
    config = Path(home) / CONFIG_NAME
    text = _replace(config.read_text(encoding="utf-8"), Config.host_factory, FACTORY)
    if drafter is not None:
        text = _replace(text, Config.drafter_factory, drafter)
        options = "".join(f"{k} = {json.dumps(v)}\n" for k, v in (drafter_options or {}).items())
        text = text.replace("[drafter.options]\n", "[drafter.options]\n" + options, 1)
    config.write_text(text, encoding="utf-8")


def _replace(text, factory, new):
    line = f'factory = "{factory}"'
    if line not in text:
        raise ConfigError("bad_config", f"signoff.toml does not name the default {factory}")
    return text.replace(line, f'factory = "{new}"', 1)
