"""Resume after a cancel or an expiry (docs/policies-and-batches.md): bind the new monitor
like the ended one and record the gap between them (``gaps``).

The new monitor, the gap and the replayed deliveries are written in one
transaction, so a crash leaves either all of them or none.
"""

from ..errors import Refused
from ..models import Gap, Monitor
from ..state.history import audit
from ..steps.recordbatches import windows
from .gaps import MODES, RESUME, changed_records, end_of, gap_row, replay
from .monitors import DAY_S, bind, check_id


def resume(rt, monitor_id, new_id, mode, ttl_s=DAY_S):
    """Bind ``new_id`` like the ended ``monitor_id`` and record the gap between them."""
    if mode not in MODES:
        raise Refused("invalid_mode", f"mode must be one of {', '.join(MODES)}")
    check_id(new_id)  # before the host is asked what changed
    old = Monitor.get_or_none(Monitor.id == monitor_id)
    if old is None:
        raise Refused("unknown_monitor", f"no monitor {monitor_id!r}")
    if Gap.select().where(Gap.previous == monitor_id, Gap.kind == RESUME).exists():
        raise Refused("already_resumed", f"monitor {monitor_id!r} was resumed already")
    now = rt.clock.now()
    ended = end_of(old, now)
    if ended is None:
        raise Refused("monitor_active", f"monitor {monitor_id!r} is still active: cancel it first")
    changed = changed_records(rt, old.document, ended) if mode == "replay" else []
    made = {}

    def record_gap():
        # In bind's transaction: the monitor, the gap and the replayed deliveries together.
        gap = Gap.create(monitor=new_id, previous=old.id, document=old.document,
                         started_at=ended, ended_at=now, mode=mode, replayed=len(changed))
        audit(now, "gap", new_id)
        made.update(gap=gap, lines=replay(rt, gap, new_id, old.event_names[0], old.document,
                                           changed, now))

    monitor = bind(rt, old.document, new_id, event_names=old.event_names, ttl_s=ttl_s,
                   window_s=old.window_s, approval_ttl_s=old.approval_ttl_s,
                   batch_window_s=windows([old.id]).get(old.id), within=record_gap)
    return {"monitor": monitor, "gap": gap_row(made["gap"]),
            "replayed": [{"event_id": line.event_id, "delivery": line.delivery}
                         for line in made["lines"]]}
