"""Webhook signing secrets of monitors: add, list, remove, and the current set.

A secret is shown once, by ``add``; listings give only ids and times, and the
audit log says that a secret was added or removed, never which bytes. A
removed secret's row stays with the secret erased, so its id is never given
again: SQLite would give a new row the largest id left plus one.
"""

import base64
import binascii
import os

from ..errors import Refused
from ..rules.names import Actor
from ..state.history import audit
from ..models import Monitor, WebhookSecret, db

PREFIX = "whsec_"
MIN_BYTES, MAX_BYTES = 24, 64
GENERATED_BYTES = 32
REMOVED = ""  # what a removed secret's row holds instead of the secret


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


def _monitor(monitor_id):
    if Monitor.get_or_none(Monitor.id == monitor_id) is None:
        raise Refused("unknown_monitor", f"no monitor {monitor_id!r}")


def add(rt, monitor_id, secret=None, by=None, channel="cli"):
    """Add a secret to a monitor (a new one when ``secret`` is None); the only time it is shown."""
    actor = Actor.of(by, channel)
    secret = check_secret(secret) if secret is not None else generate()
    now = rt.clock.now()
    with db.atomic():
        _monitor(monitor_id)
        row = WebhookSecret.create(monitor=monitor_id, secret=secret, created_at=now)
        audit(now, "secret_added", monitor_id, subject=str(row.id), **actor.audit)
    return {"monitor": monitor_id, "secret_id": row.id, "secret": secret}


def listing(monitor_id):
    """The monitor's secrets as ``{secret_id, created_at}`` rows, never the secret."""
    _monitor(monitor_id)
    return [{"secret_id": s.id, "created_at": s.created_at}
            for s in WebhookSecret.select(WebhookSecret.id, WebhookSecret.created_at)
            .where(WebhookSecret.monitor == monitor_id, WebhookSecret.secret != REMOVED)
            .order_by(WebhookSecret.id)]


def remove(rt, monitor_id, secret_id, by=None, channel="cli"):
    """Remove one secret; requests signed only with it fail from the next one on."""
    actor = Actor.of(by, channel)
    now = rt.clock.now()
    with db.atomic():
        _monitor(monitor_id)
        gone = WebhookSecret.update(secret=REMOVED).where(
            WebhookSecret.monitor == monitor_id, WebhookSecret.id == secret_id,
            WebhookSecret.secret != REMOVED).execute()
        if not gone:
            raise Refused("unknown_secret", f"monitor {monitor_id!r} has no secret {secret_id}")
        audit(now, "secret_removed", monitor_id, subject=str(secret_id), **actor.audit)
    return {"monitor": monitor_id, "secret_id": secret_id, "removed": True}


def current(monitor_id):
    """``(monitor exists, [secrets])`` in one query: what a webhook request is checked with.

    Runs on every webhook request, so the SQL is written once instead of being
    built by the query builder each time (which cost ten times the query).
    """
    rows = db.execute_sql(_current_sql(), (monitor_id,)).fetchall()
    return bool(rows), [secret for _, secret in rows if secret is not None]


_SQL = {}


def _current_sql():
    param = db.param
    if param not in _SQL:
        m, s = Monitor._meta, WebhookSecret._meta
        _SQL[param] = (
            f'SELECT m."{m.fields["id"].column_name}", s."{s.fields["secret"].column_name}" '
            f'FROM "{m.table_name}" AS m LEFT OUTER JOIN "{s.table_name}" AS s '
            f'ON s."{s.fields["monitor"].column_name}" = m."{m.fields["id"].column_name}" '
            f'AND s."{s.fields["secret"].column_name}" <> \'{REMOVED}\' '
            f'WHERE m."{m.fields["id"].column_name}" = {param} '
            f'ORDER BY s."{s.fields["id"].column_name}"')
    return _SQL[param]


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
