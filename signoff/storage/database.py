"""Which database the models use: the one bound by the calling ``Signoff``.

The models' database is ``db``, a proxy that resolves to the database bound in
the calling context (``bind``), else to the last one opened in the process. So
two homes opened in one process each use their own database. Each opened
database carries its engine (``engine_of``): the object that knows what
differs between SQLite and PostgreSQL.
"""

import contextvars
from contextlib import contextmanager

from peewee import DatabaseProxy

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


def engine_of(database=None):
    """The engine of ``database`` (a database or the ``db`` proxy; default: ``db``)."""
    database = db if database is None else database
    return getattr(database, "obj", database).engine
