"""Health checks without HTTP: the database, its schema, the queue and the workers.

``signoff healthcheck`` is what an orchestrator runs (a container's
``HEALTHCHECK``, a Kubernetes ``exec`` probe, systemd's ``ExecStartPost``):
it opens the home's backends itself, each connect bounded, and answers within
``DEADLINE_S`` even when a server accepts connections and never replies.
``/healthz`` of ``signoff serve`` asks the same two probes of its open runtime.
"""

import threading
import time

from peewee import DatabaseError

from .. import storage
from ..config import load_config, resolve_home
from ..errors import SignoffError
from ..state import heartbeats
from ..storage.faults import first_line
from ..storage.queue import queue_errors, close_queue, make_queue

CHECKS = ("database", "schema", "queue", "workers")
DEADLINE_S = 8.0  # the most the checks may take, connects included (each bounded at 5 s)
# What a check that did not answer in time says, by check.
SILENT = {"database": "database_unavailable", "queue": "queue_unreachable"}


def probe_database(database):
    """``None`` when ``database`` answers a query, else ``(code, message)``."""
    try:
        with storage.bind(database):
            database.execute_sql("SELECT 1").fetchone()
    except DatabaseError as exc:
        return storage.describe(exc, database)
    return None


def probe_queue(queue):
    """``None`` when ``queue`` answers, else ``(code, message)``."""
    try:
        queue.pending_count()
    except queue_errors() as exc:
        return "queue_unreachable", f"{type(exc).__name__}: {first_line(exc)}"
    return None


def check(home=None, max_age=heartbeats.LIVE_S, deadline_s=DEADLINE_S):
    """``{"ok": bool, "checks": {name: {"ok": bool, ...}}}`` for the home's backends.

    A failed check carries ``code`` and ``message``; the checks that need the
    database when it failed are ``not_checked``. A missing or broken home
    (``no_home``, ``bad_config``) is raised as for any command.
    """
    config = load_config(resolve_home(home))
    results = {}
    runs = [threading.Thread(target=_guarded, args=(run, config, max_age, results), daemon=True,
                             name=f"healthcheck-{run.__name__}")
            for run in (_database_checks, _queue_check)]
    deadline = time.monotonic() + deadline_s
    for run in runs:
        run.start()
    for run in runs:
        # Daemon threads: one stuck past the deadline is left behind, never waited for.
        run.join(max(0.0, deadline - time.monotonic()))
    checks = {name: dict(results.get(name) or _unanswered(name, deadline_s)) for name in CHECKS}
    return {"ok": all(c["ok"] for c in checks.values()), "checks": checks}


def first_failure(report):
    """``(check, code, message)`` of the first failed check, or ``None``."""
    for name in CHECKS:
        found = report["checks"][name]
        if not found["ok"]:
            return name, found["code"], found["message"]
    return None


def _guarded(run, config, max_age, results):
    # A check reports every failure as its result; nothing escapes its thread.
    try:
        run(config, max_age, results)
    except SignoffError as exc:
        results[_next(results, run)] = _failed(exc.code, exc.message)
    except Exception as exc:
        results[_next(results, run)] = _failed("internal_error", f"{type(exc).__name__}: {exc}")


def _next(results, run):
    """The check ``run`` was at: its first without a result."""
    names = ("queue",) if run is _queue_check else ("database", "schema", "workers")
    return next(n for n in names if n not in results)


def _database_checks(config, max_age, results):
    """database, then schema, then workers: each only once the one before passed."""
    database = storage.open_database(config)
    try:
        results["database"] = _result(probe_database(database), where=storage.label(database))
        if not results["database"]["ok"]:
            return
        with storage.session(database):
            storage.check_schema(database)
            results["schema"] = {"ok": True, "version": storage.SCHEMA_VERSION}
            now = storage.synced_clock(database).now()  # beats are in the database's time
            results["workers"] = _workers(heartbeats.summary(now, max_age), max_age)
    finally:
        storage.drop_connection(database)


def _workers(found, max_age):
    if found["live"]:
        return dict(ok=True, **found)
    last = found["workers"][0] if found["workers"] else None
    why = (f"the last beat was {last['age_s']:.0f}s ago ({last['host']}:{last['pid']})"
           if last else "no worker is running")
    return {**_failed("no_live_worker", f"no worker has beaten within {max_age:g}s: {why}"),
            **found}


def _queue_check(config, max_age, results):
    queue = make_queue(config)
    try:
        results["queue"] = _result(probe_queue(queue))
    finally:
        close_queue(queue)


def _failed(code, message):
    return {"ok": False, "code": code, "message": message}


def _result(failure, **details):
    return dict(ok=True, **details) if failure is None else _failed(*failure)


def _unanswered(name, deadline_s):
    if name in SILENT:
        return _failed(SILENT[name], f"no answer within {deadline_s:g}s")
    return _failed("not_checked", "not checked: the check before it failed or did not answer")
