"""Deciding through an email link (``/r/TOKEN`` of ``signoff serve``; ``chores/mail.py``).

A link speaks for one reviewer about one task's one digest. Opening it only
shows; the decision is a POST from its page, made here as that reviewer
through channel ``email`` (so identities, quorums and hidden characters hold
as for every decision, in ``approval.py``). The reviewer may decide the task
if they still may: not read-only, of its monitor (or of every monitor), or
escalated to for this task. The first decision spends the link; a refused one
does not. Spent, expired, or outdated by a redraft or an edit, it decides nothing.
"""

from dataclasses import dataclass

from ..chores.reminders import escalated_to
from ..errors import Refused
from ..models import Reviewer, ReviewerMonitor, Task
from ..state import links
from ..state.statuses import TaskStatus as T
from . import approval

CHANNEL = "email"
# Why a link decides nothing (the page says it; a POST is refused with the code).
PROBLEMS = {
    "link_used": "this link was used for a decision already; each link decides once",
    "link_expired": "this link has expired",
    "draft_changed": "the draft changed since this link was sent: review it again from the "
                     "review pages or a newer message",
    "not_ready": "this task is not waiting for a decision any more",
    "not_allowed": "you may no longer decide this task",
}


@dataclass(frozen=True)
class Opened:
    """What a link leads to: its reviewer, task and monitor, and why it decides nothing
    (``problem``: a key of ``PROBLEMS``, or ``None`` while it may decide)."""

    reviewer: str
    task_key: str
    monitor: str
    digest: str
    problem: str | None


def open_link(rt, token):
    """The ``Opened`` of ``token``; ``unknown_link`` when it is no link."""
    link = links.find(token)
    task = Task.get_or_none(Task.key == link.task_key) if link is not None else None
    if task is None:
        raise Refused("unknown_link", "this link is not one signoff sent (or it was pruned)")
    return Opened(link.reviewer, task.key, task.monitor, link.digest,
                  _problem(link, task, rt.clock.now()))


def _problem(link, task, now):
    if link.spent_at is not None:
        return "link_used"
    if link.expires_at <= now:
        return "link_expired"
    if task.digest != link.digest:
        return "draft_changed"
    if task.status != T.READY:
        return "not_ready"
    if not _may_decide(link.reviewer, task):
        return "not_allowed"
    return None


def _may_decide(name, task):
    reviewer = Reviewer.get_or_none(Reviewer.name == name)
    if reviewer is None or reviewer.read_only:
        return False
    limits = {m for (m,) in ReviewerMonitor.select(ReviewerMonitor.monitor).where(
        ReviewerMonitor.reviewer == name).tuples()}
    return not limits or task.monitor in limits or name in escalated_to([task]).get(task.key, ())


def decide(rt, token, decision, reason=None, ack_hidden_characters=False):
    """Approve (``decision`` ``approve``) or reject the task of ``token`` as its reviewer,
    channel ``email``; then the link is spent. A link that may not decide is refused
    with its problem's code, nothing changed."""
    if decision not in ("approve", "reject"):
        raise ValueError(f"a link approves or rejects, not {decision!r}")
    opened = open_link(rt, token)
    if opened.problem:
        raise Refused(opened.problem, PROBLEMS[opened.problem])
    limits = frozenset({opened.monitor})  # the one task's: an escalation reaches no further
    if decision == "approve":
        answer = approval.approve(rt, opened.task_key, opened.digest, by=opened.reviewer,
                                  channel=CHANNEL, ack_hidden_characters=ack_hidden_characters,
                                  monitors=limits)
    else:
        answer = approval.reject(rt, opened.task_key, reason, by=opened.reviewer,
                                 channel=CHANNEL, digest=opened.digest, monitors=limits)
    links.spend(links.find(token), rt.clock.now())
    return answer
