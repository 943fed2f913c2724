"""The worker loop's watchdog: a worker whose own loop stops coming round exits.

Every wait of the loop is bounded (``storage.net``, the hosts' and drafters'
timeouts), so the loop comes round every second or so, and within seconds of
a network that heals. Liveness must not rest on those bounds alone: a wait
nobody bounded (a driver's, a plug-in's, a kernel that never reports a dead
socket) would leave a process that keeps its pid, so no supervisor restarts
it, while its heartbeat ages, its reaper and chores stop and its leases pass
to other workers. The watchdog is a thread of its own that the loop feeds
each time round; once it has gone unfed for its limit, it calls ``expire``,
which ends the process with a failure status for its supervisor to restart.
"""

import threading
import time

LIMIT_LEASES = 4  # the default limit, in leases: a pass may renew and wait on a lease or two
LIMIT_FLOOR_S = 60.0  # and never less: a pass during an outage waits out several bounds


def default_limit(lease_ttl_s):
    """How long the loop may go unfed when ``[worker] watchdog_s`` is not set."""
    return max(LIMIT_LEASES * lease_ttl_s, LIMIT_FLOOR_S)


class Watchdog:
    """Calls ``expire(silent_s)`` once, from its own thread, when ``feed`` has not been
    called for ``limit_s`` seconds; ``stop`` ends the watch."""

    def __init__(self, limit_s, expire):
        self.limit_s = float(limit_s)
        self.expire = expire
        self._fed = time.monotonic()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="signoff-watchdog",
                                        daemon=True)

    def start(self):
        """Start watching; the limit counts from now."""
        self.feed()
        self._thread.start()
        return self

    def feed(self):
        """Say the loop came round."""
        self._fed = time.monotonic()

    def silent_s(self):
        """Seconds since the loop last came round."""
        return time.monotonic() - self._fed

    def stop(self):
        """End the watch (a loop that stops on purpose is not a silent one)."""
        self._stopped.set()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _watch(self):
        # Looked at several times per limit, so it fires at most a quarter late.
        while not self._stopped.wait(min(1.0, self.limit_s / 4)):
            silent = self.silent_s()
            if silent > self.limit_s:
                self.expire(silent)
                return
