"""Finding a task by its key or a unique prefix of it, within what a reviewer may see."""

from ..errors import Refused
from ..models import Task


MIN_PREFIX = 8  # like git: short enough to type, long enough to be unique in practice
HEX = frozenset("0123456789abcdef")
SHOWN_CANDIDATES = 5


def get_task(key, monitors=None):
    """The task row for ``key`` or a unique key prefix; ``unknown_task`` / ``ambiguous_key``.

    ``monitors`` (a limited reviewer's): only their tasks are found; another
    monitor's task is unknown exactly as one that does not exist.
    """
    within = _within(monitors)
    task = Task.get_or_none(Task.key == key, *within) if isinstance(key, str) else None
    return task if task is not None else Task.get_by_id(_by_prefix(key, within))


def resolve_key(key, monitors=None):
    """The full task key for ``key``: itself, or the one key a prefix of >= 8 hex starts
    (among ``monitors``' tasks alone, if given)."""
    within = _within(monitors)
    if isinstance(key, str) and Task.select().where(Task.key == key, *within).exists():
        return key
    return _by_prefix(key, within)


def _within(monitors):
    return () if monitors is None else (Task.monitor.in_(sorted(monitors)),)


def _by_prefix(key, within=()):
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
        Task.key >= prefix, Task.key < prefix + "g", *within).order_by(Task.key)
        .limit(SHOWN_CANDIDATES + 1).tuples()]
    if not found:
        raise Refused("unknown_task", f"no task key starts with {key!r}")
    if len(found) > 1:
        shown = ", ".join(found[:SHOWN_CANDIDATES]) + (", ..." if len(found) > SHOWN_CANDIDATES else "")
        raise Refused("ambiguous_key", f"{key!r} starts more than one task key: {shown}; "
                      "give more characters")
    return found[0]
