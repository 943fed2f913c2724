"""Standard Webhooks secrets and signatures, as pure functions.

A secret is ``whsec_`` and the base64 of 24 to 64 random bytes; a request is
signed by one of a monitor's secrets when its ``webhook-*`` headers verify under
it (``standardwebhooks``, the maintained implementation). Where secrets are kept
is ``admin/secrets``'s.
"""

import base64
import binascii
import os

from ..errors import Refused

PREFIX = "whsec_"
MIN_BYTES, MAX_BYTES = 24, 64
GENERATED_BYTES = 32


def generate():
    """A new secret: ``whsec_`` and the base64 of 32 random bytes."""
    return PREFIX + base64.b64encode(os.urandom(GENERATED_BYTES)).decode("ascii")


def check_secret(secret):
    """Refuse (``invalid_secret``) anything but ``whsec_`` + base64 of 24-64 bytes."""
    if not isinstance(secret, str) or not secret.startswith(PREFIX):
        raise Refused("invalid_secret", "a secret looks like whsec_<base64>")
    try:
        key = base64.b64decode(secret[len(PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise Refused("invalid_secret", "the part after whsec_ is not base64") from None
    if not MIN_BYTES <= len(key) <= MAX_BYTES:
        raise Refused("invalid_secret", f"the key must be {MIN_BYTES}-{MAX_BYTES} bytes, not {len(key)}")
    return secret


SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


def signed_by_one_of(text, headers, monitor_secrets):
    """True when the Standard Webhooks signature verifies under any of the secrets."""
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError
    given = {k: headers[k] for k in SIGNATURE_HEADERS if k in headers}
    for secret in monitor_secrets:
        try:
            Webhook(secret).verify(text, given, json_parse=False)
            return True
        except (WebhookVerificationError, ValueError):
            # ValueError: a malformed signature list or base64 (the library
            # raises it as it parses); it verifies nothing either way.
            continue
    return False
