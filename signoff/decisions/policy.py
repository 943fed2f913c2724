"""Standing approval policies (docs/policies-and-batches.md): approval without a click, bounded.

A policy is made only through the trusted channel (CLI or Python API) for one
monitor; nothing in an event or a record names, creates or widens one. While it
is active, each ``ready`` task of its monitor is approved through exactly the
checks of a person's approval (``approval.approve_many``: the gate, a re-read of
the source, acceptance, the digest of the drafted result), with
``approved_by = policy:<id>`` and the audit code ``auto_approved``.

A monitor has one active policy at most (a second ``add`` is refused with
``policy_exists``; adds for one monitor queue on its row, so two at once make
one). A policy covers the tasks that become ready after it is added; the
monitor's waiting backlog only when added with ``include_waiting``.

Each policy decides about a task once (a ``PolicyDecision`` row): ``approved``,
``capped`` (past ``max_per_hour`` in the last hour: the task waits for a person),
``refused:<code>``, or ``backlog`` (ready before the policy, which was added
without ``include_waiting``: written at the add, left to people). The decisions are written before the approvals, in the
transaction that counts the hour's approvals, so concurrent passes never exceed
the cap. A decision ``approved`` whose task is still ``ready`` (a pass that died
between the two) is approved again by the next pass.

A policy ends at its expiry, on revocation, when its monitor ends, or when the
host's grant no longer matches the digest it was bound to. An ended policy
approves nothing more, and the tasks it approved whose write has not started
(not ``write_possible``, not leased) go back to ``ready`` (``policy_revoked``).
"""

import logging

from peewee import Value, fn

from .approval import approve_many
from ..rules.canonical import digest
from ..errors import Refused
from ..rules.gate import gate
from ..rules.names import Actor
from ..state.approvals import withdraw_approvals
from ..state.history import append_audits, audit
from ..state.statuses import TaskStatus as T
from ..state.tasks import move_tasks
from ..models import Monitor, Policy, PolicyDecision, Task, db, insert_rows
from ..storage import key_in, lock_rows, log_failed_pass

HOUR_S = 60 * 60
PASS_LIMIT = 200  # tasks one policy considers per pass; the next pass takes the rest
RETRY_LATER = ("host_unavailable", "not_ready")  # no decision is kept for these

log = logging.getLogger("signoff.policy")


def tag(policy_id):
    """What ``approved_by`` says for tasks the policy approved."""
    return f"policy:{policy_id}"


def _refuse_signed(monitor):
    if monitor.signed_approvals:
        raise Refused("signed_approvals", f"monitor {monitor.id!r} counts only signed decisions "
                      "(monitor bind --signed-approvals): a policy cannot sign")


def add(rt, monitor_id, ttl_s=None, max_per_hour=None, by=None, include_waiting=False):
    """Add a standing approval policy for an active monitor, bound to its grant.

    It approves the tasks that become ready from now on, and with
    ``include_waiting`` the ones waiting already too. The answer is the policy's
    row plus ``waiting_included`` / ``waiting_left``: the ready tasks it takes
    on / leaves to people.
    """
    actor = Actor.of(by, "cli")
    if ttl_s is not None and not ttl_s > 0:
        raise Refused("invalid_policy", "ttl: must be a positive number of seconds")
    if max_per_hour is not None and max_per_hour < 1:
        raise Refused("invalid_policy", "max-per-hour: must be at least 1")
    monitor = Monitor.get_or_none(Monitor.id == monitor_id)
    if monitor is None:
        raise Refused("unknown_monitor", f"no monitor {monitor_id!r}")
    _refuse_signed(monitor)
    now = rt.clock.now()
    context = rt.host().context()
    refusal = gate(monitor, context, now)
    if refusal:
        raise Refused(refusal, f"the monitor's gate refused: {refusal}")
    ends = monitor.expires_at if ttl_s is None else min(now + ttl_s, monitor.expires_at)
    with db.atomic():
        # Adds for one monitor queue here, so only one of two at once finds none active.
        _refuse_signed(lock_rows(Monitor.select().where(Monitor.id == monitor.id)).get())
        _end_or_refuse(monitor, context, now)
        policy = Policy.create(monitor=monitor.id, grant_digest=monitor.grant_digest,
                               expires_at=ends, max_per_hour=max_per_hour,
                               created_by=actor.identity, created_at=now)
        audit(now, "policy_added", monitor.id, subject=tag(policy.id), **actor.audit)
        waiting = Task.select(Task.key).where(Task.monitor == monitor.id, Task.status == T.READY)
        count = waiting.count()
        if not include_waiting:
            PolicyDecision.insert_from(
                waiting.select(Value(policy.id), Task.key, Value("backlog"), Value(now)),
                [PolicyDecision.policy, PolicyDecision.task_key, PolicyDecision.decision,
                 PolicyDecision.at]).execute()
    run_pass(rt, [monitor.id])  # the tasks it takes on need not wait for a worker
    return dict(row(Policy.get_by_id(policy.id)),
                waiting_included=count if include_waiting else 0,
                waiting_left=0 if include_waiting else count)


def _end_or_refuse(monitor, context, now):
    """End the monitor's policies that are over; refuse ``policy_exists`` for a live one."""
    for other in Policy.select().where(Policy.monitor == monitor.id, Policy.ended_at.is_null()):
        code = _end_code(other, monitor, context, now)
        if not code:
            raise Refused("policy_exists", f"policy {other.id} is active on monitor "
                          f"{monitor.id!r}: revoke it first (signoff policy revoke {other.id})")
        _end(other, code, now)


def revoke(rt, policy_id, by=None, channel="cli"):
    """End a policy now; its approved tasks whose write has not started go back to ready."""
    actor = Actor.of(by, channel)
    policy = Policy.get_or_none(Policy.id == policy_id)
    if policy is None:
        raise Refused("unknown_policy", f"no policy {policy_id}")
    returned = _end(policy, "revoked", rt.clock.now(), actor.audit)
    return dict(row(Policy.get_by_id(policy_id)), tasks_returned=returned)


def row(policy):
    """A policy as the CLI shows it; ``digest`` is the grant digest it is bound to."""
    approved = PolicyDecision.select().where(PolicyDecision.policy == policy.id,
                                             PolicyDecision.decision == "approved").count()
    return {"policy": policy.id, "monitor": policy.monitor, "expires_at": policy.expires_at,
            "digest": policy.grant_digest, "max_per_hour": policy.max_per_hour,
            "by": policy.created_by, "created_at": policy.created_at,
            "active": policy.ended_at is None, "ended_at": policy.ended_at,
            "end_code": policy.end_code, "approved": approved}


def listing():
    """Every policy, oldest first."""
    return [row(p) for p in Policy.select().order_by(Policy.id)]


def run_pass(rt, monitor_ids=None):
    """End what must end, return what ended policies approved, approve what is waiting.

    ``monitor_ids`` limits the approvals to those monitors (ingest's cheap call).
    Returns counts: ``{ended, returned, approved, capped, refused}``.
    """
    summary = {"ended": 0, "returned": 0, "approved": 0, "capped": 0, "refused": 0}
    now = rt.clock.now()
    active = list(Policy.select().where(Policy.ended_at.is_null()).order_by(Policy.id))
    if active:
        try:
            context = rt.host().context()
        except Exception:  # a host that cannot say who we are ends nothing and approves nothing
            log.warning("policy pass skipped: the host's grant could not be read")
            return summary
        monitors = {m.id: m for m in Monitor.select().where(
            Monitor.id.in_(list({p.monitor for p in active})))}
        for policy in active:
            code = _end_code(policy, monitors.get(policy.monitor), context, now)
            if code:
                summary["returned"] += _end(policy, code, now)
                summary["ended"] += 1
            elif monitor_ids is None or policy.monitor in monitor_ids:
                _approve_waiting(rt, policy, now, summary)
    if monitor_ids is None:
        summary["returned"] += _return_tasks(now, _ended_tags())
    return summary


def after_ingest(rt, monitor_ids):
    """Approve new ready tasks of ``monitor_ids`` at once when a policy covers them.

    One indexed read when no policy does; a failure here is logged and left to
    the worker loop's pass (the ingest's outcomes are committed already).
    """
    if not monitor_ids:
        return
    try:
        if Policy.select().where(Policy.ended_at.is_null(),
                                 Policy.monitor.in_(list(monitor_ids))).exists():
            run_pass(rt, set(monitor_ids))
    except Exception:
        log_failed_pass(log, "policy pass after ingest", "the worker loop runs it again")


def _end_code(policy, monitor, context, now):
    if now >= policy.expires_at:
        return "expired"
    if monitor is not None and monitor.grant_digest != policy.grant_digest:
        return "scope_changed"
    return gate(monitor, context, now)


def _end(policy, code, now, who=None):
    """Mark ``policy`` ended with ``code`` (once) and return its unwritten tasks.

    ``who`` names the person who ended it (a revoke); null when it ran out by itself.
    """
    with db.atomic():
        ended = Policy.update(ended_at=now, end_code=code).where(
            Policy.id == policy.id, Policy.ended_at.is_null()).execute()
        if ended:
            audit(now, "policy_ended", policy.monitor, subject=tag(policy.id), **(who or {}))
            withdraw_approvals([tag(policy.id)], now)  # its places in quorums still open
        return _return_tasks(now, [tag(policy.id)])


def _ended_tags():
    return [tag(i) for (i,) in Policy.select(Policy.id).where(Policy.ended_at.is_null(False))
            .tuples()]


def _return_tasks(now, tags):
    """Approved tasks of ended policies whose write has not started go back to ready."""
    if not tags:
        return 0
    not_started = (Task.write_possible == False) & Task.lease_token.is_null()  # noqa: E712
    rows = list(Task.select(Task.key, Task.monitor).where(
        Task.status == T.APPROVED, Task.approved_by.in_(tags), not_started).tuples())
    if not rows:
        return 0
    with db.atomic():
        moved = move_tasks([k for k, _ in rows], [T.APPROVED], T.READY, now, where=not_started,
                           approved_digest=None, approved_by=None, approved_at=None,
                           parked=False, code="policy_revoked")
        append_audits([{"at": now, "code": "policy_revoked", "monitor": m, "task_key": k}
                       for k, m in rows if k in moved])
        withdraw_approvals(tags, now)  # the places of the tasks it had approved
    return len(moved)


def _approve_waiting(rt, policy, now, summary):
    keys = _decide(policy, now, summary)
    if not keys:
        return
    results = {k: r for k, r in Task.select(Task.key, Task.result).where(key_in(Task.key, keys))
               .tuples()}
    # The digest of the result as it is now: approve_many refuses it
    # (digest_mismatch) unless it is still the digest taken at drafting.
    outcomes = approve_many(rt, [(k, digest(results[k])) for k in keys], tag(policy.id),
                            audit_code="auto_approved", channel="policy")
    for key, outcome in zip(keys, outcomes):
        if isinstance(outcome, Refused):
            _refused(policy, key, outcome.code, now)
            summary["refused"] += 1
        else:
            summary["approved"] += 1


def _decide(policy, now, summary):
    """Write this pass's decisions under the hour's cap; returns the keys to approve."""
    mine = PolicyDecision.policy == policy.id
    # Tasks this policy capped or refused wait for a person: never taken again.
    settled = PolicyDecision.select(PolicyDecision.task_key).where(
        mine, PolicyDecision.task_key == Task.key, PolicyDecision.decision != "approved")
    # A task with open questions is a person's to answer: no policy ever approves it.
    waiting_now = Task.select(Task.key).where(
        Task.monitor == policy.monitor, Task.status == T.READY,
        Task.needs_answers == False, ~fn.EXISTS(settled))  # noqa: E712
    if not waiting_now.exists():
        return []  # the idle pass, every second: a read, no write lock
    with db.atomic():
        lock_rows(Policy.select().where(Policy.id == policy.id)).get()
        waiting = [k for (k,) in waiting_now.order_by(Task.created_at, Task.key)
                   .limit(PASS_LIMIT).tuples()]
        if not waiting:
            return []
        decided = {k for (k,) in PolicyDecision.select(PolicyDecision.task_key).where(
            mine, key_in(PolicyDecision.task_key, waiting)).tuples()}
        used = PolicyDecision.select().where(
            mine, PolicyDecision.decision == "approved", PolicyDecision.at > now - HOUR_S).count()
        again = [k for k in waiting if k in decided]  # counted in ``used`` already
        fresh = [k for k in waiting if k not in decided]
        room = len(fresh) if policy.max_per_hour is None else max(0, policy.max_per_hour - used)
        insert_rows(PolicyDecision, [
            {"policy": policy.id, "task_key": k, "decision": "approved" if n < room else "capped",
             "at": now} for n, k in enumerate(fresh)])
    summary["capped"] += max(0, len(fresh) - room)
    return again + fresh[:room]


def _refused(policy, key, code, now):
    which = (PolicyDecision.policy == policy.id) & (PolicyDecision.task_key == key)
    if code in RETRY_LATER:
        if code == "host_unavailable":  # the next pass tries again
            PolicyDecision.delete().where(which).execute()
        return
    PolicyDecision.update(decision=f"refused:{code}", at=now).where(which).execute()
