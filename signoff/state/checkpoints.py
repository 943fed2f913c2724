"""Checkpoints: the audit entries written since the last one, sealed under the home key.

A checkpoint names the head of every chain its section advanced and the hash of
each lone entry, follows the checkpoint before it (``prev``), and is signed with
the home's Ed25519 key (rules/auditchain.py). Its entries are marked with its
number, so an entry whose transaction commits after a checkpoint was made (a
lower ``seq`` committed late) is sealed by the next one: none is ever skipped.
Checkpoints are made one at a time (a named lock); the writers of entries never
wait for them.
"""

from ..models import Audit, Checkpoint
from ..rules.auditchain import (ENTRY_FIELDS, b64url, checkpoint_statement, entry_hash,
                                order_hash, statement_bytes, statement_hash)
from ..storage import lock_name, select_tuples

SECTION_LIMIT = 10_000  # entries one checkpoint seals at most
_UPDATE_CHUNK = 500  # seqs marked by one statement


def seal(key, home, now, limit=SECTION_LIMIT):
    """Seal the entries no checkpoint covers yet (the ``limit`` oldest) under ``key``;
    run in the caller's transaction. Returns ``(checkpoint row, entries sealed)``,
    or ``(None, 0)`` when there was nothing to seal."""
    lock_name("audit", "checkpoint")
    rows = list(Audit.select(Audit.seq, *[getattr(Audit, f) for f in ENTRY_FIELDS], Audit.hash)
                .where(Audit.checkpoint.is_null()).order_by(Audit.seq).limit(limit).dicts())
    if not rows:
        return None, 0
    last = last_checkpoint()
    heads, lone, hashes = {}, [], []
    for row in rows:
        # Rows from before the chain (schema version 6) carry no hash: made now.
        own = row["hash"] or entry_hash(row)
        hashes.append(own)
        if row["chain"] is None:
            lone.append(own)
        else:
            heads[row["chain"]] = own
    statement = checkpoint_statement(home, last.id + 1 if last else 1,
                                     last.hash if last else None, now, heads, lone,
                                     order_hash(hashes))
    row = Checkpoint.create(id=statement["n"], at=now, statement=statement,
                            hash=statement_hash(statement),
                            signature=b64url(key.sign(statement_bytes(statement))))
    seqs = [r["seq"] for r in rows]
    for i in range(0, len(seqs), _UPDATE_CHUNK):
        Audit.update(checkpoint=row.id).where(Audit.seq.in_(seqs[i:i + _UPDATE_CHUNK])).execute()
    return row, len(rows)


def last_checkpoint():
    """The newest checkpoint row, or ``None``."""
    return Checkpoint.select().order_by(Checkpoint.id.desc()).first()


def checkpoint_ids(after=0):
    """The numbers of the checkpoints after ``after``, in order."""
    return [n for (n,) in select_tuples(Checkpoint.select(Checkpoint.id)
                                        .where(Checkpoint.id > after).order_by(Checkpoint.id))]
