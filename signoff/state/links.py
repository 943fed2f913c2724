"""Email links: minted when a message is sent, spent by the first decision through them.

The token is 256 random bits, handed out once (in the message) and never
stored: the row holds its sha256, so a copy of the database opens no link.
A link is bound to one reviewer, one task and the digest the message showed.
"""

import hashlib
import secrets

from ..models import EmailLink

PREFIX = "sol_"


def token_hash(token):
    """The stored form of a link's token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def mint(reviewer, task_key, digest, now, ttl_s):
    """A new link's token (the only time it exists in the clear)."""
    token = PREFIX + secrets.token_urlsafe(32)
    EmailLink.create(token_hash=token_hash(token), reviewer=reviewer, task_key=task_key,
                     digest=digest, created_at=now, expires_at=now + ttl_s)
    return token


def find(token):
    """The link row of ``token``, or ``None``."""
    if not isinstance(token, str) or not token.startswith(PREFIX) or len(token) > 100:
        return None
    return EmailLink.get_or_none(EmailLink.token_hash == token_hash(token))


def spend(link, now):
    """Mark ``link`` used by a decision; False when a decision spent it first."""
    return bool(EmailLink.update(spent_at=now).where(
        EmailLink.token_hash == link.token_hash, EmailLink.spent_at.is_null()).execute())


def prune(now):
    """Drop links that expired; returns how many."""
    return EmailLink.delete().where(EmailLink.expires_at <= now).execute()
