"""Time as signoff sees it: one object, so tests can move it instead of sleeping."""

import time


class Clock:
    """Wall-clock seconds since the epoch (UTC), as a float."""

    def now(self):
        """Seconds since the epoch."""
        return time.time()

    def sleep(self, seconds):
        """Wait ``seconds``."""
        time.sleep(seconds)

    def sync(self):
        """Set the clock again from the one it follows, if any (this one follows none)."""


# A reading of the server's clock whose round trip took longer than this says
# little about when the server read it; the offset from an earlier one is kept.
SYNC_RTT_S = 1.0


class ServerClock(Clock):
    """A database server's clock, read through this machine's: seconds since the epoch.

    Workers on several machines judge each other's leases: a lease one wrote
    is over when another's clock passes it. Each machine's own clock would
    let one running ahead take over leases that are still live, and a write
    in flight would be made twice. So every process that shares a server
    database keeps time by that server: ``sync`` reads the server's clock
    (``read``), and ``now`` is this machine's clock plus the offset found,
    within half a round trip of the server's.
    """

    def __init__(self, read):
        self.read = read
        self.offset = None  # the server's clock minus this one's, once read

    def now(self):
        """The server's time, as this machine's clock and the last offset put it."""
        return time.time() + (self.offset or 0.0)

    def sync(self):
        """Read the server's clock and keep the offset to this machine's."""
        before = time.time()
        server = self.read()
        after = time.time()
        if self.offset is None or after - before <= SYNC_RTT_S:
            self.offset = server - (before + after) / 2


class FakeClock(Clock):
    """A clock that only moves when told to; for tests and simulations."""

    def __init__(self, start=1_000_000.0):
        self.t = float(start)

    def now(self):
        """The time the clock was last moved to."""
        return self.t

    def sleep(self, seconds):
        """Move the clock instead of waiting."""
        self.t += seconds

    def advance(self, seconds):
        """Move the clock forward; returns the new time."""
        self.t += seconds
        return self.t
