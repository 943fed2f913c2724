"""A task's life: born ``ready``, approved, written, confirmed, or ended otherwise
(docs/concepts.md); the writes to a task other than its quorum (``approvals``)."""

from .. import storage
from ..models import Task
from ..storage import PreparedInsert, key_in
from .moves import RELEASED, PreparedMove, check_edge, guarded, move_query
from .statuses import TASK_ACTIVE, TASK_EDGES, TASK_OPEN, TaskStatus as T


def move_task(key, sources, target, now, token=None, **fields):
    """Move task ``key`` from one of ``sources`` to ``target``; ``Fenced`` if not."""
    check_edge(TASK_EDGES, sources, target)
    guarded(Task, Task.key == key, sources, token, status=target, updated_at=now, **fields)


def update_task(key, now, statuses, token=None, **fields):
    """Change non-status fields of a task still in ``statuses`` (and still ours)."""
    guarded(Task, Task.key == key, statuses, token, updated_at=now, **fields)


def move_tasks(keys, sources, target, now, token=None, where=None, **fields):
    """Move many tasks at once under the rules of ``move_task``; returns the keys moved.

    ``where`` adds a condition every moved row must also meet; with ``keys``
    ``None`` it alone picks the rows.
    """
    return prepare_move_tasks(keys, sources, target, now, token, where, **fields).run()


def prepare_move_tasks(keys, sources, target, now, token=None, where=None, **fields):
    """``move_tasks`` built now, to ``run()`` in the writer's transaction (as
    ``prepare_move_deliveries``)."""
    check_edge(TASK_EDGES, sources, target)
    return PreparedMove(move_query(Task, Task.key, keys, sources, target, now, token,
                                    None, fields, where), Task, target)


def maybe_written(task):
    """True for a task a host may hold a result for (``may_be_written`` for one row read):
    its next try waits ``uncertain`` and reads the receipt before writing again."""
    return task.status == T.UNCERTAIN or bool(task.write_possible)


def may_be_written():
    """The tasks a host may hold a result for: a write was marked possible, or is uncertain."""
    return (Task.status == T.UNCERTAIN) | (Task.write_possible == True)  # noqa: E712


def cancel_tasks(which, now):
    """End the open tasks that ``which`` selects, as a cancel does.

    Returns ``(cancelled, in_flight)``: the keys cancelled, and among them those
    whose write a worker may be making right now. Each kind is one guarded
    UPDATE whose conditions the database checks row by row, so no worker's
    move in between can make the cancel fail:

    - no write can have reached the task: ``cancelled``, its lease dropped (a
      worker holding it is fenced before it marks the write possible);
    - it may have been written and nobody holds it: ``cancelled`` with
      ``outcome_unknown``;
    - it may have been written and a worker holds it (its write is in flight):
      ``cancelled`` with ``outcome_unknown``, keeping the lease, so that worker
      moves it to ``done`` if the receipt confirms the write; anything else
      leaves it as it is (the reaper drops the lease of a worker that died).
    """
    maybe, held = may_be_written(), Task.lease_token.is_null(False)
    ended = {"code": "cancelled", "parked": False}
    cancelled, in_flight = set(), set()
    # On PostgreSQL a worker's outcome may commit between two of the UPDATEs (an
    # in-flight write ending `uncertain` and released after the second, before
    # the third): the pass is made again until it finds no open task left.
    while True:
        moved = move_tasks(None, TASK_OPEN, T.CANCELLED, now, where=which & ~maybe,
                           outcome_unknown=False, **ended, **RELEASED)
        moved |= move_tasks(None, TASK_OPEN, T.CANCELLED, now, where=which & maybe & ~held,
                            outcome_unknown=True, **ended)
        flying = move_tasks(None, TASK_OPEN, T.CANCELLED, now, where=which & maybe & held,
                            outcome_unknown=True, **ended)
        if not moved and not flying:
            return cancelled | in_flight, in_flight
        cancelled |= moved
        in_flight |= flying


def new_tasks(rows):
    """``ready`` tasks to insert (keys that exist already are skipped), built now:
    ``run()`` them in the writer's transaction; it returns the keys inserted."""
    return PreparedInsert(Task, [dict(r, status=T.READY) for r in rows],
                          ignore_conflicts=True, returning=("key",))


def still_ours(keys, token):
    """The conditions picking the tasks of ``keys`` still open and leased under ``token``
    (looked up by key: see ``storage.unindexed``)."""
    return _ours(key_in(Task.key, keys), token)


def _ours(keys, token):
    """``still_ours`` for ``keys`` given as an SQL node."""
    return (keys, Task.lease_token == token,
            storage.unindexed(Task.status).in_(list(TASK_ACTIVE)))


def ours_under(token):
    """``ours(keys)``: the keys of ``keys`` whose tasks are still open and leased under
    ``token`` (``still_ours``), from a statement built once for ``token``: submit to a
    host without a batch write asks before each task's write."""
    statement = storage.KeyedSelect(
        lambda keys: Task.select(Task.key).where(*_ours(keys, token)), Task.key)

    def ours(keys):
        return {key for (key,) in statement.rows(keys)} if keys else set()
    return ours


def mark_write_possible(keys, token, now):
    """Record that a write may now happen on the tasks ``keys`` still leased under
    ``token``; returns the keys marked (a cancel may have taken the others)."""
    marked = Task.update(write_possible=True, updated_at=now).where(
        *still_ours(keys, token)).returning(Task.key)
    return {key for (key,) in marked.tuples().execute()}


def strip_tasks(keys, where):
    """Drop the record snapshots and results of the tasks ``keys`` that still meet
    ``where`` (retention), and the differences their edits kept; returns
    ``[(key, status)]`` of those stripped (who edited stays in the audit log)."""
    return list(Task.update(record={}, result={}, previous_drafts=[], edits=[]).where(
        key_in(Task.key, keys), where).returning(Task.key, Task.status).tuples().execute())
