"""Retry policy as a pure function: how long to wait, or give up."""

import random

TRANSIENT = (TimeoutError, ConnectionError)


def backoff(failures, policy, rng=random.random):
    """Delay before the next try after ``failures`` failed tries (>= 1).

    Exponential from ``base_delay_s``, capped at ``max_delay_s``, with jitter in
    [50 %, 100 %] so workers that failed together do not retry together.
    """
    delay = min(policy.max_delay_s, policy.base_delay_s * 2 ** (failures - 1))
    return delay * (0.5 + 0.5 * rng())


def decide(failures, step, policy, rng=random.random):
    """Seconds to wait before retrying ``step``, or ``None`` when its budget is spent."""
    if failures >= policy.budget(step):
        return None
    return backoff(failures, policy, rng)


def failed_try(failures, step, policy, final=False, retry_after=None, rng=random.random):
    """One more failed try of ``step``: ``(failures, delay)``.

    ``failures`` (``{step: count}``) is returned with this try counted, and
    ``delay`` is the seconds before the next try, or ``None`` when the step's
    budget is spent or the failure is ``final`` (no try can succeed until its
    cause is fixed). A server that said when to come back (``retry_after``, a
    429's Retry-After) is never asked sooner. The one place every step counts
    a failure and decides what follows.
    """
    failures = dict(failures or {})
    failures[step] = failures.get(step, 0) + 1
    delay = None if final else decide(failures[step], step, policy, rng)
    if delay is not None and retry_after:
        delay = max(delay, retry_after)
    return failures, delay
