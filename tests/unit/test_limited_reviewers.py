"""What a reviewer limited to some monitors may list and replay: their monitors' alone."""

import pytest

from helpers import T0, make_event
from signoff.errors import Refused


@pytest.fixture
def two_monitors(rt, host, clock):
    """Dead letters of a delivery on each of two monitors, and a stale event on the second."""
    rt.bind("doc-demo", "other")
    host.set_fault("read-timeout", times=100)
    rt.enqueue_events([make_event()])
    rt.enqueue_events([make_event(event_id="evt-9")], "other")
    for _ in range(12):
        rt.run_until_idle()
        clock.advance(10)
        if len(rt.dead_letters()) == 2:
            break
    host.clear_faults()
    rt.enqueue_events([make_event(event_id="evt-old", occurred=T0 - 7 * 24 * 3600)], "other")
    rt.run_until_idle()
    return {letter["ref"]: letter for letter in rt.dead_letters()}


def monitor_of(rt, letter):
    return rt.delivery(int(letter["ref"]))["monitor"]


def test_dead_letters_are_listed_for_the_monitors_a_reviewer_may_see(rt, two_monitors):
    letters = list(two_monitors.values())
    assert sorted(monitor_of(rt, x) for x in letters) == ["default", "other"]
    for monitor in ("default", "other"):
        [mine] = rt.dead_letters(monitors=frozenset({monitor}))
        assert monitor_of(rt, mine) == monitor
    assert len(rt.dead_letters(monitors=frozenset({"default", "other"}))) == 2
    assert rt.dead_letters(monitors=frozenset()) == []


def test_another_monitors_dead_letter_cannot_be_replayed_and_nothing_changes(rt, two_monitors):
    other = next(x for x in two_monitors.values() if monitor_of(rt, x) == "other")
    with pytest.raises(Refused) as refused:
        rt.replay(other["id"], monitors=frozenset({"default"}))
    assert refused.value.code == "unknown_dead_letter"  # not even whether it exists
    assert rt.delivery(int(other["ref"]))["status"] == "dead"
    assert rt.replay(other["id"], monitors=frozenset({"other"}))["replayed"] == 1


def test_gaps_are_listed_for_the_monitors_a_reviewer_may_see(rt, site, two_monitors):
    rt.cancel("default")
    rt.resume("default", "default-2", "new_only")
    everything = rt.gaps()
    assert everything["stale_events"]["total"] == 1 and len(everything["resume_gaps"]) == 1
    mine = rt.gaps(monitors=frozenset({"other"}))
    assert mine["stale_events"]["total"] == 1 and mine["resume_gaps"] == []
    theirs = rt.gaps(monitors=frozenset({"default", "default-2"}))
    assert theirs["stale_events"] == {"total": 0, "latest": []}
    assert site.unobserved(frozenset({"other"}))["stale_events"] == 1
    assert site.unobserved(frozenset({"default", "default-2"}))["stale_events"] == 0
    assert [g["monitor"] for g in theirs["resume_gaps"]] == [everything["resume_gaps"][0]["monitor"]]


@pytest.fixture
def two_tasks(rt):
    """A ready task of the same record on each of two monitors: ``{monitor: task}``."""
    rt.bind("doc-demo", "other")
    rt.enqueue_events([make_event()])
    rt.enqueue_events([make_event(event_id="evt-2")], "other")
    rt.run_until_idle()
    return {t["monitor"]: t for t in rt.tasks()}


def refusal(call, *args):
    with pytest.raises(Refused) as refused:
        call(*args)
    return refused.value.code, refused.value.message


def test_another_monitors_task_is_unknown_as_one_that_does_not_exist(rt, two_tasks):
    theirs, mine = two_tasks["default"]["key"], two_tasks["other"]["key"]
    none = theirs[:-1] + ("0" if theirs[-1] != "0" else "1")
    limited = frozenset({"other"})
    for size in (64, 10):  # a full key and a prefix
        # Shown, or approved (a key resolved as every decision resolves it).
        for call in (rt.task, lambda key, monitors: rt.approve(key, "0" * 64, monitors=monitors)):
            code, message = refusal(call, theirs[:size], limited)
            assert code == "unknown_task"
            assert message.replace(theirs[:size], "K") == refusal(
                call, none[:size], limited)[1].replace(none[:size], "K")
    assert rt.task(mine[:10], limited)["key"] == mine and rt.task(mine, limited)["key"] == mine
    assert rt.task(theirs)["key"] == theirs  # nobody's limit: every task


def test_another_monitors_delivery_is_unknown_as_one_that_does_not_exist(rt, two_tasks):
    theirs = next(e["delivery"] for e in rt.events() if e["monitor"] == "default")
    code, message = refusal(rt.delivery, theirs, frozenset({"other"}))
    assert (code, message) == ("unknown_delivery", f"no delivery {theirs}")
    assert rt.delivery(theirs)["monitor"] == "default"


def test_a_limited_reviewer_s_decisions_find_no_other_monitor_s_task(rt, two_tasks):
    theirs, mine = two_tasks["default"], two_tasks["other"]
    limited = frozenset({"other"})
    as_alice = {"by": "alice", "channel": "api", "monitors": limited}
    decisions = [
        lambda key: rt.approve(key, theirs["digest"], **as_alice),
        lambda key: rt.approve(key, theirs["digest"], edit="changed", **as_alice),
        lambda key: rt.reject(key, reason="no", **as_alice),
        lambda key: rt.cancel_task(key, **as_alice),
        lambda key: rt.retry(key, **as_alice),
        lambda key: rt.redraft(key, **as_alice),
    ]
    for decide in decisions:
        for size in (64, 10):
            with pytest.raises(Refused) as refused:
                decide(theirs["key"][:size])
            assert refused.value.code == "unknown_task"
    [refused] = rt.approve_many([(theirs["key"], theirs["digest"])], **as_alice)
    assert refused.code == "unknown_task"
    assert rt.task(theirs["key"])["status"] == "ready" and rt.task(theirs["key"])["approvals"] == []
    assert rt.approve(mine["key"][:10], mine["digest"], **as_alice)["status"] == "approved"


def test_a_reject_is_of_the_result_the_person_saw(rt, two_tasks, host):
    task = two_tasks["default"]
    with pytest.raises(Refused) as refused:
        rt.reject(task["key"], reason="no", by="alice", channel="page", digest="f" * 64)
    assert refused.value.code == "digest_mismatch"
    assert rt.task(task["key"])["status"] == "ready"
    assert not [a for a in rt.audit() if a["code"] == "rejected"]
    done = rt.reject(task["key"], reason="no", by="alice", channel="page", digest=task["digest"])
    assert done["status"] == "rejected"
