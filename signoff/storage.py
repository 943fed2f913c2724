"""The storage seam: every difference between SQLite and PostgreSQL lives here.

It opens the database a config names (with the session settings of each
engine), creates and checks the schema and its version, claims batches of
waiting rows, inserts rows in bulk, reconnects after a dropped connection and
retries deadlocks and serialization failures. Nothing outside this module asks
which engine it runs on.

The models' database is ``db``, a proxy that resolves to the database bound by
the calling ``Signoff`` (see ``bind``), else to the last one opened in the
process. So two homes opened in one process each use their own database.
"""

import contextvars
import functools
import json
import logging
import os
import random
import sys
import time
from contextlib import contextmanager
from urllib.parse import quote, unquote, urlsplit

import re

from peewee import (CharField, DatabaseError, DatabaseProxy, FloatField, IntegerField,
                    InterfaceError, JSONField, ModelObjectCursorWrapper, Node, OperationalError,
                    PostgresqlDatabase, SqliteDatabase, TextField)

from .errors import ConfigError, NoHome, StorageError

log = logging.getLogger("signoff.storage")

# Bumped whenever a table, column or index changes; `signoff init` records it
# (and brings an older schema up to date).
SCHEMA_VERSION = 4
# Indexes of older versions that `init` drops: version 2 made each claim index
# end in the claim's tie-break, so every engine claims in the same order.
# Version 3 indexed the times retention prunes webhook answers and refusals by.
RETIRED_INDEXES = ("delivery_status_next_at", "task_status_next_at")
SCHEMA_TABLE = "signoff_schema"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# PostgreSQL session settings (milliseconds): no statement, lock wait or idle
# transaction can hold a worker, or the rows it locked, for long.
SESSION = {"lock_timeout": 10_000, "statement_timeout": 120_000,
           "idle_in_transaction_session_timeout": 60_000}
CONNECT_TIMEOUT_S = 5
RECONNECT_S = 10.0  # how long one call keeps trying to get its connection back
# SQLSTATEs worth trying again: serialization failure, deadlock, the server
# shutting down or starting up, and every connection exception (class 08).
RETRY_STATES = {"40001", "40P01", "57P01", "57P02", "57P03"}

_bound = contextvars.ContextVar("signoff_database", default=None)


class BoundDatabase(DatabaseProxy):
    """The database of the ``Signoff`` in use: bound per call, else the last opened."""

    __slots__ = ("_fallback",)
    __setattr__ = object.__setattr__

    @property
    def obj(self):
        return _bound.get() or self._fallback

    @obj.setter
    def obj(self, database):
        object.__setattr__(self, "_fallback", database)


db = BoundDatabase()


@contextmanager
def bind(database):
    """Make the models use ``database`` in this thread until the block ends."""
    token = _bound.set(database)
    try:
        yield database
    finally:
        _bound.reset(token)


# -- lossless strings ------------------------------------------------------------

# PostgreSQL's text and jsonb refuse NUL and lone surrogates, which hosts,
# drafters and people may send (and SQLite's driver refuses lone surrogates in
# text). Such characters are escaped reversibly behind ESCAPE (a private-use
# character, itself escaped when it occurs), so every string reads back
# exactly as it was written.
ESCAPE = "\U000F0000"
_UNSAFE = re.compile("[\x00\ud800-\udfff\U000F0000]")
_ESCAPED = re.compile("\U000F0000(?:(E)|(0)|s([0-9a-f]{4}))")


def escape_text(value):
    """``value`` with NUL, lone surrogates and ``ESCAPE`` escaped (reversibly)."""
    if value.isascii() or not _UNSAFE.search(value):
        return value.replace("\x00", ESCAPE + "0") if "\x00" in value else value
    return _UNSAFE.sub(_escape_one, value)


def _escape_one(match):
    ch = match.group()
    if ch == ESCAPE:
        return ESCAPE + "E"
    if ch == "\x00":
        return ESCAPE + "0"
    return f"{ESCAPE}s{ord(ch):04x}"


def unescape_text(value):
    """The inverse of ``escape_text``."""
    if ESCAPE not in value:
        return value
    return _ESCAPED.sub(lambda m: ESCAPE if m.group(1) else "\x00" if m.group(2)
                        else chr(int(m.group(3), 16)), value)


def lossless_dumps(value, dumps=json.dumps):
    """``value`` as JSON text that every engine stores exactly (strings escaped as
    ``escape_text`` does).

    JSON text shows NUL as ``\\u0000`` and, with ``json.dumps``'s default ASCII
    output, every surrogate and ``ESCAPE`` (an astral character, written as a
    surrogate pair) as ``\\ud…``: most values are dumped once and never walked.
    """
    text = dumps(value)
    if ("\\u0000" in text or "\\ud" in text
            or not text.isascii() and _UNSAFE.search(text)):
        return dumps(_walk(value, escape_text))
    return text


def _walk(value, convert):
    if isinstance(value, str):
        return convert(value)
    if isinstance(value, dict):
        return {convert(k) if isinstance(k, str) else k: _walk(v, convert)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(v, convert) for v in value]
    return value


class Text(TextField):
    """Free-form text of any length, lossless on every engine (SQLite's driver
    refuses lone surrogates too, so it is escaped everywhere)."""

    def db_value(self, value):
        value = super().db_value(value)
        return escape_text(value) if isinstance(value, str) else value

    def python_value(self, value):
        return unescape_text(value) if isinstance(value, str) else value


class JSON(JSONField):
    """JSON (jsonb on PostgreSQL) whose strings are stored losslessly.

    Peewee adapts a JSONField to the engine last given to the proxy; this one
    adapts each value to the engine of the database in use, so homes on two
    engines can be open in one process.
    """

    _codecs = {}  # engine class -> (wrap, read)

    def _codec(self):
        database = getattr(self.model._meta.database, "obj", None)
        engine = type(database)
        if engine not in self._codecs:
            helper = database.json_methods(database)
            dumps = functools.partial(lossless_dumps, dumps=self._dumps)
            self._codecs[engine] = (helper.make_value_wrapper(dumps),
                                    helper.make_value_reader(self._loads))
        return self._codecs[engine]

    def db_value(self, value):
        if value is None or isinstance(value, Node):
            return value
        return self._codec()[0](value)

    def python_value(self, value):
        if value is None:
            return None
        if isinstance(value, str) and "\\u" not in value and ESCAPE not in value:
            return self._codec()[1](value)  # JSON text with no escape in it: nothing to undo
        return _walk(self._codec()[1](value), unescape_text)


# -- opening -------------------------------------------------------------------

def is_postgres_url(url):
    """True for a ``postgresql://`` (or ``postgres://``) url."""
    return url is not None and url.startswith(POSTGRES_SCHEMES)


def open_database(config, create=False):
    """A new Peewee database for ``config``; the SQLite file is made only if ``create``."""
    url = config.database_url
    if url is None:
        database = _open_sqlite(config.state_path, create)
    elif is_postgres_url(url):
        database = _open_postgres(url)
    else:
        raise ConfigError("bad_config", f"unsupported database url {url!r}")
    db.initialize(database)
    return database


LOCK_WAIT_S = 30.0  # how long a SQLite statement waits for the write lock
# Pauses between tries for it: from a tenth of a millisecond, growing to two.
LOCK_PAUSE_S = (0.0001, 1.5, 0.002)


class _Sqlite(SqliteDatabase):
    """SQLite that waits for its write lock in pauses of a fraction of a millisecond.

    SQLite's own busy handler sleeps 1, 2, 5, 10 … 100 ms between tries: a writer
    that finds the lock taken once sleeps far longer than the transactions here
    hold it (1-5 ms), and one that keeps losing it to a stream of one-row commits
    (an intake caller) waits hundreds of milliseconds. Each BEGIN, and each
    statement run outside a transaction, is tried again instead, after pauses
    that grow from 0.1 ms to 2 ms, for up to ``LOCK_WAIT_S``. A statement that
    finds the lock taken has done nothing, so trying it again is safe. Measured
    with one worker process beside a caller enqueueing 2,000 events one call
    each: the worker's time waiting at BEGIN fell from 1.0 s to 0.25 s (longest
    wait 0.23-0.33 s to 0.02 s), and ingest ended 0.06 s after the last call
    instead of 0.1-0.4 s.
    """

    def _add_conn_hooks(self, conn):
        super()._add_conn_hooks(conn)  # the pragmas: SQLite's handler waits while they run
        conn.execute("PRAGMA busy_timeout = 0")  # from here on, _until_unlocked waits

    def begin(self, lock_type=None):
        """Begin a transaction, waiting for the write lock (see the class)."""
        _until_unlocked(lambda: SqliteDatabase.begin(self, lock_type))

    def execute_sql(self, sql, params=None):
        """Run one statement; outside a transaction, waiting for the lock."""
        if self.in_transaction():  # the lock is held since BEGIN
            return SqliteDatabase.execute_sql(self, sql, params)
        return _until_unlocked(lambda: SqliteDatabase.execute_sql(self, sql, params))


def _until_unlocked(attempt):
    pause, growth, longest = LOCK_PAUSE_S
    deadline = None
    while True:
        try:
            return attempt()
        except OperationalError as exc:
            if "database is locked" not in str(exc):
                raise
            now = time.monotonic()
            deadline = deadline or now + LOCK_WAIT_S
            if now >= deadline:
                raise
        time.sleep(pause * (0.5 + random.random()))  # spread waiters apart
        pause = min(pause * growth, longest)


def _open_sqlite(path, create):
    if not create and not path.exists():
        raise NoHome("no_home", f"{path} is missing: run `signoff init`")
    writable = create or os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    # mode=rw: a read never creates a missing file. A read-only home is read
    # with mode=ro; when no write-ahead log is left (its last writer closed
    # cleanly) the file alone is the whole state, and immutable=1 lets SQLite
    # read it without the -shm file it could not create.
    if create:
        mode = "rwc"
    elif writable:
        mode = "rw"
    else:
        mode = "ro" if path.with_name(path.name + "-wal").exists() else "ro&immutable=1"
    pragmas = {"busy_timeout": int(LOCK_WAIT_S * 1000), "foreign_keys": 1}
    if writable:
        pragmas.update(journal_mode="wal", synchronous="full")
    return _Sqlite(
        f"file:{quote(str(path))}?mode={mode}", uri=True, pragmas=pragmas, timeout=LOCK_WAIT_S,
        # Every transaction takes the write lock at BEGIN: a deferred
        # read-then-write transaction fails at once under contention.
        lock_type="IMMEDIATE", returning_clause=True)


def _open_postgres(url):
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    options = " ".join(f"-c {name}={value}" for name, value in SESSION.items())
    return PostgresqlDatabase(url, prefer_psycopg3=True, connect_timeout=CONNECT_TIMEOUT_S,
                              application_name="signoff", options=options)


def is_sqlite(database):
    """True when ``database`` (or the database ``db`` resolves to) is SQLite."""
    return isinstance(getattr(database, "obj", database), SqliteDatabase)


def label(database):
    """What to call ``database`` in a message: the file, or the server database."""
    if database is None:
        return "the database"
    if is_sqlite(database):
        return unquote(database.database.split("?")[0].removeprefix("file:"))
    url = urlsplit(database.database)
    return f"PostgreSQL database {url.path.lstrip('/')!r} at {url.hostname}:{url.port or 5432}"


# -- schema --------------------------------------------------------------------

SCHEMA_LOCK = 0x5169_0ff  # the advisory lock concurrent `init`s queue on


def create_schema(database, models):
    """Create every missing table and index and record the schema version.

    Safe when several processes run it at once: PostgreSQL serialises them on
    an advisory lock, SQLite on the write lock its transaction takes at BEGIN.
    Never drops or resets data.
    """
    with bind(database), database.atomic():
        if not is_sqlite(database):
            database.execute_sql("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        database.create_tables(models, safe=True)
        for name in RETIRED_INDEXES:
            database.execute_sql(f'DROP INDEX IF EXISTS "{name}"')
        database.execute_sql(f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} "
                             "(version INTEGER NOT NULL, at DOUBLE PRECISION NOT NULL)")
        database.execute_sql(f"DELETE FROM {SCHEMA_TABLE}")
        database.execute_sql(f"INSERT INTO {SCHEMA_TABLE} VALUES ({database.param}, "
                             f"{database.param})", (SCHEMA_VERSION, time.time()))


def check_schema(database):
    """Refuse a database without this version's schema, with what to run."""
    where = label(database)
    try:
        with bind(database):
            tables = set(database.get_tables())
            if SCHEMA_TABLE not in tables:
                if {"delivery", "task"} <= tables:  # made before versions were recorded
                    raise StorageError("schema_mismatch", f"{where} has signoff tables but no "
                                       "schema version: run `signoff init` to record it")
                if tables:
                    raise StorageError("database_error", f"{where} is not a signoff database "
                                       "(it holds other tables): point signoff elsewhere, "
                                       "or move it away and run `signoff init`")
                raise NoHome("no_home", f"{where} holds no signoff schema: run `signoff init`")
            found = [v for (v,) in database.execute_sql(f"SELECT version FROM {SCHEMA_TABLE}")]
    except DatabaseError as exc:
        raise StorageError(*describe(exc, database)) from None
    if found != [SCHEMA_VERSION]:
        what = ("run `signoff init` to bring it up to date" if found and found[0] < SCHEMA_VERSION
                else "upgrade signoff, or run `signoff init` on a new database")
        raise StorageError("schema_mismatch", f"{where} has schema version "
                           f"{found[0] if found else 'none'}, this signoff knows "
                           f"{SCHEMA_VERSION}: {what}")


def describe(exc, database):
    """A stable ``(code, one-line message)`` for a database failure."""
    where = label(database)
    text = _first_line(exc)
    if "readonly database" in text or "read-only" in text:
        return "read_only_home", f"{where} is read-only: this command needs to write"
    if is_sqlite(database):
        if "not a database" in text or "malformed" in text:
            return "database_error", f"{where} is not a signoff database ({text}): move it away and run `signoff init`"
        if "unable to open" in text:
            return "database_error", f"{where} cannot be opened ({text})"
    if _unreachable(exc):
        return "database_unavailable", f"{where} is unreachable: {text}"
    return "database_error", f"{where}: {type(exc).__name__}: {text}"


# -- faults: reconnect and retry -----------------------------------------------

def _sqlstate(exc):
    cause = exc.__cause__ or (exc.args[0] if exc.args else None)
    return getattr(cause, "sqlstate", None)


def _unreachable(exc):
    state = _sqlstate(exc)
    if state is not None:
        return state.startswith("08") or state in {"57P01", "57P02", "57P03"}
    text = str(exc)
    return isinstance(exc, (OperationalError, InterfaceError)) and (
        "connection" in text or "server" in text or "closed" in text)


def transient(exc, database):
    """True when ``exc`` is worth a retry on a fresh connection (never on SQLite)."""
    if is_sqlite(database) or not isinstance(exc, (OperationalError, InterfaceError)):
        return False
    state = _sqlstate(exc)
    return state in RETRY_STATES or _unreachable(exc) or not database.is_connection_usable()


def drop_connection(database):
    """Forget this thread's connection, so the next query opens a new one."""
    try:
        database.close()
    except Exception:  # a dead connection may refuse even to close
        database.dispose()


def retrying(database, call, budget_s=RECONNECT_S):
    """``call()``, tried again on a fresh connection after a transient failure.

    For units of work that are safe to run again from the start (a worker
    batch, a reaper pass, a view). Inside an open transaction nothing is
    retried: the failure belongs to the outermost caller.
    """
    deadline, delay = time.monotonic() + budget_s, 0.05
    while True:
        try:
            return call()
        except (OperationalError, InterfaceError) as exc:
            if database.in_transaction() or not transient(exc, database):
                raise
            drop_connection(database)
            if time.monotonic() >= deadline:
                raise
            log.warning("database call failed (%s); retrying on a new connection", _first_line(exc))
            time.sleep(delay)
            delay = min(1.0, delay * 2)


def _first_line(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def log_failed_pass(logger, what, then):
    """Log the exception being handled, for a pass that runs again later.

    A database fault (a lost connection, a lock) is one warning line: it is the
    operator's weather, and the next pass opens a new connection. Anything else
    keeps its traceback, since it is a bug.
    """
    exc = sys.exc_info()[1]
    if isinstance(exc, (OperationalError, InterfaceError)):
        logger.warning("%s failed: database error (%s); %s", what, _first_line(exc), then)
    else:
        logger.exception("%s failed; %s", what, then)


def retried(unit):
    """Decorate a function that is one transaction: run again after a transient failure.

    For a batch's writes: fenced by their lease token, so a second run after a
    failed commit writes each row at most once, and the lease is not lost to a
    dropped connection.
    """
    @functools.wraps(unit)
    def run(*args, **kwargs):
        return retrying(db.obj, lambda: unit(*args, **kwargs))
    return run


def wait_until_reachable(database, budget_s):
    """Connect within ``budget_s`` seconds or raise ``database_unavailable``."""
    try:
        retrying(database, lambda: database.execute_sql("SELECT 1").fetchall(), budget_s)
    except (OperationalError, InterfaceError) as exc:
        raise StorageError(*describe(exc, database)) from None


@contextmanager
def read_snapshot(database):
    """A read-only transaction: every query in the block sees one snapshot."""
    if is_sqlite(database):
        # A deferred transaction in WAL mode reads one snapshot without the write lock.
        with database.atomic("DEFERRED"):
            yield
    else:
        with database.atomic(isolation_level="REPEATABLE READ"):
            database.execute_sql("SET TRANSACTION READ ONLY")
            yield


def analyze(database):
    """Refresh the planner's statistics after a bulk load, on PostgreSQL only.

    PostgreSQL keeps the most common values of a column, so a table of a
    million ``done`` rows and a few waiting ones still plans the waiting ones
    through the status index. SQLite's statistics keep only the average rows
    per value: after ANALYZE of such a table it reads every row to find the
    few waiting ones (a reaper pass at 100,000 finished tasks: 1.8 ms
    without statistics, 61 ms with). Without statistics SQLite takes the index.
    """
    if not is_sqlite(database):
        database.execute_sql("ANALYZE")


def checkpoint(database, mode="PASSIVE"):
    """Copy SQLite's write-ahead log into the database file; nothing elsewhere.

    Run off the batches' commits: PASSIVE never waits for readers or writers,
    and what it cannot copy now it copies next time (TRUNCATE, for a bulk
    load, waits and empties the log).
    """
    if is_sqlite(database):
        database.execute_sql(f"PRAGMA wal_checkpoint({mode})")


def lock_name(*parts):
    """Hold a lock named by ``parts`` until the transaction ends.

    For rows that do not exist yet (``FOR UPDATE`` locks only rows that do):
    PostgreSQL takes a transaction-level advisory lock on a hash of the name;
    SQLite needs nothing, its transactions take the write lock at BEGIN.
    """
    if not is_sqlite(db.obj):
        db.execute_sql("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                       ("\x1f".join(parts),))


def lock_rows(query):
    """``query`` holding the rows it reads until the transaction ends.

    PostgreSQL: ``FOR UPDATE``. SQLite needs nothing: its transactions take the
    write lock at BEGIN.
    """
    return query if is_sqlite(db.obj) else query.for_update()


def prepare_worker(database):
    """Engine settings a long-running worker wants (SQLite: checkpoint in the loop)."""
    if is_sqlite(database):
        # Batches commit without checkpointing; the worker loop checkpoints instead.
        database.pragma("wal_autocheckpoint", 0, permanent=True)


# -- claims --------------------------------------------------------------------

# A claim picks up to ``limit`` waiting rows in one order on every engine:
# earliest ``next_at`` first, ties broken by id for deliveries and by
# (created_at, key) for tasks, and writes its lease on them in one statement.
# Each table's claim index is (status, next_at, tie-break), so that order is
# the index's own: a range of it is read in order and cut at the limit, however
# many rows one enqueue or approval call wrote with the same next_at.
# ``suspect`` picks only rows whose last lease expired without an outcome (see
# leases.py), else only the others.
#
# SQLite (one writer at a time) picks first and updates the keys picked. With
# the portable OR of statuses SQLite reads every waiting row (and, for the
# suspect test, every row behind them) and sorts them all, so a claim slows
# down as the backlog grows: ~14 ms per claim at 100,000 waiting. Here each
# status is one range of the claim index read in order and cut at the limit;
# suspects come from their own small partial index (the unary ``+`` keeps the
# status index out of that query).
SUSPECT = "lease_expired"
_SQLITE_PICK = {
    ("delivery", False): """
        SELECT id FROM (
          SELECT id, next_at FROM (SELECT id, next_at FROM delivery
            WHERE status = 'queued' AND (last_code IS NULL OR last_code != :suspect)
            ORDER BY next_at, id LIMIT :limit)
          UNION ALL
          SELECT id, next_at FROM (SELECT id, next_at FROM delivery
            WHERE status = 'retrying' AND next_at <= :now
              AND (last_code IS NULL OR last_code != :suspect)
            ORDER BY next_at, id LIMIT :limit)
          ORDER BY 2, 1 LIMIT :limit)""",
    ("delivery", True): """
        SELECT id FROM delivery
        WHERE last_code = :suspect
          AND (+status = 'queued' OR (+status = 'retrying' AND +next_at <= :now))
        ORDER BY next_at, id LIMIT :limit""",
    ("task", False): """
        SELECT key FROM (
          SELECT key, next_at, created_at FROM (SELECT key, next_at, created_at FROM task
            WHERE status = 'approved' AND next_at <= :now AND parked = 0
              AND lease_token IS NULL AND (code IS NULL OR code != :suspect)
            ORDER BY next_at, created_at, key LIMIT :limit)
          UNION ALL
          SELECT key, next_at, created_at FROM (SELECT key, next_at, created_at FROM task
            WHERE status = 'uncertain' AND next_at <= :now AND parked = 0
              AND lease_token IS NULL AND (code IS NULL OR code != :suspect)
            ORDER BY next_at, created_at, key LIMIT :limit)
          ORDER BY 2, 3, 1 LIMIT :limit)""",
    ("task", True): """
        SELECT key FROM task
        WHERE code = :suspect AND +status IN ('approved', 'uncertain') AND +next_at <= :now
          AND parked = 0 AND lease_token IS NULL
        ORDER BY next_at, created_at, key LIMIT :limit""",
}

# PostgreSQL (many claimers at once) locks its pick with SKIP LOCKED, so two
# claimers never wait for or share a row. As on SQLite, an OR or IN of statuses
# has the planner read and sort every waiting row before the LIMIT (a sort
# under FOR UPDATE is not cut at the limit: 140 ms a claim at 200,000 waiting,
# against 1 ms this way). So each status is its own range of the claim index,
# read in index order, locked and cut at the limit, and the union of the ranges
# is cut again in claim order. PostgreSQL refuses FOR UPDATE inside a UNION, so
# each range is a CTE of its own; the rows a range locked that the second cut
# drops stay locked only until the claim commits (other claimers skip them as
# they skip claimed ones). Every CTE is MATERIALIZED: as a plain subquery the
# planner may run it once per outer row when its statistics are stale (a fresh
# table), and a claim with limit 50 then takes every waiting row. (With no
# statistics at all, before the first ANALYZE of a freshly filled table, the
# planner may still sort a whole range; the claim still stops at its limit.)
# Suspects come from their own small partial index; the suspect code is written
# into the statement (it is a constant) so that the planner can match that
# index in a generic plan too.
_POSTGRES_RANGES = {
    "delivery": ("status = 'queued'", "status = 'retrying' AND next_at <= %s"),
    "task": tuple(f"status = '{status}' AND NOT parked AND next_at <= %s AND lease_token IS NULL"
                  for status in ("approved", "uncertain")),
}
# The claim order, as the claim indexes end (models.py).
_CLAIM_ORDER = {"delivery": ("next_at", "id"), "task": ("next_at", "created_at", "key")}
_SUSPECT_COLUMN = {"delivery": "last_code", "task": "code"}


def _postgres_pick(table, suspect, now, limit):
    """``(SQL of CTEs ending in "picked", its parameters)``: the keys a claim takes."""
    order = ", ".join(_CLAIM_ORDER[table])
    column = _SUSPECT_COLUMN[table]
    if suspect:
        waiting = " OR ".join(f"({where})" for where in _POSTGRES_RANGES[table])
        sql = (f'picked AS MATERIALIZED (SELECT {order} FROM "{table}" '
               f"WHERE {column} = '{SUSPECT}' AND ({waiting}) "
               f"ORDER BY {order} LIMIT %s FOR UPDATE SKIP LOCKED)")
        return sql, [now] * waiting.count("%s") + [limit]
    ranges, params = [], []
    for n, where in enumerate(_POSTGRES_RANGES[table]):
        ranges.append(f'range{n} AS MATERIALIZED (SELECT {order} FROM "{table}" '
                      f"WHERE {where} AND ({column} IS NULL OR {column} <> '{SUSPECT}') "
                      f"ORDER BY {order} LIMIT %s FOR UPDATE SKIP LOCKED)")
        params += [now] * where.count("%s") + [limit]
    union = " UNION ALL ".join(f"SELECT * FROM range{n}" for n in range(len(ranges)))
    ranges.append(f"picked AS MATERIALIZED ({union} ORDER BY {order} LIMIT %s)")
    return ", ".join(ranges), params + [limit]


def claim(model, suspect, now, limit, changes):
    """Write ``changes`` (and one more attempt) on up to ``limit`` waiting rows.

    Returns the claimed rows as they are after the claim, as ``Fetched`` rows:
    call ``instances()`` once the transaction has ended.
    """
    database = model._meta.database
    table, pk = model._meta.table_name, model._meta.primary_key.column_name
    if is_sqlite(database):
        params = {"now": now, "limit": limit, "suspect": SUSPECT}
        keys = [k for (k,) in database.execute_sql(_SQLITE_PICK[table, suspect], params)]
        if not keys:
            return Fetched(model, None, [])
        chosen = f'"{pk}" IN (' + ", ".join("?" * len(keys)) + ")"
        sets = ", ".join(f'"{column}" = ?' for column in changes)
        sql = (f'UPDATE "{table}" SET {sets}, attempts = attempts + 1 WHERE {chosen} '
               "RETURNING *")
        return Fetched.run(model, sql, [*changes.values(), *keys])
    pick, params = _postgres_pick(table, suspect, now, limit)
    sets = ", ".join(f'"{column}" = %s' for column in changes)
    sql = (f'WITH {pick} UPDATE "{table}" AS t SET {sets}, attempts = t.attempts + 1 '
           f'FROM picked WHERE t."{pk}" = picked."{pk}" RETURNING t.*')
    return Fetched.run(model, sql, [*params, *changes.values()])


class Fetched:
    """Rows a statement returned, kept raw until ``instances()`` is asked for.

    A claim runs under the write lock (SQLite has one for the whole file):
    turning fifty rows into model instances there cost more than the claim's
    own SQL, and every other writer, a caller enqueueing one event included,
    waited for it. So the rows are only fetched in the transaction, and made
    into instances after it.
    """

    def __init__(self, model, description, rows):
        self.model, self.description, self.rows = model, description, rows

    @classmethod
    def run(cls, model, sql, params):
        """Run ``sql`` and fetch every row it returns."""
        cursor = model._meta.database.execute_sql(sql, params)
        return cls(model, cursor.description, cursor.fetchall())

    def __bool__(self):
        return bool(self.rows)

    def instances(self):
        """The rows as ``model`` instances, converted as a query would convert them."""
        if not self.rows:
            return []
        wrapper = ModelObjectCursorWrapper(_Replay(self.description, self.rows), self.model,
                                           [], self.model)
        return list(wrapper)


class _Replay:
    """Just enough of a DB-API cursor to hand fetched rows to Peewee's row wrappers."""

    def __init__(self, description, rows):
        self.description, self._rows = description, iter(rows)

    def fetchone(self):
        return next(self._rows, None)

    def close(self):
        pass


# -- bulk inserts --------------------------------------------------------------

MAX_PARAMS = 30_000  # below SQLite's 32,766 bound parameters per statement


def insert_rows(model, rows, ignore_conflicts=False, returning=()):
    """Insert dicts into ``model`` in as few statements as the parameter limit allows.

    Writes what ``model.insert_many(rows)`` writes (field defaults included),
    without building a query tree per value, which for a batch of dozens of rows
    is most of the cost. ``ignore_conflicts`` skips rows that hit a unique key
    (``ON CONFLICT DO NOTHING``); ``returning`` names fields to return for the
    rows actually inserted.
    """
    return PreparedInsert(model, rows, ignore_conflicts, returning).run()


class PreparedInsert:
    """The rows of an ``insert_rows`` call converted to parameters now, inserted by ``run``.

    Converting values (JSON above all) is most of an insert's Python work; a
    writer that prepares its rows before its transaction holds the write lock
    for the statements only.
    """

    def __init__(self, model, rows, ignore_conflicts=False, returning=()):
        self.database = None
        self.params = []
        if not rows:
            return
        database = model._meta.database
        self.database = getattr(database, "obj", database)  # resolved once, not per value
        self.plan = plan = _insert_plan(model, tuple(rows[0]),
                                        (is_sqlite(self.database), self.database.param),
                                        ignore_conflicts, tuple(returning))
        fixed = {name: d() if callable(d) else d for name, d in plan.defaults.items()}
        self.params = [[c(r[name] if name in r else fixed[name]) for name, c in plan.convert]
                       for r in rows]

    def run(self, only=None):
        """Insert the rows (those at the positions in ``only``, if given); the returned rows."""
        params = self.params if only is None else [self.params[i] for i in only]
        if not params:
            return []
        plan, out = self.plan, []
        per = max(1, MAX_PARAMS // len(plan.fields))
        for lo in range(0, len(params), per):
            chunk = params[lo:lo + per]
            cursor = self.database.execute_sql(
                plan.head + ", ".join([plan.one] * len(chunk)) + plan.tail,
                [v for row in chunk for v in row])
            if plan.returning:
                out.extend(tuple(row) for row in cursor.fetchall())
        return out


class _InsertPlan:
    """One insert shape's SQL pieces and value converters (see ``_insert_plan``)."""

    def __init__(self, model, names, engine, ignore_conflicts, returning):
        meta = model._meta
        sqlite, param = engine
        self.defaults = {f.name: d for f, d in meta.defaults.items() if f.name not in names}
        self.fields = [meta.fields[name] for name in (*names, *self.defaults)]
        holders, self.convert = [], []
        for f in self.fields:
            if sqlite and isinstance(f, JSONField):
                # As JSONField stores on SQLite: json(text), JSON-typed; None is NULL.
                holders.append(f"json({param})")
                self.convert.append((f.name, lambda v, dumps=f._dumps: None if v is None
                                     else lossless_dumps(v, dumps)))
            else:
                holders.append(param)
                self.convert.append((f.name, _plain_converter(f)))
        self.head = (f'INSERT INTO "{meta.table_name}" ('
                     + ", ".join(f'"{f.column_name}"' for f in self.fields) + ") VALUES ")
        self.tail = " ON CONFLICT DO NOTHING" if ignore_conflicts else ""
        self.returning = bool(returning)
        if returning:
            self.tail += " RETURNING " + ", ".join(f'"{meta.fields[n].column_name}"'
                                                   for n in returning)
        self.one = "(" + ", ".join(holders) + ")"


def _plain_converter(field):
    # A value already of the column's own type needs no conversion: skipping
    # the field's db_value for it is a third of the cost of a bulk insert.
    kind = (str if isinstance(field, (TextField, CharField)) else
            int if isinstance(field, IntegerField) else
            float if isinstance(field, FloatField) else None)
    if kind is None:
        return field.db_value
    if isinstance(field, Text):
        return lambda v: escape_text(v) if type(v) is str else field.db_value(v)
    return lambda v: v if type(v) is kind else field.db_value(v)


@functools.lru_cache(maxsize=256)
def _insert_plan(model, names, engine, ignore_conflicts, returning):
    # Callers insert the same few shapes over and over (one event per webhook
    # call): building the statement once per shape, not per call, halves the
    # Python cost of storing one row.
    return _InsertPlan(model, names, engine, ignore_conflicts, returning)


@contextmanager
def session(database):
    """Bind ``database`` for one API call; a connection that died in it is dropped.

    The call itself is not repeated (it may have written); the next one gets a
    fresh connection.
    """
    with bind(database):
        try:
            yield database
        except (OperationalError, InterfaceError) as exc:
            if not database.in_transaction() and transient(exc, database):
                drop_connection(database)
            raise
