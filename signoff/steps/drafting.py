"""Calling the drafter for a monitor: its token budget, its usage, its call counts.

Every path that drafts (ingest, record batches, redraft) calls ``draft`` here,
so the tokens a call spent are counted whatever became of its answer, and a
monitor over its ``tokens_per_hour`` is not drafted for until the next clock
hour (``wait_until``). The tokens are written at once, outside the step's
transaction: they are spent even when the step's own write is fenced. The call
counts are a metric: a batch (``tallied``) writes them once at its end, not one
commit per call.
"""

import threading
from collections import Counter
from contextlib import contextmanager

from peewee import EXCLUDED, fn

from ..errors import SignoffError
from ..models import DrafterCallCount, DrafterUsage
from ..rules.drafts import drafted_answer, failure_meta, tokens

HOUR_S = 3600
_local = threading.local()  # this thread's tally of calls, inside ``tallied``


def hour_of(now):
    """The clock hour ``now`` falls in (Unix seconds // 3600)."""
    return int(now // HOUR_S)


def tokens_per_hour(rt):
    """The per-monitor token budget of ``[drafter.options]``, or ``None`` (no limit)."""
    limit = (rt.config.drafter_options or {}).get("tokens_per_hour")
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def wait_until(rt, monitor_id, now):
    """The start of the next hour when ``monitor_id`` spent its hour's tokens, else ``None``."""
    limit = tokens_per_hour(rt)
    if limit is None:
        return None
    spent = (DrafterUsage.select(DrafterUsage.input_tokens + DrafterUsage.output_tokens)
             .where(DrafterUsage.monitor == monitor_id, DrafterUsage.hour == hour_of(now))
             .scalar()) or 0
    return (hour_of(now) + 1) * HOUR_S if spent >= limit else None


def draft(rt, monitor_id, records, material):
    """Call the drafter; returns its checked answer (``rules.drafts.drafted_answer``).

    A failed call raises as the drafter raised; either way the call is counted.
    """
    try:
        answer = drafted_answer(rt.drafter()(records, material))
    except Exception as exc:
        code = exc.code if isinstance(exc, SignoffError) else type(exc).__name__
        count(rt, monitor_id, code, failure_meta(exc))
        raise
    count(rt, monitor_id, "ok", answer["meta"])
    return answer


@contextmanager
def tallied():
    """Drafter calls made in the block are tallied, not written one by one: the
    step writes them in its own transaction (``write_tally``), and what is left
    when the block ends is written then.

    A block that raises writes nothing more: its calls go uncounted, as the
    metric of a crashed worker's batch would.
    """
    _local.tally = Counter()
    try:
        yield
        write_tally()
    finally:
        _local.tally = None


def write_tally():
    """Write the calls tallied so far in this thread (inside ``tallied``) and clear them."""
    tally = getattr(_local, "tally", None)
    if tally:
        for outcome, calls in tally.items():
            _count_calls(outcome, calls)
        tally.clear()


def count(rt, monitor_id, outcome, meta):
    """Add one call of ``outcome`` and the tokens ``meta`` says it spent."""
    tally = getattr(_local, "tally", None)
    if tally is not None:
        tally[outcome] += 1
    else:
        _count_calls(outcome, 1)
    if meta is None:
        return
    spent_in, spent_out = tokens(meta)
    DrafterUsage.insert(monitor=monitor_id, hour=hour_of(rt.clock.now()), input_tokens=spent_in,
                        output_tokens=spent_out, calls=1).on_conflict(
        conflict_target=[DrafterUsage.monitor, DrafterUsage.hour],
        update={DrafterUsage.input_tokens: DrafterUsage.input_tokens + EXCLUDED.input_tokens,
                DrafterUsage.output_tokens: DrafterUsage.output_tokens + EXCLUDED.output_tokens,
                DrafterUsage.calls: DrafterUsage.calls + EXCLUDED.calls}).execute()


def _count_calls(outcome, calls):
    DrafterCallCount.insert(outcome=outcome, count=calls).on_conflict(
        conflict_target=[DrafterCallCount.outcome],
        update={DrafterCallCount.count: DrafterCallCount.count + EXCLUDED.count}).execute()


def summary(limit, now):
    """The drafter's figures for ``stats``: calls, tokens, and each monitor's hour
    against ``limit`` (tokens per hour, ``None`` for none)."""
    totals = DrafterUsage.select(fn.SUM(DrafterUsage.input_tokens),
                                 fn.SUM(DrafterUsage.output_tokens)).tuples().get()
    hour = DrafterUsage.select().where(DrafterUsage.hour == hour_of(now))
    return {
        "calls": dict(DrafterCallCount.select(DrafterCallCount.outcome, DrafterCallCount.count)
                      .tuples()),
        "tokens": {"input": int(totals[0] or 0), "output": int(totals[1] or 0)},
        "tokens_per_hour": limit,
        "this_hour": {u.monitor: {
            "tokens": u.input_tokens + u.output_tokens, "calls": u.calls,
            "budget_exhausted": limit is not None and u.input_tokens + u.output_tokens >= limit}
            for u in hour.order_by(DrafterUsage.monitor)},
        "budget_exhausted": sorted(u.monitor for u in hour
                                   if limit is not None
                                   and u.input_tokens + u.output_tokens >= limit),
    }
