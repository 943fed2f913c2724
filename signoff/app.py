"""``Signoff``: one home folder opened for use; the Python API the CLI is built on."""

import functools
import threading

from .ops import (approval, deadletters, gaps, intake, monitors, policy, redraft, subscriptions,
                  views)
from .steps import ingest, reaper, submit
from . import storage, tracing
from .clock import Clock
from .config import (call_factory, load_config, load_plugin, make_private, resolve_home,
                     write_default)
from .rules.events import check_value
from .models import MODELS
from .storage.groupcommit import GroupCommit
from .storage.queue import close_queue, make_queue
from .storage.urls import require_extras
from .tasks import Wakers


def _own_database(method):
    # Every call runs against this object's own database (see storage.bind),
    # so two homes open in one process never see each other's rows.
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with storage.session(self.database):
            return method(self, *args, **kwargs)
    return call


class Signoff:
    """A signoff home: configuration, state database, queue, host and drafter.

    The object owns its database: every method runs against it, whatever else
    is open in the process. ``close()`` (or a ``with`` block) releases it.
    Hosts are made one per thread (a host need not be thread-safe); the drafter
    is shared.
    """

    def __init__(self, home=None, clock=None, create=False):
        self.home = resolve_home(home)
        self.config = load_config(self.home)
        require_extras(self.config)
        self.clock = clock or Clock()
        self.database = storage.open_database(self.config, create=create)
        try:
            if not create:
                storage.check_schema(self.database)
            self.queue = make_queue(self.config, create=create)
        except BaseException:
            storage.drop_connection(self.database)
            raise
        self.wakers = Wakers(self.queue, self)
        # Concurrent enqueue calls share commits where one writer at a time is
        # all the database allows (see storage.groupcommit); None elsewhere.
        self.commits = (GroupCommit(self._store_chunks, name="signoff-enqueue")
                        if storage.engine_of(self.database).single_writer else None)
        self._local = threading.local()
        self._drafter = None
        self._host_factory = None

    @classmethod
    def init(cls, home=None, clock=None):
        """Create the home, its config and databases if missing; never reset data.

        Safe when several processes run it at once on one database.
        """
        path = resolve_home(home)
        write_default(path)
        rt = cls(path, clock=clock, create=True)
        try:
            storage.create_schema(rt.database, MODELS)
            rt.host()  # a host that keeps files (the reference host) creates them now
            make_private(path)
        except BaseException:
            rt.close()
            raise
        return rt

    def close(self):
        """Send the wake-ups still held back, then close this thread's host (if it can
        be closed) and its connections to the database and queue (reopened on next use)."""
        if self.commits is not None:
            self.commits.close()
        self.wakers.flush()
        host = getattr(self._local, "host", None)
        if host is not None and callable(getattr(host, "close", None)):
            self._local.host = None
            host.close()
        storage.drop_connection(self.database)
        close_queue(self.queue)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- plug-ins ----------------------------------------------------------

    def host(self):
        """This thread's host object, made on first use."""
        host = getattr(self._local, "host", None)
        if host is None:
            if self._host_factory is None:
                self._host_factory = load_plugin(self.config.host_factory, "host")
            host = tracing.traced_host(call_factory(
                self._host_factory, self.config.host_factory, "host", self.home,
                self.config.host_options))
            self._local.host = host
        return host

    def drafter(self):
        """The configured ``draft(record, material)`` callable."""
        if self._drafter is None:
            factory = load_plugin(self.config.drafter_factory, "drafter")
            self._drafter = tracing.traced_drafter(call_factory(
                factory, self.config.drafter_factory, "drafter", self.home,
                self.config.drafter_options))
        return self._drafter

    # -- monitors and intake -------------------------------------------------

    @_own_database
    def bind(self, document, monitor_id="default", **options):
        """Bind a monitor from the host's current grant (see ``monitors.bind``)."""
        return monitors.bind(self, document, monitor_id, **options)

    @_own_database
    def cancel(self, monitor_id):
        """Cancel a monitor and end its open tasks."""
        return monitors.cancel(self, monitor_id)

    @_own_database
    def resume(self, monitor_id, new_id, mode, **options):
        """Bind ``new_id`` like the ended ``monitor_id`` and record the gap (``gaps.resume``)."""
        return gaps.resume(self, monitor_id, new_id, mode, **options)

    @_own_database
    def gaps(self):
        """Resume gaps and stale events: what was not observed."""
        return gaps.listing()

    @_own_database
    def monitors(self):
        """Every monitor."""
        return monitors.listing()

    @_own_database
    def subscriptions(self):
        """Every MCP Events subscription signoff asked for (never its secret)."""
        return subscriptions.listing()

    @_own_database
    def tend_subscriptions(self):
        """One pass of the subscription chore: refresh, resubscribe, unsubscribe what is due."""
        return storage.retrying(self.database, lambda: subscriptions.tend(self))

    @_own_database
    def enqueue(self, stream, monitor_id="default", progress=None):
        """Accept JSON Lines from a binary stream; returns the list of line results.

        Everything accepted is committed before this returns, whether or not
        the caller looks at the answers (``intake.enqueue`` streams them).
        """
        return list(intake.enqueue(self, stream, monitor_id, progress))

    def enqueue_events(self, events, monitor_id="default"):
        """Accept a list of event dicts (or raw values); returns the line results."""
        # Checked here, all before anything is stored, each as its JSON line would be.
        return self.enqueue_checked([check_value(e) for e in events], monitor_id)

    @_own_database
    def enqueue_checked(self, outcomes, monitor_id="default"):
        """Store events already checked (``Event`` or ``InvalidEvent`` each); the line results.

        An ``InvalidEvent`` is refused as a bad line is: one audit row, nothing else.
        """
        return list(intake.enqueue_items(self, list(enumerate(outcomes, 1)), monitor_id))

    @_own_database
    def _store_chunks(self, jobs):
        # The writer of ``commits``: in the writer thread, or a caller's own.
        return intake.store_chunks(self, jobs)

    # -- the worker's steps (Huey tasks call these) ---------------------------

    @_own_database
    def ingest_batch(self, owner):
        """Claim and process one batch of deliveries (again on a new connection if one dies)."""
        claimed, full, ready = storage.retrying(self.database,
                                                lambda: ingest.ingest_batch(self, owner))
        # Standing approvals of the tasks this batch made ready, at once: the
        # human channel is the runtime's to call, not the ingest step's.
        policy.after_ingest(self, ready)
        return claimed, full

    @_own_database
    def submit_batch(self, owner):
        """Claim and process one batch of approved or uncertain tasks (retried likewise)."""
        return storage.retrying(self.database, lambda: submit.submit_batch(self, owner))

    @_own_database
    def reap(self):
        """One reaper pass (again on a new connection if one dies)."""
        return storage.retrying(self.database, lambda: reaper.reap(self))

    @_own_database
    def run_until_idle(self, owner="inline", max_batches=10_000):
        """Process everything due now in this thread; for tests and scripts."""
        for _ in range(max_batches):
            self.reap()
            claimed = self.ingest_batch(owner)[0] + self.submit_batch(owner)[0]
            if not claimed:
                return
        raise RuntimeError("run_until_idle did not settle")

    # -- the human channel ---------------------------------------------------

    @_own_database
    def approve(self, key, digest, by="operator"):
        """Approve a ready task whose result has ``digest``."""
        return approval.approve(self, key, digest, by)

    @_own_database
    def approve_many(self, items, by="operator"):
        """Approve many ``(key, digest)`` pairs at once; a result or Refused for each."""
        return approval.approve_many(self, items, by)

    @_own_database
    def reject(self, key, reason=None):
        """Reject a ready task."""
        return approval.reject(self, key, reason)

    @_own_database
    def retry(self, key):
        """Queue a parked, approved or uncertain task again."""
        return approval.retry(self, key)

    @_own_database
    def redraft(self, key):
        """Draft a ready or blocked task again from a fresh read (see ``redraft.py``)."""
        return redraft.redraft(self, key)

    @_own_database
    def add_policy(self, monitor_id, ttl_s=None, max_per_hour=None, by="operator",
                   include_waiting=False):
        """Add a standing approval policy for a monitor (see ``policy.add``)."""
        return policy.add(self, monitor_id, ttl_s, max_per_hour, by, include_waiting)

    @_own_database
    def policies(self):
        """Every standing approval policy."""
        return policy.listing()

    @_own_database
    def revoke_policy(self, policy_id):
        """End a policy; its unwritten approvals go back to ready."""
        return policy.revoke(self, policy_id)

    @_own_database
    def replay(self, letter_id):
        """Replay a dead letter with a fresh budget."""
        return deadletters.replay(self, letter_id)

    # -- views ---------------------------------------------------------------

    @_own_database
    def events(self, **kw):
        """Deliveries and their outcomes (``limit``, ``status``, ``newest_first``)."""
        return views.events(**kw)

    @_own_database
    def tasks(self, status=None, **kw):
        """Task rows, optionally of one status (``limit``, ``newest_first``)."""
        return views.tasks(status, **kw)

    @_own_database
    def task(self, key):
        """One task with its record, result, digests and history."""
        return views.task_detail(key)

    @_own_database
    def dead_letters(self, **kw):
        """Dead letters, oldest first (``limit``, ``newest_first``)."""
        return views.dead_letters(**kw)

    @_own_database
    def audit(self, **kw):
        """Audit rows (``limit``, ``after``, ``latest``, ``newest_first``)."""
        return views.audit(**kw)

    @_own_database
    def stats(self):
        """The operator's numbers, as ``signoff stats`` prints them: one snapshot."""
        with storage.read_snapshot(self.database):
            return views.stats(self.clock.now())
