"""Database faults: what they mean, and trying again on a fresh connection.

A dropped PostgreSQL connection stays dead on its thread (Peewee does not
reconnect), and serialization failures and deadlocks need a retry: units of
work that are safe to run again from the start go through ``retrying``.
"""

import functools
import logging
import sys
import time
from contextlib import contextmanager

from peewee import DataError, IntegrityError, InterfaceError, OperationalError

from ..errors import StorageError
from .database import bind, db, engine_of
from .engines import (how_to_create, label, missing_database, server_label, sqlstate,
                      unreachable)

log = logging.getLogger("signoff.storage")

RECONNECT_S = 10.0  # how long one call keeps trying to get its connection back


def first_line(exc):
    """The first line of an exception's text (its class name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def describe(exc, database):
    """A stable ``(code, one-line message)`` for a database failure."""
    where = label(database)
    text = first_line(exc)
    if "readonly database" in text or "read-only" in text:
        return "read_only_home", f"{where} is read-only: this command needs to write"
    engine = engine_of(database) if database is not None else None
    own = engine.describe(text) if engine is not None else None
    if own is not None:
        return own
    url = database.database if engine is not None and engine.kind == "postgresql" else None
    return _server_problem(exc, url, where)


def describe_server(exc, url):
    """``describe`` for a PostgreSQL server's failure outside the state database (the queue's)."""
    return _server_problem(exc, url, server_label(url))


def _server_problem(exc, url, where):
    text = first_line(exc)
    if url and missing_database(exc):
        return "database_missing", f"{where} does not exist: {how_to_create(url)}"
    if unreachable(exc):
        return "database_unavailable", f"{where} is unreachable: {text}"
    return "database_error", f"{where}: {type(exc).__name__}: {text}"


def transient(exc, database):
    """True when ``exc`` is worth a retry on a fresh connection (never on SQLite)."""
    return engine_of(database).transient(exc)


def unstorable(exc):
    """True when ``exc`` says the engine refused a value written, not the connection or a lock.

    SQLite's driver refuses an integer past 64 bits (``OverflowError``);
    PostgreSQL refuses out-of-range and malformed values (``DataError``) and
    values past its limits (SQLSTATE class 54); converting a value for either
    may raise ``ValueError``, ``TypeError`` or ``RecursionError``.
    """
    if isinstance(exc, (DataError, IntegrityError, OverflowError, ValueError, TypeError,
                        RecursionError)):
        return True
    state = sqlstate(exc)
    return isinstance(exc, OperationalError) and state is not None and state.startswith("54")


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
    retried: the failure belongs to the outermost caller. The budget counts
    from the first failure, not from the call: a connection that went silent
    is found dead only once its bounds run out (``net``), seconds into the
    call, and the reconnecting still gets its whole window. The first retry
    says so in one warning line; the others are that same outage.
    """
    deadline, delay = None, 0.05
    while True:
        try:
            return call()
        except (OperationalError, InterfaceError) as exc:
            if database.in_transaction() or not transient(exc, database):
                raise
            drop_connection(database)
            now = time.monotonic()
            if deadline is None:
                deadline = now + budget_s
                if budget_s > 0:
                    log.warning("database call failed (%s); retrying on a new connection "
                                "for up to %gs", first_line(exc), budget_s)
            if now >= deadline:
                raise
            time.sleep(delay)
            delay = min(1.0, delay * 2)


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


def log_failed_pass(logger, what, then):
    """Log the exception being handled, for a pass that runs again later.

    A database fault (a lost connection, a lock) is one warning line: it is the
    operator's weather, and the next pass opens a new connection. Anything else
    keeps its traceback, since it is a bug.
    """
    exc = sys.exc_info()[1]
    if isinstance(exc, (OperationalError, InterfaceError)):
        logger.warning("%s failed: database error (%s); %s", what, first_line(exc), then)
    else:
        logger.exception("%s failed; %s", what, then)


def wait_until_reachable(database, budget_s):
    """Connect within ``budget_s`` seconds or raise ``database_unavailable``."""
    try:
        retrying(database, lambda: database.execute_sql("SELECT 1").fetchall(), budget_s)
    except (OperationalError, InterfaceError) as exc:
        raise StorageError(*describe(exc, database)) from None


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


def own_database(method):
    """Run a method of an object that has a ``database`` (a ``Signoff``, its ``Engine``)
    against that database, whatever else is open in the process.

    Two homes open in one process so never see each other's rows; a call from one
    of the object's own methods, bound already, binds nothing more.
    """
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if db.obj is self.database:
            return method(self, *args, **kwargs)
        with session(self.database):
            return method(self, *args, **kwargs)
    return call
