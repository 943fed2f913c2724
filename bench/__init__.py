"""Benchmarks of signoff against plain Huey on this machine; not part of the package.

``python -m bench --help`` from the repository's root. Each run measures its
baseline in the same run, so every figure comes with the ratio that matters.
"""

import functools
import os
import time


def reads(function):
    """``function(rt, ...)`` run against ``rt``'s database: bench code fills and
    reads rows directly, where signoff's own code goes through a ``Signoff``."""
    @functools.wraps(function)
    def call(rt, *args, **kwargs):
        from signoff import storage
        with storage.bind(rt.database):
            return function(rt, *args, **kwargs)
    return call


def cpu_s(pid=None):
    """User and system CPU seconds of process ``pid`` so far, every thread counted
    (this process when ``None``; Linux for another), or ``None`` if unreadable."""
    if pid is None:
        # process_time() counts nanoseconds where os.times() counts clock ticks
        # (10 ms): a few calls' CPU would read as nothing.
        return time.process_time()
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_ticks():
    """``(all, idle)`` clock ticks of every core so far (Linux's ``/proc/stat``), or
    ``None`` if unreadable: what share of the machine a stretch of time kept busy."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(t) for t in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(ticks), ticks[3] + ticks[4]  # idle and waiting for the disk


def busy_share(before, after):
    """The share of every core's time between two ``machine_ticks`` readings spent
    busy; ``None`` if either is missing."""
    if before is None or after is None or after[0] == before[0]:
        return None
    return 1 - (after[1] - before[1]) / (after[0] - before[0])
