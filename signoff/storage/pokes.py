"""Waking a SQLite queue's consumers at once: a datagram after each enqueue.

Redis and PostgreSQL queues wake a waiting consumer themselves (a blocking pop;
LISTEN/NOTIFY). A SQLite file cannot, and Huey's consumer polls it with a
backoff: tens of milliseconds between a commit and the worker seeing it. So
each worker process that reads a SQLite queue binds a Unix datagram socket in
a folder beside the queue file (``Pokes``), waits on it when the queue is
empty, and every enqueue sends one byte to each socket found there after its
commit.

A poke is a hint, never the message: the message is in the queue file, and a
consumer that hears nothing still looks again every ``WAKE_POLL_S``. So a
poke lost (a full socket buffer, a socket file removed, a path too long for a
socket) costs latency only, never work; and a consumer that binds its socket
before it looks at the queue cannot miss a poke sent after that look, since the
datagram waits in the socket until it is read.
"""

import errno
import logging
import os
import socket
import threading
from pathlib import Path

from huey import SqliteHuey
from huey.storage import SqliteStorage

log = logging.getLogger("signoff.storage")

# How long a consumer waits on its socket before looking at the queue again
# unwoken: the fallback that finds what a lost poke did not announce.
WAKE_POLL_S = 0.5
# AF_UNIX paths are limited to 108 bytes (with the terminating NUL) on Linux.
MAX_SOCKET_PATH = 107


def folder_for(queue_path):
    """Where the consumers of the SQLite queue at ``queue_path`` keep their sockets."""
    path = Path(queue_path)
    return path.with_name(path.name + ".wake")


class Pokes:
    """The sockets of one queue's folder: one bound by this process to wait on, and
    the pokes sent to every one there."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self._lock = threading.Lock()
        self._sock = None
        self._path = None
        self._pid = None
        self._waiting = 0  # threads of this process in ``wait``
        self._stopped = False

    def poke(self):
        """Send one byte to every consumer socket in the folder; never raises.

        A socket no process holds any more (its worker was killed) is removed.
        """
        try:
            names = os.listdir(self.folder)
        except OSError:
            return  # no consumer has bound a socket yet
        sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sender.setblocking(False)
            for name in names:
                _send(sender, self.folder / name)
        finally:
            sender.close()

    def wait(self, seconds):
        """Wait up to ``seconds`` for a poke (True), binding this process's socket first
        if it has none; False after the wait, or at once where no socket can be bound
        (the caller sleeps then)."""
        sock = self.bound()
        if sock is None or self._stopped:
            return False
        with self._lock:
            self._waiting += 1
        try:
            sock.settimeout(seconds)
            sock.recv(16)
            return True
        except OSError:  # the time ran out, or the socket closed under us (the queue closed)
            return False
        finally:
            with self._lock:
                self._waiting -= 1

    def stop(self):
        """End every wait of this process now, and any later one at once: a consumer
        that stops must not sit out a poll interval first."""
        with self._lock:
            self._stopped = True
            path, waiting = self._path, self._waiting
        if path is None or self._pid != os.getpid():
            return
        sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sender.setblocking(False)
            for _ in range(waiting):
                _send(sender, path)
        finally:
            sender.close()

    def bound(self):
        """This process's socket, bound now if it was not yet (None where none can be)."""
        with self._lock:
            if self._sock is not None and self._pid == os.getpid():
                return self._sock
            self._sock = self._path = None  # a forked child's is its parent's
            path = self.folder / str(os.getpid())
            if len(os.fsencode(path)) > MAX_SOCKET_PATH:
                log.info("queue wake-ups by polling only: %s is too long a socket path", path)
                self._pid = os.getpid()
                return None
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                self.folder.mkdir(mode=0o700, exist_ok=True)
                if path.exists():
                    path.unlink()  # a dead process's, whose pid this one reuses
                sock.bind(os.fspath(path))
                path.chmod(0o600)  # as the home's files: only its owner may send
            except OSError as exc:
                sock.close()
                log.info("queue wake-ups by polling only: cannot bind %s (%s)", path, exc)
                self._pid = os.getpid()
                return None
            self._sock, self._path, self._pid = sock, path, os.getpid()
            return sock

    def close(self):
        """Close and remove this process's socket, if it bound one."""
        with self._lock:
            sock, path, self._sock, self._path = self._sock, self._path, None, None
            mine, self._stopped = self._pid == os.getpid(), False
        if sock is None or not mine:
            return
        sock.close()
        try:
            path.unlink()
        except OSError:
            pass


def _send(sender, path):
    try:
        sender.sendto(b"!", os.fspath(path))
    except ConnectionRefusedError:
        # Nobody holds it: its process ended without closing it (killed).
        try:
            path.unlink()
        except OSError:
            pass
    except OSError as exc:
        # Full (the consumer has pokes to read already), gone, or not a socket:
        # a poke is a hint, and the consumer's polling covers what it missed.
        if exc.errno not in (errno.EAGAIN, errno.ENOBUFS, errno.ENOENT, errno.ENOTSOCK,
                             errno.EPROTOTYPE, errno.ECONNRESET):
            log.debug("queue poke to %s failed: %s", path, exc)


class PokedSqliteStorage(SqliteStorage):
    """Huey's SQLite storage, whose enqueue pokes the consumers and whose dequeue
    waits for a poke (``Pokes``) instead of Huey's polling backoff."""

    blocking = True  # Huey's consumer then calls dequeue again at once: it waits here

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pokes = Pokes(folder_for(self.filename))

    def enqueue(self, data, priority=None):
        """Insert the message (committed), then poke every waiting consumer."""
        super().enqueue(data, priority)
        self.pokes.poke()

    def dequeue(self):
        """The next message; when there is none, wait up to ``WAKE_POLL_S`` for a poke
        and look again. The socket is bound before the first look: a poke sent after
        it is waiting in the socket."""
        woken = self.pokes.bound() is not None
        data = super().dequeue()
        if data is not None:
            return data
        if woken:
            self.pokes.wait(WAKE_POLL_S)
        else:
            threading.Event().wait(WAKE_POLL_S)  # no socket: plain polling
        return super().dequeue()

    def stop_waiting(self):
        """Wake this process's consumers waiting for a poke, for them to see their stop."""
        self.pokes.stop()

    def close(self):
        """Close the connection, and this process's socket with its file."""
        self.pokes.close()
        return super().close()


class PokedSqliteHuey(SqliteHuey):
    """``SqliteHuey`` on ``PokedSqliteStorage``."""

    storage_class = PokedSqliteStorage
