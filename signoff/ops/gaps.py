"""Resume after a cancel or an expiry, and the observation gaps (docs/policies-and-batches.md).

Between the end of a monitor and its resume nothing watched the document: that
span is a gap, recorded and shown, never reported as "no changes". ``--replay``
asks the host which records changed in the gap (the optional host method
``changes(document, since) -> [record_id]``) and queues one event per record;
``--new-only`` queues nothing. Either way the gap stays on record. Stale events
(the freshness check of ingest, docs/concepts.md) are the other kind of gap: an
event that arrived too late to be acted on.

The new monitor, the gap and the replayed deliveries are written in one
transaction, so a crash leaves either all of them or none.
"""

from peewee import fn

from ..steps.batching import windows
from ..rules.canonical import digest
from ..errors import InvalidEvent, Refused
from ..rules.events import check_label
from ..state.lifecycle import audit
from ..models import Delivery, Gap, Monitor, db
from .monitors import DAY_S, bind, check_id
from ..rules.retry import TRANSIENT

MODES = ("new_only", "replay")
LATEST_STALE = 20


def resume(rt, monitor_id, new_id, mode, ttl_s=DAY_S):
    """Bind ``new_id`` like the ended ``monitor_id`` and record the gap between them."""
    if mode not in MODES:
        raise Refused("invalid_mode", f"mode must be one of {', '.join(MODES)}")
    check_id(new_id)  # before the host is asked what changed
    old = Monitor.get_or_none(Monitor.id == monitor_id)
    if old is None:
        raise Refused("unknown_monitor", f"no monitor {monitor_id!r}")
    if Gap.select().where(Gap.previous == monitor_id).exists():
        raise Refused("already_resumed", f"monitor {monitor_id!r} was resumed already")
    now = rt.clock.now()
    ended = _end_of(old, now)
    if ended is None:
        raise Refused("monitor_active", f"monitor {monitor_id!r} is still active: cancel it first")
    changed = _changed_records(rt, old.document, ended) if mode == "replay" else []
    with db.atomic():
        monitor = bind(rt, old.document, new_id, event_names=old.event_names, ttl_s=ttl_s,
                       window_s=old.window_s, approval_ttl_s=old.approval_ttl_s,
                       batch_window_s=windows([old.id]).get(old.id))
        gap = Gap.create(monitor=new_id, previous=old.id, document=old.document,
                         started_at=ended, ended_at=now, mode=mode, replayed=len(changed))
        audit(now, "gap", new_id)
        events = [{"event_id": replay_event_id(gap.id, rid), "name": old.event_names[0],
                   "document": old.document, "record_id": rid, "occurred": int(now)}
                  for rid in changed]
        lines = rt.enqueue_events(events, new_id) if events else []
    return {"monitor": monitor, "gap": gap_row(gap),
            "replayed": [{"event_id": line.event_id, "delivery": line.delivery} for line in lines]}


def replay_event_id(gap_id, record_id):
    """The event id a replay gives ``record_id``: the same for the same gap and record."""
    return f"gap-{gap_id}-{digest([gap_id, record_id])[:32]}"


def _end_of(monitor, now):
    """When ``monitor`` stopped observing, or ``None`` while it still does."""
    ends = [t for t in (monitor.cancelled_at, monitor.expires_at) if t is not None and t <= now]
    if monitor.active and monitor.expires_at > now:
        return None
    return min(ends) if ends else now


def _changed_records(rt, document, since):
    host = rt.host()
    changes = getattr(host, "changes", None)
    if not callable(changes):
        raise Refused("replay_unsupported", "the host cannot say what changed: use --new-only")
    try:
        ids = changes(document, since)
    except TRANSIENT:
        raise Refused("host_unavailable", "the host did not answer the changes query") from None
    if not isinstance(ids, list):
        raise Refused("bad_host_answer", "host.changes must return a list of record ids")
    out = []
    for rid in ids:
        try:
            check_label("record_id", rid)
        except InvalidEvent as exc:
            raise Refused("bad_host_answer", f"host.changes: {exc.reason}") from None
        if rid not in out:
            out.append(rid)
    return out


def gap_row(gap):
    """A resume gap as ``signoff gaps`` shows it."""
    return {"gap": gap.id, "kind": "resume", "monitor": gap.monitor, "previous": gap.previous,
            "document": gap.document, "from": gap.started_at, "to": gap.ended_at,
            "seconds": round(gap.ended_at - gap.started_at, 3), "mode": gap.mode,
            "replayed": gap.replayed, "observed": _observed(gap)}


def _observed(gap):
    # Quiet is not "no changes": what nobody watched is said to be unobserved.
    if gap.mode == "replay":
        return (f"not observed; the host named {gap.replayed} record(s) changed since, "
                "queued again as events")
    return "not observed; nothing replayed (new events only)"


def listing():
    """Resume gaps (oldest first) and the stale events, newest few of them listed."""
    stale = Delivery.select().where(Delivery.outcome == "stale_event")
    latest = [{"kind": "stale_event", "monitor": d.monitor, "event_id": d.event_id,
               "record_id": d.record_id, "occurred": d.occurred, "at": d.updated_at,
               "observed": "not observed; the event arrived outside its freshness window"}
              for d in stale.order_by(Delivery.id.desc()).limit(LATEST_STALE)]
    return {"resume_gaps": [gap_row(g) for g in Gap.select().order_by(Gap.id)],
            "stale_events": {"total": stale.count(), "latest": latest},
            "not_observed_s": summary()["not_observed_s"]}


def summary(stale_events=None):
    """The counts ``stats`` shows: resume gaps, their seconds, stale events.

    ``stale_events`` is the count when the caller has it already (a scan of
    every delivery otherwise).
    """
    count, seconds = Gap.select(fn.COUNT(Gap.id), fn.SUM(Gap.ended_at - Gap.started_at)).tuples().get()
    stale = (Delivery.select().where(Delivery.outcome == "stale_event").count()
             if stale_events is None else stale_events)
    return {"resume_gaps": count, "not_observed_s": round(seconds or 0.0, 3),
            "stale_events": stale}
