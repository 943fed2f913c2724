"""How a status is written: one guarded UPDATE, on an allowed edge, under a lease.

Every move is a guarded UPDATE: the row must be in an allowed ``from`` status
and, when a worker holds it, carry that worker's lease token. Anything but the
rows expected changed means the move did not happen (another worker, a cancel
or a human got there first) and the caller must not act on it (``Fenced``).
The tables' own modules (``deliveries``, ``tasks``, …) build on these.
"""

from .. import storage
from ..models import Delivery, db
from ..storage import key_in
from .statuses import DELIVERY_EDGES, DELIVERY_WAITING, DeliveryStatus as D
from .tallies import count_moved, returned_by


class Fenced(Exception):
    """The row moved on without us: our lease or our expected status is gone."""


def check_edge(edges, sources, target):
    """Refuse (``ValueError``: a programming error) a move not on an edge of ``edges``."""
    for source in sources:
        if (source, target) not in edges:
            raise ValueError(f"no transition {source} -> {target}")


def claim_rows(model, suspect, now, limit, lease):
    """Write ``lease`` on up to ``limit`` waiting rows in one statement.

    Returns the rows claimed as ``storage.Fetched`` (instances once the claim
    has committed).

    A delivery moves from waiting to processing (an edge of the table); a task
    keeps its status and only gains the lease. ``suspect`` claims only rows
    whose last lease expired (see leases.py).
    """
    changes = dict(lease, updated_at=now)
    if model is Delivery:
        check_edge(DELIVERY_EDGES, DELIVERY_WAITING, D.PROCESSING)
        changes["status"] = D.PROCESSING
    return storage.claim(model, suspect, now, limit, changes)


def guarded(model, which, statuses, token, **fields):
    """Update the one row ``which`` picks, still in ``statuses`` (and leased under
    ``token``, when given); ``Fenced`` unless exactly that row changed. A move to a
    status the table never leaves counts the row in its tallies."""
    query = model.update(**fields).where(which, model.status.in_(list(statuses)))
    if token is not None:
        query = query.where(model.lease_token == token)
    target = fields.get("status")
    tallied = returned_by(model, target)
    if not tallied:
        if query.execute() != 1:
            raise Fenced(which)
        return
    rows = list(query.returning(*tallied).tuples().execute())
    if len(rows) != 1:
        raise Fenced(which)
    count_moved(model, target, rows)


def run_moves(moves):
    """Run prepared moves in the caller's transaction; the keys that moved, all together."""
    return set().union(*(move.run() for move in moves))


class PreparedMove:
    """A guarded many-row move, compiled to SQL; ``run()`` returns the keys that moved.

    ``model`` and ``target``: a move to a status the table never leaves returns
    its tally's columns after the key (``move_query``) and counts what moved.
    """

    def __init__(self, query, model=None, target=None):
        self.statement = None if query is None else query.sql()
        self.model, self.target = model, target

    def run(self):
        """Run the move (in the caller's transaction); the keys of the rows it moved."""
        if self.statement is None:
            return set()
        rows = db.execute_sql(*self.statement).fetchall()
        tallied = returned_by(self.model, self.target)
        if tallied:  # read raw: as the columns' fields read them
            count_moved(self.model, self.target, [
                [f.python_value(v) for f, v in zip(tallied, row[1:])] for row in rows])
        return {row[0] for row in rows}


def move_query(model, pk, ids, sources, target, now, token, per_row, fields, where=None):
    """The guarded many-row UPDATE of a move (``None`` when ``ids`` is empty), returning
    the keys of the rows it moved; ``per_row`` maps a field to ``{key: value}``."""
    if ids is not None:
        ids = list(ids)
        if not ids:
            return None
    for name, values in (per_row or {}).items():
        distinct = set(values.values())
        fields[name] = (distinct.pop() if len(distinct) == 1
                        else storage.key_case(pk, values, model._meta.fields[name]))
    status = model.status if ids is None else storage.unindexed(model.status)
    query = model.update(status=target, updated_at=now, **fields).where(
        status.in_(list(sources)))
    if ids is not None:
        query = query.where(key_in(pk, ids))
    if token is not None:
        query = query.where(model.lease_token == token)
    if where is not None:
        query = query.where(where)
    return query.returning(pk, *returned_by(model, target))


# What a worker writes with an outcome: the lease is dropped, and the row is no
# suspect any more (it got an outcome, so it did not kill its worker).
RELEASED = {"lease_owner": None, "lease_until": None, "lease_token": None, "suspect": False}


# What the reaper writes when a lease expired without an outcome: the row may be
# what killed its worker, so its next claim takes it alone (see leases.py).
EXPIRED = dict(RELEASED, suspect=True)
