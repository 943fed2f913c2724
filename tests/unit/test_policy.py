"""Standing approval policies (docs/policies-and-batches.md), with the fake clock.

Each test drives a real home through the Python API; the worker loop's policy
pass is called directly (``policy.run_pass``), ingest runs its own after each
batch. The property tests check, over random sequences of events, policies,
revocations, grant changes and time, that no policy ever approves a task outside
its monitor or outside its lifetime.
"""

import json
import tempfile
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import example_backends
from helpers import OPERATOR, T0, examples, make_event, read_here
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from peewee import OperationalError

from signoff.decisions import policy
from signoff.app import Signoff
from signoff.cli import main
from signoff.clock import FakeClock
from signoff.errors import Refused
from signoff.state.tasks import update_task
from signoff.models import Audit, Policy, PolicyDecision, Task

HOUR = 3600


def ready(rt, n=1, monitor_id="default"):
    """One event for record ``comment-<n>`` ingested; returns its task key."""
    rt.host().put_record(f"comment-{n}", document="doc-demo")
    [line] = rt.enqueue_events([make_event(event_id=f"{monitor_id}-evt-{n}",
                                           record_id=f"comment-{n}",
                                           occurred=int(rt.clock.now()))], monitor_id=monitor_id)
    assert line.accepted
    rt.engine.ingest_batch("test")
    return Task.get(Task.record_id == f"comment-{n}", Task.monitor == monitor_id).key


def status(key):
    return Task.get_by_id(key).status


def codes(key):
    return [a.code for a in Audit.select().where(Audit.task_key == key).order_by(Audit.seq)]


def test_a_policy_approves_waiting_and_new_ready_tasks_as_a_person_would(rt, host, clock):
    waiting = ready(rt, 1)
    added = rt.add_policy("default", by="alice", include_waiting=True)
    assert {"policy", "monitor", "expires_at", "digest"} <= set(added)
    assert (added["waiting_included"], added["waiting_left"]) == (1, 0)
    assert added["monitor"] == "default" and added["active"] is True
    assert added["digest"] == rt.monitors()[0]["grant_digest"]
    assert added["expires_at"] == rt.monitors()[0]["expires_at"]  # no --ttl: the monitor's end
    fresh = ready(rt, 2)  # approved by ingest's own pass, before any worker loop
    for key in (waiting, fresh):
        task = rt.task(key)
        assert task["status"] == "approved"
        assert task["approved_by"] == f"policy:{added['policy']}"
        assert task["approved_digest"] == task["digest"]
        assert codes(key) == ["ready", "auto_approved"]
    rt.run_until_idle()
    assert {r["key"] for r in host.results()} == {waiting, fresh}
    assert rt.policies()[0]["approved"] == 2


def test_a_new_policy_leaves_the_waiting_backlog_to_people(rt, clock):
    backlog = [ready(rt, n) for n in (1, 2)]
    added = rt.add_policy("default")
    assert (added["waiting_included"], added["waiting_left"]) == (0, 2)
    fresh = ready(rt, 3)  # ready after the policy was added
    policy.run_pass(rt)
    assert [status(k) for k in backlog] == ["ready", "ready"]
    assert status(fresh) == "approved"
    assert rt.policies()[0]["approved"] == 1
    # A person still approves the backlog as before.
    assert rt.approve(backlog[0], rt.task(backlog[0])["digest"], by="bob")["status"] == "approved"


def test_include_waiting_takes_the_backlog_and_says_how_many(rt, clock):
    backlog = [ready(rt, n) for n in (1, 2, 3)]
    added = rt.add_policy("default", include_waiting=True)
    assert (added["waiting_included"], added["waiting_left"]) == (3, 0)
    assert [status(k) for k in backlog] == ["approved"] * 3


def test_one_active_policy_per_monitor(rt, clock):
    first = rt.add_policy("default", max_per_hour=1)
    with pytest.raises(Refused) as info:
        rt.add_policy("default", max_per_hour=1)
    assert info.value.code == "policy_exists" and f"policy {first['policy']}" in info.value.message
    # Two policies would each have their own hourly cap: the cap holds with one.
    assert [status(ready(rt, n)) for n in (1, 2)] == ["approved", "ready"]
    rt.revoke_policy(first["policy"])
    second = rt.add_policy("default", ttl_s=60)
    clock.advance(60)  # expired; the pass has not ended it yet
    third = rt.add_policy("default")
    rows = {p["policy"]: p for p in rt.policies()}
    assert (rows[second["policy"]]["end_code"], rows[third["policy"]]["active"]) == ("expired", True)
    rt.bind("doc-demo", "other")
    assert rt.add_policy("other")["active"] is True  # another monitor is another matter


def test_two_concurrent_adds_make_one_policy(rt):
    for _ in range(5):
        outcomes = []
        start = threading.Barrier(2)

        def add():
            start.wait()
            with rt.database.connection_context():  # this thread's own, closed after
                try:
                    outcomes.append(rt.add_policy("default")["policy"])
                except Refused as exc:
                    outcomes.append(exc.code)
        threads = [threading.Thread(target=add) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        active = [p for p in rt.policies() if p["active"]]
        assert len(active) == 1 and sorted(outcomes, key=str) == sorted(
            [active[0]["policy"], "policy_exists"], key=str), outcomes
        rt.revoke_policy(active[0]["policy"])


def test_a_policy_never_approves_another_monitors_tasks(rt, clock):
    rt.bind("doc-demo", "other")
    rt.add_policy("other")
    mine = ready(rt, 1, "default")
    theirs = ready(rt, 2, "other")
    policy.run_pass(rt)
    assert (status(mine), status(theirs)) == ("ready", "approved")


def test_expiry_ends_the_policy_and_returns_unwritten_approvals(rt, clock):
    added = rt.add_policy("default", ttl_s=600)
    assert added["expires_at"] == T0 + 600
    approved = ready(rt, 1)
    assert status(approved) == "approved"
    clock.advance(600)
    summary = policy.run_pass(rt)
    assert (summary["ended"], summary["returned"]) == (1, 1)
    task = rt.task(approved)
    assert (task["status"], task["approved_by"], task["approved_digest"]) == ("ready", None, None)
    assert codes(approved)[-2:] == ["policy_revoked", "approval_withdrawn"]
    later = ready(rt, 2)
    assert status(later) == "ready"  # an ended policy approves nothing more
    [row] = rt.policies()
    assert (row["active"], row["end_code"], row["ended_at"]) == (False, "expired", T0 + 600)
    # A person can still approve what the policy gave back.
    assert rt.approve(approved, task["digest"], by="bob")["status"] == "approved"


def test_revocation_returns_only_tasks_whose_write_has_not_started(rt, clock):
    added = rt.add_policy("default")
    keys = [ready(rt, n) for n in (1, 2, 3)]
    assert {status(k) for k in keys} == {"approved"}
    update_task(keys[1], clock.now(), ["approved"], write_possible=True)  # a write may be in flight
    update_task(keys[2], clock.now(), ["approved"], lease_token="t", lease_owner="w",
                lease_until=clock.now() + 30)  # a worker is on it
    answer = rt.revoke_policy(added["policy"])
    assert (answer["active"], answer["end_code"], answer["tasks_returned"]) == (False, "revoked", 1)
    assert [status(k) for k in keys] == ["ready", "approved", "approved"]
    # Revoking again changes nothing and says so.
    assert rt.revoke_policy(added["policy"])["tasks_returned"] == 0
    # The lease ends without a write: the loop's pass returns that task too.
    update_task(keys[2], clock.now(), ["approved"], lease_token=None, lease_owner=None,
                lease_until=None)
    assert policy.run_pass(rt)["returned"] == 1
    assert [status(k) for k in keys] == ["ready", "approved", "ready"]


def test_a_changed_grant_ends_the_policy(rt, host, clock):
    rt.add_policy("default")
    approved = ready(rt, 1)
    host.put_grant(revision=2)
    summary = policy.run_pass(rt)
    assert (summary["ended"], summary["returned"]) == (1, 1)
    assert rt.policies()[0]["end_code"] == "scope_changed"
    host.put_grant(revision=1)  # restoring the grant does not bring the policy back
    policy.run_pass(rt)
    assert status(approved) == "ready" and rt.policies()[0]["active"] is False


def test_a_cancelled_monitor_ends_its_policy(rt):
    rt.add_policy("default")
    rt.cancel("default")
    policy.run_pass(rt)
    assert rt.policies()[0]["end_code"] == "cancelled"


def test_the_hourly_cap_leaves_the_rest_for_a_person(rt, clock):
    rt.add_policy("default", max_per_hour=2)
    first = [ready(rt, n) for n in (1, 2, 3)]
    assert [status(k) for k in first] == ["approved", "approved", "ready"]
    clock.advance(HOUR / 2)
    policy.run_pass(rt)
    assert status(first[2]) == "ready"
    clock.advance(HOUR / 2 + 1)  # the first two approvals are more than an hour old
    second = [ready(rt, n) for n in (4, 5, 6)]
    assert [status(k) for k in second] == ["approved", "approved", "ready"]
    policy.run_pass(rt)
    assert status(first[2]) == "ready"  # capped once: it waits for a person
    decisions = {d.task_key: d.decision for d in PolicyDecision.select()}
    assert (decisions[first[2]], decisions[second[2]]) == ("capped", "capped")
    task = rt.task(first[2])
    assert rt.approve(first[2], task["digest"], by="carol")["status"] == "approved"


def test_a_result_changed_after_drafting_is_never_approved(rt):
    key = ready(rt, 1)
    task = Task.get_by_id(key)
    Task.update(result=dict(task.result, draft="send everything elsewhere")).where(
        Task.key == key).execute()
    rt.add_policy("default", include_waiting=True)
    assert status(key) == "ready"
    assert PolicyDecision.get().decision == "refused:digest_mismatch"
    policy.run_pass(rt)
    assert status(key) == "ready" and Task.get_by_id(key).approved_by is None


def test_a_source_changed_since_drafting_blocks_as_for_a_person(rt, host):
    key = ready(rt, 1)
    host.put_record("comment-1", version=2)
    rt.add_policy("default", include_waiting=True)
    assert (status(key), Task.get_by_id(key).code) == ("blocked", "source_changed")


def test_a_host_that_cannot_answer_ends_nothing(rt, host):
    rt.add_policy("default")

    def broken():
        raise ConnectionError("host down")

    host.context = broken
    assert policy.run_pass(rt)["ended"] == 0
    assert rt.policies()[0]["active"] is True


def test_a_database_fault_in_ingests_policy_pass_is_one_line_and_left_to_the_loop(
        rt, monkeypatch, caplog):
    # As when PostgreSQL drops the connection between ingest's commit and its pass.
    rt.add_policy("default")
    real_pass = policy.run_pass

    def dropped(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly\nmore detail")

    monkeypatch.setattr(policy, "run_pass", dropped)
    key = ready(rt, 1)
    assert status(key) == "ready"  # ingest's outcome stands; only its pass failed
    [record] = [r for r in caplog.records if r.name == "signoff.policy"]
    assert record.levelname == "WARNING" and record.exc_info is None
    assert record.getMessage() == ("policy pass after ingest failed: database error (server "
                                   "closed the connection unexpectedly); the worker loop runs "
                                   "it again")
    real_pass(rt)  # the worker loop's pass
    assert status(key) == "approved"


def test_a_bug_in_ingests_policy_pass_keeps_its_traceback(rt, monkeypatch, caplog):
    rt.add_policy("default")

    def buggy(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(policy, "run_pass", buggy)
    ready(rt, 1)
    [record] = [r for r in caplog.records if r.name == "signoff.policy"]
    assert record.levelname == "ERROR" and record.exc_info[0] is KeyError


def test_event_and_record_content_cannot_create_or_widen_a_policy(rt, host):
    host.put_record("comment-1", document="doc-demo",
                    text="policy add --monitor default; approve everything")
    rt.enqueue_events([make_event(text="signoff policy add --monitor default --by admin")])
    rt.run_until_idle()
    policy.run_pass(rt)
    assert Policy.select().count() == 0
    assert {t["status"] for t in rt.tasks()} == {"ready"}


def test_add_refusals(rt, host):
    for kwargs, code in [({"monitor_id": "nope"}, "unknown_monitor"),
                         ({"monitor_id": "default", "ttl_s": 0}, "invalid_policy"),
                         ({"monitor_id": "default", "by": "bad\x07name"}, "invalid_name")]:
        with pytest.raises(Refused) as info:
            rt.add_policy(**kwargs)
        assert info.value.code == code
    host.put_grant(user="someone-else")
    with pytest.raises(Refused) as info:
        rt.add_policy("default")
    assert info.value.code == "scope_changed"
    assert Policy.select().count() == 0


# -- the command line ----------------------------------------------------------

def cli(home, *args):
    result = CliRunner().invoke(main, ["--home", str(home), *args, "--json"])
    assert "Traceback" not in result.output
    return result.exit_code, (json.loads(result.stdout) if result.stdout.strip() else None)


@pytest.fixture
def cli_home(tmp_path):
    home = tmp_path / "cli-home"
    rt = Signoff.init(home)  # the real clock, as the CLI has
    read_here(rt)
    rt.bind("doc-demo")
    rt.close()
    return home


def test_policy_cli_shapes_and_exit_codes(cli_home):
    home = cli_home
    code, added = cli(home, "policy", "add", "--monitor", "default", "--ttl", "60",
                      "--max-per-hour", "5", "--by", "alice")
    assert code == 0 and {"policy", "monitor", "expires_at", "digest"} <= set(added)
    assert (added["max_per_hour"], added["by"]) == (5, OPERATOR)
    assert (added["waiting_included"], added["waiting_left"]) == (0, 0)
    code, exists = cli(home, "policy", "add", "--monitor", "default", "--include-waiting")
    assert code == 1 and exists["error"] == "policy_exists"
    code, rows = cli(home, "policy", "list")
    assert code == 0 and [r["policy"] for r in rows] == [added["policy"]]
    code, answer = cli(home, "policy", "revoke", str(added["policy"]))
    assert code == 0 and answer["end_code"] == "revoked" and answer["tasks_returned"] == 0
    assert cli(home, "policy", "revoke", "999")[1]["error"] == "unknown_policy"
    assert cli(home, "policy", "add", "--monitor", "nope")[1]["error"] == "unknown_monitor"
    assert cli(home, "policy", "add", "--monitor", "default", "--max-per-hour", "0")[0] == 2
    assert cli(home, "policy", "add")[0] == 2
    assert cli(home, "policy", "revoke", "x")[0] == 2
    code, again = cli(home, "policy", "add", "--monitor", "default", "--include-waiting")
    assert code == 0 and again["waiting_included"] == 0


# -- properties ----------------------------------------------------------------

STEPS = st.lists(st.one_of(
    st.tuples(st.just("event"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("policy"), st.sampled_from(["a", "b"]),
              st.one_of(st.none(), st.integers(1, 4000)), st.one_of(st.none(), st.integers(1, 3))),
    st.tuples(st.just("advance"), st.integers(1, 3000)),
    st.tuples(st.just("revoke"), st.integers(0, 3)),
    st.tuples(st.just("grant"), st.integers(1, 2)),
    st.tuples(st.just("pass"),),
    st.tuples(st.just("submit"),),
), min_size=1, max_size=14)


def apply(rt, step, n):
    kind = step[0]
    if kind == "event":
        rt.host().put_record(f"r{n}", document="doc-demo")
        rt.enqueue_events([make_event(event_id=f"e{n}", record_id=f"r{n}",
                                      occurred=int(rt.clock.now()))], monitor_id=step[1])
        rt.engine.ingest_batch("prop")
    elif kind == "policy":
        try:
            rt.add_policy(step[1], ttl_s=step[2], max_per_hour=step[3])
        except Refused:
            pass  # a monitor that ended or a changed grant: nothing is added
    elif kind == "advance":
        rt.clock.advance(step[1])
    elif kind == "revoke":
        ids = [p.id for p in Policy.select().order_by(Policy.id)]
        if ids:
            rt.revoke_policy(ids[step[1] % len(ids)])
    elif kind == "grant":
        rt.host().put_grant(revision=step[1])
    elif kind == "pass":
        policy.run_pass(rt)
    else:
        rt.engine.submit_batch("prop")


def check_invariants():
    policies = list(Policy.select())
    # One policy per monitor at most is not ended (an expired one is ended by the next add).
    live = [p.monitor for p in policies if p.ended_at is None]
    assert len(live) == len(set(live)), live
    for audit in Audit.select().where(Audit.code == "auto_approved"):
        task = Task.get_by_id(audit.task_key)
        # Some policy of this very task's monitor was live at that instant.
        # Every step moves the clock, so an approval after an end has a later time;
        # one in the instant of a revocation came before it, in the same step.
        assert any(p.monitor == task.monitor and p.created_at <= audit.at < p.expires_at
                   and (p.ended_at is None or audit.at <= p.ended_at)
                   for p in policies), (audit.at, task.monitor)
    for task in Task.select().where(Task.approved_by.startswith("policy:")):
        owner = Policy.get_by_id(int(task.approved_by.split(":")[1]))
        assert owner.monitor == task.monitor
        assert task.approved_at < owner.expires_at
        if owner.ended_at is not None:
            assert task.approved_at <= owner.ended_at


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
def test_no_policy_approves_outside_its_monitor_or_after_its_end(steps):
    with tempfile.TemporaryDirectory() as folder, example_backends():
        rt = Signoff.init(Path(folder) / "home", clock=FakeClock(T0))
        read_here(rt)
        try:
            rt.host().put_material("doc-demo", "2026-11-01")
            rt.bind("doc-demo", "a", ttl_s=5000)
            rt.bind("doc-demo", "b", ttl_s=5000)
            for n, step in enumerate(steps):
                apply(rt, step, n)
                check_invariants()
                rt.clock.advance(1)
            policy.run_pass(rt)
            check_invariants()
            # After a pass, an ended policy holds no approval whose write has not started.
            ended = [policy.tag(p.id) for p in Policy.select().where(Policy.ended_at.is_null(False))]
            assert not Task.select().where(
                Task.status == "approved", Task.approved_by.in_(ended or [""]),
                Task.write_possible == False, Task.lease_token.is_null()).exists()  # noqa: E712
        finally:
            rt.close()
