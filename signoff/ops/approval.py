"""The trusted human channel: approve, reject, retry (the life cycle in docs/concepts.md).

Nothing here is reachable from event content; the CLI and the Python API are
its only callers.
"""

from .. import tracing
from ..steps.batching import read_back
from ..rules.drafts import needs_answers
from ..errors import Blocked, InvalidRecord, Refused
from ..rules.events import check_name
from ..rules.gate import INGEST_ACTIONS, gate
from ..state.lifecycle import Fenced, audit, move_task, move_tasks, update_task, TaskStatus as T
from ..models import Audit, Monitor, Task, db, insert_rows
from ..rules.retry import TRANSIENT, backoff


MIN_PREFIX = 8  # like git: short enough to type, long enough to be unique in practice
HEX = frozenset("0123456789abcdef")
SHOWN_CANDIDATES = 5


def get_task(key):
    """The task row for ``key`` or a unique key prefix; ``unknown_task`` / ``ambiguous_key``."""
    task = Task.get_or_none(Task.key == key) if isinstance(key, str) else None
    return task if task is not None else Task.get_by_id(_by_prefix(key))


def resolve_key(key):
    """The full task key for ``key``: itself, or the one key a prefix of >= 8 hex starts."""
    if isinstance(key, str) and Task.get_or_none(Task.key == key) is not None:
        return key
    return _by_prefix(key)


def _by_prefix(key):
    if not isinstance(key, str) or not key:
        raise Refused("unknown_task", "a task key is needed (`signoff tasks list` shows them)")
    prefix = key.lower()
    if not set(prefix) <= HEX or len(prefix) >= 64:
        raise Refused("unknown_task", f"no task with key {key!r}")
    if len(prefix) < MIN_PREFIX:
        raise Refused("unknown_task", f"no task with key {key!r}; a key prefix needs at least "
                      f"{MIN_PREFIX} hex characters")
    # Keys are lowercase hex, so every key starting with the prefix sorts
    # between it and the prefix followed by "g": one range on the primary key.
    found = [k for (k,) in Task.select(Task.key).where(
        Task.key >= prefix, Task.key < prefix + "g").order_by(Task.key)
        .limit(SHOWN_CANDIDATES + 1).tuples()]
    if not found:
        raise Refused("unknown_task", f"no task key starts with {key!r}")
    if len(found) > 1:
        shown = ", ".join(found[:SHOWN_CANDIDATES]) + (", ..." if len(found) > SHOWN_CANDIDATES else "")
        raise Refused("ambiguous_key", f"{key!r} starts more than one task key: {shown}; "
                      "give more characters")
    return found[0]


def answer(task):
    """What approve and reject print."""
    return {"key": task.key, "status": task.status, "approved_digest": task.approved_digest}


def approve(rt, key, reviewed_digest, by):
    """Approve task ``key`` (or a unique key prefix) if ``reviewed_digest`` is its result's."""
    outcome = approve_many(rt, [(resolve_key(key), reviewed_digest)], by)[0]
    if isinstance(outcome, Refused):
        raise outcome
    return outcome


def approve_many(rt, items, by, audit_code="approved"):
    """Approve many ``(key, digest)`` pairs: one grant read, one transaction.

    Returns, in order, the answer dict or the ``Refused`` for each pair; the
    checks are exactly those of a single approval (a key may be a prefix). ``by`` must be a valid
    name (``invalid_name`` otherwise, nothing approved). ``audit_code`` is what the
    audit log says (a standing policy's approvals say ``auto_approved``).
    """
    check_name("by", by)
    items = _full_keys(items)
    tasks = {t.key: t for t in Task.select().where(Task.key.in_([k for k, _ in items]))}
    # A signoff.approve span per known task, in the trace of the event that made it.
    spans = {i: tracing.begin("signoff.approve", tasks[key], task_key=key,
                              monitor=tasks[key].monitor)
             for i, (key, _) in enumerate(items) if key in tasks} if tracing.enabled() else {}
    try:
        out = _approve(rt, items, tasks, by, audit_code, spans)
    except Exception as exc:  # e.g. host_unavailable: the whole call is refused
        for span in spans.values():
            tracing.end(span, code=getattr(exc, "code", type(exc).__name__))
        raise
    for i, span in spans.items():
        refused = isinstance(out[i], Refused)
        tracing.end(span, code=out[i].code if refused else audit_code,
                    status=None if refused else out[i]["status"])
    return out


def _approve(rt, items, tasks, by, audit_code, spans):
    """``approve_many`` once its tasks are read: the checks, then one transaction."""
    now = rt.clock.now()
    out, ready = [], []
    for key, reviewed in items:
        try:
            out.append(_precheck(tasks.get(key), key, reviewed, now))
        except Refused as exc:
            out.append(exc)
        if out[-1] is None:
            ready.append(len(out) - 1)
    if not ready:
        return out
    host = rt.host()
    context = with_retries(rt, host.context)
    monitors = {m.id: m for m in Monitor.select().where(
        Monitor.id.in_(list({tasks[items[i][0]].monitor for i in ready})))}
    moves = []
    for i in ready:
        task = tasks[items[i][0]]
        try:
            with tracing.current(spans.get(i)):
                _check_source(rt, host, task, monitors.get(task.monitor), context, now)
            moves.append(i)
        except Refused as exc:
            out[i] = exc
    first = {}  # a key given twice is approved once; the repeat is refused as moved on
    for i in moves:
        first.setdefault(items[i][0], i)
    with db.atomic():
        # One guarded UPDATE (still ready) for all, then their audit rows.
        moved = move_tasks(first, [T.READY], T.APPROVED, now,
                           per_row={"approved_digest": {k: items[i][1] for k, i in first.items()}},
                           approved_by=by, approved_at=now, next_at=now, code=None)
        insert_rows(Audit, [{"at": now, "code": audit_code, "monitor": tasks[k].monitor,
                             "event_id": None, "task_key": k} for k in first if k in moved])
    for i in moves:
        if first[items[i][0]] != i or items[i][0] not in moved:
            out[i] = Refused("not_ready", "the task moved on while it was being approved")
    done = [i for i in moves if not isinstance(out[i], Refused)]
    if done:
        rt.wakers.wake("submit", len(done))
        fresh = {t.key: t for t in Task.select(Task.key, Task.status, Task.approved_digest).where(
            Task.key.in_([items[i][0] for i in done]))}
        for i in done:
            out[i] = answer(fresh[items[i][0]])
    return out


def _full_keys(items):
    """``items`` with each unique key prefix replaced by its key (the rest as given)."""
    out = []
    for key, reviewed in items:
        if isinstance(key, str) and len(key) != 64:
            try:
                key = resolve_key(key)
            except Refused:
                pass  # refused per item by the checks below, as an unknown key
        out.append((key, reviewed))
    return out


def _precheck(task, key, reviewed, now):
    """Checks that need no host: ``None`` means go on, a dict is the answer."""
    if task is None:
        raise Refused("unknown_task", f"no task with key {key!r}")
    if task.status in ("approved", "done") and task.approved_digest == reviewed:
        return answer(task)
    if task.status == "ready" and task.approval_deadline is not None and now >= task.approval_deadline:
        _end(task, "expired", now)
        raise Refused("expired", "the approval deadline of this task has passed")
    if task.status != "ready":
        raise Refused("not_ready", f"task is {task.status}, not ready")
    if reviewed != task.digest:
        raise Refused("digest_mismatch", "the digest does not match the task's result")
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


def reject(rt, key, reason=None):
    """Reject a ready task; the reason is the human's and is not stored."""
    now = rt.clock.now()
    task = get_task(key)
    key = task.key
    try:
        with db.atomic():
            move_task(key, [T.READY], T.REJECTED, now, code="rejected")
            audit(now, "rejected", task.monitor, task_key=key)
    except Fenced:
        raise Refused("not_ready", f"task is {get_task(key).status}, not ready") from None
    return answer(get_task(key))


def retry(rt, key):
    """Queue a parked, approved or uncertain task for submission again."""
    now = rt.clock.now()
    task = get_task(key)
    key = task.key
    if task.status == "ready":
        raise Refused("needs_approval", "the task waits for approval: nothing is submitted before it")
    if task.status not in ("approved", "uncertain"):
        raise Refused("not_retryable", f"task is {task.status}")
    try:
        with db.atomic():
            update_task(key, now, [T.APPROVED, T.UNCERTAIN], parked=False, next_at=now)
            audit(now, "retry", task.monitor, task_key=key)
    except Fenced:
        raise Refused("not_retryable", f"task is {get_task(key).status}") from None
    rt.wakers.wake("submit")
    return answer(get_task(key))


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


