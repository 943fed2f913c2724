"""Running the worker: Huey's consumer in this process, the reaper, drain, shutdown.

SIGTERM and SIGINT both stop gracefully: no new work is claimed and running
batches finish (bounded by the lease time). Nothing depends on it: a worker
killed with SIGKILL leaves leases that expire and are taken over. SIGUSR2
writes every thread's stack to the log (standard error) and changes nothing:
what a worker that does not stop is waiting for. A worker whose own loop has
not come round for ``[worker] watchdog_s`` writes the same stacks and exits 1
(``signoff.watchdog``), for its supervisor to restart it.
"""

import io
import logging
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import replace

from peewee import InterfaceError, OperationalError, fn

from .steps import recordbatches
from .admin import subscriptions
from .chores import Chore, Schedule, checkpoints, notify, reminders, retention
from .decisions import policy
from . import storage, watchdog
from .app import Signoff
from .config import load_config, resolve_home
from .errors import StorageError
from .state import heartbeats, tallies
from .state.statuses import DELIVERY_WAITING, DeliveryStatus as D, TASK_ACTIVE
from .models import Delivery, Monitor, Task
from .storage.queue import close_queue, one_line_queue_faults, wake_consumers

REAP_INTERVAL_S = 1.0
HEALTH_INTERVAL_S = 10.0
# Huey's polling cap. Every queue's consumer waits for its wake-ups instead of polling
# (a blocking pop, LISTEN, a SQLite queue's pokes: storage.pokes), so this bounds only
# the backoff after a queue error; Huey's default of 10 s would be a long outage.
IDLE_POLL_S = 0.5
# How often `--drain` asks whether anything can progress: a query each time, and
# the moment the work ends it exits within two of them.
DRAIN_POLL_S = 0.05
STOP_POLL_S = 0.05  # how soon the loop sees a stop its signal handler asked for
UNREACHABLE_S = 30.0  # how long `--drain` waits for a database it cannot reach
# `--drain` waits for a retry due within this many seconds, and leaves a later one
# waiting: a server's Retry-After (up to a day) must not hold a drain that long.
DRAIN_WAIT_S = 60.0
EXIT_GRACE_S = 5.0  # how long a watchdog's exit waits for its last lines to be written

log = logging.getLogger("signoff.worker")

# What the loop runs beside the pipeline, on every pass or as due (``chores``).
CHORES = (
    Chore("close record batches", recordbatches.close_due),
    Chore("standing policies", policy.run_pass),
    retention.RETENTION,
    checkpoints.CHECKPOINTS,
    reminders.REMINDERS,
    Chore("prune heartbeats", lambda rt: heartbeats.prune(rt.clock.now()), every_s=60.0),
    Chore("fold tallies", tallies.fold_all, every_s=tallies.FOLD_EVERY_S, shared=True),
)


def can_progress(notifying=False, tending_at=None, due_by=None):
    """True while some delivery or task can still move without a human.

    Parked tasks, ready tasks, approval deadlines, the waiting deliveries of
    paused monitors and deliveries over their drafter token budget do not count:
    they wait for a person, the clock or a cause to be fixed; with ``due_by``
    (a time), neither do retries due after it. An open batch does: it closes on
    its own. So does, when this worker sends them (``notifying``), a
    notification not yet sent, and, when it tends subscriptions (``tending_at``:
    now), subscription work due now.
    """
    moving = (Delivery.status == D.PROCESSING) | _waiting_deliveries(due_by, later=False)
    return (Delivery.select().where(moving).exists()
            or Task.select().where(_unleased_tasks(due_by, later=False)
                                   | (_active_tasks() & Task.lease_token.is_null(False))).exists()
            or recordbatches.holds_drain()
            or (notifying and notify.outbox_busy())
            or (tending_at is not None and subscriptions.due_now(tending_at)))


def left_waiting(due_by):
    """What a drain leaves behind: ``{deliveries, tasks, next_due_at}``, the retries
    due after ``due_by`` that would otherwise go on without a person."""
    deliveries = Delivery.select(fn.COUNT(Delivery.id), fn.MIN(Delivery.next_at)).where(
        _waiting_deliveries(due_by, later=True)).tuples().get()
    tasks = Task.select(fn.COUNT(Task.key), fn.MIN(Task.next_at)).where(
        _unleased_tasks(due_by, later=True)).tuples().get()
    due = [at for _, at in (deliveries, tasks) if at is not None]
    return {"deliveries": deliveries[0], "tasks": tasks[0],
            "next_due_at": min(due) if due else None}


def _waiting_deliveries(due_by, later):
    """Queued and retrying deliveries no pause or token budget holds: those due by
    ``due_by`` (or, ``later``, those due after it; with no ``due_by``, all of them)."""
    paused = Monitor.select(Monitor.id).where(Monitor.paused_at.is_null(False))
    # A delivery waiting for its monitor's next hour of drafter tokens waits for
    # the clock, not for work: like a paused monitor's, it does not hold a drain.
    budget_wait = (Delivery.status == D.RETRYING) & (Delivery.last_code == "budget_exhausted")
    waiting = (Delivery.status.in_(list(DELIVERY_WAITING)) & Delivery.monitor.not_in(paused)
               & ~fn.COALESCE(budget_wait, False))
    return waiting & _due(Delivery.next_at, due_by, later)


def _active_tasks():
    return Task.status.in_(list(TASK_ACTIVE)) & (Task.parked == False)  # noqa: E712


def _unleased_tasks(due_by, later):
    """Approved and uncertain tasks no worker holds, by when they are due (as above)."""
    return _active_tasks() & Task.lease_token.is_null() & _due(Task.next_at, due_by, later)


def _due(column, due_by, later):
    if due_by is None:  # no horizon: every row is due by it (next_at is never null), none after
        return column.is_null(later)
    return column > due_by if later else column <= due_by


def run(home=None, workers=2, drain=False, lease_ttl=None, clock=None, drain_wait=DRAIN_WAIT_S):
    """Run a worker until a signal (or, with ``drain``, until nothing can progress
    but retries due more than ``drain_wait`` seconds away).

    Returns a summary dict (a drain adds ``left_waiting``: ``left_waiting()``);
    the process exit code is 0 either way.
    """
    # From the first step: a worker that does not start (a database it waits
    # for, a plug-in that hangs on import) is the one an operator asks for its
    # stacks, and SIGUSR2's default action would kill it.
    stacks = _stacks_on_sigusr2()
    try:
        rt = _open(home, clock)
        if lease_ttl is not None:
            rt.config = replace(rt.config, lease_ttl_s=float(lease_ttl))
        # A plug-in that does not load is the operator's to fix: say so now, once,
        # instead of failing every attempt into the dead letters.
        rt.host()
        rt.drafter()
        try:
            with storage.bind(rt.database), one_line_queue_faults(), _watchdog(rt.config) as dog:
                return _loop(rt, workers, drain, drain_wait, dog)
        finally:
            close_queue(rt.queue)  # the consumer's threads have ended: their connections too
    finally:
        if stacks is not None:
            signal.signal(signal.SIGUSR2, stacks)


def _open(home, clock):
    # A database that is down at start is waited for (a restart takes a few
    # seconds), then refused with database_unavailable.
    try:
        return Signoff(home, clock=clock)
    except StorageError as exc:
        if exc.code != "database_unavailable":
            raise
    database = storage.open_database(load_config(resolve_home(home)))
    storage.wait_until_reachable(database, UNREACHABLE_S)
    database.close()
    return Signoff(home, clock=clock)


def _watchdog(config):
    """The loop's watchdog (see ``signoff.watchdog``), watching while its block runs."""
    limit = config.watchdog_s or watchdog.default_limit(config.lease_ttl_s)
    return watchdog.Watchdog(limit, lambda silent: _exit_silent(silent, limit))


def _loop(rt, workers, drain, drain_wait, dog):
    storage.prepare_worker(rt.database)
    # One INFO line per queue poll or MCP request would bury the worker's own lines.
    for chatty in ("huey", "httpx", "httpx2"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    consumer = rt.queue.create_consumer(workers=workers, worker_type="thread", periodic=False,
                                        max_delay=IDLE_POLL_S, initial_delay=0.05,
                                        shutdown_timeout=rt.config.lease_ttl_s)
    stop = SignalStop()
    stop.install()
    started = time.monotonic()
    reaped = _reap(rt)
    notifier = notify.start(rt)  # when [notify] url or [notify.email] is set
    tender = subscriptions.start(rt)  # when the host's MCP server offers events
    start_consumer(consumer, stop)
    beats = _Beats(rt, workers)
    beats.beat()
    # The batch size in force: its default depends on the state's database.
    log.info("worker started: %d threads, lease %.0fs, batch %d, home %s", workers,
             rt.config.lease_ttl_s, rt.config.batch_size, rt.home)
    health_at = time.monotonic() + HEALTH_INTERVAL_S
    drained = _Drain(rt, notifier is not None, tender is not None, drain_wait)
    chores = Schedule(CHORES)
    pass_at = time.monotonic()
    try:
        while not stop.wait(DRAIN_POLL_S if drain else REAP_INTERVAL_S):
            dog.feed()
            if time.monotonic() >= pass_at:
                # The beat first: a slow reap must not make a live worker look silent.
                # A beat that did not reach the database says the rest would not
                # either: the next pass tries again, instead of each step waiting
                # out its own bounds while the network is down.
                if beats.beat():
                    reaped += _reap(rt)
                    chores.run_due(rt)
                    _safe(lambda: storage.checkpoint(rt.database), None)
                pass_at = time.monotonic() + (IDLE_POLL_S if drain else REAP_INTERVAL_S)
            if drain and drained.now():
                stop.why = "drained"
                break
            if time.monotonic() >= health_at:
                consumer.check_worker_health()
                health_at = time.monotonic() + HEALTH_INTERVAL_S
    finally:
        wake_consumers(rt.queue)
        consumer.stop(graceful=True)
        for helper in (notifier, tender):
            if helper is not None:
                helper.stop()
        _safe(beats.heartbeat.stop, None)
    log.info("worker stopped (%s)", stop.why)
    summary = {"stopped": stop.why, "seconds": round(time.monotonic() - started, 3),
               "reaper_changes": reaped}
    if stop.why == "drained":
        summary["left_waiting"] = drained.left()
    return summary


class _Beats:
    """The loop's heartbeat, and the database's clock read along with it.

    An outage is told in two lines, not one per pass: when a beat first fails,
    and when one reaches the database again.
    """

    def __init__(self, rt, workers):
        self.rt = rt
        self.heartbeat = heartbeats.Heartbeat(rt.clock, workers)
        self.failed_at = None  # when the first of the failing beats failed

    def beat(self):
        """Sync the clock and beat; False when the database could not be reached."""
        try:
            # No retry (the next pass is the retry), but a connection found dead is dropped.
            storage.retrying(self.rt.database, self._sync_and_beat, 0)
        except (OperationalError, InterfaceError):
            if self.failed_at is None:
                self.failed_at = time.monotonic()
                storage.log_failed_pass(log, "heartbeat", "the loop waits for the database")
            return False
        except Exception:  # a bug, not the network: said in full, and the pass goes on
            storage.log_failed_pass(log, "heartbeat", "the pass goes on")
            return True
        if self.failed_at is not None:
            log.warning("heartbeat reached the database again after %.1fs",
                        time.monotonic() - self.failed_at)
            self.failed_at = None
        return True

    def _sync_and_beat(self):
        self.rt.clock.sync()
        self.heartbeat.beat()


def _exit_silent(silent, limit):
    """The watchdog's end of a worker whose loop hangs: its stacks, one line, exit 1.

    A hard exit, since the main thread is the one stuck; and a timer makes it
    even when the writes block (a log pipe nobody reads may be what the loop
    is stuck on).
    """
    threading.Timer(EXIT_GRACE_S, os._exit, (1,)).start()
    try:
        _write_stacks(None, None)
        log.critical("worker loop silent for %.0fs (watchdog_s %g): exiting with status 1 "
                     "for the supervisor to restart the worker", silent, limit)
    finally:
        os._exit(1)


class SignalStop:
    """The stop SIGTERM or SIGINT asks for, seen by the loop within ``STOP_POLL_S``.

    The handler only sets ``why``: it takes no lock. It runs in the main thread
    between any two steps of what that thread is doing, and that may be inside
    ``threading.Event.wait`` holding the Event's own lock; an ``Event.set()``
    there waits on the main thread itself, forever (a worker that never stopped).
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.why = None

    def install(self):
        """Make ``ask`` the handler of SIGTERM and SIGINT."""
        for signum in self.SIGNALS:
            signal.signal(signum, self.ask)

    def ask(self, signum, frame):
        """The signal handler."""
        self.why = signal.Signals(signum).name

    def wait(self, seconds):
        """Sleep up to ``seconds`` in short naps; True as soon as a stop is asked."""
        deadline = time.monotonic() + seconds
        while self.why is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, STOP_POLL_S))
        return True


def start_consumer(consumer, stop):
    """Start Huey's consumer with SIGTERM and SIGINT left to ``stop``.

    ``Consumer.start`` puts in Huey's own handlers, which only note the signal
    for Huey's run loop, and the worker runs a loop of its own: a stop asked
    while the consumer started was lost, and the worker never stopped. So the
    worker's handlers go back in at once, and a stop Huey's handler took in
    between (Huey keeps it in ``_signum``) is passed on.
    """
    consumer.start()
    stop.install()
    if consumer._signum in stop.SIGNALS:
        stop.ask(consumer._signum, None)


def _stacks_on_sigusr2():
    """Write every thread's stack to standard error on SIGUSR2; the handler it replaced,
    or None where stderr is no file (a worker run inside another program's captured
    output) or this is not the main thread.

    A Python handler, run by the main thread between two steps of its loop (whose
    waits a signal interrupts), not faulthandler's: that one reads the other
    threads' frames without the interpreter's lock, and a worker asked for its
    stacks while a thread was starting or ending died of SIGSEGV.
    """
    try:
        sys.stderr.fileno()
        return signal.signal(signal.SIGUSR2, _write_stacks)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


def _write_stacks(signum, frame):
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    lines = []
    for ident, top in sys._current_frames().items():
        lines.append(f"Thread 0x{ident:x} ({names.get(ident, 'unknown')}),"
                     " most recent call last:\n")
        lines.extend(traceback.format_stack(top))
    # Straight to the descriptor: the main thread may have been stopped inside a
    # write to sys.stderr, and a buffered stream refuses a reentrant write.
    data, fd = "".join(lines).encode("utf-8", "replace"), sys.stderr.fileno()
    while data:
        data = data[os.write(fd, data):]


class _Drain:
    """When ``--drain`` may stop: nothing could progress at two checks in a row,
    but retries due more than ``wait_s`` seconds away.

    A database that cannot be reached for ``UNREACHABLE_S`` ends the worker
    with ``database_unavailable`` instead of waiting forever.
    """

    def __init__(self, rt, notifying, tending, wait_s):
        self.rt, self.notifying, self.tending, self.wait_s = rt, notifying, tending, wait_s
        self.idle, self.reached_at = 0, time.monotonic()
        self.due_by = None  # the last check's horizon

    def now(self):
        now = self.rt.clock.now()
        tending_at, self.due_by = (now if self.tending else None), now + self.wait_s
        progress = _safe(lambda: storage.retrying(
            self.rt.database,
            lambda: can_progress(self.notifying, tending_at, self.due_by), 0), None)
        if progress is None:  # not known: the database did not answer
            self.idle = 0
            if time.monotonic() - self.reached_at > UNREACHABLE_S:
                raise StorageError("database_unavailable", f"{storage.label(self.rt.database)}"
                                   f" unreachable for {UNREACHABLE_S:.0f}s; worker stopped")
            return False
        self.reached_at = time.monotonic()
        self.idle = 0 if progress else self.idle + 1
        return self.idle >= 2  # twice in a row: a batch between two checks is not missed

    def left(self):
        """The retries this drain left waiting (``left_waiting``), said in the log too."""
        left = _safe(lambda: left_waiting(self.due_by), None)
        if left and (left["deliveries"] or left["tasks"]):
            log.info("drained, leaving %d delivery and %d task retries waiting, due more than "
                     "%gs from now (the first in %.1fs); `signoff events retry ID` and "
                     "`signoff tasks retry KEY` make one due now", left["deliveries"],
                     left["tasks"], self.wait_s, left["next_due_at"] - self.rt.clock.now())
        return left


def _reap(rt):
    summary = _safe(rt.engine.reap, {})
    return sum(v for k, v in summary.items() if k != "woken")


def _safe(call, fallback):
    # The loop must outlive a locked database or a bug in one pass. A database
    # error (a lost connection, a lock) is one line: the next pass reconnects.
    try:
        return call()
    except Exception:
        storage.log_failed_pass(log, "worker loop step", "retrying on the next pass")
        return fallback
