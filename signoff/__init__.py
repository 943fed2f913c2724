"""signoff: a durable background worker for human-approved, exactly-once actions."""

from .app import Signoff
from .errors import Blocked, Refused, SignoffError

__all__ = ["Signoff", "Blocked", "Refused", "SignoffError"]
