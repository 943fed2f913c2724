"""The storage seam: every difference between SQLite and PostgreSQL, and between the
queues, lives in this package.

- ``database``: ``db``, the models' database, bound per ``Signoff`` (``bind``);
- ``engines``: ``SqliteEngine`` and ``PostgresEngine``, opened from a config
  (``open_database``), each attached to its database (``engine_of``);
- ``claims``: which rows a worker may claim, for the claim SQL and the counts;
- ``schema``: create, upgrade and check the schema and its version;
- ``fields``: columns that read back exactly what was written;
- ``bulk``: inserts in few statements, rows read in bulk as instances or tuples;
- ``faults``: what a database failure means, retries on a fresh connection, and the
  methods bound to their object's own database (``own_database``);
- ``queue``: the Huey queue on SQLite, Redis or PostgreSQL;
- ``net``: how long a server connection may stay silent before it counts as dead;
- ``urls``: backend URLs as the drivers take them, and the extras they need;
- ``homekey``: the home's Ed25519 key file, which signs the audit's checkpoints.

The functions below are the seam's face for the rest of signoff: each runs
against the database the calling ``Signoff`` bound (``db``) or the one given.
"""

from peewee import DatabaseError

from ..errors import StorageError
from .bulk import (Fetched, KeyedSelect, PreparedInsert, insert_rows, select_instances,
                   select_tuples, to_param)
from .database import Unbound, bind, db, engine_of, resolve  # noqa: F401 (the package face)
from .engines import open_database, label
from .faults import (describe, describe_server, drop_connection, log_failed_pass, retried,
                     own_database, retrying, session, transient, unstorable, wait_until_reachable)
from .fields import JSON, Text, escape_text, lossless_dumps, unescape_text
from .schema import SCHEMA_TABLE, SCHEMA_VERSION, check_schema, create_schema, recount_tallies

__all__ = [
    "Fetched", "KeyedSelect", "PreparedInsert", "insert_rows", "select_instances", "select_tuples", "to_param", "bind", "db", "engine_of", "open_database",
    "label", "describe", "describe_server", "unstorable", "drop_connection", "log_failed_pass", "retried", "retrying", "session",
    "own_database",
    "transient", "wait_until_reachable", "JSON", "Text", "escape_text", "lossless_dumps",
    "unescape_text", "SCHEMA_TABLE", "SCHEMA_VERSION", "check_schema", "create_schema",
    "recount_tallies",
    "claim", "key_in", "key_case", "unindexed", "lock_name", "lock_rows", "read_snapshot", "unsynced", "prepare_worker", "checkpoint",
    "analyze", "synced_clock",
]


def claim(model, suspect, now, limit, changes):
    """Write ``changes`` (and one more attempt) on up to ``limit`` claimable rows of
    ``model``; only suspects when ``suspect``, else only the others (see ``claims``).

    Returns the claimed rows as ``Fetched``: call ``instances()`` once the
    transaction has ended.
    """
    return engine_of(model._meta.database).claim(model, suspect, now, limit, changes)


def key_in(field, values):
    """``field IN values`` as one SQL node, cheaper to build than ``field.in_`` for a
    batch; each value as ``field`` stores it (text escaped, see ``fields``)."""
    convert = to_param(field)
    return engine_of().key_in(field.column_name, [convert(v) for v in values])


def key_case(field, values, column):
    """``CASE field WHEN key THEN value … END`` for ``{key: value}`` as one SQL node, each
    key as ``field`` and each value as ``column`` stores it (a move's per-row values:
    built value by value by Peewee it cost more than the UPDATE itself for a batch of
    fifty)."""
    key, value = to_param(field), to_param(column)
    return engine_of().key_case(field.column_name, [(key(k), value(v)) for k, v in values.items()])


def unindexed(field):
    """``field`` in a condition beside a key list: the rows are found by their keys,
    and only then checked against ``field``.

    Without statistics SQLite reckons ``status IN (…)`` a few rows through its
    index and ``key IN (200 keys)`` two hundred lookups, so it read every task of
    the status for each batch: with 20,000 approved tasks waiting, submit took
    268 µs an event instead of 184. PostgreSQL plans from its statistics.
    """
    return engine_of().unindexed(field)


def lock_name(*parts):
    """Hold a lock named by ``parts`` until the transaction ends (rows that do not exist
    yet; SQLite needs nothing, its transactions take the write lock at BEGIN)."""
    engine_of().lock_name(parts)


def lock_rows(query):
    """``query`` holding the rows it reads until the transaction ends."""
    return engine_of().lock_rows(query)


def read_snapshot(database):
    """A read-only transaction on ``database``: every query in the block sees one snapshot."""
    return engine_of(database).read_snapshot()


def unsynced(database=None):
    """A transaction whose commit returns before it is on disk, for writes a power
    failure may lose without harm (a claim: its rows wait again, as after a lease
    that expired). A process killed after the commit loses nothing, and the next
    synchronous commit makes it durable too."""
    return engine_of(database).unsynced()


def prepare_worker(database):
    """Engine settings a long-running worker wants (SQLite: checkpoint in the loop)."""
    engine_of(database).prepare_worker()


def checkpoint(database, mode="PASSIVE"):
    """Copy SQLite's write-ahead log into the database file; nothing elsewhere."""
    engine_of(database).checkpoint(mode)


def analyze(database):
    """Refresh the planner's statistics after a bulk load, where that helps (PostgreSQL)."""
    engine_of(database).analyze()


def synced_clock(database):
    """The clock ``database``'s rows are timed by, set now: a server's (whose workers may
    run on machines whose clocks disagree), or this machine's for a SQLite file."""
    clock = engine_of(database).clock()
    try:
        clock.sync()
    except DatabaseError as exc:
        raise StorageError(*describe(exc, database)) from None
    return clock
