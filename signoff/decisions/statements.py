"""Statements to sign: minted for a reviewer's decision, and signed on the command line.

``mint`` answers ``{statement, canonical, challenge}`` for one decision of one
reviewer (a new nonce each call); ``sign_and_decide`` is ``approve`` / ``reject
--sign-with``: the statement minted, signed with the reviewer's Ed25519 key
file and decided as that reviewer (the key proves who they are).
"""

from ..errors import Refused, SignatureRefused
from ..rules import statements as st
from ..rules.canonical import digest as digest_of
from ..state import nonces
from ..state.statuses import TaskStatus as T
from ..views.lookup import get_task
from ..models import ReviewerKey, ReviewerMonitor, db
from ..admin import reviewers
from . import approval, signing


def mint(rt, key, reviewer, decision="approve", edit=None, monitors=None):
    """``{statement, canonical, challenge}`` for ``reviewer``'s ``decision`` on ready task ``key``.

    For ``edit`` the statement's digest is the edited result's (``edit``: the
    draft's new text). The nonce is valid five minutes by signoff's clock.
    """
    if decision not in st.DECISIONS:
        raise Refused("invalid_body", f"decision: one of {', '.join(st.DECISIONS)}")
    if (decision == "edit") != (edit is not None):
        raise Refused("invalid_body", "edit: the edited draft, given with decision=edit alone")
    task = get_task(key, monitors)
    if task.status != T.READY:
        raise Refused("not_ready", f"task is {task.status}, not ready")
    digest = task.digest
    if edit is not None:
        text = approval.check_edit(edit, rt.config.max_record_bytes)
        digest = digest_of(dict(task.result, draft=text))
    now = rt.clock.now()
    with db.atomic():
        nonce = nonces.mint(reviewer, decision, now, task.key, digest)
    value = st.statement(signing.home_of(rt), task.monitor, task.key, digest, reviewer, decision,
                         now, nonce)
    text = st.canonical_text(value)
    return {"statement": value, "canonical": text, "challenge": st.challenge(text)}


def read_private_key(data):
    """An unencrypted PKCS#8 PEM Ed25519 private key (``openssl genpkey -algorithm ed25519``)."""
    # cryptography is imported where a key is used: most commands never touch one.
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise Refused("invalid_key", "not an unencrypted PEM private key (PKCS#8, as `openssl "
                      "genpkey -algorithm ed25519` writes)") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise Refused("invalid_key", "not an Ed25519 private key")
    return key


def sign_and_decide(rt, key, digest, private_pem, name, decision="approve", reason=None):
    """Approve (or reject) task ``key`` as reviewer ``name``, signed with ``private_pem``.

    The key's public half must be one of ``name``'s keys (``unknown_key``); the
    decision then counts as ``name``'s, within the reviewer's monitors.
    """
    private = read_private_key(private_pem)
    raw = st.raw_of(private.public_key())
    held = ReviewerKey.get_or_none(ReviewerKey.key_id == st.key_id_of(raw),
                                   ReviewerKey.kind == "ed25519")
    reviewer = reviewers.find(name)
    if held is None or reviewer is None or held.reviewer != reviewer.name:
        raise SignatureRefused("unknown_key", f"this key is not one of reviewer {name!r}'s "
                               "(`signoff reviewer key list`)")
    name = reviewer.name
    limits = [m for (m,) in ReviewerMonitor.select(ReviewerMonitor.monitor)
              .where(ReviewerMonitor.reviewer == name).tuples()]
    monitors = frozenset(limits) if limits else None
    minted = mint(rt, key, name, decision, monitors=monitors)
    if minted["statement"]["digest"] != digest:
        raise Refused("digest_mismatch", "the digest does not match the task's result")
    signature = st.b64url(private.sign(minted["canonical"].encode("utf-8")))
    proof = signing.Proof(minted["statement"], decision, signature, held.key_id)
    if decision == "reject":
        return approval.reject(rt, key, reason, name, "cli", digest, monitors, proof)
    return approval.approve(rt, key, digest, name, "cli", monitors=monitors, proof=proof)
