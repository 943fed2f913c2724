"""What happened, kept: audit rows, attempts, dead letters (identifiers and codes only)."""

from ..models import Attempt, Audit, DeadLetter, DecisionTime
from ..storage import insert_rows


def audit(now, code, monitor=None, event_id=None, task_key=None, actor=None, channel=None,
          note=None, subject=None, data=None):
    """Append one audit row: identifiers and a code, never content; returns its ``seq``.

    ``actor`` (an identity) and ``channel`` name who decided and through which
    face, for human decisions (and ``policy``); the engine's own moves leave
    them null. ``note`` is the CLI's ``--by`` word; ``subject`` what a change of
    a reviewer, secret, policy or monitor was about; ``data`` a dict of further
    identifiers and proofs (never content).
    """
    return Audit.insert(at=now, code=code, monitor=monitor, event_id=event_id,
                        task_key=task_key, actor=actor, channel=channel, note=note,
                        subject=subject, data=data).execute()


def record_decision_times(decided, channel, now):
    """Keep how long after becoming ready each human decision came (``/metrics``
    ``signoff_decision_seconds``): ``decided`` is ``((monitor, ready_at), kind)`` pairs."""
    insert_rows(DecisionTime, [{"monitor": monitor, "channel": channel, "kind": kind,
                                "seconds": max(0.0, now - ready_at), "at": now}
                               for (monitor, ready_at), kind in decided])


def record_attempts(rows):
    """Insert attempt history rows: dicts of kind, ref, at, step, code, worker."""
    insert_rows(Attempt, rows)


def bury(kind, ref, step, code, attempts, now, reason=None):
    """Write the dead-letter row for a delivery or task whose budget is spent
    (``reason``: why its last attempt failed, in words, when known)."""
    first = (Attempt.select(Attempt.at).where(Attempt.kind == kind, Attempt.ref == str(ref))
             .order_by(Attempt.id).limit(1).scalar())
    DeadLetter.insert(kind=kind, ref=str(ref), step=step, code=code, attempts=attempts,
                      first_at=first if first is not None else now, last_at=now,
                      reason=reason).execute()
