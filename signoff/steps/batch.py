"""What every worker step does first: claim a batch, then ask the host who it is."""

from dataclasses import dataclass

from ..state.leases import claimed_alone, renew
from ..models import Monitor


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
        return len(self.rows) == self.rt.config.batch_size or claimed_alone(self.rows)


def open_batch(rt, claim, model, owner):
    """Claim rows with ``claim``; ``None`` when nothing is waiting."""
    cfg = rt.config
    now = rt.clock.now()
    token, rows = claim(now, owner, cfg.lease_ttl_s, cfg.batch_size)
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
                 now + cfg.lease_ttl_s / 2)
