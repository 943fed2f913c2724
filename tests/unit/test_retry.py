"""Counting a failed try and deciding what follows (rules/retry.py): one rule for every step."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from signoff.config import RetryPolicy
from signoff.rules.retry import backoff, failed_try

pytestmark = pytest.mark.backend_independent

POLICY = RetryPolicy(read_attempts=3, draft_attempts=2, submit_attempts=4, base_delay_s=0.5,
                     max_delay_s=30.0)


def test_a_failure_is_counted_for_its_step_alone_and_the_counts_given_are_left_as_they_are():
    given_counts = {"read": 1, "draft": 1}
    counted, delay = failed_try(given_counts, "read", POLICY, rng=lambda: 1.0)
    assert counted == {"read": 2, "draft": 1} and given_counts == {"read": 1, "draft": 1}
    assert delay == backoff(2, POLICY, rng=lambda: 1.0) == 1.0


def test_the_budget_s_last_try_gets_no_delay():
    counted, delay = failed_try({"read": 2}, "read", POLICY)
    assert counted == {"read": 3} and delay is None
    assert failed_try(None, "draft", POLICY)[1] is not None
    assert failed_try({"draft": 1}, "draft", POLICY)[1] is None


def test_a_final_failure_ends_at_once_whatever_the_budget_left():
    counted, delay = failed_try({}, "submit", POLICY, final=True)
    assert counted == {"submit": 1} and delay is None


def test_a_server_s_retry_after_is_never_undercut_and_never_revives_a_spent_budget():
    assert failed_try({}, "read", POLICY, retry_after=120.0, rng=lambda: 1.0)[1] == 120.0
    assert failed_try({}, "read", POLICY, retry_after=0.01, rng=lambda: 1.0)[1] == 0.5
    assert failed_try({"read": 2}, "read", POLICY, retry_after=5.0)[1] is None


@given(st.integers(min_value=0, max_value=50), st.floats(min_value=0, max_value=1))
def test_every_delay_is_within_the_policy_s_bounds(before, jitter):
    _, delay = failed_try({"submit": before}, "submit", POLICY, rng=lambda: jitter)
    if before + 1 >= POLICY.submit_attempts:
        assert delay is None
    else:
        assert POLICY.base_delay_s / 2 <= delay <= POLICY.max_delay_s
