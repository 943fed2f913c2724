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
