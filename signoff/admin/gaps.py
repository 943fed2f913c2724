"""The observation gaps: after a cancel or an expiry, an MCP Events lapse, a stale event
(docs/policies-and-batches.md).

Between the end of a monitor and its resume nothing watched the document: that
span is a gap, recorded and shown, never reported as "no changes". So is the
time an MCP Events subscription had lapsed before it was subscribed again
(a lapse gap, replayed the same way when the host can say what changed). ``--replay``
asks the host which records changed in the gap (the optional host method
``changes(document, since) -> [record_id]``) and queues one event per record;
``--new-only`` queues nothing. Either way the gap stays on record. Stale events
(the freshness check of ingest, docs/concepts.md) are the other kind of gap: an
event that arrived too late to be acted on.

Resuming (``resume``) binds the new monitor; this module records and shows
the gaps.
"""

from peewee import fn

from ..rules.canonical import digest
from ..errors import InvalidEvent, Refused
from ..rules.events import check_label
from ..state import tallies
from ..state.history import audit
from ..models import Delivery, Gap
from ..rules.retry import TRANSIENT
from ..hosts.contract import Capability, supports

MODES = ("new_only", "replay")
RESUME, LAPSE = "resume", "lapse"  # what made a gap (Gap.kind)
LATEST_STALE = 20
STALE = "stale_event"  # a delivery's outcome when its event came too late


def replay(rt, gap, monitor_id, name, document, changed, now):
    """Queue one event per record named as changed in ``gap``; the line results."""
    events = [{"event_id": replay_event_id(gap.id, rid), "name": name, "document": document,
               "record_id": rid, "occurred": int(now)} for rid in changed]
    return rt.enqueue_events(events, monitor_id) if events else []


def changed_or_none(rt, document, since):
    """The records ``document`` changed since ``since`` per the host; ``None`` if it cannot say."""
    if not supports(rt.host(), Capability.CHANGES):
        return None
    return changed_records(rt, document, since)


def record_lapse(rt, monitor, started_at, now, changed):
    """Record the gap of a subscription that lapsed and was subscribed again.

    ``changed``: what ``changed_or_none`` said (asked before the transaction);
    those records are queued as events. Runs in the caller's transaction.
    """
    gap = Gap.create(monitor=monitor.id, previous=monitor.id, document=monitor.document,
                     started_at=started_at, ended_at=now, kind=LAPSE,
                     mode="new_only" if changed is None else "replay",
                     replayed=len(changed or []))
    audit(now, "gap", monitor.id)
    replay(rt, gap, monitor.id, monitor.event_names[0], monitor.document, changed or [], now)
    return gap


def replay_event_id(gap_id, record_id):
    """The event id a replay gives ``record_id``: the same for the same gap and record."""
    return f"gap-{gap_id}-{digest([gap_id, record_id])[:32]}"


def end_of(monitor, now):
    """When ``monitor`` stopped observing, or ``None`` while it still does."""
    ends = [t for t in (monitor.cancelled_at, monitor.expires_at) if t is not None and t <= now]
    if monitor.active and monitor.expires_at > now:
        return None
    return min(ends) if ends else now


def changed_records(rt, document, since):
    host = rt.host()
    if not supports(host, Capability.CHANGES):
        raise Refused("replay_unsupported", "the host cannot say what changed: use --new-only")
    try:
        ids = host.changes(document, since)
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
    """A resume or lapse gap as ``signoff gaps`` shows it."""
    return {"gap": gap.id, "kind": gap.kind, "monitor": gap.monitor, "previous": gap.previous,
            "document": gap.document, "from": gap.started_at, "to": gap.ended_at,
            "seconds": round(gap.ended_at - gap.started_at, 3), "mode": gap.mode,
            "replayed": gap.replayed, "observed": _observed(gap)}


def _observed(gap):
    # Quiet is not "no changes": what nobody watched is said to be unobserved.
    if gap.kind == LAPSE and gap.mode != "replay":
        return "not observed; the subscription had lapsed and the host cannot say what changed"
    if gap.mode == "replay":
        return (f"not observed; the host named {gap.replayed} record(s) changed since, "
                "queued again as events")
    return "not observed; nothing replayed (new events only)"


def listing(monitors=None):
    """Resume gaps (oldest first) and the stale events, newest few of them listed.

    ``monitors``: those monitors' alone (a limited reviewer's), or ``None`` for all.
    """
    stale = Delivery.select().where(Delivery.outcome == STALE, *_of(Delivery.monitor, monitors))
    latest = [{"kind": STALE, "monitor": d.monitor, "event_id": d.event_id,
               "record_id": d.record_id, "occurred": d.occurred, "at": d.updated_at,
               "observed": "not observed; the event arrived outside its freshness window"}
              for d in stale.order_by(Delivery.id.desc()).limit(LATEST_STALE)]
    rows = [gap_row(g) for g in _limited(Gap.select(), Gap.monitor, monitors).order_by(Gap.id)]
    return {"resume_gaps": [g for g in rows if g["kind"] == RESUME],
            "lapse_gaps": [g for g in rows if g["kind"] == LAPSE],
            "stale_events": {"total": stale_total(monitors), "latest": latest},
            "not_observed_s": summary(monitors=monitors)["not_observed_s"]}


def stale_total(monitors=None):
    """How many events arrived outside their freshness window (of ``monitors`` alone if
    given): the settled deliveries' tally and the few still on their way, never a scan
    of every delivery."""
    settled = tallies.counts("delivery", detail=STALE, monitors=monitors)
    moving = Delivery.select().where(Delivery.outcome == STALE,
                                     Delivery.status.in_(tallies.unsettled(Delivery)),
                                     *_of(Delivery.monitor, monitors)).count()
    return sum(settled.values()) + moving


def _of(column, monitors):
    """The condition that limits ``column`` to ``monitors`` (none for ``None``: all)."""
    return () if monitors is None else (column.in_(sorted(monitors)),)


def _limited(query, column, monitors):
    """``query`` limited to the rows of ``monitors`` (all of them for ``None``)."""
    return query if monitors is None else query.where(*_of(column, monitors))


def summary(stale_events=None, monitors=None):
    """The counts ``stats`` shows: resume and lapse gaps, their seconds, stale events.

    ``stale_events`` is the count when the caller has it already (``stale_total``
    otherwise); ``monitors`` limits all of them as ``listing`` does.
    """
    counts, seconds = dict.fromkeys((RESUME, LAPSE), 0), 0.0
    totals = Gap.select(Gap.kind, fn.COUNT(Gap.id), fn.SUM(Gap.ended_at - Gap.started_at))
    for kind, n, spent in _limited(totals, Gap.monitor, monitors).group_by(Gap.kind).tuples():
        counts[kind], seconds = n, seconds + (spent or 0.0)
    stale = stale_total(monitors) if stale_events is None else stale_events
    return {"resume_gaps": counts[RESUME], "lapse_gaps": counts[LAPSE],
            "not_observed_s": round(seconds, 3), "stale_events": stale}
