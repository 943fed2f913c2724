"""The engines: everything that differs between SQLite and PostgreSQL, one class each.

``open_database`` opens the database a config names and attaches its engine
(``engine_of(database)``); nothing outside this package asks which engine it
runs on. An engine knows how to open its database, name it in a message,
read its faults, claim a batch of waiting rows, lock a name or rows for a
transaction, read one snapshot, and what a worker or an upgrade needs of it.
"""

import os
import random
import re
import time
from contextlib import contextmanager
from urllib.parse import quote, unquote, urlsplit

from peewee import SQL, InterfaceError, NodeList, OperationalError, PostgresqlDatabase, SqliteDatabase

from ..clock import Clock, ServerClock
from ..errors import ConfigError, NoHome
from . import claims
from .bulk import Fetched
from .database import resolve
from ..config import kind_of
from ..rules import jsontext
from .net import libpq_params, postgres_server_settings
from .urls import postgres_dsn

# The advisory lock concurrent `init`s queue on (state schema and queue tables).
SCHEMA_LOCK = 0x5169_0ff


def open_database(config, create=False):
    """A new Peewee database for ``config``, its engine attached; the SQLite file is
    made only if ``create``."""
    kind = kind_of(config.database_url)
    if kind == "sqlite":
        database = SqliteEngine.open(config.state_path, create)
    elif kind == "postgresql":
        database = PostgresEngine.open(config.database_url)
    else:
        raise ConfigError("bad_config", f"unsupported database url {config.database_url!r} "
                      "(postgresql://…; without one the state is SQLite in the home)")
    return database


def label(database):
    """What to call ``database`` in a message: the file, or the server database."""
    if database is None:
        return "the database"
    return resolve(database).engine.label()


def sqlstate(exc):
    """The SQLSTATE a driver error carries, if any."""
    cause = exc.__cause__ or (exc.args[0] if exc.args else None)
    return getattr(cause, "sqlstate", None)


def unreachable(exc):
    """True when ``exc`` says the server could not be reached or went away."""
    state = sqlstate(exc)
    if state is not None:
        return state.startswith("08") or state in {"57P01", "57P02", "57P03"}
    text = str(exc)
    return isinstance(exc, (OperationalError, InterfaceError)) and (
        "connection" in text or "server" in text or "closed" in text)


def missing_database(exc):
    """True when a PostgreSQL server said the database named does not exist."""
    # At connect time the server's refusal carries no SQLSTATE, only its words.
    return (sqlstate(exc) == "3D000" or getattr(exc, "sqlstate", None) == "3D000"
            or re.search(r'database ".*" does not exist', str(exc)) is not None)


def server_label(url):
    """What to call the PostgreSQL database ``url`` names, in a message."""
    url = urlsplit(url)
    return f"PostgreSQL database {url.path.lstrip('/')!r} at {url.hostname}:{url.port or 5432}"


def how_to_create(url):
    """The two ways to create the database ``url`` names, then ``init``."""
    parts = urlsplit(url)
    name = unquote(parts.path.lstrip("/"))
    options = [f"-h {parts.hostname}" if parts.hostname else "",
               f"-p {parts.port}" if parts.port else "",
               f"-U {unquote(parts.username)}" if parts.username else ""]
    return (f"create it (`createdb {' '.join(filter(None, options + [name]))}`, or "
            f'`CREATE DATABASE "{name}"` in psql, as a user allowed to create databases), '
            "then run `signoff init`")


class Params(SQL):
    """An SQL fragment whose parameters are plain values, converted by the caller.

    Peewee's ``SQL`` passes each parameter through the query context one by one
    (a Python call each); a bulk approval's key lists hold thousands. These go
    to the statement's parameters as one list, except where the query is being
    written out as text (``value_literals``), which needs each value quoted.
    """

    def __sql__(self, ctx):
        if ctx.state.value_literals or not self.params:
            return super().__sql__(ctx)
        ctx.literal(self.sql)
        ctx._values.extend(self.params)
        return ctx


class Engine:
    """What one kind of database does its own way; one instance per opened database."""

    kind = None
    param = None  # the driver's placeholder
    json_holder = None  # the placeholder of a JSON value given as JSON text
    true = "TRUE"
    # Peewee's field type -> the element type of an array holding a column's
    # values, where a bulk insert sends one array per column (see PostgresEngine).
    array_types = None
    array_param = None  # the placeholder of such an array

    def __init__(self, database):
        self.database = database
        database.engine = self

    def label(self):
        """What to call the database in a message."""
        raise NotImplementedError

    def describe(self, text):
        """``(code, message)`` for a fault only this engine words its own way, else ``None``."""
        return None

    def transient(self, exc):
        """True when ``exc`` is worth a retry on a fresh connection."""
        return False

    def claim(self, model, suspect, now, limit, changes):
        """Write ``changes`` (and one more attempt) on up to ``limit`` claimable rows.

        Returns the rows as they are after the claim, as ``Fetched`` rows (make
        instances once the transaction has ended).
        """
        raise NotImplementedError

    def key_in(self, column, values):
        """``column IN (values)`` as one SQL node, a placeholder per value."""
        return Params(f'"{column}" IN (' + ", ".join([self.param] * len(values)) + ")", values)

    def key_set(self, column, values):
        """``column IN (values)`` with all of ``values`` in one parameter, so that the
        statement's text is the same however many there are (``storage.KeyedSelect``)."""
        raise NotImplementedError

    def key_case(self, column, pairs):
        """``CASE column WHEN key THEN value … END`` for ``(key, value)`` parameters, as one
        SQL node."""
        return Params(f'CASE "{column}" ' + f"WHEN {self.param} THEN {self.param} " * len(pairs)
                      + "END", [v for pair in pairs for v in pair])

    def unindexed(self, node):
        """``node`` in a condition the rows are not to be found by (``storage.unindexed``);
        as it is where the planner has statistics to choose by."""
        return node

    def lock_name(self, parts):
        """Hold a lock named by ``parts`` until the transaction ends."""

    def lock_rows(self, query):
        """``query`` holding the rows it reads until the transaction ends."""
        return query

    @contextmanager
    def read_snapshot(self):
        """A read-only transaction: every query in the block sees one snapshot."""
        raise NotImplementedError
        yield  # pragma: no cover

    @contextmanager
    def unsynced(self):
        """A transaction whose commit returns before it is on disk (see ``storage.unsynced``)."""
        raise NotImplementedError
        yield  # pragma: no cover

    def lock_schema(self):
        """Serialise concurrent schema changes (inside their transaction)."""

    def prepare_worker(self):
        """Settings a long-running worker wants."""

    def checkpoint(self, mode="PASSIVE"):
        """Copy a write-ahead log into the database file, where there is one."""

    def analyze(self):
        """Refresh the planner's statistics after a bulk load, where that helps."""

    def clock(self):
        """The clock the rows of this database are timed by (see ``clock.ServerClock``)."""
        return Clock()


# -- SQLite ----------------------------------------------------------------------

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


class SqliteEngine(Engine):
    """One SQLite file in the home; one writer at a time."""

    kind = "sqlite"
    param = "?"
    json_holder = "json(?)"  # as a JSONField stores on SQLite: JSON-typed text

    def key_set(self, column, values):
        # A JSON array the statement reads back: the text of an IN list changes
        # with its length, and each new text is parsed again.
        return Params(f'"{column}" IN (SELECT value FROM json_each(?))', [jsontext.dumps(values)])

    @classmethod
    def open(cls, path, create):
        """The state file at ``path`` (made only if ``create``)."""
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
        database = _Sqlite(
            f"file:{quote(str(path))}?mode={mode}", uri=True, pragmas=pragmas,
            timeout=LOCK_WAIT_S,
            # Every transaction takes the write lock at BEGIN: a deferred
            # read-then-write transaction fails at once under contention.
            lock_type="IMMEDIATE", returning_clause=True)
        cls(database)
        return database

    def label(self):
        return unquote(self.database.database.split("?")[0].removeprefix("file:"))

    def unindexed(self, node):
        # Unary plus: the same value, but no index of the column can answer it.
        return NodeList((SQL("+"), node), glue="")

    def describe(self, text):
        where = self.label()
        if "not a database" in text or "malformed" in text:
            return ("database_error", f"{where} is not a signoff database ({text}): move it "
                    "away and run `signoff init`")
        if "unable to open" in text:
            return "database_error", f"{where} cannot be opened ({text})"
        return None

    # A claim picks up to ``limit`` waiting rows in one order on every engine
    # (claims.ORDER) and writes its lease on them in one statement. SQLite (one
    # writer at a time) picks first and updates the keys picked. With the
    # portable OR of statuses SQLite reads every waiting row and sorts them
    # all, so a claim slows down as the backlog grows: ~14 ms per claim at
    # 100,000 waiting. Here each range is one range of the claim index read in
    # order and cut at the limit; suspects come from their own small partial
    # index (the unary ``+`` keeps the status index out of that query).
    def claim(self, model, suspect, now, limit, changes):
        table, pk = model._meta.table_name, model._meta.primary_key.column_name
        pick, params = self._pick(table, pk, suspect, now, limit)
        keys = [k for (k,) in self.database.execute_sql(pick, params)]
        if not keys:
            return Fetched(model, None, [])
        chosen = f'"{pk}" IN (' + ", ".join("?" * len(keys)) + ")"
        sets = ", ".join(f'"{column}" = ?' for column in changes)
        sql = (f'UPDATE "{table}" SET {sets}, attempts = attempts + 1 WHERE {chosen} '
               "RETURNING *")
        return Fetched.run(model, sql, [*changes.values(), *keys])

    @staticmethod
    def _pick(table, pk, suspect, now, limit):
        order = ", ".join(claims.ORDER[table])
        if suspect:
            waiting, needs = claims.waiting(table, "?", column=lambda c: "+" + c)
            return (f'SELECT "{pk}" FROM "{table}" WHERE suspect AND ({waiting}) '
                    f"ORDER BY {order} LIMIT ?", [now] * needs + [limit])
        parts, params = [], []
        for rng in claims.RANGES[table]:
            parts.append(f'SELECT {order} FROM (SELECT {order} FROM "{table}" '
                         f"WHERE {rng.sql('?')} AND NOT suspect ORDER BY {order} LIMIT ?)")
            params += [now] * rng.due + [limit]
        union = " UNION ALL ".join(parts)
        return (f'SELECT "{pk}" FROM ({union} ORDER BY {order} LIMIT ?)', params + [limit])

    @contextmanager
    def read_snapshot(self):
        # A deferred transaction in WAL mode reads one snapshot without the write lock.
        with self.database.atomic("DEFERRED"):
            yield

    @contextmanager
    def unsynced(self):
        # In WAL mode, NORMAL commits without an fsync and stays safe from
        # corruption; the next FULL commit syncs the log, this commit's frames too.
        # (Inside a transaction the setting cannot change: the outer commit decides.)
        if self.database.in_transaction():
            with self.database.atomic():
                yield
            return
        self.database.execute_sql("PRAGMA synchronous = NORMAL")
        try:
            with self.database.atomic():
                yield
        finally:
            self.database.execute_sql("PRAGMA synchronous = FULL")

    def prepare_worker(self):
        # Batches commit without checkpointing; the worker loop checkpoints instead.
        self.database.pragma("wal_autocheckpoint", 0, permanent=True)

    def checkpoint(self, mode="PASSIVE"):
        # Run off the batches' commits: PASSIVE never waits for readers or
        # writers, and what it cannot copy now it copies next time (TRUNCATE,
        # for a bulk load, waits and empties the log).
        self.database.execute_sql(f"PRAGMA wal_checkpoint({mode})")

    # analyze: nothing. SQLite's statistics keep only the average rows per
    # value: after ANALYZE of a table of a million `done` rows and a few
    # waiting ones it reads every row to find the waiting ones (a reaper pass
    # at 100,000 finished tasks: 1.8 ms without statistics, 61 ms with).


# -- PostgreSQL --------------------------------------------------------------------

# Session settings (milliseconds): no statement, lock wait or idle transaction
# can hold a worker, or the rows it locked, for long; nor can a client that
# vanished (the server's end of the bounds in ``net``).
SESSION = {"lock_timeout": 10_000, "statement_timeout": 120_000,
           "idle_in_transaction_session_timeout": 60_000, **postgres_server_settings()}


def session_options():
    """``SESSION`` as libpq's ``options`` parameter."""
    return " ".join(f"-c {name}={value}" for name, value in SESSION.items())


# SQLSTATEs worth trying again: serialization failure, deadlock, the server
# shutting down or starting up, and every connection exception (class 08).
RETRY_STATES = {"40001", "40P01", "57P01", "57P02", "57P03"}


class PostgresEngine(Engine):
    """A PostgreSQL server: many claimers at once, each on its own connection."""

    kind = "postgresql"
    param = "%s"
    json_holder = "%s::jsonb"
    # A bulk insert of many rows sends one array per column (INSERT ... SELECT FROM
    # unnest) rather than a placeholder per value, which psycopg would parse anew
    # each time (storage.bulk). 5,000 events through ingest, approval and submit:
    # about 0.5 s of 2.9 s of CPU went to that parsing.
    array_types = {"BIGAUTO": "bigint", "AUTO": "integer", "BIGINT": "bigint",
                   "INT": "integer", "BOOL": "boolean", "VARCHAR": "text", "TEXT": "text",
                   "DOUBLE": "double precision", "FLOAT": "real", "JSON": "jsonb"}
    # An array goes in binary (psycopg's %b): in text, psycopg quotes and escapes
    # each element with a regular expression, which for fifty JSON texts took 1 ms
    # against 8 µs, a fifth of a PostgreSQL ingest's CPU. The binary elements are
    # text, integers, floats or booleans, each cast by the statement.
    array_param = "%b"

    @classmethod
    def open(cls, url):
        """The server database at ``url``."""
        # Every wait for the server bounded, at both ends (see ``net``).
        database = PostgresqlDatabase(postgres_dsn(url), prefer_psycopg3=True,
                                      application_name="signoff", options=session_options(),
                                      **libpq_params())
        cls(database)
        return database

    def label(self):
        return server_label(self.database.database)

    def transient(self, exc):
        if not isinstance(exc, (OperationalError, InterfaceError)) or missing_database(exc):
            return False  # a database that does not exist stays missing
        return (sqlstate(exc) in RETRY_STATES or unreachable(exc)
                or not self.database.is_connection_usable())

    # PostgreSQL (many claimers at once) locks its pick with SKIP LOCKED, so two
    # claimers never wait for or share a row. As on SQLite, an OR or IN of
    # statuses has the planner read and sort every waiting row before the LIMIT
    # (a sort under FOR UPDATE is not cut at the limit: 140 ms a claim at
    # 200,000 waiting, against 1 ms this way). So each range is read in index
    # order, locked and cut at the limit, and the union of the ranges is cut
    # again in claim order. PostgreSQL refuses FOR UPDATE inside a UNION, so
    # each range is a CTE of its own; the rows a range locked that the second
    # cut drops stay locked only until the claim commits (other claimers skip
    # them as they skip claimed ones). Every CTE is MATERIALIZED: as a plain
    # subquery the planner may run it once per outer row when its statistics
    # are stale (a fresh table), and a claim with limit 50 then takes every
    # waiting row. Suspects come from their own small partial index.
    def claim(self, model, suspect, now, limit, changes):
        table, pk = model._meta.table_name, model._meta.primary_key.column_name
        pick, params = self._pick(table, suspect, now, limit)
        sets = ", ".join(f'"{column}" = %s' for column in changes)
        sql = (f'WITH {pick} UPDATE "{table}" AS t SET {sets}, attempts = t.attempts + 1 '
               f'FROM picked WHERE t."{pk}" = picked."{pk}" RETURNING t.*')
        return Fetched.run(model, sql, [*params, *changes.values()])

    @staticmethod
    def _pick(table, suspect, now, limit):
        """``(SQL of CTEs ending in "picked", its parameters)``: the keys a claim takes."""
        order = ", ".join(claims.ORDER[table])
        if suspect:
            waiting, needs = claims.waiting(table, "%s")
            return (f'picked AS MATERIALIZED (SELECT {order} FROM "{table}" '
                    f"WHERE suspect AND ({waiting}) "
                    f"ORDER BY {order} LIMIT %s FOR UPDATE SKIP LOCKED)", [now] * needs + [limit])
        ranges, params = [], []
        for n, rng in enumerate(claims.RANGES[table]):
            ranges.append(f'range{n} AS MATERIALIZED (SELECT {order} FROM "{table}" '
                          f"WHERE {rng.sql('%s')} AND NOT suspect "
                          f"ORDER BY {order} LIMIT %s FOR UPDATE SKIP LOCKED)")
            params += [now] * rng.due + [limit]
        union = " UNION ALL ".join(f"SELECT * FROM range{n}" for n in range(len(ranges)))
        ranges.append(f"picked AS MATERIALIZED ({union} ORDER BY {order} LIMIT %s)")
        return ", ".join(ranges), params + [limit]

    def key_in(self, column, values):
        # One array parameter, whatever the number of values: psycopg parses an IN
        # list of more than 50 placeholders anew each time (see array_types).
        return Params(f'"{column}" = ANY({self.array_param})', [values])

    key_set = key_in  # already one parameter

    def lock_name(self, parts):
        # For rows that do not exist yet (FOR UPDATE locks only rows that do):
        # a transaction-level advisory lock on a hash of the name.
        self.database.execute_sql("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                                  ("\x1f".join(parts),))

    def lock_rows(self, query):
        return query.for_update()

    @contextmanager
    def read_snapshot(self):
        with self.database.atomic(isolation_level="REPEATABLE READ"):
            self.database.execute_sql("SET TRANSACTION READ ONLY")
            yield

    @contextmanager
    def unsynced(self):
        # The commit does not wait for the server's WAL flush; a later commit's
        # flush covers it. A server crash can lose it, never half of it.
        with self.database.atomic():
            self.database.execute_sql("SET LOCAL synchronous_commit = off")
            yield

    def lock_schema(self):
        self.database.execute_sql("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))

    def clock(self):
        # Workers on other machines share these rows: the server's clock, not this one's.
        return ServerClock(lambda: self.database.execute_sql(
            "SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0])

    def analyze(self):
        # PostgreSQL keeps the most common values of a column, so a table of a
        # million `done` rows and a few waiting ones still plans the waiting
        # ones through the status index.
        self.database.execute_sql("ANALYZE")
