"""Failed authentication: held back per client address and per (client, name), counted, logged.

A login that failed counts for its client address and for the pair of that
address and the name typed; a bearer token of the JSON API that failed counts
for its address. After ``failures`` failures of one pair within ``window_s``
seconds (``[serve] login_failures``, 5, and ``login_window_s``, 60), or
``client_failures`` of one address (``login_client_failures``, 20), further
attempts of that pair, or from that address, answer 429 with ``Retry-After``
until the oldest of those failures is ``window_s`` old; their token is not even
checked. A success resets no count (failures age out), so one client's success
never frees another's.

No count is kept per name alone: wrong tokens sent from elsewhere never lock a
reviewer out. And a pair is counted whatever the name, a reviewer's or not, so
how the throttle answers never tells which names exist. The name is kept only
as a digest (a token typed into the name field is never held).

The throttle lives in the memory of one ``signoff serve`` process: a throttled
request costs nothing on the database the workers share, however many arrive.
Several servers in front of one home each allow their own ``failures``, and a
restart forgets. At most ``MAX_KEYS`` keys are kept, the least recently failed
dropped first, so memory stays bounded whatever clients send.

Counts since the process started are ``signoff_logins_total{outcome}`` (ok,
failed, throttled). Each failed login and each start of a throttle is one
warning line; a throttled request is counted, not logged.
"""

import hashlib
import logging
import math
import threading
import time
from collections import OrderedDict, deque

from prometheus_client.core import CounterMetricFamily

MAX_KEYS = 10_000
OUTCOMES = ("ok", "failed", "throttled")

log = logging.getLogger("signoff.serve.logins")


class Logins:
    """The throttle of failed authentication, and the counts, of one ``signoff serve``
    (thread-safe)."""

    def __init__(self, failures=5, window_s=60.0, client_failures=20, clock=time.monotonic):
        self.failures, self.client_failures = failures, client_failures
        self.window_s, self.clock = window_s, clock
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self._failed = OrderedDict()  # ("client", address) | ("pair", address, digest) -> times
        self._lock = threading.Lock()

    def wait_s(self, client, name=None):
        """Seconds before ``client`` may try again, for ``name`` if one is given (0: now).

        An attempt that must wait is counted as throttled.
        """
        now = self.clock()
        with self._lock:
            wait = max(self._wait(key, now) for key in _keys(client, name))
            if wait:
                self.counts["throttled"] += 1
        return math.ceil(wait)

    def succeeded(self):
        """Count a login that opened a session."""
        with self._lock:
            self.counts["ok"] += 1

    def failed(self, client, name=None, reviewer=None):
        """Count and log a failure of ``client`` (for ``name``, as typed, if any);
        ``reviewer`` is the name for the log line, given only when it is a reviewer's."""
        now = self.clock()
        started = []
        with self._lock:
            self.counts["failed"] += 1
            for key in _keys(client, name):
                times = self._failed.pop(key, None) or deque()
                times.append(now)
                self._failed[key] = times  # the most recent failure last
                if len(times) == self._limit(key):
                    started.append(key)
            while len(self._failed) > MAX_KEYS:
                self._failed.popitem(last=False)
        log.warning("login_failed client=%s reviewer=%s", client, reviewer or "-")
        for key in started:
            held = f"client={client}" + (f" reviewer={reviewer or '-'}" if key[0] == "pair" else "")
            log.warning("login_throttled %s for %.0fs after %d failed logins", held,
                        self.window_s, self._limit(key))

    def _limit(self, key):
        return self.client_failures if key[0] == "client" else self.failures

    def _wait(self, key, now):
        times = self._failed.get(key)
        if times is None:
            return 0.0
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failed[key]
            return 0.0
        return times[0] + self.window_s - now if len(times) >= self._limit(key) else 0.0

    def describe(self):
        """Nothing up front (a custom collector)."""
        return []

    def collect(self):
        """``signoff_logins_total{outcome}`` since this process started."""
        family = CounterMetricFamily("signoff_logins", "Logins to the review pages by this "
                                     "serve process, by outcome.", labels=["outcome"])
        with self._lock:
            for outcome in OUTCOMES:
                family.add_metric([outcome], self.counts[outcome])
        yield family


def _keys(client, name):
    keys = [("client", client)]
    if name is not None:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
        keys.append(("pair", client, digest))
    return keys
