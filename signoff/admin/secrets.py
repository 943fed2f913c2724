"""Webhook signing secrets of monitors: add, list, remove, and the current set.

A secret is shown once, by ``add``; listings give only ids and times, and the
audit log says that a secret was added or removed, never which bytes. A
removed secret's row stays with the secret erased, so its id is never given
again: SQLite would give a new row the largest id left plus one.
"""

from ..errors import Refused
from ..rules.names import Actor
from ..rules.signatures import check_secret, generate
from ..state.history import audit
from ..models import Monitor, WebhookSecret, db

REMOVED = ""  # what a removed secret's row holds instead of the secret


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
