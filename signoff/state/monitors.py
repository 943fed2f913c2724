"""A monitor's life: bound active, paused and unpaused, cancelled for good.

A monitor has no status column: ``active`` and ``paused_at`` say where it is,
and these are the only writes of them. A cancelled monitor is never active or
paused again; a cancel ends its pause (and keeps it as the last one, which the
gate reads to judge the events that waited through it).
"""

from ..models import Monitor


def new_monitor(monitor_id, now, **fields):
    """Write a new active monitor (the caller refused an existing id in its transaction)."""
    return Monitor.create(id=monitor_id, active=True, created_at=now, **fields)


def end_monitor(monitor_id, now):
    """Cancel an active monitor and end its pause, in the caller's transaction; True if
    this call ended it."""
    ended = Monitor.update(active=False, cancelled_at=now).where(
        Monitor.id == monitor_id, Monitor.active == True).execute()  # noqa: E712
    end_pause(monitor_id, now)
    return bool(ended)


def start_pause(monitor_id, now):
    """Pause an active, unpaused monitor; True if this call paused it (a cancel that
    committed since the caller's read leaves it as it is)."""
    return bool(Monitor.update(paused_at=now).where(
        Monitor.id == monitor_id, Monitor.paused_at.is_null(),
        Monitor.active == True).execute())  # noqa: E712


def end_pause(monitor_id, now):
    """End the monitor's pause, if it has one, in the caller's transaction; True if
    this call ended it. The pause ended is kept as the last one (the gate reads it)."""
    paused_at = Monitor.select(Monitor.paused_at).where(Monitor.id == monitor_id).scalar()
    return paused_at is not None and bool(Monitor.update(
        paused_at=None, last_pause_from=paused_at, last_pause_until=now).where(
        Monitor.id == monitor_id, Monitor.paused_at == paused_at).execute())


def set_signed_approvals(monitor_id, signed):
    """Ask for signed decisions on the monitor, or stop asking; True if this changed it."""
    return bool(Monitor.update(signed_approvals=bool(signed)).where(
        Monitor.id == monitor_id, Monitor.signed_approvals != bool(signed)).execute())
