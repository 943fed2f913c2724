"""Signed statements: what a reviewer signs to decide, and checking a signature of one.

A statement is the RFC 8785 canonical JSON (``rfc8785``, a maintained
implementation) of ``{v, home, monitor, task, digest, reviewer, decision, at,
nonce}``; an Ed25519 key signs its UTF-8 bytes, a passkey signs a WebAuthn
assertion whose challenge is ``challenge(text)``. Reviewer public keys come
as PEM SubjectPublicKeyInfo or an OpenSSH ``ssh-ed25519`` line. Pure
functions; where keys and nonces are kept is ``admin/keys`` and ``state/nonces``.
"""

import base64
import binascii
import hashlib
import json

import rfc8785

from ..errors import Refused, SignatureRefused

VERSION = 1
DECISIONS = ("approve", "reject", "edit")
FIELDS = ("v", "home", "monitor", "task", "digest", "reviewer", "decision", "at", "nonce")
NONCE_TTL_S = 300.0
MAX_KEY_FILE = 16 * 1024


def statement(home, monitor, task, digest, reviewer, decision, at, nonce):
    """The statement object a reviewer signs (``at``: whole Unix seconds)."""
    return {"v": VERSION, "home": home, "monitor": monitor, "task": task, "digest": digest,
            "reviewer": reviewer, "decision": decision, "at": int(at), "nonce": nonce}


def canonical_text(value):
    """The RFC 8785 canonical JSON of ``value``, as text."""
    return rfc8785.dumps(value).decode("utf-8")


def challenge(text):
    """base64url (no padding) of SHA-256 of the statement's canonical text: a passkey's
    challenge."""
    return b64url(hashlib.sha256(text.encode("utf-8")).digest())


def b64url(data):
    """``data`` as base64url without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text, what):
    """The bytes of base64url ``text`` (padding optional); ``bad_signature`` naming ``what``."""
    if not isinstance(text, str) or not text.isascii():
        raise SignatureRefused("bad_signature", f"{what}: not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise SignatureRefused("bad_signature", f"{what}: not base64url") from None


def parse_statement(given):
    """The statement object of a request: the object itself, or its canonical text.

    ``statement_mismatch`` for anything that is not one with exactly the fields
    of version 1.
    """
    value = given
    if isinstance(given, str):
        try:
            value = json.loads(given)
        except ValueError:
            raise SignatureRefused("statement_mismatch", "statement: not JSON") from None
    if not (isinstance(value, dict) and sorted(value) == sorted(FIELDS)
            and all(_whole(value[name]) for name in ("v", "at"))
            and all(isinstance(value[name], str) for name in FIELDS if name not in ("v", "at"))
            and value["v"] == VERSION):
        raise SignatureRefused("statement_mismatch", "statement: an object of exactly "
                               f"{', '.join(FIELDS)} (v {VERSION}, at a whole number, the rest "
                               "text)")
    return value


def _whole(number):
    # I-JSON's range: RFC 8785 writes no other integer.
    return isinstance(number, int) and not isinstance(number, bool) and 0 <= number < 2 ** 53


def read_public_key(data):
    """An Ed25519 public key from PEM SubjectPublicKeyInfo or an OpenSSH ``ssh-ed25519``
    line; ``invalid_key`` for anything else."""
    # cryptography is imported where a key is used: most commands never touch one.
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    if not isinstance(data, bytes) or len(data) > MAX_KEY_FILE:
        raise Refused("invalid_key", f"a public key file is at most {MAX_KEY_FILE} bytes")
    text = data.strip()
    try:
        if text.startswith(b"ssh-"):
            key = serialization.load_ssh_public_key(text.splitlines()[0])
        else:
            key = serialization.load_pem_public_key(text)
    except (ValueError, UnsupportedAlgorithm):
        raise Refused("invalid_key", "not a PEM public key (SubjectPublicKeyInfo) or an "
                      "OpenSSH ssh-ed25519 line") from None
    if not isinstance(key, Ed25519PublicKey):
        raise Refused("invalid_key", "not an Ed25519 key: reviewer keys are Ed25519 "
                      "(openssl genpkey -algorithm ed25519, ssh-keygen -t ed25519)")
    return key


def raw_of(public_key):
    """The 32 raw bytes of an Ed25519 public key."""
    from cryptography.hazmat.primitives import serialization  # loaded with the key's class
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_fingerprint(data):
    """``SHA256:<hex>`` of a key's bytes (raw Ed25519, or a passkey's COSE key)."""
    return "SHA256:" + hashlib.sha256(data).hexdigest()


def key_id_of(data):
    """A key's short id: the first 16 hex characters of SHA-256 of its bytes."""
    return hashlib.sha256(data).hexdigest()[:16]


def ed25519_holds(raw_public, signature, text):
    """True when base64url ``signature`` is the key's Ed25519 signature of ``text``'s UTF-8."""
    sig = unb64url(signature, "signature")
    # cryptography is imported where a key is used: most commands never touch one.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    try:
        Ed25519PublicKey.from_public_bytes(raw_public).verify(sig, text.encode("utf-8"))
    except (InvalidSignature, ValueError):
        return False
    return True
