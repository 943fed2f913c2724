"""One task at a time: ``tasks cancel KEY``, ``monitor pause`` / ``unpause``.

A cancel ends one task as a monitor's cancel ends them all (an uncertain one
``outcome_unknown``); a paused monitor keeps accepting events, processes none
of them (its approved tasks still submit) and, unpaused, processes every one
as fresh as it arrived: no stale event, no gap.
"""

import json
import subprocess

import pytest

from conftest import child_env, make_event, signoff_cmd, start_worker
from helpers import OPERATOR
from servekit import event, ready_home
from signoff.errors import Refused
from signoff.models import Delivery, Monitor, Reviewer, Task
from signoff.state.leases import claimable_counts


def cli(home, *args):
    """Run ``signoff --json ARGS`` on ``home``: ``(exit code, answer)``."""
    done = subprocess.run(signoff_cmd(home, *args, "--json"), env=child_env(),
                          capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout)


@pytest.fixture
def site(home):
    """A real-clock home with three ready tasks (records comment-1..3)."""
    rt = ready_home(home)
    yield rt
    rt.close()


def keys_by_record(rt):
    return {t.record_id: t.key for t in Task.select()}


def test_tasks_cancel_ends_a_ready_an_approved_and_an_uncertain_task(site, home):
    rt = site
    keys = keys_by_record(rt)
    ready, approved, uncertain = keys["comment-1"], keys["comment-2"], keys["comment-3"]
    for key in (approved, uncertain):
        rt.approve(key, rt.task(key)["digest"])
    # The write of `uncertain` reaches the host, its acknowledgement is lost.
    Task.update(next_at=1e18).where(Task.key == approved).execute()  # keep it unwritten
    rt.host().set_fault("lose-ack", 1)
    rt.engine.submit_batch("w1")
    assert rt.task(uncertain)["status"] == "uncertain"
    Task.update(next_at=0).where(Task.key == approved).execute()

    answers = {}
    for key in (ready, approved, uncertain):
        code, answers[key] = cli(home, "tasks", "cancel", key[:12], "--by", "ops-oncall")
        assert code == 0, answers[key]
    assert answers[ready]["status"] == answers[approved]["status"] == "cancelled"
    assert answers[ready]["outcome_unknown"] is answers[approved]["outcome_unknown"] is False
    assert (answers[uncertain]["status"], answers[uncertain]["outcome_unknown"]) == (
        "cancelled", True)
    assert rt.host().receipt(uncertain) is not None  # it was written: hence outcome unknown
    assert rt.host().receipt(approved) is None

    rt.run_until_idle()  # nothing cancelled is submitted afterwards
    assert rt.host().receipt(approved) is None
    assert {rt.task(k)["status"] for k in keys.values()} == {"cancelled"}
    rows = [a for a in rt.audit() if a["code"] == "cancelled" and a["task_key"]]
    assert {(a["task_key"], a["actor"], a["channel"], a["note"]) for a in rows} == {
        (k, OPERATOR, "cli", "ops-oncall") for k in (ready, approved, uncertain)}


def test_tasks_cancel_refuses_a_finished_task_and_changes_nothing(site, home):
    rt = site
    key = keys_by_record(rt)["comment-1"]
    rt.approve(key, rt.task(key)["digest"])
    rt.run_until_idle()
    assert rt.task(key)["status"] == "done"
    audit_rows = len(rt.audit())
    code, answer = cli(home, "tasks", "cancel", key)
    assert (code, answer["error"]) == (1, "not_cancellable")
    assert rt.task(key)["status"] == "done" and len(rt.audit()) == audit_rows
    code, answer = cli(home, "tasks", "cancel", "0" * 64)
    assert (code, answer["error"]) == (1, "unknown_task")


def test_a_paused_monitor_accepts_events_processes_none_then_all_without_a_gap(rt, clock):
    host = rt.host()
    for n in range(2, 5):
        host.put_record(f"comment-{n}", document="doc-demo", text=f"comment {n}")
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    [first] = rt.tasks("ready")
    rt.approve(first["key"], first["digest"], by="carol")

    paused = rt.pause("default", by="carol", channel="cli")
    assert paused["paused"] is True and paused["active"] is True
    assert rt.pause("default", by="carol")["paused"] is True  # again: as it is, one audit row
    answers = rt.enqueue_events([make_event(event_id=f"evt-{n}", record_id=f"comment-{n}",
                                            occurred=int(clock.now())) for n in range(2, 5)])
    assert all(a.accepted for a in answers)
    clock.advance(600)  # ten times the monitor's window: held events are not stale for it
    assert claimable_counts(clock.now())[0] == 0
    rt.run_until_idle()

    # Nothing of the paused monitor was processed, but its approved task was submitted.
    assert Delivery.select().where(Delivery.status == "queued").count() == 3
    assert rt.task(first["key"])["status"] == "done"
    stats = rt.stats()
    assert stats["paused"] == {"monitors": ["default"], "deliveries_waiting": 3}
    assert [m["paused"] for m in rt.monitors()] == [True]

    rt.unpause("default", by="carol", channel="cli")
    assert claimable_counts(clock.now())[0] == 3
    rt.run_until_idle()
    outcomes = sorted(e["outcome"] for e in rt.events())
    assert outcomes == ["ready"] * 4
    assert len(rt.tasks("ready")) == 3
    stats = rt.stats()
    assert stats["stale_event_gaps"] == 0 and stats["paused"]["monitors"] == []
    listed = rt.gaps()
    assert listed["resume_gaps"] == listed["lapse_gaps"] == []
    assert listed["stale_events"]["total"] == 0
    codes = [(a["code"], a["actor"], a["channel"], a["note"]) for a in rt.audit()
             if a["code"] in ("paused", "unpaused")]
    assert codes == [("paused", OPERATOR, "cli", "carol"), ("unpaused", OPERATOR, "cli", "carol")]


def test_events_that_arrive_after_an_unpause_are_judged_fresh_as_always(rt, clock):
    rt.pause("default")
    clock.advance(30)
    rt.unpause("default")
    clock.advance(100)
    # Occurred 90 s before it arrives (the window is 60 s): stale, pause or not.
    rt.enqueue_events([make_event(occurred=int(clock.now()) - 90)])
    rt.run_until_idle()
    assert [e["outcome"] for e in rt.events()] == ["stale_event"]


def test_pause_and_unpause_refuse_an_unknown_or_cancelled_monitor(rt):
    with pytest.raises(Refused) as refused:
        rt.pause("nope")
    assert refused.value.code == "unknown_monitor"
    rt.cancel("default")
    for action in (rt.pause, rt.unpause):
        with pytest.raises(Refused) as refused:
            action("default")
        assert refused.value.code == "cancelled"
    assert Monitor.get_by_id("default").paused_at is None


def test_a_paused_monitors_deliveries_do_not_hold_worker_drain(site, home):
    rt = site
    code, answer = cli(home, "monitor", "pause", "default", "--by", "ops")
    assert code == 0 and answer["paused"] is True
    rt.host().put_record("comment-4", document="doc-demo", text="four")
    rt.enqueue_events([event(4)])
    worker = start_worker(home, "--drain", "--workers", "1")
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    assert [e["status"] for e in rt.events() if e["event_id"] == "evt-4"] == ["queued"]
    code, listed = cli(home, "monitor", "list")
    assert [m["paused"] for m in listed] == [True]
    code, answer = cli(home, "monitor", "unpause", "default")
    assert code == 0 and answer["paused"] is False
    worker = start_worker(home, "--drain", "--workers", "1")
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    assert [e["outcome"] for e in rt.events() if e["event_id"] == "evt-4"] == ["ready"]


def test_reviewer_add_refuses_a_monitor_that_does_not_exist(site, home):
    code, answer = cli(home, "reviewer", "add", "lena", "--monitor", "default",
                       "--monitor", "missing")
    assert (code, answer["error"]) == (1, "unknown_monitor")
    assert Reviewer.select().count() == 0
    code, answer = cli(home, "reviewer", "add", "lena", "--monitor", "default")
    assert code == 0 and answer["monitors"] == ["default"]
    code, listed = cli(home, "reviewer", "list")
    assert [(r["name"], r["monitors"]) for r in listed] == [("lena", ["default"])]
