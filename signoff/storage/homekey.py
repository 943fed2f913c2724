"""The home's Ed25519 key: made by ``signoff init``, it signs the audit's checkpoints.

A PEM PKCS#8 file, mode 600, at ``[audit] home_key`` (default
``<home>/home_key.pem``); a later ``init`` keeps it. Its public part names the
home (``home_id``) in every signed statement and checkpoint, and is what
``signoff audit verify --home-key`` is given.
"""

import hashlib
import os
from pathlib import Path

from ..config import PRIVATE_FILE, Config, load_config
from ..errors import ConfigError

KEY_NAME = "home_key.pem"


def key_path(home):
    """Where the key of ``home`` (a ``Config``, or a home folder) lives: the config's
    ``[audit] home_key``, by default ``home_key.pem`` in the home."""
    config = home if isinstance(home, Config) else load_config(Path(home))
    return config.home_key_path or config.home / KEY_NAME


def load_home_key(home):
    """The private key of ``home``; ``ConfigError`` (``home_key``) when it is missing or unreadable."""
    path = key_path(home)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError("home_key", f"{path}: cannot be read ({exc.strerror or exc}): "
                          "run `signoff init` to make the home's key") from None
    # cryptography is imported where a key is used: most commands never touch one.
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigError("home_key", f"{path}: not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError("home_key", f"{path}: not an Ed25519 key")
    return key


def create_home_key(home):
    """Make the key of ``home`` unless it exists (then it is loaded and kept); returns it.

    Written whole to a file of its own, then linked into place: a crash leaves no
    half key, and of two ``init`` at once the first link wins and both keep it.
    """
    path = key_path(home)
    if path.exists():
        return load_home_key(home)
    # cryptography is imported where a key is used: most commands never touch one.
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fresh = path.with_name(f".{path.name}.{os.getpid()}.new")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
            out.flush()
            os.fsync(out.fileno())
        os.link(fresh, path)
    except FileExistsError:
        return load_home_key(home)
    finally:
        fresh.unlink(missing_ok=True)
    return key


def public_raw(key):
    """The 32 raw bytes of the public part of ``key`` (a private or a public Ed25519 key)."""
    from cryptography.hazmat.primitives import serialization  # loaded with the key's class
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def home_id(public_key):
    """The home's id in statements: the first 32 hex characters of SHA-256 of the raw key."""
    return hashlib.sha256(public_raw(public_key)).hexdigest()[:32]


def fingerprint(public_key):
    """``SHA256:<hex>`` of the raw public key, as ``signoff audit key`` prints it."""
    return "SHA256:" + hashlib.sha256(public_raw(public_key)).hexdigest()
