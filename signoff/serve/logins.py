"""Failed logins: held back per client address and per reviewer, counted, logged.

After ``failures`` failed logins within ``window_s`` seconds (``[serve]
login_failures``, 5, and ``login_window_s``, 60) from one client address, or
for one reviewer's name, further logins from that address or for that name
answer 429 with ``Retry-After`` until the oldest of those failures is
``window_s`` old; their token is not even checked. A success resets no count
(failures age out), so one client's success never frees another's.

The throttle lives in the memory of one ``signoff serve`` process: a throttled
request costs nothing on the database the workers share, however many arrive.
Several servers in front of one home each allow their own ``failures``, and a
restart forgets. Only known reviewers' names are kept (an unknown name is the
address's business), and at most ``MAX_KEYS`` keys, the least recently failed
dropped first, so memory stays bounded whatever a client sends.

Counts since the process started are ``signoff_logins_total{outcome}`` (ok,
failed, throttled). Each failed login and each start of a throttle is one
warning line; a throttled request is counted, not logged.
"""

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
    """The login throttle and counts of one ``signoff serve`` (thread-safe)."""

    def __init__(self, failures=5, window_s=60.0, clock=time.monotonic):
        self.failures, self.window_s, self.clock = failures, window_s, clock
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self._failed = OrderedDict()  # ("client" | "reviewer", value) -> deque of times
        self._lock = threading.Lock()

    def wait_s(self, reviewer_name, client):
        """Seconds before a login for ``reviewer_name`` from ``client`` may be tried (0: now).

        A login that must wait is counted as throttled.
        """
        now = self.clock()
        with self._lock:
            wait = max(self._wait(key, now) for key in _keys(reviewer_name, client))
            if wait:
                self.counts["throttled"] += 1
        return math.ceil(wait)

    def succeeded(self):
        """Count a login that opened a session."""
        with self._lock:
            self.counts["ok"] += 1

    def failed(self, reviewer, client):
        """Count and log a failed login; ``reviewer`` is the name only when it is a reviewer's."""
        now = self.clock()
        started = []
        with self._lock:
            self.counts["failed"] += 1
            for key in _keys(reviewer, client):
                times = self._failed.pop(key, None) or deque()
                times.append(now)
                self._failed[key] = times  # the most recent failure last
                if len(times) == self.failures:
                    started.append(key)
            while len(self._failed) > MAX_KEYS:
                self._failed.popitem(last=False)
        log.warning("login_failed client=%s reviewer=%s", client, reviewer or "-")
        for kind, value in started:
            log.warning("login_throttled %s=%s for %.0fs after %d failed logins", kind, value,
                        self.window_s, self.failures)

    def _wait(self, key, now):
        times = self._failed.get(key)
        if times is None:
            return 0.0
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failed[key]
            return 0.0
        return times[0] + self.window_s - now if len(times) >= self.failures else 0.0

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


def _keys(reviewer, client):
    keys = [("client", client)]
    if reviewer is not None:
        keys.append(("reviewer", reviewer))
    return keys
