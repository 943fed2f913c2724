"""Checking a signed decision (docs/concepts.md, "Signed approvals").

On a monitor bound with ``--signed-approvals`` only a decision carrying a valid
signature of its reviewer counts: an Ed25519 signature of the statement's
canonical text by one of the reviewer's keys, or a passkey's WebAuthn
assertion (``webauthn``, user verification required) whose challenge is the
statement's. ``check`` runs in the transaction that records the decision, and
``spend`` spends the nonce there once the decision counted: a refused attempt
records nothing and keeps its nonce.
"""

from dataclasses import dataclass
from urllib.parse import urlsplit


from ..errors import SignatureRefused
from ..rules import statements as st
from ..state import nonces
from ..storage.homekey import home_id, key_path, load_home_key
from ..models import ReviewerKey

WEBAUTHN_FIELDS = ("credential_id", "authenticator_data", "client_data_json", "signature")


@dataclass(frozen=True)
class Proof:
    """A signed decision as a request carries it.

    ``statement`` as given (the object, or its canonical text); ``expect``: what
    the request does (approve, reject or edit); an Ed25519 ``signature`` with its
    ``key_id``, or ``webauthn`` (the assertion's fields, base64url) made at
    ``origin`` (the review page's, which the assertion names).
    """

    statement: object
    expect: str
    signature: str | None = None
    key_id: str | None = None
    webauthn: dict | None = None
    origin: str | None = None


@dataclass(frozen=True)
class Checked:
    """A proof that holds: its nonce, what the decision's row keeps, what its audit row carries."""

    nonce: str
    text: str
    signature: dict
    digest: str
    key_id: str
    sign_count: int | None = None

    @property
    def data(self):
        """The audit row's proof: ``{digest, statement, signature, key_id}`` or
        ``{digest, statement, webauthn}``."""
        return {"digest": self.digest, "statement": self.text, **self.signature}


# Home ids by key file and its modification time: reading and parsing the PEM
# file cost a third of a millisecond, twice per signed decision.
_HOME_IDS = {}


def home_of(rt):
    """The home's id, as statements name it."""
    path = key_path(rt.config)
    try:
        seen = (str(path), path.stat().st_mtime_ns)
    except OSError:  # load_home_key says what is wrong with it
        return home_id(load_home_key(rt.config).public_key())
    if seen not in _HOME_IDS:
        _HOME_IDS[seen] = home_id(load_home_key(rt.config).public_key())
    return _HOME_IDS[seen]


def required(monitor, proof):
    """Refuse (``signature_required``) an unsigned decision on a monitor that asks for
    signatures."""
    if proof is None and monitor is not None and monitor.signed_approvals:
        raise SignatureRefused("signature_required", f"monitor {monitor.id!r} counts only "
                               "signed decisions: sign the task's statement with one of "
                               "your keys (`signoff approve --sign-with`, the API, a passkey)")


def check(rt, proof, task, reviewer, digest, now):
    """The ``Checked`` proof of ``reviewer``'s decision on ``task`` at ``digest``, or a
    ``SignatureRefused`` naming what does not hold. Run in the decision's transaction."""
    value = st.parse_statement(proof.statement)
    expected = {"home": home_of(rt), "monitor": task.monitor, "task": task.key, "digest": digest,
                "reviewer": reviewer, "decision": proof.expect}
    wrong = [name for name, want in expected.items() if value[name] != want]
    if wrong:
        raise SignatureRefused("statement_mismatch", f"the statement's {wrong[0]} is not this "
                               "decision's: fetch the task's statement again")
    text = st.canonical_text(value)
    key, signature, count = _verified(proof, text, reviewer)
    _check_nonce(value, reviewer, now)
    return Checked(value["nonce"], text, signature, digest, key.key_id, count)


def _verified(proof, text, reviewer):
    """``(key, what the row keeps of the signature, passkey counter)`` once it verifies."""
    if proof.webauthn is not None:
        return _verified_passkey(proof, text, reviewer)
    key = None
    if isinstance(proof.key_id, str):
        key = ReviewerKey.get_or_none(ReviewerKey.key_id == proof.key_id,
                                      ReviewerKey.kind == "ed25519", ReviewerKey.reviewer == reviewer)
    if key is None:
        raise SignatureRefused("unknown_key", f"reviewer {reviewer!r} holds no key "
                               f"{proof.key_id!r} (`signoff reviewer key list`)")
    if not st.ed25519_holds(st.unb64url(key.public_key, "key"), proof.signature, text):
        raise SignatureRefused("bad_signature", "the signature is not the key's signature "
                               "of the statement's canonical text")
    return key, {"signature": proof.signature, "key_id": key.key_id}, None


def _verified_passkey(proof, text, reviewer):
    given = proof.webauthn
    if not isinstance(given, dict) or sorted(given) != sorted(WEBAUTHN_FIELDS) or not all(
            isinstance(given[f], str) for f in WEBAUTHN_FIELDS):
        raise SignatureRefused("bad_signature",
                               f"webauthn: an object of {', '.join(WEBAUTHN_FIELDS)}")
    key = ReviewerKey.get_or_none(ReviewerKey.credential_id == given["credential_id"],
                                  ReviewerKey.reviewer == reviewer)
    if key is None:
        raise SignatureRefused("unknown_key", f"reviewer {reviewer!r} holds no passkey "
                               "with this credential id")
    # webauthn takes a tenth of a second to import: only a passkey's check loads it.
    from webauthn import verify_authentication_response
    from webauthn.helpers.exceptions import InvalidAuthenticationResponse
    credential = {"id": given["credential_id"], "rawId": given["credential_id"],
                  "type": "public-key",
                  "response": {"authenticatorData": given["authenticator_data"],
                               "clientDataJSON": given["client_data_json"],
                               "signature": given["signature"]}}
    try:
        verified = verify_authentication_response(
            credential=credential, expected_challenge=st.unb64url(st.challenge(text), "challenge"),
            expected_rp_id=rp_id_of(proof.origin), expected_origin=proof.origin or "",
            credential_public_key=st.unb64url(key.public_key, "key"),
            credential_current_sign_count=key.sign_count, require_user_verification=True)
    except (InvalidAuthenticationResponse, ValueError, KeyError, TypeError) as exc:
        raise SignatureRefused("bad_signature",
                               f"the passkey's assertion does not hold: {exc}") from None
    return key, {"webauthn": dict(given)}, verified.new_sign_count


def rp_id_of(origin):
    """The WebAuthn relying party id of a page origin: its host name."""
    return urlsplit(origin or "").hostname or ""


def _check_nonce(value, reviewer, now):
    row = nonces.find(value["nonce"])
    minted_for = (reviewer, value["decision"], value["task"], value["digest"], value["at"])
    if row is None or (row.reviewer, row.decision, row.task_key, row.digest,
                       int(row.issued_at)) != minted_for:
        raise SignatureRefused("nonce_invalid", "the statement's nonce is not one signoff "
                               "minted for this decision: fetch the statement again")
    if row.used_at is not None:
        raise SignatureRefused("nonce_used", "this statement counted already: each counts once")
    if now > row.issued_at + st.NONCE_TTL_S:
        raise SignatureRefused("nonce_expired", f"the statement is older than "
                               f"{st.NONCE_TTL_S:g} s: fetch a new one and sign it")


def spend(checked, now):
    """Spend the nonce of a decision that counted, in its transaction (``nonce_used``
    if another decision spent it first: the caller's transaction rolls back)."""
    if not nonces.spend(checked.nonce, now):
        raise SignatureRefused("nonce_used", "this statement counted already: each counts once")
    if checked.sign_count is not None:
        nonces.count_signature(checked.key_id, checked.sign_count)
