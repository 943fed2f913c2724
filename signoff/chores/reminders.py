"""Reminders and escalation of tasks left waiting (``monitor bind … --remind-after S
--escalate-after S --escalate-to NAME…``), and who may decide a task.

Counted from the moment a task became ``ready`` (its ``created_at``): every
``remind_after_s`` the reviewers who may decide it and have not are reminded,
until it is decided or expires; once ``escalate_after_s`` has passed, the
named reviewers are notified, may decide that task from then on (even when
limited to other monitors) and are reminded with the others.

Each is one audit row, which the notify outbox turns into messages
(``chores/notify.py``): ``reminded`` (one per task and round; its ``data``
names the round and the reviewers) and ``escalated`` (its ``data`` names
those it escalated to). A round is taken by moving the task's ``TaskNudge``
row forward in a guarded update, so however many workers run the chore at
once, each round and each escalation is written exactly once.
"""

import math

from ..models import (Approval, Monitor, MonitorReminders, Reviewer, ReviewerMonitor, Task,
                      TaskNudge, db)
from ..state import links
from ..state.history import audit
from ..state.statuses import TaskStatus as T
from ..storage import key_in, unindexed
from . import Chore

EVERY_S = 1.0  # how often the fleet looks for rounds due: the finest interval it keeps
LIMIT = 500  # tasks looked at per pass
LINKS_KEPT_S = 7 * 86400  # an expired link still says "expired" this long, then is dropped


def set_reminders(monitor_id, remind_after_s=None, escalate_after_s=None, escalate_to=()):
    """Keep a new monitor's reminder settings (none given: nothing kept)."""
    if remind_after_s is None and escalate_after_s is None:
        return
    MonitorReminders.create(monitor=monitor_id, remind_after_s=remind_after_s,
                            escalate_after_s=escalate_after_s, escalate_to=list(escalate_to))


def settings_of(monitor_ids):
    """``{monitor id: MonitorReminders}`` for the monitors among ``monitor_ids`` that have them."""
    if not monitor_ids:
        return {}
    return {r.monitor: r for r in MonitorReminders.select().where(
        MonitorReminders.monitor.in_(sorted(set(monitor_ids))))}


def escalated_to(tasks):
    """``{task key: {reviewer, ...}}``: who each of ``tasks`` (rows with ``key`` and
    ``monitor``) was escalated to."""
    keys = [t.key for t in tasks]
    done = {k for (k,) in TaskNudge.select(TaskNudge.task_key).where(
        key_in(TaskNudge.task_key, keys), TaskNudge.escalated_at.is_null(False)).tuples()}
    settings = settings_of({t.monitor for t in tasks if t.key in done})
    return {t.key: set(settings[t.monitor].escalate_to) for t in tasks
            if t.key in done and t.monitor in settings}


def deciders(tasks):
    """``{task key: [reviewer, ...]}``: for each of ``tasks`` (rows with ``key``,
    ``monitor`` and ``digest``), the reviewers who may decide it and have not
    approved its digest: not read-only, and of every monitor, of its monitor, or
    escalated to for this task."""
    if not tasks:
        return {}
    names = [n for (n,) in Reviewer.select(Reviewer.name).where(~Reviewer.read_only)
             .order_by(Reviewer.name).tuples()]
    limits = {}
    for reviewer, monitor in ReviewerMonitor.select(ReviewerMonitor.reviewer,
                                                    ReviewerMonitor.monitor).tuples():
        limits.setdefault(reviewer, set()).add(monitor)
    given = set(Approval.select(Approval.task_key, Approval.digest, Approval.by).where(
        key_in(Approval.task_key, [t.key for t in tasks])).tuples())
    escalated = escalated_to(tasks)
    return {t.key: [n for n in names
                    if (n not in limits or t.monitor in limits[n]
                        or n in escalated.get(t.key, ()))
                    and (t.key, t.digest, n) not in given]
            for t in tasks}


def run(rt):
    """One pass: the reminders and escalations due now; ``{reminded, escalated}``."""
    now = rt.clock.now()
    settings = {r.monitor: r for r in MonitorReminders.select().join(
        Monitor, on=(Monitor.id == MonitorReminders.monitor)).where(
        Monitor.active, Monitor.expires_at > now)}
    _forget_decided()
    if not settings:
        return None
    tasks = list(Task.select(Task.key, Task.monitor, Task.digest, Task.created_at,
                             Task.approval_deadline)
                 .where(unindexed(Task.status) == T.READY, Task.monitor.in_(sorted(settings)))
                 .order_by(Task.created_at).limit(LIMIT))
    tasks = [t for t in tasks if t.approval_deadline is None or t.approval_deadline > now]
    if tasks:
        TaskNudge.insert_many([{"task_key": t.key} for t in tasks]).on_conflict_ignore().execute()
    nudges = {n.task_key: n for n in TaskNudge.select().where(
        key_in(TaskNudge.task_key, [t.key for t in tasks]))}
    reminded = escalated = 0
    for task in tasks:
        escalated += _escalate(task, settings[task.monitor], nudges.get(task.key), now)
        reminded += _remind(task, settings[task.monitor], nudges.get(task.key), now)
    links.prune(now - LINKS_KEPT_S)
    return {"reminded": reminded, "escalated": escalated}


def _forget_decided():
    """Drop the rounds of tasks no longer waiting: nothing reminds them again."""
    TaskNudge.delete().where(TaskNudge.task_key.in_(
        Task.select(Task.key).where(Task.key.in_(TaskNudge.select(TaskNudge.task_key)),
                                    unindexed(Task.status) != T.READY))).execute()


def _escalate(task, setting, nudge, now):
    """Escalate ``task`` once its delay has passed; 1 if this pass did, else 0."""
    if (setting.escalate_after_s is None or nudge is None or nudge.escalated_at is not None
            or now - task.created_at < setting.escalate_after_s):
        return 0
    with db.atomic():
        if not TaskNudge.update(escalated_at=now).where(
                TaskNudge.task_key == task.key, TaskNudge.escalated_at.is_null()).execute():
            return 0  # another worker escalated it
        audit(now, "escalated", task.monitor, task_key=task.key,
              data={"reviewers": sorted(setting.escalate_to)})
    return 1


def _remind(task, setting, nudge, now):
    """Remind ``task``'s round due now, unless a worker has; 1 if this pass did, else 0."""
    if setting.remind_after_s is None or nudge is None:
        return 0
    due = math.floor((now - task.created_at) / setting.remind_after_s)
    if due <= nudge.rounds:
        return 0
    with db.atomic():
        if not TaskNudge.update(rounds=due).where(TaskNudge.task_key == task.key,
                                                  TaskNudge.rounds == nudge.rounds).execute():
            return 0
        waiting = deciders([task])[task.key]
        audit(now, "reminded", task.monitor, task_key=task.key,
              data={"round": due, "reviewers": waiting})
    return 1


REMINDERS = Chore("reminders", run, every_s=EVERY_S, shared=True)
