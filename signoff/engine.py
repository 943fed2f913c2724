"""``Engine``: a home's worker side, what its Huey tasks and a worker's loop call.

Library users and ``serve`` never call these: a ``Signoff`` makes its engine
(``Signoff.engine``) for the Huey tasks its queue registers (``tasks.Wakers``),
and ``Signoff.run_until_idle`` runs it in the caller's thread.
"""

from . import storage
from .admin import subscriptions
from .decisions import policy
from .steps import ingest, reaper, submit
from .steps.claiming import ClaimSizes
from .storage import own_database


class Engine:
    """The batches, reaper and subscription pass of one open home (``rt``, a ``Signoff``).

    Each call runs against the home's database and, when a connection dies in
    it, again on a new connection (``storage.retrying``).
    """

    def __init__(self, rt):
        """The engine of ``rt``; its claims are sized for this process (``ClaimSizes``)."""
        self.rt = rt
        self.database = rt.database
        self.claim_sizes = ClaimSizes()

    def claim_limit(self, step):
        """Rows the next claim of ``step`` (``ingest`` or ``submit``) takes in this process."""
        return self.claim_sizes.limit(step, self.rt.config.batch_size)

    @own_database
    def ingest_batch(self, owner):
        """Claim and process one batch of deliveries; ``(claimed, full)``."""
        claimed, full, ready = storage.retrying(self.database,
                                                lambda: ingest.ingest_batch(self.rt, owner))
        # Standing approvals of the tasks this batch made ready, at once: the
        # human channel is the home's to call, not the ingest step's.
        policy.after_ingest(self.rt, ready)
        return claimed, full

    @own_database
    def submit_batch(self, owner):
        """Claim and process one batch of approved or uncertain tasks; ``(claimed, full)``."""
        return storage.retrying(self.database, lambda: submit.submit_batch(self.rt, owner))

    @own_database
    def reap(self):
        """One reaper pass; its summary."""
        return storage.retrying(self.database, lambda: reaper.reap(self.rt))

    @own_database
    def tend_subscriptions(self):
        """One pass of the subscription chore: refresh, resubscribe, unsubscribe what is due."""
        return storage.retrying(self.database, lambda: subscriptions.tend(self.rt))
