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
