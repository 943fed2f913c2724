"""Canonical JSON and the digests built on it (the words in docs/concepts.md)."""

import hashlib

from .jsontext import encoder

# One encoder for every call (rules/jsontext.py): two to five values an event a step.
_ENCODE = encoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def canonical(value):
    """Serialise ``value`` the one way every digest in signoff uses."""
    return _ENCODE(value)


def digest(value):
    """sha256 hex of the canonical JSON of ``value``.

    A lone surrogate (which hosts may send) is encoded as its surrogate code
    unit, so every value has a digest and no batch fails on one.
    """
    return hashlib.sha256(canonical(value).encode("utf-8", "surrogatepass")).hexdigest()


def task_key(monitor_id, grant_digest, record_id, version):
    """The key of the task for one monitor, grant, record and record version."""
    return digest([monitor_id, grant_digest, record_id, version])
