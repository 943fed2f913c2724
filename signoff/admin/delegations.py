"""Delegation: while NAME is away, OTHER decides for them (docs/slack-and-delegation.md, "Delegation").

``reviewer delegate NAME --to OTHER [--until TIME]`` lets OTHER decide for
NAME until TIME (or until ``reviewer undelegate NAME``); one delegation per
NAME, a new one replaces it. While it is active OTHER may decide what NAME may
decide, for NAME, and never more than NAME may: the faces widen OTHER's
monitors by NAME's (``reviewers._monitors_of``; a read-only NAME lends nothing,
a read-only OTHER decides nothing), and a decision on a task of NAME's monitors
is recorded for NAME. The decision keeps ``by`` OTHER (the identity the quorum
counts, once whoever they decide for) and ``for`` NAME. Every face gets this
through the decisions, which ask ``stand_in`` who a reviewer decides for.
"""

import datetime

from ..errors import Refused
from ..models import Delegation, Reviewer, ReviewerMonitor, db
from ..rules.names import Actor
from ..state.history import audit
from .reviewers import find


def parse_until(text, now):
    """``--until``: ISO 8601 with a zone, or Unix seconds; in the future (``invalid_until``)."""
    text = str(text).strip()
    if text.isascii() and text.isdigit():
        at = float(text)
    else:
        try:
            moment = datetime.datetime.fromisoformat(text)
        except ValueError:
            raise Refused("invalid_until", f"--until {text!r}: give ISO 8601 with a zone "
                          "(2026-12-24T18:00:00+01:00) or Unix seconds") from None
        if moment.tzinfo is None:
            raise Refused("invalid_until", f"--until {text!r} names no zone: add one "
                          "(Z, +01:00) so every reader agrees on the moment")
        at = moment.timestamp()
    if at <= now:
        raise Refused("invalid_until", f"--until {text!r} has passed already")
    return at


def delegate(rt, name, to, until=None, by=None, channel="cli"):
    """Let reviewer ``to`` decide for reviewer ``name`` (until ``until``, a ``parse_until``
    text, or until undone); answers ``{reviewer, delegate, until}``."""
    actor = Actor.of(by, channel)
    now = rt.clock.now()
    until_at = None if until is None else parse_until(until, now)
    with db.atomic():
        reviewer, other = _reviewer(name), _reviewer(to)
        if reviewer == other:
            raise Refused("invalid_delegation", f"{reviewer!r} cannot delegate to themselves")
        Delegation.delete().where(Delegation.reviewer == reviewer).execute()
        Delegation.create(reviewer=reviewer, delegate=other, until=until_at, created_at=now)
        audit(now, "delegated", subject=reviewer, data={"to": other, "until": until_at},
              **actor.audit)
    return {"reviewer": reviewer, "delegate": other, "until": until_at}


def undelegate(rt, name, by=None, channel="cli"):
    """End reviewer ``name``'s delegation (``not_delegated`` when there is none)."""
    actor = Actor.of(by, channel)
    now = rt.clock.now()
    with db.atomic():
        reviewer = _reviewer(name)
        if not Delegation.delete().where(Delegation.reviewer == reviewer).execute():
            raise Refused("not_delegated", f"{reviewer!r} has no delegation to end")
        audit(now, "undelegated", subject=reviewer, **actor.audit)
    return {"reviewer": reviewer, "delegated": False}


def listing(now):
    """Delegations as ``{reviewer, delegate, until, active}``."""
    return [{"reviewer": d.reviewer, "delegate": d.delegate, "until": d.until,
             "active": d.until is None or d.until > now}
            for d in Delegation.select().order_by(Delegation.reviewer)]


def _reviewer(name):
    row = find(name)
    if row is None:
        raise Refused("unknown_reviewer", f"no reviewer {name!r}")
    return row.name


def stand_in(identity, monitor, now, asked=None):
    """The reviewer ``identity`` decides for on a task of ``monitor``, or ``None``.

    Without ``asked``: the first (by name) reviewer whose active delegation is
    to ``identity`` and who may decide ``monitor``'s tasks, if any. With
    ``asked`` (a reviewer's name): that one, or ``not_delegated`` when no
    active delegation of theirs is to ``identity`` or they may not decide
    ``monitor``'s tasks. The caller has found the task within ``identity``'s
    monitors, which a face widens by those of the reviewers delegating to them.
    """
    query = Delegation.select(Delegation.reviewer).where(
        Delegation.delegate == identity,
        Delegation.until.is_null() | (Delegation.until > now)).order_by(Delegation.reviewer)
    if asked is not None:
        row = find(asked)
        query = query.where(Delegation.reviewer == (row.name if row else asked))
    names = [n for (n,) in query.tuples()]
    for name in names:
        if _may_decide(name, monitor):
            return name
    if asked is not None:
        raise Refused("not_delegated", f"{identity!r} may not decide for {asked!r} here: no "
                      "active delegation to them, or it does not reach this task's monitor")
    return None


def _may_decide(name, monitor):
    """True when reviewer ``name`` may decide ``monitor``'s tasks themselves."""
    reviewer = Reviewer.get_or_none(Reviewer.name == name)
    if reviewer is None or reviewer.read_only:
        return False
    limits = {m for (m,) in ReviewerMonitor.select(ReviewerMonitor.monitor)
              .where(ReviewerMonitor.reviewer == name).tuples()}
    return not limits or monitor in limits


def acting(actor, monitor, now, asked=None):
    """``actor`` standing in for whom it decides for on ``monitor`` (``stand_in``).

    Only reviewers delegate: the CLI's operator and policies decide for no one
    (``asked`` there is ``not_delegated``).
    """
    if actor.channel in ("cli", "policy"):
        if asked is not None:
            raise Refused("not_delegated", "only a reviewer decides for another reviewer")
        return actor
    name = stand_in(actor.identity, monitor, now, asked)
    if name is None:
        return actor
    return Actor(actor.identity, actor.channel, actor.note, actor.monitors, name)
