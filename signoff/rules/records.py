"""What signoff takes from a host: records and material it can use and keep.

Every answer is checked where it is read (ingest, batches, redraft, approval's
re-read), before anything is drafted or stored. An answer outside the types
and ranges signoff stores is ``invalid_record``; one over ``[host]
max_record_bytes`` / ``max_material_bytes`` is ``record_too_large``. Either is
a permanent refusal of that answer (``InvalidRecord``, a ``Blocked``): final for
the event at once, never a batch write that fails for every row in it.
"""

import json
import math

from .canonical import canonical
from ..errors import InvalidRecord

RECORD_KEYS = ("id", "document", "version", "status", "kind")
TEXT_KEYS = ("id", "document", "status", "kind")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what a database integer column holds
MAX_DEPTH = 64  # JSON nesting a host answer may use
SHOWN_KEY = 40  # characters of a key a message shows


def check_record(record, max_bytes):
    """``record`` if it is a host record signoff can keep; else ``InvalidRecord``."""
    if not isinstance(record, dict):
        raise InvalidRecord("invalid_record", "the host's record is not an object")
    for key in RECORD_KEYS:
        if key not in record:
            raise InvalidRecord("invalid_record", f"the host's record has no {key!r}")
    for key in TEXT_KEYS:
        if not isinstance(record[key], str):
            raise InvalidRecord("invalid_record", f"record.{key}: must be a string")
    if type(record["version"]) is not int:
        raise InvalidRecord("invalid_record", "record.version: must be an integer")
    _check_value("record", record, max_bytes, "max_record_bytes")
    return record


def check_material(material, max_bytes):
    """``material`` if it is material signoff can use; else ``InvalidRecord``."""
    if not isinstance(material, dict):
        raise InvalidRecord("invalid_record", "the host's material is not an object")
    _check_value("material", material, max_bytes, "max_material_bytes")
    return material


def _check_value(what, value, max_bytes, setting):
    problem, least, most = _problem(what, value)
    if problem:
        raise InvalidRecord("invalid_record", problem)
    if most <= max_bytes:  # fits however its strings are escaped: no need to serialise it
        return
    # ``least`` (characters of its strings) bounds the size from below: a huge
    # answer is refused without serialising it once more.
    at_least = least > max_bytes
    size = least if at_least else len(canonical(value).encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InvalidRecord("record_too_large", f"the host's {what} is {'at least ' * at_least}"
                            f"{size} bytes as JSON; [host] {setting} is {max_bytes}")


def _problem(root, value):
    """``(why value is not JSON every engine stores as it is, or None, least, most)``:
    ``least`` is its strings' length, ``most`` a bound on its size as JSON."""
    # A path is kept as (parent path, step) and spelled out only for a problem:
    # spelling every key's path cost more than the whole walk. Only containers
    # go on the stack, each with its children's depth; a scalar is measured
    # where its container is walked (a record is mostly scalars, and a stack
    # entry each cost more than measuring them). A character takes at most 6
    # bytes as JSON (``\u001f``; a pair of surrogates, 12 for 2), a number at
    # most 24, and each value a separator and its brackets.
    least = most = 0
    stack = [(root, 0, False, ((None, value),))]  # the root: the one child of no container
    while stack:
        where, depth, keyed, children = stack.pop()
        for step, item in children:
            if depth > MAX_DEPTH:
                return f"{root}: nested deeper than {MAX_DEPTH} levels", least, most
            if keyed:
                if not isinstance(step, str):
                    return f"{_spelled(where)}: has a key that is not a string", least, most
                least, most = least + len(step), most + 6 * len(step) + 3
            if isinstance(item, str):
                least, most = least + len(item), most + 6 * len(item) + 3
                continue
            if item is None or isinstance(item, bool):
                most += 6
                continue
            path = where if step is None and not keyed else (where, step)
            if isinstance(item, int):
                most += 24
                if not INT64_MIN <= item <= INT64_MAX:
                    return f"{_spelled(path)}: an integer outside the signed 64-bit range", \
                        least, most
            elif isinstance(item, float):
                most += 26
                if not math.isfinite(item):
                    return f"{_spelled(path)}: {item} is not a finite number", least, most
            elif isinstance(item, dict):
                most += 3
                stack.append((path, depth + 1, True, item.items()))
            elif isinstance(item, list):
                most += 3
                stack.append((path, depth + 1, False, enumerate(item)))
            else:
                return f"{_spelled(path)}: a {type(item).__name__} is not a JSON value", \
                    least, most
    return None, least, most


def _spelled(where):
    """``record["a"][0]`` for the path ``(("record", "a"), 0)``."""
    steps = []
    while isinstance(where, tuple):
        where, step = where
        steps.append(f"[{json.dumps(step[:SHOWN_KEY])}]" if isinstance(step, str) else f"[{step}]")
    return where + "".join(reversed(steps))
