"""Slack: a monitor's ready tasks posted to its channel, and each message kept current.

A monitor bound with ``--slack-channel C…`` gets, for each task that becomes
``ready``, one message (``chat.postMessage`` with the official ``slack_sdk``):
the record's excerpt and the draft with hidden characters marked, the digest's
first 12 characters, and Approve / Reject / Open buttons whose value names the
task and the digest shown. Every later decision about the task (an approval,
the quorum completed, an edit, a reject, a redraft, its end) updates that
message (``chat.update``) to say who decided and how it stands; once the task
is no longer ready its buttons go. The clicks come back to ``signoff serve``
(``serve/slack.py``).

Both go through the notify outbox (``notify.py``): one row per task for its
post and one per audit row for an update, sent by the worker's pump, retried
with backoff and dead-lettered when the budget is spent. An update renders the
task as it is when it is sent, so updates sent late or twice converge. A post
is at least once: a crash between Slack's answer and the row that keeps its
``ts`` posts again on the retry.

    [notify.slack]
    bot_token_env = "SLACK_BOT_TOKEN"            # the variable holding the xoxb- token
    signing_secret_env = "SLACK_SIGNING_SECRET"  # the variable holding the signing secret
    api_url = "https://slack.com/api/"           # another for tests and proxies
    review_url = "https://signoff.example"       # base of the review pages (Open)
"""

import os
from dataclasses import dataclass

from ..config import ATTEMPTS, CONFIG_NAME, DELAY_S, NUMBER, Range, number_in, read_table
from ..errors import ConfigError
from ..models import Approval, Monitor, MonitorSlack, Notification, SlackMessage, Task
from ..rules.canonical import digest
from ..rules.text import visible
from ..state.notifications import new_decision_notifications
from ..state.statuses import NotificationStatus as N, TaskStatus as T
from ..storage import key_in

POST, UPDATE = "slack.post", "slack.update"
# Audit codes that make a task's message: its post (once per task) ...
POSTED = ("ready", "redrafted")
# ... and those that change what it says.
UPDATED = ("approval_added", "approved", "auto_approved", "rejected", "edited", "redrafted",
           "superseded", "expired", "cancelled", "done", "policy_revoked", "source_changed",
           "acceptance_failed")
CODES = tuple(dict.fromkeys(POSTED + UPDATED))
TEXT_CHARS = 2800  # a section's text is at most 3000 characters in Slack
DRAFT_LINES = 30


@dataclass(frozen=True)
class SlackSettings:
    """The ``[notify.slack]`` table."""

    bot_token_env: str = "SLACK_BOT_TOKEN"
    signing_secret_env: str = "SLACK_SIGNING_SECRET"
    api_url: str = "https://slack.com/api/"
    review_url: str = "http://127.0.0.1:8080"
    attempts: int = 6
    timeout_s: float = 5.0
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0

    def _secret(self, variable, what):
        value = os.environ.get(getattr(self, variable), "")
        if not value.strip():
            raise ConfigError("bad_config", f"notify.slack.{variable}: the variable "
                              f"{getattr(self, variable)} holding the {what} is not set")
        return value

    @property
    def signing_secret(self):
        """The app's signing secret, from the variable ``signing_secret_env`` names."""
        return self._secret("signing_secret_env", "Slack signing secret")

    def client(self):
        """A ``slack_sdk`` ``WebClient`` with the bot token, at ``api_url``."""
        from slack_sdk import WebClient
        base = self.api_url if self.api_url.endswith("/") else self.api_url + "/"
        return WebClient(token=self._secret("bot_token_env", "Slack bot token"), base_url=base,
                         timeout=max(1, int(self.timeout_s)))


NUMBERS = {"attempts": (int, ATTEMPTS), "timeout_s": (NUMBER, Range(0, 300, above=True)),
           "base_delay_s": (NUMBER, DELAY_S), "max_delay_s": (NUMBER, DELAY_S)}


def slack_settings(home):
    """The ``[notify.slack]`` settings of ``home``, or ``None`` when there is no such table."""
    table = read_table(home, "notify").get("slack")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError("bad_config", "[notify.slack] must be a table")
    unknown = set(table) - set(SlackSettings.__dataclass_fields__)
    if unknown:
        raise ConfigError("bad_config", f"unknown key notify.slack.{sorted(unknown)[0]}")
    for name in ("bot_token_env", "signing_secret_env", "api_url", "review_url"):
        if name in table and not (isinstance(table[name], str) and table[name].strip()):
            raise ConfigError("bad_config", f"notify.slack.{name} must be a non-empty string")
    if not table.get("api_url", "https://").startswith(("http://", "https://")):
        raise ConfigError("bad_config", "notify.slack.api_url must be an http(s) URL")
    for key, (kind, allowed) in NUMBERS.items():
        number_in(table, key, kind, getattr(SlackSettings, key), allowed, home / CONFIG_NAME,
                  "notify.slack")
    try:
        import slack_sdk  # noqa: F401 (only whether it is there)
    except ImportError:
        raise ConfigError("missing_extra", "[notify.slack] needs the slack extra: "
                          "pip install 'signoff[slack]'") from None
    return SlackSettings(**table)


def outbox_rows(rows, now):
    """Outbox rows for the audit ``rows`` (``seq, task_key, code``) of tasks whose monitor
    posts to Slack: a post per task, an update per row; returns how many were added."""
    keys = list({r.task_key for r in rows})
    posted = {k for (k,) in Task.select(Task.key).join(
        MonitorSlack, on=(MonitorSlack.monitor == Task.monitor)).where(
            key_in(Task.key, keys)).tuples()} if keys else set()
    wanted = []
    for r in rows:
        if r.task_key not in posted:
            continue
        if r.code in POSTED:
            wanted.append((digest([POST, r.task_key]), POST, r.task_key, r.seq))
        if r.code in UPDATED:
            wanted.append((digest([UPDATE, r.seq]), UPDATE, r.task_key, r.seq))
    return len(new_decision_notifications(wanted, now)) if wanted else 0


def send(client, settings, row, task, now):
    """Send one Slack outbox ``row`` about ``task``: ``None`` when done, else the failure's code."""
    from slack_sdk.errors import SlackApiError
    message = SlackMessage.get_or_none(SlackMessage.task_key == task.key)
    try:
        if message is not None:
            text, blocks = render(task, settings)
            client.chat_update(channel=message.channel, ts=message.ts, text=text, blocks=blocks)
            return None
        if row.type == UPDATE:
            return "not_posted" if _post_pending(task.key) else None
        if task.status != T.READY:
            return None  # decided before it could be posted: there is nothing to ask
        channel = MonitorSlack.select(MonitorSlack.channel).where(
            MonitorSlack.monitor == task.monitor).scalar()
        if channel is None:
            return None
        text, blocks = render(task, settings)
        answer = client.chat_postMessage(channel=channel, text=text, blocks=blocks)
        SlackMessage.insert(task_key=task.key, channel=answer.get("channel") or channel,
                            ts=answer["ts"], posted_at=now).on_conflict_ignore().execute()
        return None
    except SlackApiError as exc:
        return "slack_" + str(exc.response.get("error") or exc.response.status_code)
    except OSError as exc:  # urllib's URLError, timeouts, refused connections
        return type(exc).__name__


def _post_pending(key):
    return Notification.select().where(Notification.task_key == digest([POST, key]),
                                       Notification.status == N.PENDING).exists()


def render(task, settings):
    """``(text, blocks)`` of a task's message as the task stands now."""
    needed, signed = Monitor.select(Monitor.approvals, Monitor.signed_approvals).where(
        Monitor.id == task.monitor).tuples().first() or (1, False)
    needed = needed or 1
    head = (f"Task {task.key[:12]} · monitor {task.monitor} · record {task.record_id} "
            f"v{task.version} · digest {task.digest[:12]}")
    draft = (task.result or {}).get("draft") if isinstance(task.result, dict) else None
    blocks = [_section(head),
              _section("Record:\n" + _excerpt(_record_text(task.record), 12)),
              _section("Draft:\n" + _excerpt(draft, DRAFT_LINES)),
              _context(standing(task, needed))]
    if task.status == T.READY:
        blocks.append(_buttons(task, settings, signed))
    return f"{head}: {standing(task, needed)}", blocks


def standing(task, needed):
    """Who decided and how the task stands, in one line."""
    given = [_who(a.by, a.for_reviewer, a.channel) for a in Approval.select().where(
        Approval.task_key == task.key, Approval.digest == task.digest).order_by(Approval.id)]
    if task.status == T.READY:
        line = f"Waiting for approval: {len(given)} of {needed}"
        return line + (f" (approved by {', '.join(given)})" if given else "")
    if task.status == T.REJECTED:
        shown = _who(task.rejected_by, task.rejected_for, None)
        return f"Rejected by {shown}" + (f": {visible(task.reject_reason)}"
                                         if task.reject_reason else "")
    if task.approved_by:
        shown = ", ".join(given) or task.approved_by
        return f"Approved by {shown} · now {task.status}" + (
            f" ({task.code})" if task.code else "")
    return f"No longer waiting: {task.status}" + (f" ({task.code})" if task.code else "")


def _who(by, for_reviewer, channel):
    shown = visible(by or "-") + (f" for {visible(for_reviewer)}" if for_reviewer else "")
    return shown + (f" ({channel})" if channel else "")


def _record_text(record):
    if isinstance(record, list):  # a batch: each record's text, one after another
        return "\n---\n".join(str((r or {}).get("text") or "") for r in record)
    return str((record or {}).get("text") or "")


def _excerpt(text, lines):
    """The first ``lines`` of ``text``, hidden characters marked, within a section's limit."""
    shown = visible(text if isinstance(text, str) else "")
    head = "\n".join(shown.split("\n")[:lines])
    head = head[:TEXT_CHARS]
    return (head + ("…" if head != shown else "")) or "(empty)"


def _section(text):
    # plain_text: a draft's "<!channel>" or "*bold*" is shown as typed, never obeyed.
    return {"type": "section", "text": {"type": "plain_text", "text": text, "emoji": False}}


def _context(text):
    return {"type": "context", "elements": [{"type": "plain_text", "text": text[:TEXT_CHARS],
                                             "emoji": False}]}


def _buttons(task, settings, signed=False):
    """The message's buttons: Approve, Reject and Open; Open alone on a monitor of
    signed approvals, whose decisions a click cannot sign (``signature_required``)."""
    value = f"{task.key}:{task.digest}"
    page = settings.review_url.rstrip("/") + f"/tasks/{task.key}"
    deciding = [] if signed else [
        {"type": "button", "action_id": "approve", "style": "primary", "value": value,
         "text": {"type": "plain_text", "text": "Approve"}},
        {"type": "button", "action_id": "reject", "style": "danger", "value": value,
         "text": {"type": "plain_text", "text": "Reject"}}]
    return {"type": "actions", "block_id": "signoff", "elements": deciding + [
        {"type": "button", "action_id": "open", "url": page,
         "text": {"type": "plain_text", "text": "Open"}}]}
