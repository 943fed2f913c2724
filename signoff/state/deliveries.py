"""A delivery's life: born ``queued``, claimed, retried, done or dead (docs/concepts.md)."""

from ..models import Delivery, Inbox
from ..storage import insert_rows, key_in
from .moves import PreparedMove, check_edge, guarded, move_query
from .statuses import DELIVERY_EDGES, DeliveryStatus as D
from .tallies import relabel_outcome


def update_delivery(delivery_id, now, statuses, **fields):
    """Change non-status fields of a delivery still in ``statuses`` and held by no
    worker; ``Fenced`` if not."""
    guarded(Delivery, (Delivery.id == delivery_id) & Delivery.lease_token.is_null(), statuses,
             None, updated_at=now, **fields)


def move_delivery(delivery_id, sources, target, now, token=None, **fields):
    """Move a delivery between statuses under the same rules as ``move_task``."""
    check_edge(DELIVERY_EDGES, sources, target)
    guarded(Delivery, Delivery.id == delivery_id, sources, token, status=target,
             updated_at=now, **fields)


def prepare_move_deliveries(ids, sources, target, now, token, per_row=None, **fields):
    """Build a move of many deliveries at once under the rules of ``move_delivery``.

    One guarded UPDATE: each row must still be in one of ``sources`` and carry
    ``token``. ``per_row`` maps a field to ``{delivery id: value}`` for values
    that differ by row. ``run()`` it in the writer's transaction: it returns
    the ids that moved; the others are fenced. Building the UPDATE of a batch
    costs more than running it, so a writer that builds it first holds the
    write lock for the statement alone.
    """
    check_edge(DELIVERY_EDGES, sources, target)
    return PreparedMove(move_query(Delivery, Delivery.id, ids, sources, target, now, token,
                                    per_row, fields), Delivery, target)


def new_deliveries(items, now, traces=None):
    """Insert ``queued`` deliveries for ``(monitor id, Event)`` pairs; their ids, in order.

    ``traces``: the trace carrier of each (see ``tracing.carrier``), kept on its row.
    """
    rows = [dict(ev.as_dict(), monitor=monitor_id, status=D.QUEUED, next_at=now,
                 accepted_at=now, updated_at=now) for monitor_id, ev in items]
    if traces and any(traces):  # untraced rows leave the columns alone
        for row, trace in zip(rows, traces):
            row.update(traceparent=(trace or {}).get("traceparent"),
                       tracestate=(trace or {}).get("tracestate"))
    return [r[0] for r in insert_rows(Delivery, rows, returning=("id",))]


def drop_deliveries(ids):
    """Delete deliveries written in this transaction that must not be kept (a lost race)."""
    if ids:
        Delivery.delete().where(key_in(Delivery.id, ids)).execute()


def relabel_duplicate(delivery_id, monitor, event_id, was, task_key=None, inbox=False):
    """Say a delivery this transaction finished with outcome ``was`` (and, with
    ``inbox``, its event's inbox row) was a duplicate; ``task_key`` links it to the
    task it duplicates."""
    fields = {"outcome": "duplicate", "last_code": "duplicate"}
    if task_key is not None:
        fields["task_key"] = task_key
    if Delivery.update(**fields).where(Delivery.id == delivery_id,
                                       Delivery.status == D.DONE).execute():
        relabel_outcome(monitor, was, "duplicate")
    if inbox:
        Inbox.update(outcome="duplicate").where(Inbox.monitor == monitor,
                                                Inbox.event_id == event_id).execute()


def link_batched(monitor, event_ids, task_key):
    """Link the batched deliveries of ``event_ids`` (and their inbox rows) to their task."""
    Inbox.update(task_key=task_key).where(Inbox.monitor == monitor,
                                          key_in(Inbox.event_id, event_ids)).execute()
    Delivery.update(task_key=task_key).where(Delivery.monitor == monitor,
                                             key_in(Delivery.event_id, event_ids),
                                             Delivery.outcome == "batched").execute()
