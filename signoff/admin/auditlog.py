"""The audit log taken out of the home: the home's public key, and the export that
`signoff audit verify` checks with no database (docs/audit.md).

An export is JSON Lines: each checkpoint's entries (in ``seq`` order) then the
checkpoint itself, oldest first; then a ``task`` line for every task the
database holds as approved, uncertain or done; then the ``close``, signed now,
naming the last checkpoint (the head) and the task lines. Every entry is sealed
by a checkpoint first, so the export covers every entry written before it began.
"""

import json

from cryptography.hazmat.primitives import serialization

from ..errors import Refused
from ..models import Audit, Checkpoint, Task
from ..rules.auditchain import (ENTRY_FIELDS, b64url, close_statement, statement_bytes,
                                tasks_hash)
from ..chores.checkpoints import seal_all
from ..rules.auditverify import PAST_APPROVAL
from ..state.checkpoints import checkpoint_ids, last_checkpoint
from ..storage import select_tuples
from ..storage.homekey import fingerprint, home_id, key_path, load_home_key


def key_info(home):
    """The public key of ``home`` (a folder): ``{public_key (PEM), fingerprint, home, path}``."""
    key = load_home_key(home)
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    return {"public_key": pem.decode("ascii"), "fingerprint": fingerprint(key),
            "home": home_id(key), "path": str(key_path(home))}


def export(rt, write, since=None):
    """Write the export line by line through ``write(text)``; returns the head.

    ``since``: the hash of a checkpoint (a head printed earlier); the export then
    starts after it, with that checkpoint as its first line.
    """
    key = load_home_key(rt.home)
    seal_all(rt, key)
    head = last_checkpoint()
    if head is None:
        raise Refused("nothing_to_export", "the audit log holds no entry yet")
    start = _since(since)
    if start is not None:
        write(_checkpoint_line(start))
    for number in checkpoint_ids(after=start.id if start is not None else 0):
        for entry in (Audit.select(*[getattr(Audit, f) for f in ENTRY_FIELDS])
                      .where(Audit.checkpoint == number).order_by(Audit.seq).dicts()):
            write(_line({"kind": "entry", **{k: v for k, v in entry.items() if v is not None}}))
        write(_checkpoint_line(Checkpoint.get_by_id(number)))
    states = _task_states()
    for state in states:
        write(_line(state))
    close = close_statement(home_id(key), rt.clock.now(), head.hash, tasks_hash(states))
    write(_line({**close, "signature": b64url(key.sign(statement_bytes(close)))}))
    return head.hash


def _since(since):
    if since is None:
        return None
    found = Checkpoint.get_or_none(Checkpoint.hash == since)
    if found is None:
        raise Refused("unknown_head", f"no checkpoint has the head {since}")
    return found


def _task_states():
    rows = select_tuples(Task.select(Task.key, Task.status, Task.approved_digest)
                         .where(Task.status.in_(list(PAST_APPROVAL))).order_by(Task.key))
    return [{"kind": "task", "key": k, "status": s, "approved_digest": d} for k, s, d in rows]


def _checkpoint_line(row):
    return _line({**row.statement, "signature": row.signature})


def _line(value):
    # ASCII escapes keep every value (a lone surrogate too) as it was read.
    return json.dumps(value, separators=(",", ":"), sort_keys=True) + "\n"
