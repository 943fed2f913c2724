"""Monitors: bind one from the host's current grant, pause, unpause or cancel it, list them."""

from . import reviewers, subscriptions
from ..chores import reminders
from ..steps import recordbatches
from ..rules.canonical import digest
from ..errors import Refused
from ..rules.events import check_label
from ..rules.names import Actor
from ..errors import InvalidEvent
from ..state.history import audit
from ..state.monitors import (end_monitor, end_pause, new_monitor, set_signed_approvals,
                              start_pause)
from ..state.statuses import DELIVERY_WAITING
from ..state.tasks import cancel_tasks
from ..models import Delivery, Monitor, MonitorSlack, Policy, Task, db
from ..rules.retry import TRANSIENT
from ..storage import retried

DAY_S = 24 * 60 * 60
DEFAULT_EVENTS = ("comment.created",)
# A monitor id is a segment of webhook URLs (/hooks/<id>): only characters that
# need no escaping there. Monitors bound before the rule keep their ids.
ID_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:@")
ID_RULE = "1-128 characters: ASCII letters, digits, '.', '_', '-', ':' and '@' (not '.' or '..')"
MAX_ID = 128
MAX_APPROVALS = 20  # a quorum larger than this is a typo, not a team


def check_id(monitor_id):
    """Refuse (``invalid_name``) a new monitor id that is not safe in a URL path segment."""
    if not (isinstance(monitor_id, str) and 1 <= len(monitor_id) <= MAX_ID
            and set(monitor_id) <= ID_CHARACTERS and monitor_id not in (".", "..")):
        raise Refused("invalid_name", f"monitor id {monitor_id!r}: must be {ID_RULE}")


def bind(rt, document, monitor_id="default", event_names=None, ttl_s=DAY_S, window_s=60,
         approval_ttl_s=None, batch_window_s=None, within=None, approvals=1,
         signed_approvals=False, remind_after_s=None, escalate_after_s=None, escalate_to=(),
         slack_channel=None):
    """Bind a monitor from the host's current grant context.

    An id that exists already (active or cancelled) is refused: a cancelled
    monitor is never reactivated, and a changed grant needs a new monitor. On
    a host whose MCP server offers events the monitor is subscribed first
    (``subscriptions.subscribe``); ``event_names`` then defaults to the
    subscribed event's name. ``within()`` runs in the transaction that writes
    the monitor. ``approvals``: the distinct approvers each task's digest needs;
    ``signed_approvals``: only decisions signed by their reviewers count.
    ``remind_after_s``, ``escalate_after_s``, ``escalate_to``: reminders and
    escalation of its waiting tasks (``chores/reminders.py``). ``slack_channel``:
    the Slack channel id its ready tasks are posted to.
    """
    events = subscriptions.settings_of(rt)
    if event_names is None:
        event_names = [events.name] if events is not None else list(DEFAULT_EVENTS)
    _check_options(monitor_id, document, event_names, events,
                   {"ttl": ttl_s, "window": window_s, "approval-ttl": approval_ttl_s,
                    "batch-window": batch_window_s, "remind-after": remind_after_s,
                    "escalate-after": escalate_after_s})
    if isinstance(approvals, bool) or not isinstance(approvals, int) or not 1 <= approvals <= MAX_APPROVALS:
        raise Refused("invalid_monitor", f"approvals: must be a whole number from 1 to {MAX_APPROVALS}")
    escalate_to = _escalation(escalate_after_s, escalate_to)
    _check_slack_channel(slack_channel)
    context = _granted_context(rt, document)

    def create():
        now = rt.clock.now()
        with db.atomic():
            _refuse_existing(monitor_id)
            new_monitor(monitor_id, now, document=document, event_names=list(event_names),
                        expires_at=now + ttl_s, window_s=window_s,
                        approval_ttl_s=approval_ttl_s, approvals=approvals,
                        grant_digest=digest(context), signed_approvals=bool(signed_approvals))
            if batch_window_s is not None:
                recordbatches.set_window(monitor_id, batch_window_s)
            reminders.set_reminders(monitor_id, remind_after_s, escalate_after_s, escalate_to)
            if slack_channel is not None:
                MonitorSlack.create(monitor=monitor_id, channel=slack_channel)
            audit(now, "bound", monitor_id, subject=monitor_id)
            if signed_approvals:
                audit(now, "monitor_signed_approvals", monitor_id, subject=monitor_id,
                      data={"signed_approvals": True})
            if within is not None:
                within()
        return row(Monitor.get_by_id(monitor_id))

    if events is None:
        return create()
    _refuse_existing(monitor_id)  # before asking the server for anything
    return subscriptions.subscribe(rt, events, monitor_id, document, create)


def _check_options(monitor_id, document, event_names, events, durations):
    # The id rule keeps it a plain path segment, as a subscription's callback URL needs too.
    check_id(monitor_id)
    try:
        for label, value in [("document", document)] + [
                ("event", name) for name in event_names]:
            check_label(label, value)
    except InvalidEvent as exc:
        raise Refused("invalid_monitor", exc.reason) from None
    for name, value in durations.items():
        if value is not None and not value > 0:
            raise Refused("invalid_monitor", f"{name}: must be a positive number of seconds")


def _granted_context(rt, document):
    """The host's current grant context, refused unless it allows read and draft on
    ``document``."""
    try:
        context = rt.host().context()
    except TRANSIENT as exc:  # e.g. a host URL that cannot be reached: the message names it
        raise Refused("host_unavailable", f"the host did not answer: {exc}") from None
    actions = context.get("actions", []) if isinstance(context, dict) else []
    if not {"read", "draft"} <= set(actions):
        raise Refused("action", "the current grant does not allow read and draft")
    docs = context.get("docs") if isinstance(context, dict) else None
    if not isinstance(docs, list) or document not in docs:
        # Refused now, not at the first event: such a monitor could never act.
        raise Refused("access", f"the current grant does not cover document {document!r}")
    return context


def _escalation(after_s, names):
    """The stored names of the reviewers ``names`` escalates to; each must exist."""
    if (after_s is None) != (not names):
        raise Refused("invalid_monitor", "--escalate-after and --escalate-to go together")
    found = [reviewers.find(name) for name in names]
    missing = [name for name, row in zip(names, found) if row is None]
    if missing:
        raise Refused("unknown_reviewer", f"no reviewer {missing[0]!r} to escalate to")
    return sorted({row.name for row in found})


def _check_slack_channel(channel):
    """A Slack channel id (``C…``, ``G…`` or ``D…``, capitals and digits), or ``invalid_monitor``."""
    if channel is None:
        return
    if not (isinstance(channel, str) and 2 <= len(channel) <= 32 and channel[0] in "CGD"
            and channel.isascii() and channel.isalnum() and channel == channel.upper()):
        raise Refused("invalid_monitor", f"slack-channel {channel!r}: a Slack channel id (C, G "
                      "or D, then capital letters and digits), not its name")


def _refuse_existing(monitor_id):
    existing = Monitor.get_or_none(Monitor.id == monitor_id)
    if existing is not None:
        code = "monitor_exists" if existing.active else "cancelled"
        raise Refused(code, f"monitor {monitor_id!r} exists already"
                      + ("" if existing.active else " and is cancelled; bind a new id"))


def cancel(rt, monitor_id, by=None, channel="cli"):
    """Stop intake, end the monitor's open tasks (see ``state.tasks.cancel_tasks``) and its
    MCP Events subscription (answered 410 from now on; the worker unsubscribes it).

    A cancel ends a pause too: the deliveries the pause held, and those that
    arrive later, are processed and end ``cancelled`` at the gate, as for a
    monitor that was never paused.

    Answers the monitor with ``tasks_cancelled`` and ``writes_in_flight``: the
    cancelled tasks a worker was writing at that moment, each of which ends
    ``done`` if its receipt confirms the write, else stays cancelled with
    ``outcome_unknown``.
    """
    actor = Actor.of(by, channel)
    cancelled, in_flight = _cancel(monitor_id, rt.clock.now(), actor.audit)
    _wake_held(rt, monitor_id)
    return dict(row(Monitor.get_by_id(monitor_id)), tasks_cancelled=len(cancelled),
                writes_in_flight=len(in_flight))


@retried  # a deadlock with a worker's batch is tried again: every write here is guarded
def _cancel(monitor_id, now, who):
    with db.atomic():
        if not Monitor.select().where(Monitor.id == monitor_id).exists():
            raise Refused("unknown_monitor", f"no monitor {monitor_id!r}")
        end_monitor(monitor_id, now)
        subscriptions.end_for_monitor(monitor_id, now, "cancelled")
        ended = cancel_tasks(Task.monitor == monitor_id, now)
        audit(now, "cancelled", monitor_id, **who, subject=monitor_id)
    return ended


def pause(rt, monitor_id, by, channel):
    """Hold a monitor's new events without ending it: they are still accepted, and
    wait unclaimed (``storage/claims.py``) until ``unpause``; its approved tasks
    still submit. Pausing a paused monitor answers as it is."""
    return _set_paused(rt, monitor_id, True, by, channel)


def unpause(rt, monitor_id, by, channel):
    """Let a paused monitor's events be processed again, the held ones first."""
    answer = _set_paused(rt, monitor_id, False, by, channel)
    _wake_held(rt, monitor_id)
    return answer


def _wake_held(rt, monitor_id):
    # The deliveries a pause held got no wake-up of their own while it lasted.
    waiting = Delivery.select().where(Delivery.monitor == monitor_id,
                                      Delivery.status.in_(list(DELIVERY_WAITING))).count()
    if waiting:
        rt.wakers.wake("ingest", waiting)


def _active(monitor_id):
    """Monitor ``monitor_id``, refused ``unknown_monitor`` or ``cancelled`` unless it is active."""
    monitor = Monitor.get_or_none(Monitor.id == monitor_id)
    if monitor is None:
        raise Refused("unknown_monitor", f"no monitor {monitor_id!r}")
    if not monitor.active:
        raise Refused("cancelled", f"monitor {monitor_id!r} is cancelled")
    return monitor


@retried
def _set_paused(rt, monitor_id, paused, by, channel):
    actor = Actor.of(by, channel)
    now = rt.clock.now()
    with db.atomic():
        monitor = _active(monitor_id)
        if paused and monitor.paused_at is None:
            if start_pause(monitor_id, now):
                audit(now, "paused", monitor_id, subject=monitor_id, **actor.audit)
            elif not Monitor.get_by_id(monitor_id).active:
                raise Refused("cancelled", f"monitor {monitor_id!r} is cancelled")
        elif not paused and end_pause(monitor_id, now):
            audit(now, "unpaused", monitor_id, subject=monitor_id, **actor.audit)
    return row(Monitor.get_by_id(monitor_id))


@retried
def set_signed(rt, monitor_id, signed, by=None, channel="cli"):
    """Turn a monitor's signed approvals on or off (audited ``monitor_signed_approvals``).

    Turning them on is refused (``policy_active``) while a policy approves there:
    a policy cannot sign. Setting what is set already answers as it is.
    """
    actor = Actor.of(by, channel)
    now = rt.clock.now()
    with db.atomic():
        monitor = _active(monitor_id)
        if signed and Policy.select().where(Policy.monitor == monitor_id,
                                            Policy.ended_at.is_null()).exists():
            raise Refused("policy_active", f"monitor {monitor_id!r} has an active policy, which "
                          "cannot sign: `policy revoke` it first")
        if set_signed_approvals(monitor_id, signed):
            audit(now, "monitor_signed_approvals", monitor_id, subject=monitor_id,
                  data={"signed_approvals": bool(signed)}, **actor.audit)
    return row(Monitor.get_by_id(monitor_id))


def row(monitor):
    """A monitor as the CLI shows it."""
    nudge = reminders.settings_of([monitor.id]).get(monitor.id)
    return {"id": monitor.id, "document": monitor.document,
            "event_names": monitor.event_names, "active": monitor.active,
            "paused": monitor.paused_at is not None, "paused_at": monitor.paused_at,
            "expires_at": monitor.expires_at, "window_s": monitor.window_s,
            "approval_ttl_s": monitor.approval_ttl_s, "approvals": monitor.approvals,
            "signed_approvals": bool(monitor.signed_approvals),
            "grant_digest": monitor.grant_digest,
            "batch_window_s": recordbatches.windows([monitor.id]).get(monitor.id),
            "remind_after_s": nudge and nudge.remind_after_s,
            "escalate_after_s": nudge and nudge.escalate_after_s,
            "escalate_to": nudge.escalate_to if nudge else [],
            "slack_channel": MonitorSlack.select(MonitorSlack.channel).where(
                MonitorSlack.monitor == monitor.id).scalar()}


def listing():
    """Every monitor, oldest first (by id among those bound at the same instant)."""
    # Without the id, PostgreSQL returns monitors of one instant in any order.
    return [row(m) for m in Monitor.select().order_by(Monitor.created_at, Monitor.id)]
