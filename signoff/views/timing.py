"""How long people take to decide: the decision times ``/metrics`` shows as the
``signoff_decision_seconds`` histogram, and the oldest task waiting per monitor
(``stats``, the review index)."""

from peewee import Case, fn

from ..models import DecisionTime, Task
from ..state.statuses import TaskStatus as T

# Upper bounds of the histogram's buckets, in seconds: from a minute to a week.
BUCKETS = (60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)


def decision_seconds():
    """Per ``(monitor, channel)``: ``{monitor, channel, count, sum, buckets}``, the buckets
    ``[(upper bound, decisions within it)]`` cumulative as Prometheus counts them."""
    within = [fn.SUM(Case(None, [(DecisionTime.seconds <= bound, 1)], 0)) for bound in BUCKETS]
    query = (DecisionTime.select(DecisionTime.monitor, DecisionTime.channel,
                                 fn.COUNT(DecisionTime.id), fn.SUM(DecisionTime.seconds), *within)
             .group_by(DecisionTime.monitor, DecisionTime.channel)
             .order_by(DecisionTime.monitor, DecisionTime.channel))
    return [{"monitor": monitor, "channel": channel, "count": count, "sum": float(total or 0),
             "buckets": list(zip(BUCKETS, (int(n or 0) for n in counts)))}
            for monitor, channel, count, total, *counts in query.tuples()]


def oldest_waiting(now, monitors=None):
    """``{monitor: {"since", "age_s"}}``: each monitor's oldest ``ready`` task (of
    ``monitors`` alone, a limited reviewer's, if given)."""
    query = (Task.select(Task.monitor, fn.MIN(Task.created_at))
             .where(Task.status == T.READY).group_by(Task.monitor).order_by(Task.monitor))
    if monitors is not None:
        query = query.where(Task.monitor.in_(sorted(monitors)))
    return {monitor: {"since": since, "age_s": max(0.0, now - since)}
            for monitor, since in query.tuples()}
