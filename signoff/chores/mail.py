"""Email through the notify outbox: a message per reviewer who may decide a waiting task.

When a task becomes ``ready``, at each reminder and at its escalation
(``chores/reminders.py``), every reviewer with an address who may decide it
and has not gets a message: the monitor, the record's text (cut to a length
a mail reader shows, hidden characters marked as on the pages), the draft,
the digest's first 12 characters and a link ``PUBLIC_URL/r/TOKEN`` to the
task's page (``serve/links.py``). The outbox row names the task and the
reviewer only: the link is minted when the message is sent (``state/links.py``
keeps its sha256), so no message holding a live link is ever stored; a failed
try mints another next time. Rows are retried and dead-lettered as the
webhook's are (``chores/notify.py``).

    [notify.email]
    smtp_url = "smtps://mail.example:465"   # or smtp://host:port
    starttls = false                         # smtp:// only: upgrade with STARTTLS
    from = "signoff@example.com"
    username_env = "SIGNOFF_SMTP_USER"       # the variables holding the login, if any
    password_env = "SIGNOFF_SMTP_PASSWORD"
    public_url = "https://signoff.example"   # where `signoff serve` is reached
    link_ttl_s = 86400
"""

import os
import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from urllib.parse import urlsplit

from ..config import ATTEMPTS, CONFIG_NAME, DELAY_S, NUMBER, Range, number_in, read_table
from ..errors import ConfigError, Refused
from ..models import Audit, Monitor, Reviewer, Task
from ..rules.canonical import digest
from ..rules.contacts import check_email
from ..rules.text import visible
from ..state import links
from ..state.notifications import new_decision_notifications
from ..state.statuses import TaskStatus as T
from ..storage import key_in, unindexed
from .reminders import deciders, escalated_to

TYPE = "email"  # the outbox rows of this channel
# The audit codes that send email, and what the message says each is.
MAILED = {"ready": "waits for your decision", "reminded": "still waits for your decision",
          "escalated": "was escalated to you and waits for a decision"}
TEXT_SHOWN = 2000  # of the record and of the draft; the page shows the rest
NOT_NEEDED = "not_needed"  # a row settled without a message: decided, or no address


@dataclass(frozen=True)
class EmailSettings:
    """The ``[notify.email]`` table."""

    smtp_url: str
    sender: str
    public_url: str
    starttls: bool = False
    username_env: str | None = None
    password_env: str | None = None
    link_ttl_s: float = 86400.0
    attempts: int = 6
    timeout_s: float = 10.0
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0

    @property
    def server(self):
        """``(scheme, host, port)`` of ``smtp_url``."""
        parts = urlsplit(self.smtp_url)
        return parts.scheme, parts.hostname, parts.port or (465 if parts.scheme == "smtps" else 25)


NUMBERS = {"attempts": (int, ATTEMPTS), "timeout_s": (NUMBER, Range(0, 300, above=True)),
           "base_delay_s": (NUMBER, DELAY_S), "max_delay_s": (NUMBER, DELAY_S),
           "link_ttl_s": (NUMBER, Range(1, 30 * 86400))}
STRINGS = ("smtp_url", "from", "public_url", "username_env", "password_env")


def email_settings(home):
    """The ``[notify.email]`` settings of ``home``, or ``None`` when it has none."""
    table = read_table(home, "notify").get("email")
    if table is None:
        return None
    where = f"{home / CONFIG_NAME}: notify.email"
    if not isinstance(table, dict):
        raise ConfigError("bad_config", f"{where} must be a table")
    unknown = set(table) - set(STRINGS) - set(NUMBERS) - {"starttls"}
    if unknown:
        raise ConfigError("bad_config", f"unknown key notify.email.{sorted(unknown)[0]}")
    for key in STRINGS:
        if key in table and not isinstance(table[key], str):
            raise ConfigError("bad_config", f"{where}.{key} must be a string")
    if not isinstance(table.get("starttls", False), bool):
        raise ConfigError("bad_config", f"{where}.starttls must be true or false")
    for key, (kind, allowed) in NUMBERS.items():
        number_in(table, key, kind, getattr(EmailSettings, key), allowed, home / CONFIG_NAME,
                  "notify.email")
    _check_urls(table, where)
    try:
        check_email(table.get("from"))
    except Refused as exc:
        raise ConfigError("bad_config", f"{where}.from: {exc.message}") from None
    return EmailSettings(**{("sender" if k == "from" else k): v for k, v in table.items()})


def _check_urls(table, where):
    smtp = urlsplit(table.get("smtp_url") or "")
    if smtp.scheme not in ("smtp", "smtps") or not smtp.hostname or smtp.path not in ("", "/"):
        raise ConfigError("bad_config", f"{where}.smtp_url must be smtp://HOST[:PORT] or "
                          "smtps://HOST[:PORT]")
    if smtp.username or smtp.password:
        raise ConfigError("bad_config", f"{where}.smtp_url: name the login's variables in "
                          "username_env and password_env, not in the URL")
    if table.get("starttls") and smtp.scheme == "smtps":
        raise ConfigError("bad_config", f"{where}.starttls is for smtp:// (smtps:// is TLS "
                          "from the start)")
    public = urlsplit(table.get("public_url") or "")
    if public.scheme not in ("http", "https") or not public.netloc or public.query:
        raise ConfigError("bad_config", f"{where}.public_url must be the http(s) URL where "
                          "`signoff serve` is reached, such as \"https://signoff.example\"")


def collect(rows, now):
    """Outbox rows for the mailed audit ``rows`` (``seq``, ``task_key``, ``code``,
    ``data``): one per reviewer with an address who may decide the task and has not.
    Returns the keys added."""
    rows = [r for r in rows if r.code in MAILED]
    if not rows:
        return []
    tasks = {t.key: t for t in Task.select(Task.key, Task.monitor, Task.digest).where(
        key_in(Task.key, list({r.task_key for r in rows})), unindexed(Task.status) == T.READY)}
    open_to = deciders(list(tasks.values()))
    # Those escalated to get the escalation's message, not the first one: the cursor
    # reads a stretch of the log again, and a ready row read after an escalation
    # must not mail them as if they had been asked from the start.
    later = escalated_to(list(tasks.values()))
    reachable = {n for (n,) in Reviewer.select(Reviewer.name).where(
        Reviewer.email.is_null(False)).tuples()}
    out = []
    for r in rows:
        if r.task_key not in tasks:
            continue
        named = ([n for n in open_to[r.task_key] if n not in later.get(r.task_key, ())]
                 if r.code == "ready" else (r.data or {}).get("reviewers", []))
        out += [(digest([TYPE, r.seq, name]), TYPE, r.task_key, r.seq, name)
                for name in named if name in reachable and name in open_to[r.task_key]]
    return new_decision_notifications(out, now)


def try_send(row, settings, now):
    """Send outbox ``row``'s message; ``None`` when sent, ``NOT_NEEDED`` when no message
    is wanted any more, else the failure's code."""
    task = Task.get_or_none(Task.key == row.task)
    reviewer = Reviewer.get_or_none(Reviewer.name == row.reviewer)
    if (task is None or reviewer is None or not reviewer.email or task.status != T.READY
            or row.reviewer not in deciders([task])[task.key]):
        return NOT_NEEDED
    cause = Audit.get_or_none(Audit.seq == row.audit_seq)
    token = links.mint(reviewer.name, task.key, task.digest, now, settings.link_ttl_s)
    message = compose(task, reviewer, settings, token, cause)
    try:
        deliver(settings, message)
    except (smtplib.SMTPException, OSError) as exc:
        return type(exc).__name__
    return None


def compose(task, reviewer, settings, token, cause):
    """The message to ``reviewer`` about ``task`` holding the link ``token``; ``cause``:
    the audit row it answers (``ready``, ``reminded`` or ``escalated``)."""
    monitor = Monitor.get_or_none(Monitor.id == task.monitor)
    why = _why(cause)
    records = task.record if isinstance(task.record, list) else [task.record or {}]
    link = settings.public_url.rstrip("/") + "/r/" + token
    draft = (task.result or {}).get("draft") or ""
    lines = [f"Task {task.key[:12]} of monitor {visible(task.monitor)} "
             f"{why}.", "",
             f"Document: {visible(str(records[0].get('document', '')))}",
             f"Record:   {visible(task.record_id)}, version {task.version}",
             f"Digest:   {task.digest[:12]}",
             f"Approvals needed: {monitor.approvals if monitor else 1}", ""]
    for record in records[:20]:
        lines += [f"-- Record {visible(str(record.get('id', '')))} text --",
                  _shown(record.get("text")), ""]
    lines += ["-- Draft --", _shown(draft), "",
              f"Open the task to approve or reject it (as {reviewer.name}; the link works once "
              f"and expires in {settings.link_ttl_s / 3600:g} h):", link, "",
              "Opening the link decides nothing: the page's buttons do."]
    message = EmailMessage()
    message["Subject"] = (f"[signoff] {visible(task.monitor)}: {visible(task.record_id)} "
                          f"{why}")
    message["From"] = settings.sender
    message["To"] = reviewer.email
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = make_msgid(domain=settings.sender.rsplit("@", 1)[1])
    message["Auto-Submitted"] = "auto-generated"
    message.set_content("\n".join(lines))
    return message


def _why(cause):
    """What the message says of the task: it waits, still waits (reminder N), escalated."""
    code = cause.code if cause is not None and cause.code in MAILED else "ready"
    if code == "reminded":
        return f"{MAILED[code]} (reminder {(cause.data or {}).get('round', 1)})"
    return MAILED[code]


def _shown(text):
    """Text a reviewer reads in the message: hidden characters marked, cut at TEXT_SHOWN."""
    text = text if isinstance(text, str) else ""
    more = len(text) - TEXT_SHOWN
    shown = visible(text[:TEXT_SHOWN])
    return shown + (f"\n[… {more:,} more characters on the page]" if more > 0 else "")


def deliver(settings, message):
    """Send ``message`` through ``smtp_url`` (TLS as configured, the login if named)."""
    scheme, host, port = settings.server
    context = ssl.create_default_context()
    if scheme == "smtps":
        client = smtplib.SMTP_SSL(host, port, timeout=settings.timeout_s, context=context)
    else:
        client = smtplib.SMTP(host, port, timeout=settings.timeout_s)
    with client:
        if settings.starttls:
            client.starttls(context=context)
        if settings.username_env:
            client.login(os.environ.get(settings.username_env, ""),
                         os.environ.get(settings.password_env or "", ""))
        client.send_message(message)
