"""Time as signoff sees it: one object, so tests can move it instead of sleeping."""

import time


class Clock:
    """Wall-clock seconds since the epoch (UTC), as a float."""

    def now(self):
        return time.time()

    def sleep(self, seconds):
        time.sleep(seconds)


class FakeClock(Clock):
    """A clock that only moves when told to; for tests and simulations."""

    def __init__(self, start=1_000_000.0):
        self.t = float(start)

    def now(self):
        return self.t

    def sleep(self, seconds):
        self.t += seconds

    def advance(self, seconds):
        self.t += seconds
        return self.t
