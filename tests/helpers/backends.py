"""Server backends for the test suite: a PostgreSQL database and a queue name per test.

Like procrastinate's tests, the schema is built once per session into a template
database (``signoff_template_v<schema version>_<digest of the models>``), and
each test gets ``CREATE DATABASE ... TEMPLATE`` of it, dropped at teardown. A
PostgreSQL queue lives in the test's own database (its Huey tables are in the
template); a Redis queue gets a unique name, and its keys are deleted after.
"""

import hashlib
import itertools
import os
import queue
import re
import threading
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
            database_name = f"signoff_test_{tag}"
            self.admin().execute(
                f'CREATE DATABASE "{database_name}" TEMPLATE "{self.template()}"')
            database_url = _with_database(self._server_url(), database_name)
        if self.queue_url and not pg_queue:
            self.redis()
        queue_url = database_url if pg_queue else self.queue_url
        return Settings(database_url if self.database_url else None, queue_url,
                        f"signoff_test_{tag}", database_name)

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
        """Drop the test's database and delete its queue's keys."""
        if settings.database_name:
            self.drop(settings.database_name)
        if settings.queue_url and storage.urls.kind_of(settings.queue_url) != "postgresql":
            client = self.redis()
            for key in client.scan_iter(match=f"huey.*{settings.queue_name}*"):
                client.delete(key)

    def close(self):
        if self._dropper is not None:
            self._drops.put(None)
            self._dropper.join()
        if self._admin is not None:
            self._admin.close()
