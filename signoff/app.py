"""``Signoff``: one home folder opened for use; the Python API the CLI is built on."""

import threading

from peewee import DatabaseError

from . import views
from .admin import delegations, gaps, keys, monitors, resume, reviewers, secrets, subscriptions
from .chores import retention
from .decisions import approval, deadletters, deliveries, policy, redraft, statements
from .engine import Engine
from .intake import enqueue
from .steps import drafting
from . import storage, tracing
from .errors import ConfigError, StorageError
from .hosts.contract import CALLS, Capability, check_host, supports
from .config import (call_factory, load_config, load_plugin, make_private, resolve_home,
                     write_default)
from .rules.events import check_value
from .models import MODELS
from .storage import own_database
from .storage.groupcommit import GATHER_S, GroupCommit
from .storage.queue import close_queue, make_queue
from .storage.urls import require_extras
from .tasks import Wakers


class Signoff:
    """A signoff home: configuration, state database, queue, host and drafter.

    The object owns its database: every method runs against it, whatever else
    is open in the process. ``close()`` (or a ``with`` block) releases it.
    Hosts are made one per thread (a host need not be thread-safe); the drafter
    is shared. What a worker runs on the home (its batches, the reaper) is its
    ``engine`` (``signoff.engine.Engine``); what ``signoff serve`` alone asks of it
    is ``signoff.serve.site.Site``.
    """

    def __init__(self, home=None, clock=None, create=False):
        """Open the home at ``home`` (default ``$SIGNOFF_HOME``, else ``./.signoff``).

        ``no_home`` when it holds no signoff home; ``clock`` is where its time
        comes from (tests move a fake one); ``create`` makes its missing
        databases, as ``init`` does.
        """
        self.home = resolve_home(home)
        self.config = load_config(self.home)
        require_extras(self.config)
        self.database = storage.open_database(self.config, create=create)
        try:
            if not create:
                storage.check_schema(self.database)
            # Leases, retries and beats are judged by the database's clock (``ServerClock``).
            self.clock = clock or storage.synced_clock(self.database)
            self.queue = make_queue(self.config, create=create)
        except BaseException:
            storage.drop_connection(self.database)
            raise
        self.engine = Engine(self)
        self.wakers = Wakers(self.queue, self.engine)
        # Concurrent enqueue calls share commits (see storage.groupcommit); the
        # writer thread's connection is closed with it.
        self.commits = GroupCommit(self._store_chunks, name="signoff-enqueue",
                                   gather_s=GATHER_S,
                                   finish=lambda: storage.drop_connection(self.database))
        self._local = threading.local()
        self._draft = None  # the drafter as its factory made it
        self._drafter = None  # the same, traced when tracing is on
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
            # Kept when it exists: it names the home in signed statements and signs the
            # audit's checkpoints (cryptography loads only where a key is used).
            from .storage.homekey import create_home_key
            create_home_key(rt.config)
            rt.host()  # a host that keeps files (the reference host) creates them now
            # A drafter that cannot start (a missing key) is said at once; not kept,
            # so that tracing started later still wraps the one the runtime uses.
            rt._new_drafter()
            make_private(path)
        except BaseException as exc:
            rt.close()
            if isinstance(exc, DatabaseError):  # said with this home's database named
                raise StorageError(*storage.describe(exc, rt.database)) from None
            raise
        return rt

    def close(self):
        """Send the wake-ups still held back, then close this thread's host and the
        drafter (those that can be closed) and the connections to the database and
        queue (all reopened on next use)."""
        self.commits.close()
        self.wakers.flush()
        host = getattr(self._local, "host", None)
        if host is not None and supports(host, Capability.CLOSE):
            self._local.host = None
            host.close()
        if callable(getattr(self._draft, "close", None)):
            self._draft.close()  # its connections; the drafter itself stays for the next use
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
            host = tracing.traced_host(check_host(call_factory(
                self._host_factory, self.config.host_factory, "host", self.home,
                self.config.host_options), self.config.host_factory), CALLS)
            self._local.host = host
        return host

    def drafter(self):
        """The configured ``draft(record, material)`` callable."""
        if self._drafter is None:
            draft = self._draft = self._new_drafter()
            timeout = getattr(draft, "timeout_s", None)
            self._drafter_timeout_s = float(timeout) if isinstance(timeout, (int, float)) else 0.0
            self._drafter = tracing.traced_drafter(draft)
        return self._drafter

    def _new_drafter(self):
        """The configured drafter, made now (``bad_config`` when it cannot be), untraced."""
        factory = load_plugin(self.config.drafter_factory, "drafter")
        draft = call_factory(factory, self.config.drafter_factory, "drafter", self.home,
                             self.config.drafter_options)
        _check_drafter_timeout(draft, self.config.lease_ttl_s)
        return draft

    def drafter_timeout_s(self):
        """How long one drafter call may wait (its ``timeout_s``; 0 when it has none)."""
        try:
            self.drafter()
        except Exception:  # the draft attempt itself records why the drafter cannot start
            return 0.0
        return self._drafter_timeout_s

    # -- monitors and intake -------------------------------------------------

    @own_database
    def bind(self, document, monitor_id="default", **options):
        """Bind a monitor from the host's current grant (see ``monitors.bind``)."""
        return monitors.bind(self, document, monitor_id, **options)

    @own_database
    def cancel(self, monitor_id, by=None, channel="cli"):
        """Cancel a monitor and end its open tasks."""
        return monitors.cancel(self, monitor_id, by, channel)

    @own_database
    def set_signed_approvals(self, monitor_id, signed, by=None, channel="cli"):
        """Count only signed decisions on a monitor, or stop asking (``monitors.set_signed``)."""
        return monitors.set_signed(self, monitor_id, signed, by, channel)

    @own_database
    def pause(self, monitor_id, by=None, channel="cli"):
        """Hold a monitor's new events (still accepted) until ``unpause``; approved tasks still submit."""
        return monitors.pause(self, monitor_id, by, channel)

    @own_database
    def unpause(self, monitor_id, by=None, channel="cli"):
        """Process a paused monitor's events again, those held first."""
        return monitors.unpause(self, monitor_id, by, channel)

    @own_database
    def resume(self, monitor_id, new_id, mode, **options):
        """Bind ``new_id`` like the ended ``monitor_id`` and record the gap (``resume``)."""
        return resume.resume(self, monitor_id, new_id, mode, **options)

    @own_database
    def gaps(self, monitors=None):
        """Resume gaps and stale events: what was not observed (of ``monitors`` alone, if given)."""
        return gaps.listing(monitors)

    @own_database
    def monitors(self):
        """Every monitor."""
        return monitors.listing()

    @own_database
    def subscriptions(self):
        """Every MCP Events subscription signoff asked for (never its secret)."""
        return subscriptions.listing()

    @own_database
    def enqueue(self, stream, monitor_id="default", progress=None):
        """Accept JSON Lines from a binary stream; returns the list of line results.

        Everything accepted is committed before this returns, whether or not
        the caller looks at the answers (``enqueue_stream`` streams them).
        """
        return list(self.enqueue_stream(stream, monitor_id, progress))

    def enqueue_stream(self, stream, monitor_id="default", progress=None):
        """Like ``enqueue``, yielding each line's result once its chunk is committed,
        so a stream of any length runs in constant memory."""
        chunks = enqueue.enqueue(self, stream, monitor_id, progress)
        while True:
            # Each chunk is read and stored against this home's database; between
            # chunks the caller's code runs unbound, as it would between two calls.
            with storage.session(self.database):
                try:
                    results = next(chunks)
                except StopIteration:
                    return
            yield from results

    def enqueue_events(self, events, monitor_id="default"):
        """Accept a list of event dicts (or raw values); returns the line results."""
        # Checked here, all before anything is stored, each as its JSON line would be.
        return self.enqueue_checked([check_value(e) for e in events], monitor_id)

    @own_database
    def enqueue_checked(self, outcomes, monitor_id="default"):
        """Store events already checked (``Event`` or ``InvalidEvent`` each); the line results.

        An ``InvalidEvent`` is refused as a bad line is: one audit row, nothing else.
        """
        return [result for chunk in enqueue.enqueue_items(self, list(enumerate(outcomes, 1)),
                                                         monitor_id) for result in chunk]

    @own_database
    def _store_chunks(self, jobs):
        # The writer of ``commits``: in the writer thread, or a caller's own.
        return enqueue.store_chunks(self, jobs)

    @own_database
    def run_until_idle(self, owner="inline", max_batches=10_000):
        """Process everything due now in this thread, as a worker would; for tests and scripts."""
        engine = self.engine
        for _ in range(max_batches):
            engine.reap()
            claimed = engine.ingest_batch(owner)[0] + engine.submit_batch(owner)[0]
            if not claimed:
                return
        raise RuntimeError("run_until_idle did not settle")

    # -- the human channel ---------------------------------------------------

    @own_database
    def approve(self, key, digest, by=None, channel="cli", edit=None,
                ack_hidden_characters=False, monitors=None, proof=None, for_reviewer=None):
        """Approve a ready task whose result has ``digest`` (one place of its quorum).

        ``edit``: the draft's new text, approved as edited (its own digest).
        ``ack_hidden_characters``: the approver saw the draft's hidden characters marked.
        ``monitors``: a limited reviewer's monitors; another monitor's task is unknown.
        ``proof``: ``by``'s signature of the decision (``decisions.signing.Proof``).
        ``for_reviewer``: the reviewer a delegate decides for (``reviewer delegate``).
        """
        return approval.approve(self, key, digest, by, channel, edit, ack_hidden_characters,
                                monitors, proof, for_reviewer)

    @own_database
    def statement(self, key, reviewer, decision="approve", edit=None, monitors=None):
        """``{statement, canonical, challenge}`` for ``reviewer`` to sign (``statements.mint``)."""
        return statements.mint(self, key, reviewer, decision, edit, monitors)

    @own_database
    def sign_and_decide(self, key, digest, private_pem, name, decision="approve", reason=None):
        """Approve or reject as reviewer ``name``, signed with their Ed25519 key file's contents."""
        return statements.sign_and_decide(self, key, digest, private_pem, name, decision, reason)

    @own_database
    def approve_many(self, items, by=None, channel="cli", ack_hidden_characters=False,
                     monitors=None):
        """Approve many ``(key, digest)`` pairs at once; a result or Refused for each."""
        return approval.approve_many(self, items, by, channel=channel,
                                     ack_hidden_characters=ack_hidden_characters,
                                     monitors=monitors)

    @own_database
    def reject(self, key, reason=None, by=None, channel="cli", digest=None, monitors=None,
               proof=None, for_reviewer=None):
        """Reject a ready task; ``reason`` (1-200 printable characters) is kept and shown;
        ``digest``: the result the person saw (refused ``digest_mismatch`` once it changed);
        ``proof``: ``by``'s signature of the reject; ``for_reviewer``: the reviewer a
        delegate decides for."""
        return approval.reject(self, key, reason, by, channel, digest, monitors, proof,
                               for_reviewer)

    @own_database
    def cancel_task(self, key, by=None, channel="cli", monitors=None):
        """Cancel one ready, approved or uncertain task (``approval.cancel``)."""
        return approval.cancel(self, key, by, channel, monitors)

    @own_database
    def retry(self, key, by=None, channel="cli", monitors=None):
        """Queue a parked, approved or uncertain task again."""
        return approval.retry(self, key, by, channel, monitors)

    @own_database
    def retry_delivery(self, delivery_id, by=None, channel="cli"):
        """Make a ``retrying`` delivery due now (``deliveries.hurry``)."""
        return deliveries.hurry(self, delivery_id, by, channel)

    @own_database
    def redraft(self, key, by=None, channel="cli", monitors=None):
        """Draft a ready or blocked task again from a fresh read (see ``redraft.py``)."""
        return redraft.redraft(self, key, by, channel, monitors)

    @own_database
    def add_policy(self, monitor_id, ttl_s=None, max_per_hour=None, by=None,
                   include_waiting=False):
        """Add a standing approval policy for a monitor (see ``policy.add``)."""
        return policy.add(self, monitor_id, ttl_s, max_per_hour, by, include_waiting)

    @own_database
    def policies(self):
        """Every standing approval policy."""
        return policy.listing()

    @own_database
    def revoke_policy(self, policy_id, by=None, channel="cli"):
        """End a policy; its unwritten approvals go back to ready."""
        return policy.revoke(self, policy_id, by, channel)

    @own_database
    def add_reviewer(self, name, read_only=False, monitors=(), by=None, channel="cli",
                     email=None, slack_user=None):
        """Create a reviewer, optionally limited to ``monitors``, reached at ``email`` and
        deciding from Slack as member ``slack_user``; its token is answered once."""
        return reviewers.add(self, name, read_only, monitors, by, channel, email, slack_user)

    @own_database
    def set_reviewer(self, name, email=None, slack_user=None, by=None, channel="cli"):
        """Change a reviewer's email address and/or Slack member id (``""`` removes one)."""
        return reviewers.set_contacts(self, name, email, slack_user, by, channel)

    @own_database
    def delegate(self, name, to, until=None, by=None, channel="cli"):
        """Let reviewer ``to`` decide for ``name`` until ``until`` (ISO 8601 with a zone,
        or Unix seconds; default: until ``undelegate``)."""
        return delegations.delegate(self, name, to, until, by, channel)

    @own_database
    def undelegate(self, name, by=None, channel="cli"):
        """End reviewer ``name``'s delegation."""
        return delegations.undelegate(self, name, by, channel)

    @own_database
    def replay(self, letter_id, by=None, channel="cli", monitors=None):
        """Replay a dead letter with a fresh budget (of ``monitors`` alone, if given)."""
        return deadletters.replay(self, letter_id, by, channel, monitors)

    @own_database
    def purge(self, older_than_days=None, dry_run=False, progress=None):
        """Drop finished tasks' snapshots past retention (see ``retention.purge``)."""
        return retention.purge(self, older_than_days, dry_run, progress)

    # -- webhook secrets and reviewers ----------------------------------------

    @own_database
    def add_secret(self, monitor_id, secret=None, by=None, channel="cli"):
        """Add a webhook secret to a monitor (a new one when ``secret`` is None);
        the answer holds it this once."""
        return secrets.add(self, monitor_id, secret, by, channel)

    @own_database
    def monitor_secrets(self, monitor_id):
        """A monitor's secret ids and when they were added (never the secrets)."""
        return secrets.listing(monitor_id)

    @own_database
    def remove_secret(self, monitor_id, secret_id, by=None, channel="cli"):
        """Remove one of a monitor's webhook secrets."""
        return secrets.remove(self, monitor_id, secret_id, by, channel)

    @own_database
    def add_reviewer_key(self, name, data, by=None, channel="cli"):
        """Give a reviewer an Ed25519 public key (PEM or ``ssh-ed25519`` bytes) to sign with."""
        return keys.add(self, name, data, by, channel)

    @own_database
    def reviewer_keys(self, name=None):
        """Reviewers' keys (of ``name`` alone, if given)."""
        return keys.listing(name)

    @own_database
    def remove_reviewer_key(self, name, key_id, by=None, channel="cli"):
        """Take a key from a reviewer."""
        return keys.remove(self, name, key_id, by, channel)

    @own_database
    def reviewers(self):
        """Reviewers (never their tokens)."""
        return reviewers.listing()

    @own_database
    def remove_reviewer(self, name, by=None, channel="cli"):
        """Delete a reviewer and end their sessions."""
        return reviewers.remove(self, name, by, channel)

    # -- views ---------------------------------------------------------------

    @own_database
    def listing(self, name, status=None, limit=None):
        """One page of a listing as the CLI shows it: ``(rows, more)`` (``views.listing``)."""
        return views.listing(name, status=status, limit=limit)

    @own_database
    def events(self, **kw):
        """Deliveries and their outcomes (``limit``, ``status``, ``newest_first``)."""
        return views.events(**kw)

    @own_database
    def tasks(self, status=None, **kw):
        """Task rows, optionally of one status (``limit``, ``newest_first``)."""
        return views.tasks(status, **kw)

    @own_database
    def monitor_tasks(self, monitor_id, status=None, limit=100):
        """One monitor's tasks, oldest first (``status`` to filter; at most ``limit``)."""
        return views.monitor_tasks(monitor_id, status, limit)

    @own_database
    def delivery(self, delivery_id, monitors=None):
        """One delivery with its event's fields and attempt history (of ``monitors``
        alone, if given: another's is unknown)."""
        return views.delivery_detail(delivery_id, monitors)

    @own_database
    def task(self, key, monitors=None):
        """One task with its record, result, digests and history (of ``monitors`` alone,
        if given: another's is unknown)."""
        return views.task_detail(key, monitors)

    @own_database
    def dead_letters(self, **kw):
        """Dead letters, oldest first (``limit``, ``newest_first``)."""
        return views.dead_letters(**kw)

    @own_database
    def audit(self, **kw):
        """Audit rows (``limit``, ``after``, ``latest``, ``newest_first``)."""
        return views.audit(**kw)

    @staticmethod
    def audit_key(home=None):
        """The public key of ``home`` (no database opened): ``{public_key, fingerprint,
        home, path}``."""
        from .admin import auditlog  # cryptography, loaded by the commands that sign
        return auditlog.key_info(resolve_home(home))

    @own_database
    def audit_export(self, write, since=None):
        """Write the audit export line by line through ``write``; returns its head."""
        from .admin import auditlog
        return auditlog.export(self, write, since)

    @own_database
    def stats(self):
        """The operator's numbers, as ``signoff stats`` prints them: one snapshot."""
        with storage.read_snapshot(self.database):
            return views.stats(self.clock.now(), drafting.tokens_per_hour(self))



def _check_drafter_timeout(draft, lease_ttl_s):
    """A drafter bounded by ``timeout_s`` must answer within the lease it is called under."""
    timeout = getattr(draft, "timeout_s", None)
    if isinstance(timeout, (int, float)) and timeout >= lease_ttl_s:
        raise ConfigError("bad_config", f"[drafter.options] timeout_s ({timeout:g} s) must be "
                          f"below the worker's lease ({lease_ttl_s:g} s): a later answer "
                          "would come after another worker took the delivery over")
