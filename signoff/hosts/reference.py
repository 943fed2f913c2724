"""The reference host: records, materials, results and a grant in one SQLite file.

It is the demo and the test double, so it is honest: a real database, real
idempotency checks, and fault switches that persist across processes.
"""

import os
import signal
import sqlite3
import time
from pathlib import Path

from ..rules.canonical import canonical
from ..rules.jsontext import loads
from ..errors import Blocked, Refused, StorageError
from .contract import covered, verdict

FILENAME = "host.db"
# MCP Events subscriptions and outbox, kept when `signoff host mcp --http --events` serves.
EVENTS_FILENAME = "host-events.db"
FAULTS = ("read-timeout", "lose-ack", "bad-receipt", "crash-after-write")
ALWAYS = -1  # a fault that stays on until cleared

DEFAULT_GRANT = {"tenant": "demo-tenant", "user": "demo-owner", "docs": ["doc-demo"],
                 "actions": ["read", "draft", "submit_review"], "revision": 1}

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS materials (document TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, result TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS grants (id INTEGER PRIMARY KEY CHECK (id = 1), body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS faults (name TEXT PRIMARY KEY, remaining INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS record_changes (record_id TEXT PRIMARY KEY, document TEXT NOT NULL,
    at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS record_changes_by_document ON record_changes (document, at);
"""


class ReferenceHost:
    """A host backed by ``host.db`` in the signoff home (the host contract in docs/plugins.md)."""

    def __init__(self, home, timeout=5.0, path=None):
        self.now = time.time  # when a record changed; tests put their fake clock here
        self.path = Path(path) if path else Path(home) / FILENAME
        self.conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None,
                                    check_same_thread=False)
        try:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")
            with self._write():
                for statement in filter(str.strip, SCHEMA.split(";")):
                    self.conn.execute(statement)
                self.conn.execute("INSERT OR IGNORE INTO grants VALUES (1, ?)",
                                  (canonical(DEFAULT_GRANT),))
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            code = "read_only_home" if "readonly" in str(exc) else "database_error"
            raise StorageError(code, f"{self.path}: {exc}") from None

    def _write(self):
        return _Immediate(self.conn)

    def _one(self, sql, *args):
        row = self.conn.execute(sql, args).fetchone()
        return loads(row[0]) if row else None

    # -- the host protocol -------------------------------------------------

    def context(self):
        """The grant context of the current principal."""
        return self._one("SELECT body FROM grants WHERE id = 1")

    def get(self, record_id):
        """The authoritative record, as the grant allows it to be read."""
        # The fault switch, the record and the grant in one statement (one snapshot).
        armed, record, grant = self.conn.execute(
            "SELECT (SELECT remaining FROM faults WHERE name = 'read-timeout'),"
            " (SELECT body FROM records WHERE id = ?), (SELECT body FROM grants WHERE id = 1)",
            (record_id,)).fetchone()
        if armed and self._fire("read-timeout"):
            raise TimeoutError("reference host: simulated read timeout")
        if record is None:
            raise Blocked("missing", f"no record {record_id!r}")
        record = loads(record)
        if not readable(record, loads(grant)):
            raise Blocked("access", "the grant does not cover this record")
        return record

    def read_material(self, document):
        """The material for ``document``."""
        grant, material = self.conn.execute(
            "SELECT (SELECT body FROM grants WHERE id = 1),"
            " (SELECT body FROM materials WHERE document = ?)", (document,)).fetchone()
        if document not in loads(grant)["docs"]:
            raise Blocked("access", "the grant does not cover this document")
        if material is None:
            raise Blocked("missing", f"no material for {document!r}")
        return loads(material)

    def get_many(self, record_ids):
        """``{record_id: record}`` for the ids ``get`` would answer, read in one snapshot.

        An id left out (missing, outside the grant) is for ``get`` to explain.
        """
        if self._fire("read-timeout"):
            raise TimeoutError("reference host: simulated read timeout")
        ids = list(record_ids)
        rows = self.conn.execute(
            f"SELECT id, body, (SELECT body FROM grants WHERE id = 1) FROM records"
            f" WHERE id IN ({_marks(ids)})", ids).fetchall()
        if not rows:
            return {}
        grant = loads(rows[0][2])  # one snapshot: the same grant on every row
        return {rid: record for rid, record in ((rid, loads(body)) for rid, body, _ in rows)
                if readable(record, grant)}

    def submit(self, key, expected, result):
        """Write ``result`` under ``key`` once; idempotent for the same result."""
        refused = self._write_results([(key, expected, result)])
        if refused:
            raise Blocked(refused[key], _REFUSALS[refused[key]])

    def submit_many(self, items):
        """Write each ``(key, expected, result)`` as ``submit`` would, in one transaction.

        Returns ``{key: code}`` for the items refused; the others were written,
        or already held the same result. One commit (one fsync) for the batch.
        """
        return self._write_results(items)

    def _write_results(self, items):
        if "submit_review" not in self.context()["actions"]:
            raise Blocked("action", "the grant does not allow submit_review")
        refused, rows = {}, []
        with self._write():
            # Two reads for the whole batch, in its transaction: the results its
            # keys hold and the records its results were drafted from.
            held = self._bodies("SELECT key, result FROM results WHERE key IN",
                                {key for key, _, _ in items})
            current = self._bodies("SELECT id, body FROM records WHERE id IN",
                                   {r.get("id") for _, expected, _ in items
                                    for r in covered(expected)})
            for key, expected, result in items:
                answer = verdict(held.get(key), expected, result, current)
                if answer == "write":
                    held[key] = result  # the same key again in this batch finds it held
                    rows.append((key, canonical(result)))
                elif answer != "held":
                    refused[key] = answer
            self.conn.executemany("INSERT INTO results VALUES (?, ?, strftime('%s','now'))", rows)
        if rows:  # a retry that finds its result already held writes nothing
            self._after_write()
        return refused

    def _bodies(self, select, keys):
        """``{key: decoded JSON}`` of ``select … IN (keys)``, a query of two columns."""
        keys = list(keys)
        rows = self.conn.execute(f"{select} ({_marks(keys)})", keys).fetchall() if keys else ()
        return {key: loads(body) for key, body in rows}

    def _after_write(self):
        if self._fire("crash-after-write"):
            # The process serving the host dies with the write committed and
            # unanswered (over MCP: the server process, not the worker).
            os.kill(os.getpid(), signal.SIGKILL)
        if self._fire("lose-ack"):
            raise TimeoutError("reference host: simulated lost acknowledgement")

    def receipt(self, key):
        """The result stored under ``key``, or ``None``."""
        return self._results([key]).get(key)

    def receipts(self, keys):
        """``{key: result}`` for the keys that hold a result (one query)."""
        return self._results(keys)

    def _results(self, keys):
        found = self._bodies("SELECT key, result FROM results WHERE key IN", keys)
        if found and self._fire("bad-receipt"):
            found = {k: dict(r, draft=str(r.get("draft")) + " [altered]") for k, r in found.items()}
        return found

    def changes(self, document, since):
        """Ids of the records of ``document`` changed at or after ``since``, oldest first.

        The optional host method behind ``monitor resume --replay``; only records
        the grant may read are named.
        """
        grant = self.context()
        if document not in grant["docs"] or "read" not in grant["actions"]:
            raise Blocked("access", "the grant does not cover this document")
        rows = self.conn.execute(
            "SELECT c.record_id, r.body FROM record_changes c JOIN records r ON r.id = c.record_id"
            " WHERE c.document = ? AND c.at >= ? ORDER BY c.at, c.record_id", (document, since))
        return [rid for rid, body in rows if loads(body)["tenant"] == grant["tenant"]]

    # -- administration (the `signoff host` commands) ------------------------

    def has_record(self, record_id):
        """True when a record ``record_id`` exists (whatever the grant says)."""
        return self.conn.execute("SELECT 1 FROM records WHERE id = ?",
                                 (record_id,)).fetchone() is not None

    def put_record(self, record_id, document=None, version=None, status=None, kind=None,
                   tenant=None, text=None):
        """Insert or update a record; options left ``None`` keep their value."""
        with self._write():
            old = self._one("SELECT body FROM records WHERE id = ?", record_id)
            if old is None and document is None:
                raise Refused("missing_option", "a new record needs --document")
            record = old or {"id": record_id, "version": 1, "status": "open", "kind": "review",
                             "tenant": self.context()["tenant"], "text": ""}
            changes = {"document": document, "version": version, "status": status,
                       "kind": kind, "tenant": tenant, "text": text}
            record.update({k: v for k, v in changes.items() if v is not None})
            record.setdefault("source", f"reference://{record['document']}/{record_id}")
            self.conn.execute("INSERT OR REPLACE INTO records VALUES (?, ?)",
                              (record_id, canonical(record)))
            self.conn.execute("INSERT OR REPLACE INTO record_changes VALUES (?, ?, ?)",
                              (record_id, record["document"], self.now()))
        return record

    def put_material(self, document, demo_date):
        """Set the material for ``document``."""
        material = {"document": document, "demo_date": demo_date,
                    "source": f"reference://materials/{document}"}
        with self._write():
            self.conn.execute("INSERT OR REPLACE INTO materials VALUES (?, ?)",
                              (document, canonical(material)))
        return material

    def put_grant(self, **changes):
        """Change the grant context; ``None`` values keep their value."""
        with self._write():
            grant = self.context()
            grant.update({k: v for k, v in changes.items() if v is not None})
            self.conn.execute("UPDATE grants SET body = ? WHERE id = 1", (canonical(grant),))
        return grant

    def set_fault(self, name, times=1):
        """Arm fault ``name`` for ``times`` calls (``bad-receipt``: until cleared)."""
        if name not in FAULTS:
            raise Refused("unknown_fault", f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
        remaining = ALWAYS if name == "bad-receipt" else times
        with self._write():
            self.conn.execute("INSERT OR REPLACE INTO faults VALUES (?, ?)", (name, remaining))
        return self.faults()

    def clear_faults(self):
        """Turn every fault off."""
        with self._write():
            self.conn.execute("DELETE FROM faults")
        return self.faults()

    def faults(self):
        """Armed faults and how many calls each has left (-1: until cleared)."""
        return dict(self.conn.execute("SELECT name, remaining FROM faults WHERE remaining != 0"))

    def results(self):
        """Every result written, in key order."""
        return [{"key": k, "result": loads(r)} for k, r in
                self.conn.execute("SELECT key, result FROM results ORDER BY key")]

    def _fire(self, name):
        row = self.conn.execute("SELECT remaining FROM faults WHERE name = ?", (name,)).fetchone()
        if not row or row[0] == 0:
            return False
        if row[0] == ALWAYS:
            return True
        # A conditional decrement, so concurrent workers share one count exactly.
        with self._write():
            cursor = self.conn.execute(
                "UPDATE faults SET remaining = remaining - 1 WHERE name = ? AND remaining > 0",
                (name,))
            return cursor.rowcount == 1

    def close(self):
        """Close the host's database connection."""
        self.conn.close()


_REFUSALS = {"idempotency_conflict": "this key holds another result",
             "source_changed": "the record changed since it was read"}


def readable(record, grant):
    """True when ``grant`` lets its principal read ``record`` (its tenant, document, ``read``)."""
    return (record["tenant"] == grant["tenant"] and record["document"] in grant["docs"]
            and "read" in grant["actions"])


def _marks(values):
    return ", ".join("?" * len(values))


class _Immediate:
    """BEGIN IMMEDIATE ... COMMIT (or ROLLBACK on error) on a raw connection."""

    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb):
        self.conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
        return False


def events_held(home):
    """Subscriptions the reference host's events server holds (its store in ``home``)."""
    with sqlite3.connect(home / EVENTS_FILENAME) as store:
        return store.execute("SELECT count(*) FROM subscriptions").fetchone()[0]
