"""The gate: does the standing permission still hold? (ingest's second check, docs/concepts.md)."""

from .canonical import digest

INGEST_ACTIONS = ("read", "draft")
SUBMIT_ACTIONS = ("read", "draft", "submit_review")


class GrantRead:
    """One read of the host's grant context, gated against for many rows.

    A batch checks every row's monitor against the context it read once; its
    digest (canonical JSON, then sha256) is made the first time a gate needs it,
    not once a row.
    """

    __slots__ = ("context", "_digest")

    def __init__(self, context):
        self.context, self._digest = context, None

    def digest(self):
        """``digest(context)``, computed once."""
        if self._digest is None:
            self._digest = digest(self.context)
        return self._digest


def gate(monitor, context, now, needs=INGEST_ACTIONS):
    """Return the refusal code, or ``None`` when the monitor may act now.

    ``context`` is the host's *current* grant context, or a ``GrantRead`` of it;
    ``monitor`` may be ``None``.
    """
    read = context if isinstance(context, GrantRead) else GrantRead(context)
    if monitor is None or not monitor.active:
        return "cancelled"
    if now >= monitor.expires_at:
        return "expired"
    if read.digest() != monitor.grant_digest:
        return "scope_changed"
    context = read.context
    actions = context.get("actions") if isinstance(context, dict) else None
    if not isinstance(actions, list) or not set(needs) <= set(actions):
        return "action"
    return None


def held_s(monitor, accepted_at):
    """Seconds a delivery accepted at ``accepted_at`` waited through its monitor's last pause.

    A pause holds events back without ending the monitor, so that wait is not
    the event's age: freshness is judged that much earlier (no stale events,
    no observation gap, for a pause).
    """
    start = getattr(monitor, "last_pause_from", None)
    until = getattr(monitor, "last_pause_until", None)
    if start is None or until is None:
        return 0.0
    return max(0.0, until - max(accepted_at, start))
