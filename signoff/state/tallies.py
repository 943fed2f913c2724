"""Tallies: how many rows reached a status they never leave, kept as they reach it.

``stats``, ``/metrics`` and the listings would otherwise count the whole history
on every read: a GROUP BY over a million finished tasks on each Prometheus
scrape. Instead the transaction that settles rows (a delivery ``done``; a task
``done``, ``rejected`` or ``expired``; a notification ``sent``; every attempt)
inserts what it added as ``TallyDelta`` rows beside its moves. Writers only
insert, so the hot path shares no row and takes no lock it did not take before;
a shared chore folds the deltas into ``Tally``. A reader adds the two in one
statement and counts itself only the rows not settled, which are few by nature
(they wait for a worker or a person).

Keys: ``(kind, monitor, status, detail)``. A delivery's detail is its outcome;
a task has one row with detail ``""`` and one per flag it settled with
(``parked``, ``outcome_unknown``, ``recovered``); an attempt's status and detail
are its step and code (monitor ``""``); a notification has neither.
"""

from collections import Counter

from peewee import EXCLUDED, fn

from ..models import Delivery, Notification, Tally, TallyDelta, Task, db
from ..storage import insert_rows, unescape_text
from .statuses import DeliveryStatus as D, NotificationStatus as N, TaskStatus as T

# The statuses each table never leaves, and the columns a settling move returns
# so that its tally is known without another read.
SETTLED = {Delivery: (D.DONE,), Task: (T.DONE, T.REJECTED, T.EXPIRED), Notification: (N.SENT,)}
KINDS = {Delivery: "delivery", Task: "task", Notification: "notification"}
FOLD_CHUNK = 5000
FOLD_EVERY_S = 5.0


def unsettled(model):
    """The statuses of ``model`` its rows may still leave: counted from the rows."""
    settled = SETTLED[model]
    return [s for s in type(settled[0]) if s not in settled]


def returned_by(model, target):
    """The columns a move of ``model`` to ``target`` returns for its tally (none when
    ``target`` is not a status the table never leaves)."""
    if target not in SETTLED.get(model, ()):
        return ()
    if model is Delivery:
        return (Delivery.monitor, Delivery.outcome)
    if model is Task:
        return (Task.monitor, Task.parked, Task.outcome_unknown, Task.write_possible,
                Task.attempts)
    return ()


def count_moved(model, target, rows):
    """Record the tally of rows a move settled: ``rows`` are the values of
    ``returned_by(model, target)`` of each row moved, in the mover's transaction."""
    if target not in SETTLED.get(model, ()):
        return
    added = Counter()
    kind = KINDS[model]
    for row in rows:
        if model is Delivery:
            monitor, outcome = row
            added[(kind, monitor, target, outcome or "")] += 1
        elif model is Task:
            monitor, parked, unknown, possible, attempts = row
            added[(kind, monitor, target, "")] += 1
            for flag, on in (("parked", parked), ("outcome_unknown", unknown),
                             ("recovered", target == T.DONE and possible and attempts > 1)):
                if on:
                    added[(kind, monitor, target, flag)] += 1
        else:
            added[(kind, "", target, "")] += 1
    record(added)


def count_attempts(rows):
    """Record the tally of attempt rows being inserted (dicts with ``step`` and ``code``)."""
    record(Counter(("attempt", "", r["step"], r["code"]) for r in rows))


def relabel_outcome(monitor, was, now_is):
    """A done delivery's outcome changed from ``was`` to ``now_is`` (a duplicate found
    in the transaction that finished it): move its count along."""
    if was != now_is:
        record({("delivery", monitor, D.DONE, was or ""): -1,
                ("delivery", monitor, D.DONE, now_is): 1})


def record(added):
    """Insert ``{(kind, monitor, status, detail): n}`` as deltas (the caller's transaction)."""
    rows = [{"kind": k, "monitor": m, "status": s, "detail": d, "n": n}
            for (k, m, s, d), n in added.items() if n]
    if rows:
        insert_rows(TallyDelta, rows)


def fold(limit=FOLD_CHUNK):
    """Fold up to ``limit`` deltas into the tallies; how many were folded.

    What a DELETE returns is this transaction's alone: two workers folding at
    once never fold one delta twice.
    """
    with db.atomic():
        ids = TallyDelta.select(TallyDelta.id).order_by(TallyDelta.id).limit(limit)
        taken = list(TallyDelta.delete().where(TallyDelta.id.in_(ids)).returning(
            TallyDelta.kind, TallyDelta.monitor, TallyDelta.status, TallyDelta.detail,
            TallyDelta.n).tuples().execute())
        sums = Counter()
        for kind, monitor, status, detail, n in taken:
            sums[(kind, monitor, status, detail)] += n
        for (kind, monitor, status, detail), n in sorted(sums.items()):
            (Tally.insert(kind=kind, monitor=monitor, status=status, detail=detail, n=n)
             .on_conflict(conflict_target=[Tally.kind, Tally.monitor, Tally.status, Tally.detail],
                          update={Tally.n: Tally.n + EXCLUDED.n})
             .execute())
    return len(taken)


def fold_all(rt):
    """The fold chore: every delta there is now, in chunks; ``{folded}``."""
    folded = total = fold()
    while folded == FOLD_CHUNK:
        folded = fold()
        total += folded
    return {"folded": total}


def counts(kind, detail="", statuses=None, monitors=None):
    """``{(monitor, status): n}`` of ``kind``'s settled rows with ``detail``, tallied
    and not yet folded alike, read in one statement (one snapshot)."""
    parts = []
    for model in (Tally, TallyDelta):
        query = (model.select(model.monitor, model.status, model.n)
                 .where(model.kind == kind, model.detail == detail))
        if statuses is not None:
            query = query.where(model.status.in_([str(s) for s in statuses]))
        if monitors is not None:
            query = query.where(model.monitor.in_(sorted(monitors)))
        parts.append(query)
    union = parts[0].union_all(parts[1]).alias("u")
    query = (Tally.select(union.c.monitor, union.c.status, fn.SUM(union.c.n))
             .from_(union).group_by(union.c.monitor, union.c.status))
    # Read through a union, the columns come as stored: unescape as ``Text`` would.
    return {(unescape_text(m), s): int(n) for m, s, n in query.tuples() if n}


def by_detail(kind, status=None):
    """``{(status, detail): n}`` of every detail of ``kind`` (an attempt's step and code,
    a delivery's outcome), over every monitor, in one statement."""
    parts = []
    for model in (Tally, TallyDelta):
        query = model.select(model.status, model.detail, model.n).where(model.kind == kind)
        if status is not None:
            query = query.where(model.status == status)
        parts.append(query)
    union = parts[0].union_all(parts[1]).alias("u")
    query = (Tally.select(union.c.status, union.c.detail, fn.SUM(union.c.n))
             .from_(union).group_by(union.c.status, union.c.detail))
    return {(s, unescape_text(d)): int(n) for s, d, n in query.tuples() if n}
