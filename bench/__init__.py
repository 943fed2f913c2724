"""Benchmarks of signoff against plain Huey on this machine; not part of the package.

``python -m bench --help`` from the repository's root. Each run measures its
baseline in the same run, so every figure comes with the ratio that matters.
"""

import functools


def reads(function):
    """``function(rt, ...)`` run against ``rt``'s database: bench code fills and
    reads rows directly, where signoff's own code goes through a ``Signoff``."""
    @functools.wraps(function)
    def call(rt, *args, **kwargs):
        from signoff import storage
        with storage.bind(rt.database):
            return function(rt, *args, **kwargs)
    return call
