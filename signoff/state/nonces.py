"""Nonces of signed statements and passkey registrations: minted, then spent once.

A nonce is valid five minutes by signoff's clock from when it was minted. It is
spent by the one decision that counted with it, in that decision's transaction,
so a refused attempt leaves it usable and a counted one can never count again
(not after an edit or a redraft restarted the quorum either: the spent row stays).
"""

import secrets

from ..models import ReviewerKey, StatementNonce


# A nonce's row is kept a day, long past its five minutes: until then a late
# statement is refused as expired (or used), and after as one signoff does not
# know (nonce_invalid). Each mint drops its reviewer's older rows, so the table
# holds about a day of statements.
KEEP_S = 24 * 60 * 60


def mint(reviewer, decision, now, task_key=None, digest=None):
    """Write a new nonce for ``reviewer``'s ``decision`` (of ``task_key`` at ``digest``)."""
    StatementNonce.delete().where(StatementNonce.reviewer == reviewer,
                                  StatementNonce.issued_at < now - KEEP_S).execute()
    nonce = secrets.token_urlsafe(24)
    StatementNonce.create(nonce=nonce, reviewer=reviewer, decision=decision, task_key=task_key,
                          digest=digest, issued_at=now)
    return nonce


def find(nonce):
    """The nonce row ``nonce`` names, or ``None``."""
    if not isinstance(nonce, str) or not 1 <= len(nonce) <= 64:
        return None
    return StatementNonce.get_or_none(StatementNonce.nonce == nonce)


def spend(nonce, now):
    """Mark ``nonce`` used, in the caller's transaction; False if it was spent already
    (by a decision that committed first: the caller refuses and rolls back)."""
    return bool(StatementNonce.update(used_at=now).where(
        StatementNonce.nonce == nonce, StatementNonce.used_at.is_null()).execute())


def count_signature(key_id, sign_count):
    """Keep a passkey's authenticator counter after an assertion that counted."""
    ReviewerKey.update(sign_count=sign_count).where(ReviewerKey.key_id == key_id).execute()
