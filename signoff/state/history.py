"""What happened, kept: audit rows, attempts, dead letters (identifiers and codes only).

Every audit row is written by ``append_audits`` (``audit`` for one), which links
it into its hash chain (rules/auditchain.py): a task's entries into the task's
chain, each holding its predecessor's hash. The writer holds the task's row
(it created, moved or locked it in this transaction; SQLite's transaction holds
the write lock from BEGIN), so two writers of one chain never read the same head
and the chain never forks; writers of different tasks share no lock. An entry
about a task whose row its writer does not hold is written ``lone`` and stands
alone, committed to by the next checkpoint.
"""

from peewee import SQL, Value, fn

from ..models import Approval, Attempt, Audit, DeadLetter, DecisionTime
from ..rules.auditchain import APPROVING, ENTRY_FIELDS, TASK_CHAIN, entry_hash, task_chain
from ..storage import KeyedSelect, insert_rows
from .tallies import count_attempts

LONE = "lone"  # a row's key: True when its writer does not hold the task's row
# A row's key: True when its writer created the task's row in this transaction, so
# its chain begins here (tasks are never deleted: a key is never made twice).
CREATED = "created"
_UNSET = dict.fromkeys(ENTRY_FIELDS)  # every column an entry's hash covers, null


def audit(now, code, monitor=None, event_id=None, task_key=None, actor=None, channel=None,
          note=None, subject=None, data=None, lone=False):
    """Append one audit row: identifiers and a code, never content; returns its ``seq``.

    ``actor`` (an identity) and ``channel`` name who decided and through which
    face, for human decisions (and ``policy``); the engine's own moves leave
    them null. ``note`` is the CLI's ``--by`` word; ``subject`` what a change of
    a reviewer, secret, policy or monitor was about; ``data`` a dict of further
    identifiers and proofs (never content). ``lone``: see ``append_audits``.
    """
    [row] = _linked([{"at": now, "code": code, "monitor": monitor, "event_id": event_id,
                      "task_key": task_key, "actor": actor, "channel": channel, "note": note,
                      "subject": subject, "data": data, LONE: lone}])
    return Audit.insert(**row).execute()


def append_audits(rows):
    """Append audit rows (dicts of ``at``, ``code`` and any other columns), in order,
    each linked into its chain; run in the caller's transaction.

    A row with a ``task_key`` joins that task's chain: its writer must hold the
    task's row (module docstring), or give ``lone: True``; ``created: True`` says
    the writer made the task's row, and spares the look for the chain's head.
    """
    if rows:
        insert_rows(Audit, _linked(rows))


def _linked(rows):
    """``rows`` with every column, each with its chain, ``prev`` and ``hash``."""
    linked, created = [], set()
    for given in rows:
        row = {**_UNSET, **given}
        lone, made = row.pop(LONE, False), row.pop(CREATED, False)
        if row["task_key"] is not None and not lone:
            row["chain"] = task_chain(row["task_key"])
            if made:
                created.add(row["chain"])
        linked.append(row)
    heads = chain_heads({row["chain"] for row in linked if row["chain"] is not None} - created)
    for row in linked:
        if row["chain"] is not None:
            row["prev"] = heads.get(row["chain"])
        own = entry_hash(row)
        if row["chain"] is not None:
            heads[row["chain"]] = own
        row["hash"] = own  # after: the body is the row without it
    return linked


def task_entries(key):
    """Task ``key``'s audit entries, oldest first: its chain's and those written about
    it outside the chain, each read through its own index (never the whole audit)."""
    chained = Audit.select().where(Audit.chain == task_chain(key))
    # Both terms of the partial index's condition, written out: from them each engine's
    # planner proves the index (models.py, ``audit_unchained_task``) may serve the read.
    alone = Audit.select().where(Audit.chain.is_null(), Audit.task_key.is_null(False),
                                 Audit.task_key == key)
    return sorted([*chained, *alone], key=lambda entry: entry.seq)


def _approvals_recorded(keys):
    """The approvals of the tasks ``keys`` (an SQL node), each with whether its chain records it."""
    recorded = fn.EXISTS(Audit.select(SQL("1")).where(
        Audit.chain == Value(TASK_CHAIN).concat(Approval.task_key),
        Audit.actor == Approval.by, Audit.code.in_(list(APPROVING))))
    return Approval.select(Approval.task_key, Approval.digest, recorded).where(keys)


def _heads(chains):
    """The last entry's chain and hash of each of ``chains`` (an SQL node)."""
    last = Audit.select(fn.MAX(Audit.seq)).where(chains).group_by(Audit.chain)
    return Audit.select(Audit.chain, Audit.hash).where(Audit.seq.in_(last))


# Both run every batch (every approval, every submit): built once.
_APPROVALS_RECORDED = KeyedSelect(_approvals_recorded, Approval.task_key)
_HEADS = KeyedSelect(_heads, Audit.chain)


def approvals_in_chains(keys):
    """``{key: [(digest, recorded)]}``: each approval on record of the task ``keys``,
    with its digest and whether an entry of the task's chain records it (its
    identity approving); one not recorded was written around signoff, not by it."""
    if not keys:
        return {}
    found = {}
    for key, digest, inside in _APPROVALS_RECORDED.rows(sorted(keys)):
        found.setdefault(key, []).append((digest, bool(inside)))
    return found


def chain_heads(chains):
    """``{chain: hash of its last entry}`` for those of ``chains`` that have entries."""
    if not chains:
        return {}
    return dict(_HEADS.rows(sorted(chains)))


def record_decision_times(decided, channel, now):
    """Keep how long after becoming ready each human decision came (``/metrics``
    ``signoff_decision_seconds``): ``decided`` is ``((monitor, ready_at), kind)`` pairs."""
    insert_rows(DecisionTime, [{"monitor": monitor, "channel": channel, "kind": kind,
                                "seconds": max(0.0, now - ready_at), "at": now}
                               for (monitor, ready_at), kind in decided])


def record_attempts(rows):
    """Insert attempt history rows: dicts of kind, ref, at, step, code, worker."""
    insert_rows(Attempt, rows)
    count_attempts(rows)


def bury(kind, ref, step, code, attempts, now, reason=None):
    """Write the dead-letter row for a delivery or task whose budget is spent
    (``reason``: why its last attempt failed, in words, when known)."""
    first = (Attempt.select(Attempt.at).where(Attempt.kind == kind, Attempt.ref == str(ref))
             .order_by(Attempt.id).limit(1).scalar())
    DeadLetter.insert(kind=kind, ref=str(ref), step=step, code=code, attempts=attempts,
                      first_at=first if first is not None else now, last_at=now,
                      reason=reason).execute()
