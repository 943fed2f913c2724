"""Reviewer keys: Ed25519 public keys for scripts and passkeys registered on the pages.

Adding and removing a key is audited (``reviewer_key_added`` with the key's
id, kind, public part and fingerprint; ``reviewer_key_removed``), so the audit
says which keys could sign when. A key belongs to one reviewer: the same key
again is refused ``key_exists``.
"""

import hashlib
import json
from urllib.parse import urlsplit

from peewee import IntegrityError

from ..errors import Refused, SignatureRefused
from ..rules import statements as st
from ..rules.names import Actor
from ..state import nonces
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


def passkey_options(rt, name, origin):
    """The WebAuthn creation options for reviewer ``name`` to register a passkey at
    ``origin`` (user verification required), with a challenge minted as a nonce."""
    # webauthn takes a tenth of a second to import: only the passkey pages load it.
    from webauthn import generate_registration_options, options_to_json
    from webauthn.helpers.structs import (AuthenticatorSelectionCriteria,
                                          PublicKeyCredentialDescriptor, ResidentKeyRequirement,
                                          UserVerificationRequirement)
    reviewer = _reviewer(name)
    with db.atomic():
        nonce = nonces.mint(reviewer, "register", rt.clock.now())
    held = [c for (c,) in ReviewerKey.select(ReviewerKey.credential_id).where(
        ReviewerKey.reviewer == reviewer, ReviewerKey.credential_id.is_null(False)).tuples()]
    options = generate_registration_options(
        rp_id=urlsplit(origin).hostname or "", rp_name="signoff", user_name=reviewer,
        user_id=hashlib.sha256(reviewer.encode("utf-8")).digest()[:16],
        challenge=st.unb64url(nonce, "challenge"),
        authenticator_selection=AuthenticatorSelectionCriteria(
            user_verification=UserVerificationRequirement.REQUIRED,
            resident_key=ResidentKeyRequirement.PREFERRED),
        exclude_credentials=[PublicKeyCredentialDescriptor(id=st.unb64url(c, "id")) for c in held])
    return json.loads(options_to_json(options))


def register_passkey(rt, name, credential, origin):
    """Keep the passkey reviewer ``name`` created at ``origin`` (a ``PublicKeyCredential``
    as JSON, base64url fields) once ``webauthn`` verifies it against the challenge
    signoff minted; audited as theirs. Answers as ``add``."""
    from webauthn import verify_registration_response  # as in passkey_options
    from webauthn.helpers.exceptions import InvalidRegistrationResponse
    reviewer = _reviewer(name)
    now = rt.clock.now()
    nonce = _registration_nonce(credential)
    row = nonces.find(nonce)
    if row is None or (row.reviewer, row.decision) != (reviewer, "register"):
        raise SignatureRefused("nonce_invalid", "this registration's challenge is not one "
                               "signoff gave you: open the keys page again")
    if row.used_at is not None or now > row.issued_at + st.NONCE_TTL_S:
        raise SignatureRefused("nonce_expired", "this registration's challenge is used or "
                               "older than 5 minutes: try again")
    try:
        verified = verify_registration_response(
            credential=credential, expected_challenge=st.unb64url(nonce, "challenge"),
            expected_origin=origin, expected_rp_id=urlsplit(origin).hostname or "",
            require_user_verification=True)
    except (InvalidRegistrationResponse, ValueError, KeyError, TypeError) as exc:
        raise SignatureRefused("bad_signature", f"the passkey did not register: {exc}") from None
    with db.atomic():
        if not nonces.spend(nonce, now):
            raise SignatureRefused("nonce_used", "this registration was completed already")
        return _store(rt, reviewer, "webauthn", verified.credential_public_key,
                      (st.b64url(verified.credential_id), verified.sign_count),
                      Actor.of(reviewer, "page"))


def _registration_nonce(credential):
    """The challenge a registration answers (from its client data), or ``nonce_invalid``."""
    try:
        raw = credential["response"]["clientDataJSON"]
        return json.loads(st.unb64url(raw, "clientDataJSON"))["challenge"]
    except (TypeError, KeyError, ValueError, Refused):
        raise SignatureRefused("nonce_invalid", "not a passkey registration") from None


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
             "fingerprint": k.fingerprint, "credential_id": k.credential_id,
             "created_at": k.created_at} for k in query]


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

