"""Server backends for the test suite: a PostgreSQL database and a queue name per test.

Like procrastinate's tests, the schema is built once per session into a template
database (``signoff_template_v<schema version>_<digest of the models>``), and
each test gets a database of its own: ``CREATE DATABASE ... TEMPLATE`` of it, or
one an earlier test of the same process used, emptied (see ``Backends.release``).
A PostgreSQL queue lives in the test's own database (its Huey tables are in the
template); a Redis queue gets a unique name, and its keys are deleted after.
"""

import hashlib
import itertools
import os
import queue
import re
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import signoff
from signoff import storage
from signoff.config import DEFAULT_TOML
from signoff.models import MODELS
from signoff.storage.engines import PostgresEngine

SIGNOFF = Path(signoff.__file__).parent


def _with_database(url, name):
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def _schema_digest():
    # The models and the column types they use: a template is rebuilt when either changes.
    text = (SIGNOFF / "models.py").read_text(encoding="utf-8") + repr(
        [(f.name, f.field_type) for m in MODELS for f in m._meta.sorted_fields])
    return hashlib.sha256(text.encode()).hexdigest()[:10]


# Everything a test may have made in its database that is not rows: a database whose
# fingerprint differs from a fresh clone's is dropped, never handed to another test.
FINGERPRINT = """
SELECT md5(string_agg(item, ',' ORDER BY item)) FROM (
  SELECT format('%s.%s:%s', n.nspname, c.relname, c.relkind) AS item
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  UNION ALL
  SELECT format('%s.%s.%s:%s:%s:%s', n.nspname, c.relname, a.attname, a.atttypid::regtype,
                a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE a.attnum > 0 AND NOT a.attisdropped
     AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  UNION ALL
  SELECT format('%s:%s', conname, pg_get_constraintdef(oid)) FROM pg_constraint
   WHERE connamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL
  SELECT format('%s:%s', proname, prosrc) FROM pg_proc
   WHERE pronamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)
  UNION ALL
  SELECT 'trigger:' || tgname FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL
  SELECT 'extension:' || extname FROM pg_extension
  UNION ALL
  SELECT 'setting:' || array_to_string(setconfig, ',') FROM pg_db_role_setting
   WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL
  SELECT 'large object:' || count(*) FROM pg_largeobject_metadata
) AS items
"""

# Every name a test process makes holds its process id (see ``allocate``).
_OWNER = re.compile(r"signoff_(?:test|empty)_(\d+)_|signoff_template_.*_building_(\d+)$")


def _made_by_a_dead_process(name):
    """True when ``name`` was made by a test process no longer running on this machine."""
    found = _OWNER.search(name)
    if found is None:
        return False
    return not os.path.exists(f"/proc/{found.group(1) or found.group(2)}")


@dataclass
class Settings:
    """One test's backends."""

    database_url: str | None
    queue_url: str | None
    queue_name: str
    database_name: str | None

    def env(self):
        """The environment overrides that point every home of the test here."""
        values = {"SIGNOFF_QUEUE_NAME": self.queue_name}
        if self.database_url:
            values["SIGNOFF_DATABASE_URL"] = self.database_url
        if self.queue_url:
            values["SIGNOFF_QUEUE_URL"] = self.queue_url
        return values

    def write_config(self, home):
        """Create ``home`` with a default ``signoff.toml`` that names these backends."""
        home.mkdir(parents=True, exist_ok=True)
        lines = [DEFAULT_TOML]
        if self.database_url:
            lines.append(f'[database]\nurl = "{self.database_url}"\n')
        lines.append("[queue]\n" + (f'url = "{self.queue_url}"\n' if self.queue_url else "")
                     + f'name = "{self.queue_name}"\n')
        (home / "signoff.toml").write_text("\n".join(lines), encoding="utf-8")


class Backends:
    """The session's servers; ``allocate`` per test, ``release`` after it."""

    def __init__(self, database_url, queue_url):
        self.database_url, self.queue_url = database_url, queue_url
        self.active = bool(database_url or queue_url)
        self._admin = self._redis = None
        self._template = None
        self._counter = itertools.count()
        self._drops, self._dropper = queue.Queue(), None
        self._spares = []  # emptied databases of this process's earlier tests
        self._fresh = None  # what a clone of the template holds (see ``release``)

    # -- servers (a server that is set but down fails the test) ------------------

    def admin(self):
        import psycopg
        if (self._admin is not None
                and self._admin.info.transaction_status != psycopg.pq.TransactionStatus.IDLE):
            # A test timed out inside one of its statements: a new connection,
            # or every later test would fail on "another command is already in progress".
            self._admin.close()
            self._admin = None
        if self._admin is None:
            url = self.database_url or self.queue_url
            self._admin = psycopg.connect(url, autocommit=True, connect_timeout=5)
        return self._admin

    def redis(self):
        if self._redis is None:
            import redis
            self._redis = redis.Redis.from_url(self.queue_url)
            self._redis.ping()
        return self._redis

    def template(self):
        """The template database with this code's schema, built once."""
        if self._template is None:
            name = f"signoff_template_v{storage.SCHEMA_VERSION}_{_schema_digest()}"
            admin = self.admin()
            # Several test sessions may start at once: one builds, the others wait.
            admin.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
            try:
                found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                      (name,)).fetchone()
                if not found:
                    self._build_template(name)
            finally:
                admin.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))
            self._template = name
        return self._template

    def _build_template(self, name):
        from huey import PostgresHuey
        building = f"{name}_building_{os.getpid()}"
        self.admin().execute(f'CREATE DATABASE "{building}"')
        url = _with_database(self._server_url(), building)
        database = PostgresEngine.open(url)
        storage.create_schema(database, MODELS)
        database.close()
        PostgresHuey("template", dsn=url, create_tables=True).storage.close()
        self.admin().execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')

    def _server_url(self):
        return self.database_url or self.queue_url

    def leftover_databases(self):
        """The databases of test processes that no longer exist (see ``sweep_leftovers``)."""
        if storage.urls.kind_of(self._server_url()) != "postgresql":
            return []
        return [n for (n,) in self.admin().execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'signoff\\_%'")
                if _made_by_a_dead_process(n)]

    def sweep_leftovers(self):
        """Drop the databases and Redis keys of test processes that no longer exist.

        A run that was killed (Ctrl-C at the wrong moment, a lost CI job) never
        reaches its teardown: its per-test databases would stay behind, each
        one costing the server a checkpoint when it is finally dropped. Every
        name made here holds its process id (``allocate``), so a name whose
        process is gone on this machine is a leftover; a name of a live process
        (another session running beside this one) is left alone.
        """
        for name in self.leftover_databases():
            # Here, not on the drop thread: behind a run's worth of drops it
            # could take minutes, and a run sweeps once, before its tests.
            self.admin().execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if self.queue_url and storage.urls.kind_of(self.queue_url) != "postgresql":
            client = self.redis()
            for key in client.scan_iter(match="huey.*signoff_test_*"):
                if _made_by_a_dead_process(key.decode(errors="replace")):
                    client.delete(key)

    # -- per test --------------------------------------------------------------

    def allocate(self, test_name):
        """A fresh database (cloned from the template) and queue name for one test."""
        tag = f"{os.getpid()}_{next(self._counter)}_{uuid.uuid4().hex[:6]}"
        database_name = database_url = None
        pg_queue = storage.urls.kind_of(self.queue_url) == "postgresql"
        if self.database_url or pg_queue:
            database_name = self._spares.pop() if self._spares else self._clone(tag)
            database_url = _with_database(self._server_url(), database_name)
        if self.queue_url and not pg_queue:
            self.redis()
        queue_url = database_url if pg_queue else self.queue_url
        return Settings(database_url if self.database_url else None, queue_url,
                        f"signoff_test_{tag}", database_name)

    def _clone(self, tag):
        name = f"signoff_test_{tag}"
        self.admin().execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template()}"')
        if self._fresh is None:
            with self._connect(name) as conn:
                self._fresh = _Fresh.of(conn)
        return name

    def _connect(self, name):
        import psycopg
        return psycopg.connect(_with_database(self._server_url(), name), autocommit=True,
                               connect_timeout=5)

    def allocate_empty(self):
        """``(name, url)`` of a new database without any table."""
        name = f"signoff_empty_{os.getpid()}_{next(self._counter)}_{uuid.uuid4().hex[:6]}"
        self.admin().execute(f'CREATE DATABASE "{name}"')
        return name, _with_database(self._server_url(), name)

    def drop(self, name):
        """Drop a database made here, whoever is still connected to it.

        The drop runs on a thread of its own (a DROP DATABASE takes a second or
        more on a busy server), so the next test does not wait for it; ``close``
        waits until every drop is done.
        """
        if self._dropper is None:
            self._dropper = threading.Thread(target=self._drop_all, name="drop-databases",
                                             daemon=True)
            self._dropper.start()
        self._drops.put(name)

    def _drop_all(self):
        import psycopg
        with psycopg.connect(self._server_url(), autocommit=True, connect_timeout=5) as admin:
            for name in iter(self._drops.get, None):
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def release(self, settings):
        """Empty the test's database for the next test (or drop it); delete its queue's keys."""
        if settings.database_name:
            if self._emptied(settings.database_name):
                self._spares.append(settings.database_name)
            else:
                self.drop(settings.database_name)
        if settings.queue_url and storage.urls.kind_of(settings.queue_url) != "postgresql":
            client = self.redis()
            for key in client.scan_iter(match=f"huey.*{settings.queue_name}*"):
                client.delete(key)

    def _emptied(self, name):
        """True once ``name`` is as a fresh clone is: no session on it, the same rows, schema
        and other objects.

        Emptying instead of dropping: a DROP DATABASE waits for a checkpoint, which writes
        out every page the run's clones dirtied; one per test kept the server's disk busy
        and left the run's end waiting minutes for the drops still queued.
        """
        import psycopg
        try:
            with self._connect(name) as conn:
                if not self._alone(conn):
                    return False
                self._fresh.restore(conn)
                return _Fresh.of(conn, self._fresh.rows) == self._fresh
        except psycopg.Error:
            return False

    @staticmethod
    def _alone(conn, timeout=5.0):
        # What the test left connected (a killed child's session, a pool) is ended,
        # as DROP DATABASE ... WITH (FORCE) would.
        others = ("SELECT pid FROM pg_stat_activity"
                  " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = [pid for (pid,) in conn.execute(others)]
            if not pids:
                return True
            for pid in pids:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            time.sleep(0.01)
        return False

    def close(self):
        for name in self._spares:
            self.drop(name)
        self._spares.clear()
        if self._dropper is not None:
            self._drops.put(None)
            self._dropper.join()
        if self._admin is not None:
            self._admin.close()


@dataclass
class _Fresh:
    """A fresh clone of the template: its fingerprint and the rows it has (the schema version)."""

    fingerprint: str
    rows: dict

    @classmethod
    def of(cls, conn, tables=None):
        """``conn``'s database; the rows of ``tables`` only (default: every table)."""
        if tables is None:
            tables = _tables(conn)
        rows = {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in tables}
        return cls(conn.execute(FINGERPRINT).fetchone()[0], {t: r for t, r in rows.items() if r})

    def restore(self, conn):
        """Put back the rows a fresh clone has, delete every other, restart every sequence."""
        sequences = [s for (s,) in conn.execute(
            "SELECT format('%I.%I', schemaname, sequencename) FROM pg_sequences")]
        # DELETE, not TRUNCATE: on tables this small it is a hundred times faster. In
        # replica mode the foreign keys are not checked, so the tables' order does not matter.
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            for table in _tables(conn):
                conn.execute(f"DELETE FROM {table}")
                # A fresh clone's own rows (the schema version) go back as they were:
                # `signoff init` stamps that row again, and a database whose row
                # differed was dropped instead of reused, an immediate checkpoint each.
                for row in self.rows.get(table, ()):
                    holders = ", ".join(["%s"] * len(row))
                    conn.execute(f"INSERT INTO {table} VALUES ({holders})", row)
            for sequence in sequences:
                conn.execute(f"ALTER SEQUENCE {sequence} RESTART")


def _tables(conn):
    return [t for (t,) in conn.execute(
        "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
        " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')")]
