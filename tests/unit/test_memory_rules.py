"""The pipeline's rules driven through the memory host's fault hooks, in this process.

The gate (a permission revoked), acceptance (a record changed under the reviewer),
the quorum, the life cycle's edges and the retry budgets with their dead letters:
each is the home's own rows moving, with the host failing as a real one does.
"""

import pytest
from helpers import T0, make_event

from signoff.config import RetryPolicy
from signoff.errors import Refused
from signoff.testing import MemoryHost, forget, memory_home


def ready(rt, **event):
    """Enqueue one event, process it, and return the ``(key, digest)`` of its ready task."""
    [line] = rt.enqueue_events([make_event(**event)])
    assert line.accepted, line.reason
    rt.run_until_idle()
    [task] = [t for t in rt.tasks() if t["status"] == "ready"]
    return task["key"], task["digest"]


def approved(rt, **event):
    key, digest = ready(rt, **event)
    assert rt.approve(key, digest, by="ana")["status"] == "approved"
    return key


def refusal(call, *args, **kwargs):
    with pytest.raises(Refused) as info:
        call(*args, **kwargs)
    return info.value.code


def settle(rt, clock, key, statuses, rounds=40, step=30):
    """Run, moving the clock past each backoff, until ``key`` reaches one of ``statuses``."""
    for _ in range(rounds):
        rt.run_until_idle()
        if rt.task(key)["status"] in statuses:
            return rt.task(key)
        clock.advance(step)
    raise AssertionError(f"{key} never reached {statuses}: {rt.task(key)['status']}")


# -- retries and dead letters at submit ------------------------------------------

@pytest.mark.parametrize("failures", [1, 3, 7])
def test_submits_that_fail_before_writing_are_retried_within_the_budget(rt, host, clock,
                                                                        failures):
    key = approved(rt)
    host.fail_submits(failures)
    task = settle(rt, clock, key, {"done", "dead"})
    assert task["status"] == "done"
    assert host.write_counts() == {key: 1}
    assert [c["outcome"] for c in host.submit_log()] == ["error"] * failures + ["wrote"]


def test_a_spent_submit_budget_is_a_dead_letter_and_a_replay_writes_once(rt, host, clock):
    key = approved(rt)
    host.fail_submits(RetryPolicy().submit_attempts)
    task = settle(rt, clock, key, {"done", "dead"})
    assert task["status"] == "dead"
    [letter] = rt.dead_letters()
    assert (letter["kind"], letter["ref"], letter["step"]) == ("task", key, "submit")
    assert host.results() == []
    rt.replay(letter["id"])
    assert settle(rt, clock, key, {"done", "dead"})["status"] == "done"
    assert host.write_counts() == {key: 1}


def test_an_unexpected_exception_is_a_failed_attempt_under_its_class_name(rt, host, clock):
    key = approved(rt)
    host.fail_submits(1, error=ValueError)
    rt.run_until_idle()
    task = rt.task(key)
    # The write was marked possible before the call: a failure now may have written.
    assert task["status"] == "uncertain"
    assert [a["code"] for a in task["history"] if a.get("step") == "submit"] == ["ValueError"]
    assert settle(rt, clock, key, {"done"})["status"] == "done"


def test_a_retry_waits_for_its_backoff_and_not_longer_than_the_cap(rt, host, clock):
    key = approved(rt)
    host.fail_submits(1)
    rt.run_until_idle()
    assert rt.task(key)["status"] == "uncertain"
    rt.run_until_idle()  # not due yet: the clock has not moved
    assert host.write_counts() == {}
    clock.advance(RetryPolicy().max_delay_s)
    rt.run_until_idle()
    assert rt.task(key)["status"] == "done"


def test_lost_acknowledgements_leave_the_task_uncertain_until_its_receipt_is_read(rt, host,
                                                                                  clock):
    key = approved(rt)
    host.lose_acks(1)
    rt.run_until_idle()
    assert rt.task(key)["status"] == "uncertain"
    assert settle(rt, clock, key, {"done"})["status"] == "done"
    assert host.write_counts() == {key: 1}
    assert [c["outcome"] for c in host.submit_log()] == ["lost_ack"]  # read back, not re-sent


# -- the gate and acceptance ----------------------------------------------------

def test_a_revoked_submit_permission_parks_the_task_and_a_retry_after_the_fix_submits(
        rt, host, clock):
    key = approved(rt)
    host.revoke("submit_review")
    rt.run_until_idle()
    task = rt.task(key)
    assert task["status"] == "approved" and task["code"] == "scope_changed"
    assert host.results() == []
    host.put_grant(actions=["read", "draft", "submit_review"])
    rt.retry(key)
    assert settle(rt, clock, key, {"done"})["status"] == "done"


def test_a_revoked_read_permission_refuses_approval_and_leaves_the_task_ready(rt, host):
    key, digest = ready(rt)
    host.revoke("read")
    assert refusal(rt.approve, key, digest, by="ana") == "scope_changed"
    assert rt.task(key)["status"] == "ready"


def test_a_record_changed_under_the_reviewer_blocks_the_task_at_approval(rt, host):
    key, digest = ready(rt)
    host.change_record("comment-1", text="changed meanwhile")
    assert refusal(rt.approve, key, digest, by="ana") == "source_changed"
    task = rt.task(key)
    assert (task["status"], task["code"]) == ("blocked", "source_changed")
    # The new version is a new task.
    new_key, _ = ready(rt, event_id="evt-2")
    assert new_key != key


def test_a_record_changed_after_approval_blocks_the_task_at_submit(rt, host):
    key = approved(rt)
    host.change_record("comment-1", status="closed")
    rt.run_until_idle()
    task = rt.task(key)
    assert (task["status"], task["code"]) == ("blocked", "source_changed")
    assert host.results() == []


# -- the quorum -----------------------------------------------------------------

def test_a_quorum_needs_distinct_approvers_and_then_submits_once(rt, host):
    rt.bind("doc-demo", "q", approvals=2)
    [line] = rt.enqueue_events([make_event(event_id="q-1")], monitor_id="q")
    rt.run_until_idle()
    [task] = [t for t in rt.tasks() if t["monitor"] == "q"]
    key, digest = task["key"], rt.task(task["key"])["digest"]
    assert rt.approve(key, digest, by="ana", channel="api")["approvals_missing"] == 1
    again = rt.approve(key, digest, by="ana", channel="api")  # the same person again
    assert again["status"] == "ready" and again["approvals_missing"] == 1
    assert rt.approve(key, digest, by="bob", channel="api")["status"] == "approved"
    rt.run_until_idle()
    assert rt.task(key)["status"] == "done"
    assert host.write_counts() == {key: 1}


# -- the life cycle's edges ------------------------------------------------------

@pytest.mark.parametrize("end", ["reject", "cancel_task"])
def test_an_ended_task_is_never_approved_nor_written(rt, host, end):
    key, digest = ready(rt)
    getattr(rt, end)(key)
    assert refusal(rt.approve, key, digest, by="ana") == "not_ready"
    rt.run_until_idle()
    assert host.results() == []


def test_done_is_final_and_approving_it_again_answers_done(rt, host):
    key, digest = ready(rt)
    rt.approve(key, digest, by="ana")
    rt.run_until_idle()
    assert rt.approve(key, digest, by="ana")["status"] == "done"
    assert refusal(rt.cancel_task, key) == "not_cancellable"
    assert host.write_counts() == {key: 1}


def test_an_approval_deadline_expires_a_ready_task(tmp_path, clock):
    with memory_home(tmp_path, clock=clock, approval_ttl_s=60) as rt:
        key, digest = ready(rt)
        clock.advance(61)
        rt.run_until_idle()
        assert rt.task(key)["status"] == "expired"
        assert refusal(rt.approve, key, digest, by="ana") == "not_ready"


# -- the helper itself ------------------------------------------------------------

def test_memory_home_runs_a_drafter_of_the_users_with_its_options(tmp_path, clock):
    with memory_home(tmp_path, clock=clock, drafter="signoff.drafters.template:template",
                     drafter_options={"text": "Brief: {document} on {demo_date}"}) as rt:
        key, _ = ready(rt)
        assert rt.task(key)["result"]["draft"] == "Brief: doc-demo on 2026-11-01"
        assert isinstance(rt.host(), MemoryHost)
        assert rt.host().now() == T0


def test_each_home_has_a_store_of_its_own_that_ends_with_its_memory_home(tmp_path, clock):
    first, second = MemoryHost(tmp_path / "a"), MemoryHost(tmp_path / "a")
    first.put_record("only-in-a", document="doc-demo")
    assert second.has_record("only-in-a")  # another thread's host object, the same home
    assert not MemoryHost(tmp_path / "b").has_record("only-in-a")
    with memory_home(tmp_path, clock=clock) as rt:
        rt.host().put_record("kept-while-open", document="doc-demo")
        assert MemoryHost(tmp_path / "home").has_record("kept-while-open")
    assert not MemoryHost(tmp_path / "home").has_record("kept-while-open")
    for home in ("a", "b", "home"):
        forget(tmp_path / home)
