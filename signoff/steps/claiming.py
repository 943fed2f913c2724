"""What every worker step does first: claim a batch, then ask the host who it is.

How many rows a claim takes is decided here too (``ClaimSizes``).
"""

import time
from dataclasses import dataclass, field

from ..rules.gate import GrantRead
from ..state.leases import claim_deliveries, claim_tasks, claimed_alone, renew
from ..models import Delivery, Monitor, Task

# Each step's claim, and the model of the rows it claims.
STEPS = {"ingest": (claim_deliveries, Delivery), "submit": (claim_tasks, Task)}

# A claim takes about this much work. A batch's outcomes are written when its last
# row is done, so a step whose rows are slow (a drafter calling a model) claims a
# few at a time: each is written soon after its call, a crash loses little, and
# other threads take the rest. Fast rows fill ``batch_size``, which spreads each
# batch's fixed cost (the claim, its reads, one transaction) over many rows.
BATCH_S = 1.0


class ClaimSizes:
    """How many rows the next claim of each step (``ingest``, ``submit``) takes in
    this process: ``batch_size`` at most, fewer when that step's last batch took
    more than ``BATCH_S`` for that many rows."""

    def __init__(self):
        self._per_row = {}  # step -> seconds a row took in the step's last batch

    def limit(self, step, batch_size, cautious=False):
        """The next claim's row limit; one row for a ``cautious`` step not timed yet."""
        per_row = self._per_row.get(step)
        if per_row is None:
            return 1 if cautious else batch_size
        return max(1, min(batch_size, int(BATCH_S / per_row))) if per_row > 0 else batch_size

    def timed(self, step, rows, seconds):
        """Record that the step's last batch took ``seconds`` for ``rows`` rows."""
        if rows:
            self._per_row[step] = seconds / rows


@dataclass
class Batch:
    """A claimed batch of rows, with what the checks of each row need."""

    rt: object
    model: type
    token: str
    rows: list
    monitors: dict
    host: object
    context: dict | None
    context_error: Exception | None
    renew_at: float
    step: str
    limit: int  # the rows this claim could take
    grant: GrantRead = field(init=False)  # the context as every row's gate checks it
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self):
        self.grant = GrantRead(self.context)

    def keep_lease(self, need=0.0):
        """Renew the batch's leases once half their time has passed, or when they
        would end within ``need`` seconds (a call about to start); returns now.

        Host calls take time: without this a long batch loses its rows to
        another worker before it writes, and is redone until its budget is spent.
        """
        now = self.rt.clock.now()
        ttl = self.rt.config.lease_ttl_s
        if now >= self.renew_at or now + need >= self.renew_at + ttl / 2:
            renew(self.model, self.token, now, ttl)
            self.renew_at = now + ttl / 2
        return now

    @property
    def full(self):
        """More rows may be waiting: the claim took a whole batch, or a suspect alone."""
        return len(self.rows) == self.limit or claimed_alone(self.rows)

    def done(self):
        """The batch's outcomes are written: its time sizes the step's next claim."""
        self.rt.engine.claim_sizes.timed(self.step, len(self.rows),
                                         time.monotonic() - self.started)


def open_batch(rt, step, owner, cautious=False):
    """Claim rows for ``step`` (``ingest`` or ``submit``); ``None`` when nothing is waiting.

    ``cautious``: until the step has timed a batch, claim one row (its rows may
    be slow; see ``BATCH_S``).
    """
    claim, model = STEPS[step]
    cfg = rt.config
    now = rt.clock.now()
    limit = rt.engine.claim_sizes.limit(step, cfg.batch_size, cautious)
    token, rows = claim(now, owner, cfg.lease_ttl_s, limit)
    if not rows:
        return None
    monitors = {m.id: m for m in Monitor.select().where(
        Monitor.id.in_(list({r.monitor for r in rows})))}
    host = rt.host()
    try:
        context, context_error = host.context(), None
    except Exception as exc:  # a failing host is a failed attempt, never a dead worker
        context, context_error = None, exc
    return Batch(rt, model, token, rows, monitors, host, context, context_error,
                 now + cfg.lease_ttl_s / 2, step, limit)
