"""The throttle of failed authentication (``serve/logins.py``), on a clock the test moves."""

from signoff.serve.logins import Logins


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def throttle(failures=3, client_failures=5, window_s=60.0):
    clock = Clock()
    return Logins(failures, window_s, client_failures, clock=clock), clock


def test_a_name_is_held_back_for_its_client_alone():
    logins, _ = throttle()
    for _ in range(3):
        assert logins.wait_s("10.0.0.1", "alice") == 0
        logins.failed("10.0.0.1", "alice", reviewer="alice")
    assert logins.wait_s("10.0.0.1", "alice") == 60
    assert logins.wait_s("10.0.0.1", "bob") == 0  # another name from there
    assert logins.wait_s("10.0.0.2", "alice") == 0  # the name from elsewhere


def test_names_that_are_nobodys_count_as_a_reviewers_do():
    logins, _ = throttle()
    for name in ("alice", "zed"):
        for _ in range(3):
            logins.failed("10.0.0.1", name, reviewer="alice" if name == "alice" else None)
    assert logins.wait_s("10.0.0.1", "alice") == logins.wait_s("10.0.0.1", "zed") == 60


def test_a_client_failing_for_many_names_or_tokens_is_held_back_whatever_it_sends():
    logins, _ = throttle()
    for n in range(4):
        logins.failed("10.0.0.1", f"name-{n}")
    logins.failed("10.0.0.1")  # a wrong API token: no name
    assert logins.wait_s("10.0.0.1") == logins.wait_s("10.0.0.1", "alice") == 60
    assert logins.wait_s("10.0.0.2", "name-0") == 0
    assert logins.counts == {"ok": 0, "failed": 5, "throttled": 2}


def test_failures_age_out_after_the_window():
    logins, clock = throttle()
    for _ in range(3):
        logins.failed("10.0.0.1", "alice")
        clock.now += 10
    assert logins.wait_s("10.0.0.1", "alice") == 30  # the oldest failure is 30 s old
    clock.now += 30
    assert logins.wait_s("10.0.0.1", "alice") == 0
