"""Where one ``python -m bench`` run keeps its state and queue.

SQLite files in each bench home by default. With a PostgreSQL database URL
every home gets a database of its own, created for the run and dropped after
it; with a PostgreSQL queue URL the run gets one queue database. Every home
and every plain-Huey baseline uses a queue name of its own, so a run shares
nothing with other runs or deployments on the same servers. The backend
overrides of the environment (``SIGNOFF_DATABASE_URL`` …) are set aside for
a run: only the bench's flags choose its backends.
"""

import contextlib
import os
import uuid
from urllib.parse import urlsplit, urlunsplit

from signoff.config import BACKEND_ENV, Config, write_default

POSTGRES = ("postgres://", "postgresql://")
REDIS = ("redis://", "rediss://", "unix://")


def kind_of(url):
    """``sqlite``, ``postgresql`` or ``redis`` for a database or queue URL (``None``: SQLite)."""
    if url is None:
        return "sqlite"
    if url.startswith(POSTGRES):
        return "postgresql"
    if url.startswith(REDIS):
        return "redis"
    raise ValueError(f"unsupported url {url!r}")


@contextlib.contextmanager
def backend_env_set_aside():
    """Within: the environment's backend overrides are unset, for this process and its children.

    ``SIGNOFF_DATABASE_URL`` and the like point a deployment's homes at its
    servers; a bench's homes are its own, named in their own ``signoff.toml``.
    Left set, the override would put every home of a run in one database.
    """
    saved = {name: os.environ.pop(name) for name in BACKEND_ENV.values() if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _with_database(url, name):
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


class BenchBackend:
    """The state and queue backends of one bench run, and the databases it made."""

    def __init__(self, database_url=None, queue_url=None, host_factory=None):
        self.database_url, self.queue_url = database_url, queue_url
        # The homes' [host] factory; None keeps signoff's reference host.
        self.host_factory = host_factory
        self.state, self.queue = kind_of(database_url), kind_of(queue_url)
        self.run_id = f"{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self._created = []  # (server url, database name), dropped by close()
        self._queue_database = None

    @property
    def label(self):
        """``state/queue``, e.g. ``sqlite/sqlite`` or ``postgresql/redis``."""
        return f"{self.state}/{self.queue}"

    def queue_name(self, home):
        """A queue name no other run or home uses."""
        return f"bench-{self.run_id}-{home}"

    def queue_url_for_run(self):
        """The queue URL homes and baselines use (a fresh database on PostgreSQL)."""
        if self.queue != "postgresql":
            return self.queue_url
        if self._queue_database is None:
            self._queue_database = self._create(self.queue_url, f"signoff_bench_{self.run_id}_queue")
        return self._queue_database

    def write_config(self, folder, home):
        """Create ``folder``'s ``signoff.toml`` pointing at this run's backends for ``home``."""
        write_default(folder)
        if self.host_factory is not None:
            path = folder / "signoff.toml"
            default = f'factory = "{Config.host_factory}"'
            text = path.read_text(encoding="utf-8")
            if default not in text:
                raise RuntimeError(f"bench: {path} has no default [host] factory to replace")
            path.write_text(text.replace(default, f'factory = "{self.host_factory}"', 1),
                            encoding="utf-8")
        extra = ""
        if self.state == "postgresql":
            url = self._create(self.database_url, f"signoff_bench_{self.run_id}_{home}")
            extra += f'\n[database]\nurl = "{url}"\n'
        if self.queue != "sqlite":
            extra += (f'\n[queue]\nurl = "{self.queue_url_for_run()}"\n'
                      f'name = "{self.queue_name(home)}"\n')
        if extra:
            path = folder / "signoff.toml"
            path.write_text(path.read_text(encoding="utf-8") + extra, encoding="utf-8")

    def _create(self, server_url, name):
        import psycopg
        name = name.replace("-", "_").lower()
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self._created.append((server_url, name))
        return _with_database(server_url, name)

    def close(self):
        """Drop every database this run created, and its queues' Redis keys."""
        if self.queue == "redis":
            self._delete_redis_keys()
        if not self._created:
            return
        import psycopg
        for server_url, name in reversed(self._created):
            with psycopg.connect(server_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._created = []

    def _delete_redis_keys(self):
        # Wake-ups no worker took (a home without workers, the last of a run) would
        # otherwise stay on the server. Huey keeps a queue name's letters, digits
        # and underscores in its keys, so the run id survives.
        import redis
        client = redis.Redis.from_url(self.queue_url)
        try:
            keys = list(client.scan_iter(match=f"huey.*.bench{self.run_id}*"))
            if keys:
                client.delete(*keys)
        finally:
            client.close()


def vacuum(url):
    """VACUUM ANALYZE the PostgreSQL database at ``url``, as autovacuum does within
    minutes of a bulk load: measured straight after one, the planner pays for index
    entries no vacuum has visited yet (planning the status count took 1 ms at a
    million tasks, and ``GET /api/v1/tasks`` 12-13 ms against 8.5-11.5 after a
    vacuum), and autovacuum's own pass over the load would run beside the timing."""
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
