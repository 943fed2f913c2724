"""The home key: the Ed25519 key a home signs with (docs/concepts.md, "Signed approvals").

Made by ``signoff init`` and kept by every later ``init``; a PKCS#8 PEM file
only its owner may read (mode 600), at ``<home>/home_key.pem`` unless ``[audit]
home_key`` names another path. Its public half names the home: a signed
statement carries ``home_id`` so a signature given to one home never counts in
another.
"""

import hashlib
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..config import PRIVATE_FILE, Config
from ..errors import ConfigError

KEY_NAME = "home_key.pem"


def key_path(home):
    """Where the home key of ``home`` (a ``Config``, or a home folder) lives."""
    if isinstance(home, Config):
        return home.home_key_path or home.home / KEY_NAME
    return Path(home) / KEY_NAME


def load_home_key(home):
    """The home's private key; ``bad_config`` when it is missing or not an Ed25519 PEM key."""
    path = key_path(home)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("bad_config", f"no home key at {path}: run `signoff init`") from None
    except OSError as exc:
        raise ConfigError("bad_config", f"{path}: cannot be read: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError("bad_config",
                          f"{path}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError("bad_config", f"{path}: not an Ed25519 key")
    return key


def create_home_key(home):
    """The home's key, made now (mode 600) unless one exists: an existing key is kept."""
    path = key_path(home)
    if path.exists():
        return load_home_key(home)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    # Written aside, then linked into place: two inits at once make one key (the
    # second reads the first's), and no reader ever sees half a file.
    spare = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        os.link(spare, path)
    except FileExistsError:
        return load_home_key(home)
    finally:
        spare.unlink(missing_ok=True)
    return key


def public_raw(key):
    """The 32 raw bytes of the public half of ``key`` (a private or a public Ed25519 key)."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def home_id(public_key):
    """The home's id: the first 32 hex characters of SHA-256 of its raw public key."""
    return hashlib.sha256(public_raw(public_key)).hexdigest()[:32]


def fingerprint(public_key):
    """``SHA256:<hex>`` of the raw public key, as ``audit key`` prints it."""
    return "SHA256:" + hashlib.sha256(public_raw(public_key)).hexdigest()
