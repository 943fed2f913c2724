"""The trusted human channel: approve, reject, retry, cancel (the life cycle in docs/concepts.md).

Nothing here is reachable from event content; the CLI, the review pages, the
JSON API, Slack's verified clicks and the Python API are its only callers.
``by`` and ``channel`` name who decided and through which face (cli, page, api,
slack, policy); they become an ``Actor`` (``rules/names.py``): on the CLI the OS
account is the identity and ``by`` a note, elsewhere ``by`` is the identity the
face authenticated. A quorum counts identities; a delegate's decision also
names whom it was for (``admin/delegations.py``).
"""

from dataclasses import dataclass

from .. import tracing
from ..rules.canonical import digest
from ..rules.drafts import draft_diff, needs_answers
from ..rules.text import check_reason, hidden_characters
from ..steps.recordbatches import read_back
from ..steps.hostreads import BatchReads
from ..errors import Blocked, InvalidRecord, Refused
from ..rules.gate import INGEST_ACTIONS, GrantRead, gate
from ..rules.names import Actor
from . import signing
from ..state.approvals import add_approvals, approval_counts, edit_task, quorum_of
from ..state.history import audit, record_decision_times
from ..state.moves import Fenced
from ..state.statuses import TaskStatus as T
from ..state.tasks import cancel_tasks, move_task, move_tasks, update_task
from ..storage import key_in, retried, select_instances
from ..models import Approval, Monitor, Task, db
from ..views.lookup import get_task, resolve_key
from ..admin import delegations
from ..rules.retry import TRANSIENT, backoff


def answer(task, missing=0):
    """What approve and reject print; ``approvals_missing`` while a quorum is incomplete."""
    out = {"key": task.key, "status": task.status, "approved_digest": task.approved_digest}
    if missing:
        out["approvals_missing"] = missing
    return out


def approve(rt, key, reviewed_digest, by, channel="cli", edit=None, ack_hidden_characters=False,
            monitors=None, proof=None, for_reviewer=None):
    """Approve task ``key`` (or a unique key prefix) if ``reviewed_digest`` is its result's.

    With ``edit`` (the draft's new text) the draft is replaced first and the
    approval binds the edited result's digest (``edit_and_approve``). A draft
    holding hidden characters needs ``ack_hidden_characters``. ``monitors``: the
    deciding reviewer's limits (another monitor's task is ``unknown_task``).
    ``proof``: the reviewer ``by``'s signature of the decision (``signing.Proof``),
    which a monitor bound with ``--signed-approvals`` requires.
    ``for_reviewer``: the reviewer a delegate decides for (``admin/delegations.py``;
    by default whoever's active delegation to them reaches the task, if any).
    """
    if edit is not None:
        return edit_and_approve(rt, key, reviewed_digest, edit, by, channel, ack_hidden_characters,
                                monitors, proof, for_reviewer)
    outcome = approve_many(rt, [(resolve_key(key, monitors), reviewed_digest)], by,
                           channel=channel, ack_hidden_characters=ack_hidden_characters,
                           monitors=monitors, proof=proof, for_reviewer=for_reviewer)[0]
    if isinstance(outcome, Refused):
        raise outcome
    return outcome


# The columns an approval reads: the checks' and the answer's, and the trace
# context of the task's span. Not the history columns (failures, earlier drafts,
# edits), which a bulk approval would decode for every task and never look at.
_READ = (Task.key, Task.monitor, Task.record_id, Task.status, Task.record, Task.result,
         Task.digest, Task.approved_digest, Task.approval_deadline, Task.traceparent,
         Task.tracestate)


def approve_many(rt, items, by, audit_code="approved", channel="cli", ack_hidden_characters=False,
                 monitors=None, proof=None, for_reviewer=None):
    """Approve many ``(key, digest)`` pairs: one grant read, one transaction.

    Returns, in order, the answer dict or the ``Refused`` for each pair; the
    checks are exactly those of a single approval (a key may be a prefix). ``by`` must be a valid
    name (``invalid_name`` otherwise, nothing approved). ``audit_code`` is what the
    audit log says (a standing policy's approvals say ``auto_approved``). Each
    approval counts towards its task's quorum under the actor's identity; the
    one that completes it approves. A policy never approves an edited draft; a
    reviewer limited to ``monitors`` finds no other monitor's task. A ``proof``
    (one item alone) signs the approval; a signed monitor's task is refused
    ``signature_required`` without one. A delegate approves for ``for_reviewer``
    (or whom their delegations name, per task).
    """
    if proof is not None and len(items) != 1:
        raise ValueError("a signature proves one approval")
    actor = Actor.of(by, channel, monitors, signed=proof is not None)
    items = _full_keys(items, actor.monitors)
    read = _READ + ((Task.edits,) if actor.channel == "policy" else ())
    within = () if actor.monitors is None else (Task.monitor.in_(sorted(actor.monitors)),)
    tasks = {t.key: t for t in select_instances(
        Task.select(*read).where(key_in(Task.key, [k for k, _ in items]), *within))}
    # A signoff.approve span per known task, in the trace of the event that made it.
    spans = {i: tracing.begin("signoff.approve", tasks[key], task_key=key,
                              monitor=tasks[key].monitor)
             for i, (key, _) in enumerate(items) if key in tasks} if tracing.enabled() else {}
    who = Who(actor, audit_code, ack_hidden_characters, _given(actor.identity, items), proof,
              for_reviewer)
    try:
        out = _approve(rt, items, tasks, who, spans)
    except Exception as exc:  # e.g. host_unavailable: the whole call is refused
        for span in spans.values():
            tracing.end(span, code=getattr(exc, "code", type(exc).__name__))
        raise
    for i, span in spans.items():
        refused = isinstance(out[i], Refused)
        tracing.end(span, code=out[i].code if refused else audit_code,
                    status=None if refused else out[i]["status"])
    return out


@dataclass(frozen=True)
class Who:
    """Who approves, through which face, and what they have already given."""

    actor: Actor
    audit_code: str
    ack_hidden: bool
    given: frozenset  # (key, digest) pairs the identity approved already
    proof: object = None  # signing.Proof of a signed approval
    for_reviewer: str | None = None  # asked for by name; None: found per task


def _given(identity, items):
    keys = [k for k, _ in items if isinstance(k, str)]
    if not keys:
        return frozenset()
    return frozenset(Approval.select(Approval.task_key, Approval.digest).where(
        Approval.by == identity, key_in(Approval.task_key, keys)).tuples())


def _approve(rt, items, tasks, who, spans):
    """``approve_many`` once its tasks are read: the checks, then one transaction."""
    now = rt.clock.now()
    out, ready = [], []
    for key, reviewed in items:
        try:
            out.append(_precheck(tasks.get(key), key, reviewed, now, who))
        except Refused as exc:
            out.append(exc)
        if out[-1] is None:
            ready.append(len(out) - 1)
    if not ready:
        return out
    host = rt.host()
    context = GrantRead(with_retries(rt, host.context))  # every task's gates, one digest
    monitors = {m.id: m for m in Monitor.select().where(
        Monitor.id.in_(list({tasks[items[i][0]].monitor for i in ready})))}
    asked = [tasks[items[i][0]] for i in ready]
    host = BatchReads(host, _readable_records(asked, monitors, context, now), asked)
    moves = []
    for i in ready:
        task = tasks[items[i][0]]
        try:
            with tracing.current(spans.get(i)):
                _check_source(rt, host, task, monitors.get(task.monitor), context, now)
            moves.append(i)
        except Refused as exc:
            out[i] = exc
    moved = _record(rt, items, tasks, monitors, moves, who, out, now)
    if moved:
        rt.wakers.wake("submit", len(moved))
    return out


def _record(rt, items, tasks, monitors, moves, who, out, now):
    """Count the checked approvals (``moves``) in one transaction, with their
    signatures' checks and whom a delegate stands in for; fills ``out`` and
    returns the keys approved."""
    with db.atomic():
        proofs = {}
        for i in list(moves):
            try:
                task = tasks[items[i][0]]
                proofs.update(_signed(rt, who.actor, who.proof, task, monitors.get(task.monitor),
                                      items[i][1], now))
            except Refused as exc:
                out[i] = exc
                moves.remove(i)
        first = {}  # a key given twice is approved once; the repeat is refused as moved on
        for i in moves:
            first.setdefault(items[i][0], i)
        stand_ins = _stand_ins(first, items, tasks, who, now, out)
        needed = {k: _needed(monitors.get(tasks[k].monitor)) for k in first}
        counted, moved, repeated, _ = add_approvals(
            {k: (items[i][1], needed[k]) for k, i in first.items()}, who.actor, now, who.audit_code,
            {k: (p.text, p.signature, p.data) for k, p in proofs.items()}, stand_ins)
        for key in counted & set(proofs):
            signing.spend(proofs[key], now)
        taken = counted | repeated
        for i in moves:
            if isinstance(out[i], Refused):  # no one it may stand in for (``_stand_ins``)
                continue
            if first.get(items[i][0]) != i or items[i][0] not in taken:
                out[i] = Refused("not_ready", "the task moved on while it was being approved")
        done = [i for i in moves if not isinstance(out[i], Refused)]
        # Read before commit: once committed, a worker may submit the task before we answer.
        answers = _answers([items[i][0] for i in done], needed)
    for i in done:
        out[i] = answers[items[i][0]]
    return moved


def _signed(rt, actor, proof, task, monitor, digest, now):
    """``{key: Checked}`` for ``actor``'s decision on ``task`` at ``digest`` signed with
    ``proof``, ``{}`` for an unsigned one its ``monitor`` allows; refuses one it does
    not, and a signature that does not hold. Run in the decision's transaction."""
    signing.required(monitor, proof)
    if proof is None:
        return {}
    return {task.key: signing.check(rt, proof, task, actor.identity, digest, now)}


def _stand_ins(first, items, tasks, who, now, out):
    """``{key: reviewer}`` a delegate approves for; a key whose asked-for reviewer
    cannot be stood in for is refused in ``out`` and left out of ``first``."""
    stand_ins, by_monitor = {}, {}  # one look-up per monitor, however many tasks
    for key, i in list(first.items()):
        monitor = tasks[key].monitor
        if monitor not in by_monitor:
            try:
                by_monitor[monitor] = delegations.acting(who.actor, monitor, now,
                                                         who.for_reviewer).for_reviewer
            except Refused as exc:
                by_monitor[monitor] = exc
        found = by_monitor[monitor]
        if isinstance(found, Refused):
            out[i] = found
            del first[key]
        elif found is not None:
            stand_ins[key] = found
    return stand_ins


def _answers(keys, needed):
    """``{key: answer}`` for approved ``keys`` as the approval left them (in its transaction)."""
    if not keys:
        return {}
    fresh = select_instances(Task.select(Task.key, Task.status, Task.approved_digest)
                             .where(key_in(Task.key, keys)))
    # Only a task still waiting for its quorum has approvals missing to count.
    counts = approval_counts([t.key for t in fresh if t.status == T.READY])
    return {t.key: answer(t, 0 if t.status != T.READY else max(0, needed[t.key] - counts.get(t.key, 0)))
            for t in fresh}


def _readable_records(tasks, monitors, context, now):
    """The record ids the re-reads of ``tasks`` need, where their monitors' gates let them."""
    ids = []
    for task in tasks:
        if not gate(monitors.get(task.monitor), context, now, INGEST_ACTIONS):
            ids.extend([r["id"] for r in task.record] if isinstance(task.record, list)
                       else [task.record_id])
    return ids


def _needed(monitor):
    return quorum_of(monitor)


def edit_and_approve(rt, key, reviewed, text, by, channel="cli", ack_hidden_characters=False,
                     monitors=None, proof=None, for_reviewer=None):
    """Replace the draft of ready task ``key`` by ``text`` and approve the edited result.

    ``reviewed`` is the digest the editor saw (stale → ``digest_mismatch``,
    nothing changed). The edited result keeps the sources and questions, passes
    acceptance again and gets its own digest, which the approval binds; the
    quorum starts again with the editor's approval as its first. A ``proof``
    signs the edit (its statement names the edited digest).
    """
    actor = Actor.of(by, channel, monitors, signed=proof is not None)
    if actor.channel == "policy":  # a programming error: policies approve drafts as drafted
        raise ValueError("a policy never edits a draft")
    now = rt.clock.now()
    task = get_task(key, actor.monitors)
    key = task.key
    actor = delegations.acting(actor, task.monitor, now, for_reviewer)
    if task.status != T.READY:
        raise Refused("not_ready", f"task is {task.status}, not ready; only a waiting draft is edited")
    _precheck(task, key, reviewed, now, Who(actor, "approved", True, frozenset()))
    result = dict(task.result, draft=check_edit(text, rt.config.max_record_bytes))
    new_digest = digest(result)
    if new_digest == task.digest:  # nothing changed: an approval as it stands
        return approve(rt, key, reviewed, by, channel, ack_hidden_characters=ack_hidden_characters,
                       monitors=monitors, proof=proof, for_reviewer=for_reviewer)
    if hidden_characters(result["draft"]) and not ack_hidden_characters:
        raise _hidden_refusal(result["draft"])
    problem = acceptance(result, task.record)
    if problem:
        raise Refused("acceptance_failed", f"the edited draft fails acceptance: {problem}")
    host = rt.host()
    monitor = Monitor.get_or_none(Monitor.id == task.monitor)
    _check_source(rt, host, task, monitor, with_retries(rt, host.context), now)
    edit = {"by": actor.identity, "for": actor.for_reviewer, "channel": actor.channel,
            "note": actor.note, "at": now, "from_digest": task.digest, "to_digest": new_digest,
            "diff": draft_diff(task.result.get("draft"), result["draft"], task.digest, new_digest)}
    try:
        with db.atomic():
            signed = _signed(rt, actor, proof, task, monitor, new_digest, now)
            edit_task(key, reviewed, result, new_digest, edit, now)
            audit(now, "edited", task.monitor, task_key=key,
                  **actor.audit_with({"from": reviewed, "digest": new_digest}))
            record_decision_times([((task.monitor, task.created_at), "edited")], actor.channel, now)
            _, moved, _, _ = add_approvals(
                {key: (new_digest, _needed(monitor))}, actor, now,
                proofs={k: (p.text, p.signature, p.data) for k, p in signed.items()},
                stand_ins={key: actor.for_reviewer} if actor.for_reviewer else None)
            for checked in signed.values():
                signing.spend(checked, now)
            fresh = get_task(key)  # before commit, as in _approve
    except Fenced:
        raise Refused("digest_mismatch", "the task changed while it was being edited; "
                      "reload it and edit again") from None
    if moved:
        rt.wakers.wake("submit")
    return dict(answer(fresh, 0 if moved else _needed(monitor) - 1), digest=new_digest)


def check_edit(text, limit):
    """The edited draft's text, or ``invalid_edit`` (not text, too large, broken characters)."""
    if not isinstance(text, str):
        raise Refused("invalid_edit", "the edited draft must be text")
    if len(text.encode("utf-8", "surrogatepass")) > limit:
        raise Refused("invalid_edit", f"the edited draft is larger than {limit} bytes")
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        raise Refused("invalid_edit", "the edited draft holds a lone surrogate")
    return text


def _hidden_refusal(draft):
    shown = ", ".join(hidden_characters(draft)[:5])
    return Refused("hidden_characters", f"the draft holds characters that render differently "
                   f"from what they are ({shown}); look at it marked (`tasks show`) and approve "
                   "with --ack-hidden-characters if it is what you mean")


def _full_keys(items, monitors=None):
    """``items`` with each unique key prefix replaced by its key (the rest as given)."""
    out = []
    for key, reviewed in items:
        if isinstance(key, str) and len(key) != 64:
            try:
                key = resolve_key(key, monitors)
            except Refused:
                pass  # refused per item by the checks below, as an unknown key
        out.append((key, reviewed))
    return out


def _precheck(task, key, reviewed, now, who):
    """Checks that need no host: ``None`` means go on, a dict is the answer."""
    if task is None:
        raise Refused("unknown_task", f"no task with key {key!r}")
    if task.status in (T.APPROVED, T.DONE) and task.approved_digest == reviewed:
        return answer(task)
    if task.status == T.READY and task.approval_deadline is not None and now >= task.approval_deadline:
        _end(task, "expired", now)
        raise Refused("expired", "the approval deadline of this task has passed")
    if task.status != T.READY:
        raise Refused("not_ready", f"task is {task.status}, not ready")
    if reviewed != task.digest:
        raise Refused("digest_mismatch", "the digest does not match the task's result")
    if who.actor.channel == "policy" and task.edits:
        raise Refused("edited", "a person edited this draft: a policy approves only a draft as "
                      "drafted, so every remaining place needs a person other than the editor")
    # The same identity again counts once; a signed repeat is checked first, so a
    # statement that counted already is refused as used.
    if (task.key, reviewed) in who.given and who.proof is None:
        return answer(task, max(0, _needed(Monitor.get_or_none(Monitor.id == task.monitor))
                                - approval_counts([task.key]).get(task.key, 0)))
    if not who.ack_hidden and hidden_characters((task.result or {}).get("draft")):
        raise _hidden_refusal(task.result["draft"])
    return None


def _check_source(rt, host, task, monitor, context, now):
    """Gate, re-read the source and run acceptance; refuse (and block) on failure."""
    refusal = gate(monitor, context, rt.clock.now(), INGEST_ACTIONS)
    if refusal:
        raise Refused(refusal, f"the monitor's gate refused: {refusal}")
    try:
        current = with_retries(rt, lambda: read_back(host, task, rt.config.max_record_bytes))
    except Blocked as exc:
        raise host_refusal(exc, "re-reading the source failed") from None
    if current != task.record:
        _block(task, "source_changed", now)
        raise Refused("source_changed", "the source changed since the draft; a new event makes a new task")
    problem = acceptance(task.result, task.record)
    if problem:
        _block(task, "acceptance_failed", now)
        raise Refused("acceptance_failed", problem)


def host_refusal(exc, doing):
    """The ``Refused`` for a host's permanent refusal (or unusable answer) while ``doing``."""
    if isinstance(exc, InvalidRecord):
        return Refused(exc.code, exc.message)  # it says what was wrong, and which limit
    return Refused(exc.code, f"{doing}: {exc.code}")


def acceptance(result, record):
    """Why ``result`` fails acceptance against the snapshot, or ``None``."""
    if not isinstance(result, dict):
        return "the result is not an object"
    if isinstance(record, list):  # a batch: the result names its whole set
        if result.get("records") != sorted([r.get("id"), r.get("version")] for r in record):
            return "the result does not name the batch's record ids and versions"
    elif result.get("record_id") != record.get("id") or result.get("version") != record.get("version"):
        return "the result does not name the snapshot's record id and version"
    draft = result.get("draft")
    if not isinstance(draft, str) or not draft.strip():
        return "the draft is blank"
    sources = result.get("sources")
    # A result that asks open questions may cite nothing: the person answers them.
    if not isinstance(sources, list) or not (sources or needs_answers(result)):
        return "the result has no source"
    return None


def reject(rt, key, reason=None, by=None, channel="cli", digest=None, monitors=None, proof=None,
           for_reviewer=None):
    """Reject a ready task, keeping who rejected it and why (``reason``, optional).

    ``digest``: the result the person saw; the task is rejected only while it is
    still that result, checked in the transaction that rejects it (else
    ``digest_mismatch``, nothing changed). ``proof``: the reviewer ``by``'s
    signature of the reject (its statement's digest is the result seen), which a
    monitor bound with ``--signed-approvals`` requires. ``for_reviewer``: as for
    ``approve``.
    """
    actor = Actor.of(by, channel, monitors, signed=proof is not None)
    reason = check_reason(reason)
    now = rt.clock.now()
    task = get_task(key, actor.monitors)
    key = task.key
    actor = delegations.acting(actor, task.monitor, now, for_reviewer)
    if digest is None and proof is not None:
        digest = task.digest
    seen = () if digest is None else (Task.digest == digest,)
    with db.atomic():
        signed = _signed(rt, actor, proof, task, Monitor.get_or_none(Monitor.id == task.monitor),
                         digest, now).get(key)
        moved = move_tasks([key], [T.READY], T.REJECTED, now, where=seen[0] if seen else None,
                           code="rejected", rejected_by=actor.identity,
                           rejected_for=actor.for_reviewer, reject_reason=reason,
                           **({} if signed is None else {"reject_proof": dict(
                               statement=signed.text, **signed.signature)}))
        if moved:
            audit(now, "rejected", task.monitor, task_key=key,
                  **actor.audit_with(None if signed is None else signed.data))
            if signed is not None:
                signing.spend(signed, now)
            if actor.channel != "policy":
                record_decision_times([((task.monitor, task.created_at), "rejected")],
                                      actor.channel, now)
    if not moved:
        now_task = get_task(key)
        if now_task.status == T.READY:
            raise Refused("digest_mismatch", "the digest does not match the task's result")
        raise Refused("not_ready", f"task is {now_task.status}, not ready")
    return answer(get_task(key))


def retry(rt, key, by=None, channel="cli", monitors=None):
    """Queue a parked, approved or uncertain task for submission again."""
    actor = Actor.of(by, channel, monitors)
    now = rt.clock.now()
    task = get_task(key, actor.monitors)
    key = task.key
    if task.status == T.READY:
        raise Refused("needs_approval", "the task waits for approval: nothing is submitted before it")
    if task.status not in (T.APPROVED, T.UNCERTAIN):
        raise Refused("not_retryable", f"task is {task.status}")
    try:
        with db.atomic():
            update_task(key, now, [T.APPROVED, T.UNCERTAIN], parked=False, next_at=now)
            audit(now, "retry", task.monitor, task_key=key, **actor.audit)
    except Fenced:
        raise Refused("not_retryable", f"task is {get_task(key).status}") from None
    rt.wakers.wake("submit")
    return answer(get_task(key))


def cancel(rt, key, by, channel, monitors=None):
    """Cancel one open task as a monitor's cancel ends its tasks (``state.tasks.cancel_tasks``).

    What no write can have reached is ``cancelled``; a task that may have been
    written ends ``cancelled`` with ``outcome_unknown`` (and one whose write is
    in flight ends ``done`` if its receipt confirms it). A finished task is
    refused (``not_cancellable``), nothing changed.
    """
    actor = Actor.of(by, channel, monitors)
    task = get_task(key, actor.monitors)
    in_flight = _cancel_one(task, rt.clock.now(), actor)
    task = get_task(task.key)
    return dict(answer(task), outcome_unknown=task.outcome_unknown,
                write_in_flight=bool(in_flight))


@retried  # a deadlock with a worker's batch is tried again: every write here is guarded
def _cancel_one(task, now, actor):
    with db.atomic():
        cancelled, in_flight = cancel_tasks(Task.key == task.key, now)
        if not cancelled:
            status = Task.get_by_id(task.key).status
            raise Refused("not_cancellable", f"task is {status}: only ready, approved and "
                          "uncertain tasks can be cancelled")
        audit(now, "cancelled", task.monitor, task_key=task.key, **actor.audit)
    return in_flight


def _end(task, status, now):
    try:
        with db.atomic():
            move_task(task.key, [T.READY], status, now, code=status)
            audit(now, status, task.monitor, task_key=task.key)
    except Fenced:
        pass  # someone else ended it first; the refusal stands either way


def _block(task, code, now):
    try:
        with db.atomic():
            move_task(task.key, [T.READY], T.BLOCKED, now, code=code)
            audit(now, code, task.monitor, task_key=task.key)
    except Fenced:
        pass


def with_retries(rt, call):
    """``call()`` with the read budget's retries on transient failures (``host_unavailable``)."""
    policy = rt.config.retry
    for attempt in range(1, policy.read_attempts + 1):
        try:
            return call()
        except TRANSIENT:
            if attempt == policy.read_attempts:
                raise Refused("host_unavailable", "the host did not answer within the read budget") from None
            rt.clock.sleep(backoff(attempt, policy))


