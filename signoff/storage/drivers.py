"""Server drivers imported only once a home uses them.

Peewee imports psycopg, and Huey imports redis (which imports OpenTelemetry's
SDK), whenever they are installed: together about half of the CLI's start-up,
paid by every command on a home of SQLite files. So peewee and Huey are first
imported here with those drivers hidden, as if not installed, and ``load``
hands a driver to both libraries (the names their imports would have bound)
when a home on PostgreSQL or Redis opens. A driver imported before signoff
was leaves the libraries as they made themselves.
"""

import importlib
import sys

DEFERRED = ("psycopg", "psycopg2", "redis")


def import_libraries():
    """Import peewee and Huey with the deferred drivers hidden (before anything else does)."""
    hidden = [name for name in DEFERRED if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # an import of it raises ImportError
    try:
        import peewee  # noqa: F401
        import huey.storage  # noqa: F401
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]



def load(name):
    """Import driver ``name`` (``psycopg`` or ``redis``) and hand it to peewee and Huey."""
    module = importlib.import_module(name)
    {"psycopg": _psycopg, "redis": _redis}[name](module)
    return module


def _psycopg(psycopg):
    import huey.storage
    import peewee
    if peewee.psycopg is None:
        from psycopg.pq import TransactionStatus
        from psycopg.types.json import Json, Jsonb
        peewee.psycopg, peewee.TransactionStatus = psycopg, TransactionStatus
        peewee.Json_pg3, peewee.Jsonb_pg3 = Json, Jsonb
        adapter = peewee.Psycopg3Adapter
        adapter.txn_idle = TransactionStatus.IDLE
        adapter.txn_inerror = TransactionStatus.INERROR
        adapter.txn_unknown = TransactionStatus.UNKNOWN
    if huey.storage.psycopg is None:
        huey.storage.psycopg = psycopg


def _redis(redis):
    import huey.storage as storage
    if storage.Redis is None:
        storage.ConnectionPool, storage.Redis = redis.ConnectionPool, redis.Redis
        storage.ConnectionError = redis.exceptions.ConnectionError
        storage.TimeoutError = redis.exceptions.TimeoutError
        storage.RedisStorage.redis_client = redis.Redis
