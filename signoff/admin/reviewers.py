"""Reviewers (people who use the review pages and the JSON API), their tokens and sessions.

Tokens and session cookies are high-entropy random strings; only their sha256
is stored, and they are compared with ``hmac.compare_digest``. The CSRF token
of a session is derived from its cookie, so it needs no storage of its own.
A reviewer added with monitors sees and acts on those monitors' tasks only.
"""

import dataclasses
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from peewee import IntegrityError

from ..chores.reminders import escalated_to
from ..errors import Refused
from ..rules.contacts import check_email
from ..rules.names import Actor, clash, normal_name, skeleton
from ..state.history import audit
from ..models import (AuditReviewer, Delegation, Monitor, Reviewer, ReviewerKey,
                      ReviewerMonitor, ReviewSession, Task, db)

SESSION_TTL_S = 12 * 3600


def _hash(token):
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def csrf_for(session_token):
    """The CSRF token of a session: an HMAC of a fixed label under its cookie."""
    return hmac.new(session_token.encode(), b"signoff-csrf", hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Viewer:
    """The reviewer behind one request."""

    name: str
    read_only: bool
    session_token: str = ""
    monitors: frozenset | None = None  # None: every monitor

    def may_see(self, monitor):
        """True when this reviewer may list and act on ``monitor``'s tasks."""
        return self.monitors is None or monitor in self.monitors

    def check_monitor(self, monitor):
        """Refuse a monitor this reviewer may not see as one that does not exist
        (``unknown_monitor``, worded as ``monitors.py`` words it): a limited reviewer
        learns nothing of the others."""
        if not self.may_see(monitor):
            raise Refused("unknown_monitor", f"no monitor {monitor!r}")

    @property
    def csrf(self):
        """This session's CSRF token (hidden in every form)."""
        return csrf_for(self.session_token)

    def csrf_ok(self, given):
        """True when ``given`` is this session's CSRF token (constant-time)."""
        return isinstance(given, str) and hmac.compare_digest(given.encode(), self.csrf.encode())


def add(rt, name, read_only=False, monitors=(), by=None, channel="cli", email=None,
        slack_user=None):
    """Create a reviewer; returns ``{name, token, read_only, monitors, email, slack_user}``
    (the token, this once).

    ``name`` is kept normalised (``rules/names.py``: ``Alice `` becomes
    ``alice``, which the answer's ``name`` says); one equal to or confusable
    with an existing reviewer's, or breaking the name rule, is refused
    ``invalid_name`` (the very name again: ``reviewer_exists``). ``monitors``
    limits the reviewer to those monitors' tasks (each must exist, else
    ``unknown_monitor``); none means every monitor. ``email``: where links to
    decide are mailed (``rules/contacts.py``, else ``invalid_email``).
    ``slack_user``: the Slack user id whose clicks are this reviewer's
    (``check_slack_user``).
    """
    form = normal_name(name)
    email = None if email is None else check_email(email)
    actor = Actor.of(by, channel)
    slack_user = None if slack_user is None else check_slack_user(slack_user)
    token = "sor_" + secrets.token_urlsafe(32)
    now = rt.clock.now()
    monitors = sorted(set(monitors))
    with db.atomic():
        _refuse_lookalike(name, form)
        known = {m for (m,) in Monitor.select(Monitor.id).where(Monitor.id.in_(monitors)).tuples()}
        unknown = [m for m in monitors if m not in known]
        if unknown:
            raise Refused("unknown_monitor", f"no monitor {unknown[0]!r}")
        try:
            with db.atomic():  # a savepoint: a look-alike added meanwhile is refused cleanly
                _refuse_taken_slack_user(slack_user, form)
                Reviewer.create(name=form, token_hash=_hash(token), read_only=bool(read_only),
                                created_at=now, skeleton=skeleton(form), email=email,
                                slack_user=slack_user)
        except IntegrityError:
            raise Refused("invalid_name", f"{form!r} looks like a reviewer added at the same "
                          "moment; choose a name no one could take for another") from None
        for monitor in monitors:
            ReviewerMonitor.create(reviewer=form, monitor=monitor)
        audit(now, "reviewer_added", subject=form, **actor.audit)
    return {"name": form, "token": token, "read_only": bool(read_only),
            "monitors": monitors or None, "email": email, "slack_user": slack_user}


def check_slack_user(uid):
    """A Slack user id (``U…`` or ``W…``, capitals and digits), or ``invalid_slack_user``."""
    if not (isinstance(uid, str) and 2 <= len(uid) <= 32 and uid[0] in "UW"
            and uid.isascii() and uid.isalnum() and uid == uid.upper()):
        raise Refused("invalid_slack_user", f"{uid!r} is not a Slack user id (U or W, then "
                      "capital letters and digits: the member id of the person's Slack profile)")
    return uid


def _refuse_taken_slack_user(uid, name):
    if uid is None:
        return
    other = Reviewer.get_or_none(Reviewer.slack_user == uid)
    if other is not None and other.name != name:
        raise Refused("invalid_slack_user", f"Slack user {uid} is reviewer {other.name!r}'s "
                      "already: one person, one reviewer")


def set_contacts(rt, name, email=None, slack_user=None, by=None, channel="cli"):
    """Change reviewer ``name``'s contacts (``reviewer set``): ``email`` and/or
    ``slack_user``, ``""`` removing one, ``None`` leaving it; audited
    ``reviewer_changed`` (whether an address is set, never the address). Returns
    the reviewer as ``listing`` shows it."""
    actor = Actor.of(by, channel)
    if email is None and slack_user is None:  # a programming error: the CLI asks for one
        raise ValueError("set_contacts changes email, slack_user or both")
    changes = {}
    if email is not None:
        changes["email"] = None if email == "" else check_email(email)
    if slack_user is not None:
        changes["slack_user"] = None if slack_user == "" else check_slack_user(slack_user)
    now = rt.clock.now()
    with db.atomic():
        row = find(name)
        if row is None:
            raise Refused("unknown_reviewer", f"no reviewer {name!r}")
        _refuse_taken_slack_user(changes.get("slack_user"), row.name)
        Reviewer.update(**changes).where(Reviewer.name == row.name).execute()
        data = dict(changes)
        if "email" in data:  # whether one is set, never the address
            data["email"] = data["email"] is not None
        audit(now, "reviewer_changed", subject=row.name, data=data, **actor.audit)
    return next(r for r in listing() if r["name"] == row.name)


def viewer_for_slack_user(uid, now):
    """The ``Viewer`` whose reviewer has Slack user id ``uid``, or ``None``."""
    reviewer = Reviewer.get_or_none(Reviewer.slack_user == uid) if isinstance(uid, str) else None
    if reviewer is None:
        return None
    return Viewer(name=reviewer.name, read_only=bool(reviewer.read_only),
                  monitors=_monitors_of(reviewer.name, now))


def _refuse_lookalike(typed, form):
    """Refuse a new reviewer ``form`` that is, or looks like, an existing one."""
    other = clash(form, [n for (n,) in Reviewer.select(Reviewer.name).tuples()])
    if other is None:
        return
    if other == typed:
        raise Refused("reviewer_exists", f"reviewer {other!r} exists already")
    what = "is" if other == form else "looks like"
    raise Refused("invalid_name", f"{typed!r} (kept as {form!r}) {what} the existing reviewer "
                  f"{other!r}: one person, one name; choose another")


def find(name):
    """The reviewer row a person means by ``name``, or ``None``.

    The name as typed first (a reviewer kept before names were normalised may
    not be in the normal form), then in its normal form (``Alice`` is ``alice``).
    """
    if not isinstance(name, str):
        return None
    row = Reviewer.get_or_none(Reviewer.name == name)
    if row is None:
        try:
            form = normal_name(name)
        except Refused:
            return None
        row = Reviewer.get_or_none(Reviewer.name == form) if form != name else None
    return row


def remove(rt, name, by=None, channel="cli"):
    """Delete a reviewer and end every session of theirs."""
    actor = Actor.of(by, channel)
    now = rt.clock.now()
    with db.atomic():
        row = find(name)
        if row is None or not Reviewer.delete().where(Reviewer.name == row.name).execute():
            raise Refused("unknown_reviewer", f"no reviewer {name!r}")
        name = row.name
        ended = ReviewSession.delete().where(ReviewSession.reviewer == name).execute()
        ReviewerMonitor.delete().where(ReviewerMonitor.reviewer == name).execute()
        _remove_keys(name, now, actor.audit)
        Delegation.delete().where((Delegation.reviewer == name)
                                  | (Delegation.delegate == name)).execute()
        audit(now, "reviewer_removed", subject=name, **actor.audit)
    return {"name": name, "removed": True, "sessions_ended": ended}


def _remove_keys(reviewer, now, who):
    """Remove every key of ``reviewer`` (being removed: a later reviewer of the name
    signs with none of them), each audited as ``keys.remove`` audits it."""
    for (key_id,) in ReviewerKey.select(ReviewerKey.key_id).where(
            ReviewerKey.reviewer == reviewer).tuples():
        ReviewerKey.delete().where(ReviewerKey.key_id == key_id).execute()
        audit(now, "reviewer_key_removed", subject=reviewer, **who, data={"key_id": key_id})


def listing():
    """Reviewers as ``{name, read_only, monitors, email, slack_user, delegate, created_at}``
    (never a token); ``monitors`` is null for a reviewer of every monitor,
    ``delegate`` names who decides for them (``reviewer delegate``), if anyone."""
    limits = _limits(None)
    delegates = dict(Delegation.select(Delegation.reviewer, Delegation.delegate).tuples())
    return [{"name": r.name, "read_only": r.read_only,
             "monitors": sorted(limits[r.name]) if r.name in limits else None,
             "email": r.email, "slack_user": r.slack_user, "delegate": delegates.get(r.name),
             "created_at": r.created_at}
            for r in Reviewer.select().order_by(Reviewer.name)]


def _limits(name):
    """``{reviewer: {monitor, ...}}`` of limited reviewers (of ``name`` alone, if given)."""
    query = ReviewerMonitor.select(ReviewerMonitor.reviewer, ReviewerMonitor.monitor)
    if name is not None:
        query = query.where(ReviewerMonitor.reviewer == name)
    limits = {}
    for reviewer, monitor in query.tuples():
        limits.setdefault(reviewer, set()).add(monitor)
    return limits


def _monitors_of(name, now):
    """The monitors ``name`` sees and decides (``None``: every monitor): their own, and
    while a reviewer who may decide delegates to them (``reviewer delegate``), that
    reviewer's too, since the delegate decides what the delegator may, for them."""
    lenders = [n for (n,) in Delegation.select(Delegation.reviewer)
               .join(Reviewer, on=(Reviewer.name == Delegation.reviewer))
               .where(Delegation.delegate == name, Reviewer.read_only == False,  # noqa: E712
                      Delegation.until.is_null() | (Delegation.until > now)).tuples()]
    limits = _limits(None) if lenders else _limits(name)
    if any(n not in limits for n in (name, *lenders)):
        return None
    return frozenset().union(*(limits[n] for n in (name, *lenders)))


def viewer_for_task(viewer, key):
    """``viewer`` as it may see and decide task ``key`` (a full key): a reviewer limited
    to other monitors may, once the task was escalated to them (chores/reminders.py),
    and for that task alone."""
    if viewer is None or viewer.monitors is None or not isinstance(key, str):
        return viewer
    task = Task.select(Task.key, Task.monitor).where(Task.key == key).first()
    if (task is None or task.monitor in viewer.monitors
            or viewer.name not in escalated_to([task]).get(task.key, ())):
        return viewer
    return dataclasses.replace(viewer, monitors=viewer.monitors | {task.monitor})


def viewer_for_token(token, now):
    """The ``Viewer`` whose reviewer token is ``token`` (a bearer token), or ``None``.

    Only the token's sha256 is stored: the row is found by it, and the stored
    hash is compared in constant time as at login.
    """
    if not isinstance(token, str) or not token:
        return None
    given = _hash(token)
    reviewer = Reviewer.get_or_none(Reviewer.token_hash == given)
    expected = reviewer.token_hash if reviewer is not None else _hash("")
    if not hmac.compare_digest(given, expected) or reviewer is None:
        return None
    return Viewer(name=reviewer.name, read_only=bool(reviewer.read_only),
                  monitors=_monitors_of(reviewer.name, now))


def log_in(name, token, now):
    """``(session token or None, reviewer)`` for one login, audited ``login`` / ``login_failed``.

    ``reviewer`` is ``name`` when it is a reviewer's, else ``None``: only a known
    name is kept with the audit row, so a token pasted into the name field is
    never stored. The token itself never is.
    """
    reviewer = find(name)
    given = _hash(token if isinstance(token, str) else "")
    # Compare even for an unknown name, so timing does not tell names apart.
    expected = reviewer.token_hash if reviewer is not None else _hash("")
    matched = hmac.compare_digest(given, expected) and reviewer is not None
    known = reviewer.name if reviewer is not None else None
    session = secrets.token_urlsafe(32) if matched else None
    with db.atomic():
        seq = audit(now, "login" if matched else "login_failed")
        if known is not None:
            AuditReviewer.create(seq=seq, reviewer=known)
        if matched:
            ReviewSession.delete().where(ReviewSession.expires_at <= now).execute()  # housekeeping
            ReviewSession.create(token_hash=_hash(session), reviewer=known, created_at=now,
                                 expires_at=now + SESSION_TTL_S)
    return session, known


def viewer_for(session_token, now):
    """The ``Viewer`` of a live session cookie, or ``None``."""
    if not session_token:
        return None
    row = (ReviewSession.select(ReviewSession.reviewer, Reviewer.read_only)
           .join(Reviewer, on=(Reviewer.name == ReviewSession.reviewer))
           .where(ReviewSession.token_hash == _hash(session_token), ReviewSession.expires_at > now)
           .tuples().first())
    if row is None:
        return None
    return Viewer(name=row[0], read_only=bool(row[1]), session_token=session_token,
                  monitors=_monitors_of(row[0], now))


def log_out(session_token):
    """End one session."""
    ReviewSession.delete().where(ReviewSession.token_hash == _hash(session_token)).execute()
