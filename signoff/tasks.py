"""Huey tasks: the wake-ups that make workers ingest deliveries and submit tasks.

A message carries nothing but "there is work": the rows say what. Huey deletes
a message before running it, so a task that dies mid-way loses nothing but the
wake-up, and the reaper sends another.
"""

import os
import socket
import threading
import time

import sqlite3

from huey import PostgresHuey, RedisHuey, SqliteHuey

from .errors import ConfigError, StorageError
from .storage import SCHEMA_LOCK, describe_server, is_postgres_url
from .wakeups import WakePolicy

# How long one wake-up keeps claiming batches before yielding its thread.
SLICE_S = 1.0


def make_queue(config, create=False):
    """The Huey instance for ``config``: SQLite beside the state by default.

    Queue tables are created by ``init`` (``create``) only: PostgreSQL's race
    when several workers start at once.
    """
    url, name = config.queue_url, config.queue_name
    if url is None:
        # The rows are the truth and lost wake-ups are re-sent by the reaper,
        # so the queue file does not need its own fsync. A missing file is
        # made again (a lost queue loses only wake-ups).
        path = config.queue_path
        fresh = create or not path.exists() or not _sqlite_queue_ready(path)
        return SqliteHuey(name=name, filename=str(path), fsync=False, results=False,
                          timeout=30, create_tables=fresh)
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisHuey(name=name, url=url, results=False)
    if is_postgres_url(url):
        queue = PostgresHuey(name=name, dsn=url, results=False, create_tables=False,
                             connection=QueueConnections(url))
        if create:
            _create_postgres_queue(queue)
        return queue
    raise ConfigError("bad_config", f"unsupported queue url {url!r}")


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
        conn = psycopg.connect(self.url, connect_timeout=5, application_name="signoff-queue")
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
    try:
        with psycopg.connect(queue.storage.dsn, autocommit=True, connect_timeout=5) as conn:
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


def worker_name():
    """This thread's name as it appears in leases and attempt history."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"


class Wakers:
    """The two Huey tasks bound to one runtime, and the wake-up policy that sends them.

    Callers ask for wake-ups with ``wake`` / ``top_up`` (see ``signoff.wakeups``)
    and ``flush`` what is held before closing; ``ingest`` and ``submit`` send
    unconditionally and are the policy's own.
    """

    def __init__(self, queue, runtime):
        self.queue = queue
        self.policy = WakePolicy(self, lambda: runtime.config.batch_size)

        @queue.task(name="signoff.ingest")
        def ingest():
            _drain_for_a_while(runtime.ingest_batch, lambda: self.top_up({"ingest": 1}))

        @queue.task(name="signoff.submit")
        def submit():
            _drain_for_a_while(runtime.submit_batch, lambda: self.top_up({"submit": 1}))

        self._ingest, self._submit = ingest, submit
        # Messages name their task as Huey's registry does: read it off one.
        self._kind_of = {queue.serializer.deserialize(queue.serialize_task(task.s())).name: kind
                         for task, kind in ((ingest, "ingest"), (submit, "submit"))}

    def wake(self, kind, rows=1):
        """Make sure wake-ups will be waiting for ``rows`` newly claimable rows of ``kind``."""
        return self.policy.wake(kind, rows)

    def top_up(self, backlog):
        """Make sure wake-ups are waiting for ``{kind: claimable rows}``, now."""
        return self.policy.top_up(backlog)

    def flush(self):
        """Send the wake-ups ``wake`` is holding back, now."""
        return self.policy.flush()

    @property
    def unreachable(self):
        """Why the last send failed, while the queue cannot be reached; else ``None``."""
        return self.policy.unreachable

    def send(self, kind, count):
        """Send ``count`` wake-ups of ``kind`` (ingest or submit)."""
        getattr(self, kind)(count)

    def ingest(self, count=1):
        """Send ``count`` wake-ups for waiting deliveries."""
        for _ in range(count):
            self._ingest()

    def submit(self, count=1):
        """Send ``count`` wake-ups for approved or uncertain tasks."""
        for _ in range(count):
            self._submit()

    def pending(self):
        """Wake-ups waiting in the queue."""
        return self.queue.pending_count()

    def pending_by_kind(self, limit):
        """``{kind: wake-ups waiting}`` among the next ``limit`` messages of the queue."""
        counts = dict.fromkeys(self._kind_of.values(), 0)
        for data in self.queue.storage.enqueued_items(limit):
            # The message's name only: a task this process does not know (another
            # version's) is counted as nothing instead of logged as broken.
            kind = self._kind_of.get(self.queue.serializer.deserialize(data).name)
            if kind is not None:
                counts[kind] += 1
        return counts


def _drain_for_a_while(batch, wake_again):
    deadline = time.monotonic() + SLICE_S
    while True:
        claimed, full = batch(worker_name())
        if not full:
            return
        if time.monotonic() >= deadline:
            # More is waiting: hand the rest to the next free thread.
            wake_again()
            return
