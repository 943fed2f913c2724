"""Server drivers: psycopg and redis, imported where a home on a server needs one.

Peewee and Huey import psycopg and redis at their own import when they are
installed, which costs a third of a second: more than the rest of signoff's
start-up. A program that imports signoff keeps that behaviour. The ``signoff``
command owns its process, so it imports both libraries with the drivers held
back (``signoff.__main__``, whose ``HELD_BACK`` are these ``DRIVERS``); ``load``
imports a driver when a backend asks for it and hands it to the library globals
that import left empty. ``restore`` does that for every installed driver, before a
plug-in that may use the libraries on its own.

``load`` is the one place signoff asks for a driver, so a missing extra is found
in one place (``urls``).
"""

import importlib
import importlib.util
import sys

DRIVERS = ("psycopg", "redis")


def load(name):
    """The driver module ``name`` (``psycopg`` or ``redis``); ImportError if absent."""
    module = importlib.import_module(name)
    _BIND[name](module)
    return module


def restore():
    """Hand every installed driver to Peewee and Huey, as their own import would have."""
    for name in DRIVERS:
        if importlib.util.find_spec(name) is not None:
            load(name)


def _bind_psycopg(psycopg):
    """Peewee's and Huey's psycopg globals, where a deferred import left them empty."""
    peewee = sys.modules.get("peewee")
    if peewee is not None and peewee.psycopg is None:
        from psycopg.pq import TransactionStatus
        from psycopg.types.json import Json, Jsonb
        peewee.psycopg, peewee.TransactionStatus = psycopg, TransactionStatus
        peewee.Json_pg3, peewee.Jsonb_pg3 = Json, Jsonb
        adapter = peewee.Psycopg3Adapter
        adapter.txn_idle = TransactionStatus.IDLE
        adapter.txn_inerror = TransactionStatus.INERROR
        adapter.txn_unknown = TransactionStatus.UNKNOWN
    storage = sys.modules.get("huey.storage")
    if storage is not None and storage.psycopg is None:
        storage.psycopg = psycopg


def _bind_redis(redis):
    """Huey's redis globals, where a deferred import left them empty."""
    storage = sys.modules.get("huey.storage")
    if storage is not None and storage.Redis is None:
        storage.ConnectionPool, storage.Redis = redis.ConnectionPool, redis.Redis
        storage.ConnectionError = redis.exceptions.ConnectionError
        storage.TimeoutError = redis.exceptions.TimeoutError
        for value in vars(storage).values():  # the Redis storage classes name their client
            if isinstance(value, type) and "redis_client" in vars(value) and value.redis_client is None:
                value.redis_client = redis.Redis


_BIND = {"psycopg": _bind_psycopg, "redis": _bind_redis}
