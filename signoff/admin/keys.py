"""Reviewer keys: Ed25519 public keys for scripts and passkeys registered on the pages.

Adding and removing a key is audited (``reviewer_key_added`` with the key's
id, kind, public part and fingerprint; ``reviewer_key_removed``), so the audit
says which keys could sign when. A key belongs to one reviewer: the same key
again is refused ``key_exists``.
"""

from peewee import IntegrityError

from ..errors import Refused
from ..rules import statements as st
from ..rules.names import Actor
from ..state.history import audit
from ..models import ReviewerKey, db
from . import reviewers


def _reviewer(name):
    row = reviewers.find(name)
    if row is None:
        raise Refused("unknown_reviewer", f"no reviewer {name!r}")
    return row.name


def add(rt, name, data, by=None, channel="cli"):
    """Give reviewer ``name`` the Ed25519 public key in ``data`` (PEM or ``ssh-ed25519``);
    answers ``{reviewer, key_id, fingerprint}``."""
    actor = Actor.of(by, channel)
    raw = st.raw_of(st.read_public_key(data))
    return _store(rt, name, "ed25519", raw, None, actor)


def add_passkey(rt, name, credential_id, cose_key, sign_count):
    """Keep a passkey the reviewer ``name`` registered on the pages (audited as theirs)."""
    return _store(rt, name, "webauthn", cose_key, (credential_id, sign_count),
                  Actor.of(name, "page"))


def _store(rt, name, kind, public, credential, actor):
    now = rt.clock.now()
    key_id, fingerprint = st.key_id_of(public), st.key_fingerprint(public)
    with db.atomic():
        reviewer = _reviewer(name)
        try:
            with db.atomic():  # a savepoint: the refusal leaves the transaction usable
                ReviewerKey.create(key_id=key_id, reviewer=reviewer, kind=kind,
                                   public_key=st.b64url(public), fingerprint=fingerprint,
                                   credential_id=credential and credential[0],
                                   sign_count=credential[1] if credential else 0, created_at=now)
        except IntegrityError:
            raise Refused("key_exists", f"key {key_id} ({fingerprint}) is held already: "
                          "one key, one reviewer") from None
        audit(now, "reviewer_key_added", subject=reviewer, **actor.audit,
              data={"key_id": key_id, "kind": kind, "public_key": st.b64url(public),
                    "fingerprint": fingerprint})
    return {"reviewer": reviewer, "key_id": key_id, "fingerprint": fingerprint, "kind": kind}


def listing(name=None):
    """Reviewer keys (of ``name`` alone, if given), by reviewer then when added."""
    query = ReviewerKey.select().order_by(ReviewerKey.reviewer, ReviewerKey.created_at,
                                          ReviewerKey.key_id)
    if name is not None:
        query = query.where(ReviewerKey.reviewer == _reviewer(name))
    return [{"reviewer": k.reviewer, "key_id": k.key_id, "kind": k.kind,
             "fingerprint": k.fingerprint, "created_at": k.created_at} for k in query]


def remove(rt, name, key_id, by=None, channel="cli"):
    """Take key ``key_id`` from reviewer ``name``: it signs nothing from now on."""
    actor = Actor.of(by, channel)
    now = rt.clock.now()
    with db.atomic():
        reviewer = _reviewer(name)
        if not ReviewerKey.delete().where(ReviewerKey.key_id == key_id,
                                          ReviewerKey.reviewer == reviewer).execute():
            raise Refused("unknown_key", f"reviewer {reviewer!r} holds no key {key_id!r}")
        audit(now, "reviewer_key_removed", subject=reviewer, **actor.audit, data={"key_id": key_id})
    return {"reviewer": reviewer, "key_id": key_id, "removed": True}

