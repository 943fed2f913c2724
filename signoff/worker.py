"""Running the worker: Huey's consumer in this process, the reaper, drain, shutdown.

SIGTERM and SIGINT both stop gracefully: no new work is claimed and running
batches finish (bounded by the lease time). Nothing depends on it: a worker
killed with SIGKILL leaves leases that expire and are taken over.
"""

import logging
import signal
import threading
import time
from dataclasses import replace

from . import notify
from .app import Signoff
from .lifecycle import DELIVERY_PENDING, TASK_ACTIVE
from .models import Delivery, Task, db, is_sqlite

REAP_INTERVAL_S = 1.0
HEALTH_INTERVAL_S = 10.0
IDLE_POLL_S = 0.5  # Huey's idle polling cap; its default of 10 s is too slow a wake-up

log = logging.getLogger("signoff.worker")


def can_progress():
    """True while some delivery or task can still move without a human.

    Parked tasks, ready tasks and approval deadlines do not count: they wait
    for a person or for a cause to be fixed.
    """
    return (Delivery.select().where(Delivery.status.in_(list(DELIVERY_PENDING))).exists()
            or Task.select().where(Task.status.in_(list(TASK_ACTIVE)),
                                   Task.parked == False).exists())  # noqa: E712


def run(home=None, workers=2, drain=False, lease_ttl=None, clock=None):
    """Run a worker until a signal (or, with ``drain``, until nothing can progress).

    Returns a summary dict; the process exit code is 0 either way.
    """
    rt = Signoff(home, clock=clock)
    if lease_ttl is not None:
        rt.config = replace(rt.config, lease_ttl_s=float(lease_ttl))
    # A plug-in that does not load is the operator's to fix: say so now, once,
    # instead of failing every attempt into the dead letters.
    rt.host()
    rt.drafter()
    if is_sqlite():
        # Batches commit without checkpointing; this loop checkpoints instead.
        rt.database.pragma("wal_autocheckpoint", 0, permanent=True)
    logging.getLogger("huey").setLevel(logging.WARNING)
    consumer = rt.queue.create_consumer(workers=workers, worker_type="thread", periodic=False,
                                        max_delay=IDLE_POLL_S, initial_delay=0.05,
                                        shutdown_timeout=rt.config.lease_ttl_s)
    stop = threading.Event()
    reason = {"why": "signal"}

    def on_signal(signum, frame):
        reason["why"] = signal.Signals(signum).name
        stop.set()

    started = time.monotonic()
    reaped = _reap(rt)
    notifier = notify.start(rt)  # task.ready notifications, when [notify] url is set
    consumer.start()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    log.info("worker started: %d threads, lease %.0fs, home %s", workers,
             rt.config.lease_ttl_s, rt.home)
    idle, health_at = 0, time.monotonic() + HEALTH_INTERVAL_S
    while not stop.wait(REAP_INTERVAL_S if not drain else IDLE_POLL_S):
        reaped += _reap(rt)
        _safe(_checkpoint, None)
        if drain:
            idle = 0 if _safe(can_progress, True) else idle + 1
            if idle >= 2:  # twice in a row: a batch between two checks is not missed
                reason["why"] = "drained"
                break
        if time.monotonic() >= health_at:
            consumer.check_worker_health()
            health_at = time.monotonic() + HEALTH_INTERVAL_S
    consumer.stop(graceful=True)
    if notifier is not None:
        notifier.stop()
    log.info("worker stopped (%s)", reason["why"])
    return {"stopped": reason["why"], "seconds": round(time.monotonic() - started, 3),
            "reaper_changes": reaped}


def _checkpoint():
    # Copy the WAL into the database file here, off the batches' commits: the
    # copy runs in SQLite with the GIL released while the batches go on. PASSIVE
    # never waits for readers or writers; what it cannot copy now it copies next
    # time. Durability is the WAL's (synchronous=full) either way.
    if is_sqlite():
        db.execute_sql("PRAGMA wal_checkpoint(PASSIVE)")


def _reap(rt):
    summary = _safe(rt.reap, {})
    return sum(v for k, v in summary.items() if k != "woken")


def _safe(call, fallback):
    # The loop must outlive a locked database or a bug in one pass.
    try:
        return call()
    except Exception:
        log.exception("worker loop step failed; retrying on the next pass")
        return fallback
