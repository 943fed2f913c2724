"""Which database the models use: the one bound by the calling ``Signoff``.

The models' database is ``db``, a proxy that resolves to the database bound in
the calling context (``bind``); a query outside any binding is a bug, and
raises instead of guessing. So two homes opened in one process each use their
own database, and every face reaches state through a ``Signoff`` that binds it. Each opened
database carries its engine (``engine_of``): the object that knows what
differs between SQLite and PostgreSQL.
"""

import contextvars
from contextlib import contextmanager

from peewee import DatabaseProxy

_bound = contextvars.ContextVar("signoff_database", default=None)


class Unbound(RuntimeError):
    """A query ran where no ``Signoff`` (or ``bind``) had chosen a database."""


class BoundDatabase(DatabaseProxy):
    """The database of the ``Signoff`` in use, bound per call."""

    __slots__ = ()
    __setattr__ = object.__setattr__

    @property
    def obj(self):
        return _bound.get()  # None outside a binding: peewee asks that while defining models

    @obj.setter
    def obj(self, database):
        pass  # peewee's initialize(); the database is chosen per call, never stored

    def __getattr__(self, attr):
        database = _bound.get()
        if database is None:
            raise Unbound(f"no database is bound here (wanted .{attr}): reach state "
                          "through a Signoff method or storage.bind(database)")
        return getattr(database, attr)


db = BoundDatabase()


@contextmanager
def bind(database):
    """Make the models use ``database`` in this thread until the block ends."""
    token = _bound.set(database)
    try:
        yield database
    finally:
        _bound.reset(token)


def resolve(database=None):
    """The database ``database`` stands for: itself, or for the ``db`` proxy (the
    default) the bound one; ``Unbound`` when nothing is bound."""
    if database is None or isinstance(database, BoundDatabase):
        database = _bound.get()
        if database is None:
            raise Unbound("no database is bound here: reach state through a Signoff "
                          "method or storage.bind(database)")
    return database


def engine_of(database=None):
    """The engine of ``database`` (a database or the ``db`` proxy; default: ``db``)."""
    return resolve(database).engine
