"""Which rows a worker may claim, written once for the claim statements and the counts.

A claimable row is in one of its table's *ranges*: a status, and for most of
them a due time (``next_at <= now``); a task must also be unparked and
unleased, and a delivery's monitor not paused. Each range is a range of its
table's claim index (status, next_at, tie-break), so each engine reads every
range in index order and cuts it at the claim's limit (``engines``), and the
counts the wake-ups are sized by read the same ranges (``claimable``). A
*suspect* (a row whose last lease expired without an outcome, see
``signoff.state.leases``) is claimable like any other row, but claimed alone.
"""

from dataclasses import dataclass

from peewee import SQL


@dataclass(frozen=True)
class Range:
    """One status whose rows are claimable, and what else they must meet."""

    status: str
    due: bool  # next_at <= now
    free: bool = False  # not parked and not leased (tasks)
    running: bool = False  # its monitor is not paused (deliveries)

    def sql(self, param, column=str):
        """The range's condition; ``param`` is the engine's placeholder for now.

        ``column`` may wrap column names (SQLite's unary ``+`` keeps an index
        out of a query).
        """
        parts = [f"{column('status')} = '{self.status}'"]
        if self.due:
            parts.append(f"{column('next_at')} <= {param}")
        if self.free:
            parts.append(f"NOT {column('parked')} AND {column('lease_token')} IS NULL")
        if self.running:
            parts.append(f"{column('monitor')} NOT IN ({PAUSED})")
        return " AND ".join(parts)


# The ids of paused monitors (few, if any): their deliveries wait, unclaimed.
PAUSED = 'SELECT "monitor"."id" FROM "monitor" WHERE "monitor"."paused_at" IS NOT NULL'
RANGES = {
    "delivery": (Range("queued", due=False, running=True),
                 Range("retrying", due=True, running=True)),
    "task": (Range("approved", due=True, free=True), Range("uncertain", due=True, free=True)),
}
# The claim order, as the claim indexes end (models.py).
ORDER = {"delivery": ("next_at", "id"), "task": ("next_at", "created_at", "key")}


def waiting(table, param, column=str):
    """``(SQL of every range OR-ed, how many times it needs now)``."""
    conditions = [r.sql(param, column) for r in RANGES[table]]
    return " OR ".join(f"({c})" for c in conditions), sum(r.due for r in RANGES[table])


def claimable(model, now):
    """A condition selecting the rows of ``model`` a claim could take at ``now``."""
    database = model._meta.database
    sql, needs = waiting(model._meta.table_name, database.param)
    return SQL(f"({sql})", [now] * needs)
