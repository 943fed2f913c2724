"""Notifications: an outbox filled from the audit log, sent signed.

Five kinds: ``task.ready`` (a task waits; how many approvals it needs),
``task.approval_added`` (one place of a quorum filled: the next approver is
wanted), ``task.rejected`` (who rejected it, and why), ``task.reminder`` and
``task.escalated`` (``chores/reminders.py``: the round, the reviewers named).
The same outbox carries email (``[notify.email]``, ``chores/mail.py``), with
or without a ``[notify] url``.

Design: ingest is not touched. A pump thread started by the worker reads the
``ready`` audit rows past a stored cursor, puts one outbox row per task key
(``Notification``, so a task is announced once however many events made it)
for tasks still ready (and one row per decision's audit row), and POSTs each due row to ``[notify] url`` signed the
Standard Webhooks way (the ``webhook-id`` is the same on every try, so the
receiver can dedupe). A failed try is retried with backoff; when the budget
is spent the row goes to the dead letters (kind ``notification``), from where
``dlq replay`` sends it again. The cursor re-reads a short stretch behind
itself on every pass, since on PostgreSQL a transaction can commit a lower
sequence number after a higher one; the outbox key makes that harmless.

Notifications start when they are configured: the first pass of a home with
no cursor (a worker runs it before it takes any work) puts the cursor at the
end of the audit log, and neither the cursor nor its look-back ever reads
behind that start, so tasks that were ready before are not announced.

Slack messages (``[notify.slack]``, ``slack.py``) go through the same outbox,
cursor and pump, with or without a ``[notify] url``.

    [notify]
    url = "https://chat.example/hooks/signoff"
    secret = "whsec_..."
    review_url = "https://signoff.example"   # base of the review pages
    attempts = 6
    timeout_s = 5.0
"""

import contextlib
import datetime
import functools
import json
import logging
import operator
import threading
from dataclasses import dataclass

from peewee import fn

from ..config import ATTEMPTS, CONFIG_NAME, DELAY_S, NUMBER, Range, number_in, read_table
from ..errors import ConfigError, Refused
from ..state.history import audit, bury, record_attempts
from ..state.moves import Fenced
from ..state.notifications import (hold_notification, move_notification,
                                   new_decision_notifications, new_notifications,
                                   update_notification)
from ..state.statuses import NotificationStatus as N, TaskStatus as T
from ..models import Approval, Audit, Cursor, DeadLetter, Monitor, Notification, Task, db
from ..rules.canonical import digest
from ..rules.retry import backoff
from .. import storage
from ..storage import key_in, log_failed_pass, unindexed
from . import mail, slack

CURSOR = "notify"
START = "notify_start"  # where the cursor started: nothing before it is ever collected
LOOKBACK = 200  # audit rows re-read behind the cursor (see the module docstring)
COLLECT_LIMIT = 500
SEND_LIMIT = 20
INTERVAL_S = 0.5
MESSAGE_PREFIX = "ready_"
# The audit codes announced, and the type each notification says.
ANNOUNCED = {"ready": "task.ready", "rejected": "task.rejected",
             "approval_added": "task.approval_added", "reminded": "task.reminder",
             "escalated": "task.escalated"}
# Tables of [notify] that configure a channel of their own, not the webhook.
CHANNEL_TABLES = ("email", "slack")

log = logging.getLogger("signoff.notify")


@dataclass(frozen=True)
class NotifySettings:
    """The ``[notify]`` table."""

    url: str
    secret: str
    review_url: str = "http://127.0.0.1:8080"
    attempts: int = 6
    timeout_s: float = 5.0
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0


# The numbers of [notify] and where each may lie.
NUMBERS = {"attempts": (int, ATTEMPTS), "timeout_s": (NUMBER, Range(0, 300, above=True)),
           "base_delay_s": (NUMBER, DELAY_S), "max_delay_s": (NUMBER, DELAY_S)}


def notify_settings(home):
    """The ``[notify]`` settings of ``home``, or ``None`` when no url is set."""
    from ..rules.signatures import check_secret
    # Its channels' tables ([notify.email], [notify.slack]) are read by their own modules.
    table = {k: v for k, v in read_table(home, "notify").items() if k not in CHANNEL_TABLES}
    if not table.get("url"):
        return None
    known = set(NotifySettings.__dataclass_fields__)
    if set(table) - known:
        raise ConfigError("bad_config", f"unknown key notify.{sorted(set(table) - known)[0]}")
    url = table["url"]
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError("bad_config", "notify.url must be an http(s) URL")
    try:
        check_secret(table.get("secret"))
    except Refused as exc:
        raise ConfigError("bad_config", f"notify.secret: {exc.message}") from None
    for key, (kind, allowed) in NUMBERS.items():
        number_in(table, key, kind, getattr(NotifySettings, key), allowed, home / CONFIG_NAME,
                  "notify")
    try:
        return NotifySettings(**table)
    except TypeError as exc:
        raise ConfigError("bad_config", f"[notify]: {exc}") from None


def collect(now, webhook=True, email=False, to_slack=False):
    """Move new audit rows into the outbox; returns how many rows were added.

    ``webhook``: ``[notify] url`` is set (its ``ANNOUNCED`` rows); ``email``:
    ``[notify.email]`` is (``mail.collect``); ``to_slack``: ``[notify.slack]`` is
    (``slack.CODES`` rows of monitors with a channel).
    """
    codes = (list(ANNOUNCED) if webhook or email else []) + (list(slack.CODES) if to_slack else [])
    with db.atomic():
        cursor = Cursor.get_or_none(Cursor.name == CURSOR)
        top = Audit.select(fn.MAX(Audit.seq)).scalar() or 0
        if cursor is None:  # notifications were just configured: start at the end
            for name in (CURSOR, START):
                Cursor.insert(name=name, seq=top).on_conflict_ignore().execute()
            return 0
        seen = cursor.seq
        if top <= seen:
            return 0
        start = Cursor.select(Cursor.seq).where(Cursor.name == START).scalar() or 0
        rows = list(Audit.select(Audit.seq, Audit.task_key, Audit.code, Audit.data)
                    .where(Audit.seq > max(start, seen - LOOKBACK), Audit.seq <= top,
                           Audit.code.in_(sorted(set(codes))), Audit.task_key.is_null(False))
                    .order_by(Audit.seq).limit(COLLECT_LIMIT))
        new_seq = rows[-1].seq if len(rows) == COLLECT_LIMIT else top
        if not Cursor.update(seq=new_seq).where(Cursor.name == CURSOR, Cursor.seq == seen).execute():
            return 0  # another pump moved the cursor first
        announced = [r for r in rows if r.code in ANNOUNCED]
        return ((_webhook_rows(announced, now) if webhook else 0)
                + (len(mail.collect(announced, now)) if email else 0)
                + (slack.outbox_rows(rows, now) if to_slack else 0))


def _webhook_rows(rows, now):
    """The webhook's outbox rows for audit ``rows``: one ``task.ready`` per task still
    ready, one per other announced row; how many were added."""
    keys = list({r.task_key for r in rows if r.code == "ready"})
    ready = [k for (k,) in Task.select(Task.key).where(
        key_in(Task.key, keys), unindexed(Task.status) == T.READY).tuples()]
    decisions = [(digest(["notice", r.seq]), ANNOUNCED[r.code], r.task_key, r.seq)
                 for r in rows if r.code != "ready"]
    return len(new_notifications(ready, now)) + len(new_decision_notifications(decisions, now))


def outbox_busy():
    """True while a ``ready`` task's notification is still to be collected or sent.

    What ended in the dead letters no longer counts: it waits for a replay.
    """
    cursor = Cursor.get_or_none(Cursor.name == CURSOR)
    behind = Audit.select().where(Audit.seq > (cursor.seq if cursor else 0),
                                  Audit.code.in_(list(ANNOUNCED)), Audit.task_key.is_null(False))
    return behind.exists() or Notification.select().where(
        Notification.status == N.PENDING).exists()


def payload(task, settings, row=None):
    """The notification body: identifiers, digest, the approvals it needs (the
    monitor's quorum) and the page; never record text. A decision's (``row``, its
    outbox row) adds who decided, through which face, and for a reject the reason."""
    needed = Monitor.select(Monitor.approvals).where(Monitor.id == task.monitor).scalar() or 1
    body = {"type": "task.ready", "key": task.key, "monitor": task.monitor,
            "record_id": task.record_id, "version": task.version, "digest": task.digest,
            "approvals_needed": needed,
            "review_url": settings.review_url.rstrip("/") + f"/tasks/{task.key}"}
    if row is None or row.type is None:
        return body
    decided = Audit.get_or_none(Audit.seq == row.audit_seq)
    body.update(type=row.type, by=decided and decided.actor, channel=decided and decided.channel,
                note=decided and decided.note)
    if row.type in ("task.reminder", "task.escalated"):  # the round and reviewers named
        body.update((decided.data or {}) if decided else {})
    if row.type == "task.rejected":
        body["reason"] = task.reject_reason
    else:  # the approvals of the digest as they stood at that row: the same body every try
        given = Approval.select().where(Approval.task_key == task.key,
                                        Approval.digest == task.digest,
                                        Approval.at <= (decided.at if decided else 0)).count()
        body["approvals_missing"] = max(0, needed - given)
    return body


def signed_request(task, settings, now, row=None):
    """``(body, headers)`` of one try, signed with ``[notify] secret``."""
    from standardwebhooks.webhooks import Webhook
    body = json.dumps(payload(task, settings, row), separators=(",", ":"))
    msg_id = (MESSAGE_PREFIX + task.key if row is None or row.type is None
              else f"{row.type.split('.')[1]}_{row.audit_seq}")
    at = datetime.datetime.fromtimestamp(int(now), tz=datetime.timezone.utc)
    return body, {"content-type": "application/json", "webhook-id": msg_id,
                  "webhook-timestamp": str(int(now)),
                  "webhook-signature": Webhook(settings.secret).sign(msg_id, at, body)}


def send_due(rt, settings, client, email=None, slack_settings=None, slack_client=None):
    """Send the outbox rows that are due; returns ``(sent, failed)``.

    ``settings``/``client``: the webhook's (``None`` without a ``[notify] url``);
    ``email``: ``[notify.email]``'s; ``slack_settings``/``slack_client``: Slack's.
    Only the configured channels' rows are sent; the others wait for their
    channel to be configured (here, or in another worker).
    """
    now = rt.clock.now()
    sent = failed = 0
    kinds = _configured(settings, email, slack_settings)
    if not kinds:
        return 0, 0
    # Read whole before the first write: on SQLite a cursor still being read keeps its
    # snapshot, and once another process has committed, every write this connection
    # tries meanwhile is refused as locked until the lock wait runs out.
    due = list(Notification.select().where(Notification.status == N.PENDING,
                                           Notification.next_at <= now,
                                           functools.reduce(operator.or_, kinds))
               .order_by(Notification.next_at).limit(SEND_LIMIT))
    for row in due:
        channel = _channel_of(row, settings, email, slack_settings)
        # Hold the row for the length of a try so another pump leaves it alone: from
        # now, not the pass's start, which the tries before it (SMTP's) may have aged.
        now = rt.clock.now()
        if not hold_notification(row.task_key, row.next_at, now + 2 * channel.timeout_s + 1):
            continue
        code = _send_one(row, channel, client, slack_client, now)
        if code is None or code == mail.NOT_NEEDED:
            sent += 1
        else:
            failed += 1
        _record(rt, row, code, channel)
    return sent, failed


def _configured(settings, email, slack_settings):
    """The outbox rows the configured channels send: one SQL condition per channel."""
    is_slack = Notification.type.startswith("slack.")
    is_mail = Notification.type == mail.TYPE
    webhook = Notification.type.is_null() | ~(is_slack | is_mail)
    return [kind for kind, on in ((webhook, settings), (is_mail, email), (is_slack, slack_settings))
            if on is not None]


def _channel_of(row, settings, email, slack_settings):
    """The settings of the channel outbox ``row`` goes through."""
    if row.type == mail.TYPE:
        return email
    return slack_settings if (row.type or "").startswith("slack.") else settings


def _send_one(row, channel, client, slack_client, now):
    """One try of outbox ``row`` through its channel: ``None`` when sent, else a code."""
    if row.type == mail.TYPE:
        return mail.try_send(row, channel, now)
    task = Task.get_or_none(Task.key == (row.task or row.task_key))
    if task is None:
        return "unknown_task"
    if (row.type or "").startswith("slack."):
        return slack.send(slack_client, channel, row, task, now)
    return _try_send(client, task, channel, now, row)


def _try_send(client, task, settings, now, row=None):
    import httpx
    body, headers = signed_request(task, settings, now, row)
    try:
        response = client.post(settings.url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return None if 200 <= response.status_code < 300 else f"http_{response.status_code}"


def _record(rt, row, code, settings):
    now = rt.clock.now()
    attempts = row.attempts + 1
    with db.atomic():
        record_attempts([{"kind": "notification", "ref": row.task_key, "at": now,
                          "step": "notify", "code": code or "sent", "worker": None}])
        if code is None or code == mail.NOT_NEEDED:
            move_notification(row.task_key, [N.PENDING], N.SENT, now, attempts=attempts,
                              last_code=code or "sent")
        elif attempts >= settings.attempts:
            move_notification(row.task_key, [N.PENDING], N.DEAD, now, attempts=attempts,
                              last_code=code)
            bury("notification", row.task_key, "notify", code, attempts, now)
            # About the task's notification, not the task: outside its chain.
            audit(now, "dead_letter", task_key=row.task_key, lone=True)
        else:
            policy = _Policy(settings.base_delay_s, settings.max_delay_s)
            update_notification(row.task_key, now, attempts=attempts, last_code=code,
                                next_at=now + backoff(attempts, policy))


@dataclass(frozen=True)
class _Policy:
    base_delay_s: float
    max_delay_s: float


def replay(rt, letter, who=None):
    """Send a dead notification again with a fresh budget (``dlq replay``)."""
    now = rt.clock.now()
    try:
        with db.atomic():
            move_notification(letter.ref, [N.DEAD], N.PENDING, now, attempts=0, next_at=now)
            DeadLetter.update(replayed=DeadLetter.replayed + 1).where(
                DeadLetter.id == letter.id).execute()
            audit(now, "replayed", task_key=letter.ref, lone=True, **(who or {}))
    except Fenced:
        raise Refused("not_dead", "this notification was replayed already and is in progress") from None


class Pump:
    """The notification thread of one worker process (``settings``: the webhook's,
    ``email``: ``[notify.email]``'s, ``slack_settings``: ``[notify.slack]``'s; each may
    be ``None``)."""

    def __init__(self, rt, settings, email=None, slack_settings=None):
        self.rt, self.settings, self.email, self.slack = rt, settings, email, slack_settings
        self.timeout_s = max(c.timeout_s for c in (settings, email, slack_settings) if c)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="signoff-notify", daemon=True)

    def _run(self):
        with storage.bind(self.rt.database):
            self._pump()

    def _pump(self):
        slack_client = self.slack.client() if self.slack else None
        with self._client() as client:
            while not self._stop.wait(INTERVAL_S):
                try:
                    collect(self.rt.clock.now(), self.settings is not None,
                            self.email is not None, self.slack is not None)
                    send_due(self.rt, self.settings, client, self.email, self.slack, slack_client)
                except Exception:
                    log_failed_pass(log, "notification pass", "retrying on the next pass")
                    db.close()  # this thread's connection: the next pass reconnects
        db.close()

    def _client(self):
        """The webhook's HTTP client (none for email alone: httpx is the serve extra's)."""
        if self.settings is None:
            return contextlib.nullcontext()
        import httpx
        return httpx.Client(timeout=self.settings.timeout_s, follow_redirects=False)

    def stop(self):
        """Stop after the try in progress (bounded by the request timeout)."""
        self._stop.set()
        self._thread.join(timeout=self.timeout_s + 5)


def start(rt):
    """Start the notification pump when ``[notify] url``, ``[notify.email]`` or
    ``[notify.slack]`` is set; returns it or ``None``.

    Its first collection runs here, before the worker takes any work, so that a
    home's first one starts the cursor before a new task can become ready.
    """
    settings, email = notify_settings(rt.home), mail.email_settings(rt.home)
    to_slack = slack.slack_settings(rt.home)
    if settings is None and email is None and to_slack is None:
        return None
    if to_slack is not None:
        to_slack.client()  # a variable that is not set stops the worker here, naming it
    try:
        collect(rt.clock.now(), settings is not None, email is not None, to_slack is not None)
    except Exception:
        log_failed_pass(log, "first notification pass", "the pump runs it again")
    pump = Pump(rt, settings, email, to_slack)
    pump._thread.start()
    return pump
