"""The queue's engines: Huey on a SQLite file, Redis or PostgreSQL, and their faults.

A queue message is only a wake-up: the rows are the truth. So the SQLite queue
file needs no fsync of its own, and a lost queue loses only wake-ups, which a
worker's reaper sends again.
"""

import contextlib
import logging
import sqlite3
import sys
import threading

from huey import PostgresHuey, RedisHuey

from ..errors import ConfigError, StorageError
from ..config import kind_of
from .engines import SCHEMA_LOCK, session_options
from .net import libpq_params, redis_params
from .pokes import PokedSqliteHuey, PokedSqliteStorage
from .urls import postgres_dsn


def queue_errors():
    """What a send or a look at the queue may raise when the queue cannot be reached."""
    # A driver that is not imported has raised nothing.
    errors = [OSError, sqlite3.Error]
    if sys.modules.get("redis") is not None:
        errors.append(sys.modules["redis"].exceptions.RedisError)
    if sys.modules.get("psycopg") is not None:
        errors.append(sys.modules["psycopg"].Error)
    return tuple(errors)


# Where Huey's consumer says it could not use the queue, and how each message
# begins: its workers reading the queue, or doing its bookkeeping once a task
# has run (clearing the task's revoke flag, a retry's enqueue); its scheduler
# reading the schedule. A task's own failure is logged by ``huey.api`` instead.
HUEY_QUEUE_FAULTS = {"huey.consumer.Worker": ("Error reading from queue",
                                              "Unhandled error during execution of task"),
                     "huey.consumer.Scheduler": ("Error reading schedule",)}


class _OneLineFaults(logging.Filter):
    """Turn Huey's traceback for a queue it could not use into one warning line.

    Huey's threads share one queue connection: whichever meets it dead first
    logs a traceback (see ``HUEY_QUEUE_FAULTS``) and the next call opens a new
    one. An outage is the operator's weather, told in one line as the worker's
    own database faults are; what a task committed stands, and a lost wake-up
    is the reaper's. Any other record keeps its traceback: a task that failed,
    even on an ``OSError``, is not the queue's.
    """

    def filter(self, record):
        # Set on each of HUEY_QUEUE_FAULTS' loggers, it sees only their own records.
        exc = record.exc_info[1] if record.exc_info else None
        if (isinstance(exc, queue_errors()) and isinstance(record.msg, str)
                and record.msg.startswith(HUEY_QUEUE_FAULTS[record.name])):
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            record.msg = f"{record.getMessage()}: queue unreachable ({first}); Huey reconnects"
            record.args, record.exc_info, record.exc_text = (), None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


@contextlib.contextmanager
def one_line_queue_faults():
    """While inside, Huey's consumer logs a queue outage as one line (see ``_OneLineFaults``)."""
    one_line = _OneLineFaults()
    loggers = [logging.getLogger(name) for name in HUEY_QUEUE_FAULTS]
    for logger in loggers:
        logger.addFilter(one_line)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(one_line)


def make_queue(config, create=False):
    """The Huey instance for ``config``: SQLite beside the state by default.

    Queue tables are created by ``init`` (``create``) only: PostgreSQL's race
    when several workers start at once.
    """
    url, name = config.queue_url, config.queue_name
    kind = kind_of(url)
    if kind == "sqlite":
        # A missing file is made again (a lost queue loses only wake-ups). Its
        # consumers are woken by a datagram after each enqueue (see ``pokes``).
        path = config.queue_path
        fresh = create or not path.exists() or not _sqlite_queue_ready(path)
        return PokedSqliteHuey(name=name, filename=str(path), fsync=False, results=False,
                               timeout=30, create_tables=fresh)
    if kind == "redis":
        # Every wait bounded, as PostgreSQL's are: a server that is down or silent
        # fails a call, never hangs it (see ``net``). Huey's consumer waits in a
        # blocking pop (BRPOP, a second at a time): a push wakes it at once.
        import redis  # here: only a Redis queue needs the driver
        pool = redis.ConnectionPool.from_url(url, **redis_params(redis, url))
        return RedisHuey(name=name, connection_pool=pool, results=False)
    if kind == "postgresql":
        # Huey's consumer waits on LISTEN, and each enqueue NOTIFYs in its commit.
        queue = PostgresHuey(name=name, dsn=postgres_dsn(url), results=False,
                             create_tables=False, connection=QueueConnections(postgres_dsn(url)))
        if create:
            _create_postgres_queue(queue)
        return queue
    raise ConfigError("bad_config", f"unsupported queue url {url!r}")


def wake_consumers(queue):
    """Wake this process's consumers of ``queue`` that wait for a wake-up, for them to
    see their stop: a SQLite queue's wait on a socket (``pokes``); the others' blocking
    reads end on their own within a second."""
    if isinstance(queue.storage, PokedSqliteStorage):
        queue.storage.stop_waiting()


def close_queue(queue):
    """Release ``queue``'s connections (Huey reopens them on next use).

    Huey's Redis storage has no ``close`` of its own: its pool's idle sockets
    would stay open until the collector finds them. A socket in use is left to
    its thread: a consumer still blocked in its read (a stop on a busy machine
    can outlast the shutdown timeout) would fail on a socket closed under it.
    Its PostgreSQL storage closes only the calling thread's LISTEN connection;
    the ones of threads that have ended are closed here too.
    """
    pool = getattr(queue.storage, "pool", None)
    if pool is not None:
        pool.disconnect(inuse_connections=False)
    queue.storage.close()
    connections = getattr(queue.storage, "connection", None)
    if isinstance(connections, QueueConnections):
        connections.close_unused()


class QueueConnections:
    """Opens the connections of a PostgreSQL queue and keeps hold of every one.

    Huey's ``PostgresStorage`` keeps a LISTEN connection per consumer thread in
    a thread-local and leaves it to the garbage collector once the thread has
    ended (an unclosed psycopg connection warns when collected). Held here,
    such a connection stays reachable until ``close_unused`` closes it.
    """

    def __init__(self, url):
        self.url = url
        self._lock = threading.Lock()
        self._opened = []  # (connection, thread that opened it)

    def __call__(self):
        import psycopg
        conn = psycopg.connect(self.url, application_name="signoff-queue",
                               options=session_options(), **libpq_params())
        with self._lock:
            self._opened = [(c, t) for c, t in self._opened if not c.closed]
            self._opened.append((conn, threading.current_thread()))
        return conn

    def close_unused(self):
        """Close the connections of ended threads and of this one; returns how many.

        A live thread's LISTEN connection may be waiting for a notification
        right now: closing it under that thread is not safe, so it is kept.
        """
        me = threading.current_thread()
        unused, kept = [], []
        with self._lock:
            for conn, thread in self._opened:
                if not conn.closed:
                    (unused if thread is me or not thread.is_alive() else kept).append(
                        (conn, thread))
            self._opened = kept
        for conn, _ in unused:
            conn.close()
        return len(unused)


def _create_postgres_queue(queue):
    # Several `init`s at once would race on CREATE TABLE: take turns on the
    # same advisory lock the state schema uses (held by this connection).
    import psycopg
    from .faults import describe_server
    try:
        with psycopg.connect(queue.storage.dsn, autocommit=True, **libpq_params()) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
            queue.storage.initialize_schema()
    except psycopg.OperationalError as exc:
        raise StorageError(*describe_server(exc, queue.storage.dsn)) from None


def _sqlite_queue_ready(path):
    """True when ``path`` holds Huey's tables; a file that is no SQLite database is refused."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
    except sqlite3.OperationalError:
        return True  # unreadable here (a read-only home): a write will say why
    except sqlite3.DatabaseError as exc:
        raise StorageError("database_error", f"{path} is not a queue file ({exc}): "
                           "move it away and run `signoff init`") from None
    return "task" in names
