"""Leases, fencing, retries and dead letters (docs/concepts.md), driven by the fake clock.

Nothing here sleeps: time moves only when a test advances the clock, and the
worker's steps are called directly (``ingest_batch``, ``submit_batch``, ``reap``).
"""

import random

import pytest

from helpers import T0, make_event, read_here
from signoff.steps import ingest, submit
from signoff.steps.hostreads import BatchReads
from signoff.app import Signoff
from signoff.config import RetryPolicy
from signoff.state.leases import claim_deliveries, claim_tasks
from signoff.state.deliveries import move_delivery
from signoff.state.moves import Fenced
from signoff.state.tasks import move_task
from signoff.models import Attempt, Delivery, Inbox, Monitor, Task
from signoff.rules.retry import backoff, decide

import testhosts  # noqa: E402
from testhosts import arm_receipt_timeouts  # noqa: E402

TTL = 30.0


def write_config(home, factory="testhosts:RecordingHost", **retry):
    """A ``signoff.toml`` naming a test host and the given ``[retry]`` values."""
    home.mkdir(parents=True, exist_ok=True)
    lines = ["[host]", f'factory = "{factory}"', "[retry]"]
    lines += [f"{k} = {v!r}" for k, v in retry.items()]
    lines += ["[worker]", f"lease_ttl_s = {TTL}", "batch_size = 10"]
    (home / "signoff.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def make_rt(tmp_path, clock):
    """Build a home with a chosen test host; the same records as the ``rt`` fixture."""
    opened = []

    def make(factory="testhosts:RecordingHost", window_s=60, **retry):
        home = tmp_path / f"home{len(opened)}"
        write_config(home, factory, **retry)
        app = Signoff.init(home, clock=clock)
        read_here(app)
        setup = app.host()
        setup.put_record("comment-1", document="doc-demo", text="please add the demo date")
        setup.put_material("doc-demo", "2026-11-01")
        app.bind("doc-demo", window_s=window_s)
        opened.append(app)
        return app

    yield make
    for app in opened:
        app.close()


def delivery(delivery_id):
    return Delivery.get_by_id(delivery_id)


def enqueue(rt, **changes):
    [line] = rt.enqueue_events([make_event(**changes)])
    assert line.accepted, line
    return line.delivery


def ready_task(rt):
    """Ingest the default event and return its ready task row."""
    enqueue(rt)
    rt.run_until_idle()
    [task] = Task.select()
    assert task.status == "ready"
    return task


def approved_task(rt):
    task = ready_task(rt)
    assert rt.approve(task.key, task.digest)["status"] == "approved"
    return Task.get_by_id(task.key)


def run_step_by_step(rt, clock, done, step=0.25, limit=400):
    """Advance the clock in small steps, running the worker's steps, until ``done()``."""
    for _ in range(limit):
        rt.run_until_idle()
        if done():
            return
        clock.advance(step)
    raise AssertionError("never reached the expected state")


def rt_monitor():
    return Monitor.get_by_id("default")


def history(kind, ref):
    return [(a.step, a.code, a.worker) for a in
            Attempt.select().where(Attempt.kind == kind, Attempt.ref == str(ref)).order_by(Attempt.id)]


# -- leases: expiry and takeover ------------------------------------------------

def test_delivery_lease_expires_and_another_owner_takes_over(rt, clock):
    did = enqueue(rt)
    token1, rows = claim_deliveries(clock.now(), "w1", TTL, 10)
    assert [r.id for r in rows] == [did]
    assert rows[0].lease_owner == "w1" and rows[0].attempts == 1
    # Held: nobody else can claim it, and the reaper leaves a live lease alone.
    assert claim_deliveries(clock.now(), "w2", TTL, 10)[1] == []
    clock.advance(TTL - 1)
    assert rt.engine.reap()["deliveries_released"] == 0
    assert claim_deliveries(clock.now(), "w2", TTL, 10)[1] == []

    clock.advance(2)  # past the lease
    assert rt.engine.reap()["deliveries_released"] == 1
    row = delivery(did)
    assert (row.status, row.last_code, row.lease_token) == ("retrying", "lease_expired", None)
    assert row.failures == {"read": 1}
    assert history("delivery", did) == [("read", "lease_expired", "w1")]

    clock.advance(rt.config.retry.base_delay_s)  # the first backoff is at most base_delay_s
    token2, rows = claim_deliveries(clock.now(), "w2", TTL, 10)
    assert [r.id for r in rows] == [did]
    assert token2 != token1 and rows[0].lease_owner == "w2" and rows[0].attempts == 2


def test_rows_finishing_in_one_batch_keep_their_own_failures(make_rt, clock):
    # Final outcomes are written grouped by equal values: a retried row and a
    # fresh one that end alike must still each keep their own count.
    rt = make_rt("testhosts:OddHost")
    rt.host().put_record("comment-2", document="doc-demo", text="and the venue")
    failing = [ConnectionError("the host is away")]

    def once(record):
        if failing:
            raise failing.pop()
        return record

    testhosts.ODD["comment-1"] = once
    try:
        retried = enqueue(rt)
        assert rt.engine.ingest_batch("w1")[0] == 1
        assert delivery(retried).failures == {"read": 1}
        fresh = enqueue(rt, event_id="evt-2", record_id="comment-2")
        clock.advance(rt.config.retry.base_delay_s)  # the first backoff is at most this
        assert rt.engine.ingest_batch("w2")[0] == 2  # one claim takes both
    finally:
        del testhosts.ODD["comment-1"]
    assert [delivery(d).outcome for d in (retried, fresh)] == ["ready", "ready"]
    assert delivery(retried).failures == {"read": 1} and delivery(fresh).failures == {}


def test_tasks_done_in_one_batch_keep_their_own_failures(make_rt, clock, monkeypatch):
    rt = make_rt("testhosts:HookHost")
    rt.host().put_record("comment-2", document="doc-demo", text="and the venue")
    enqueue(rt)
    enqueue(rt, event_id="evt-2", record_id="comment-2")
    rt.run_until_idle()
    retried, fresh = (Task.get(Task.record_id == r) for r in ("comment-1", "comment-2"))
    failing = [ConnectionError("the host is away")]

    def once(key):
        if failing:
            raise failing.pop()

    monkeypatch.setattr(testhosts, "BEFORE_SUBMIT", once)
    assert rt.approve(retried.key, retried.digest)["status"] == "approved"
    assert rt.engine.submit_batch("w1")[0] == 1
    assert Task.get_by_id(retried.key).failures == {"submit": 1}
    assert rt.approve(fresh.key, fresh.digest)["status"] == "approved"
    clock.advance(rt.config.retry.base_delay_s)  # the first backoff is at most this
    assert rt.engine.submit_batch("w2")[0] == 2  # one claim takes both
    after = {t.key: t for t in Task.select()}
    assert [after[t.key].status for t in (retried, fresh)] == ["done", "done"]
    assert after[retried.key].failures == {"submit": 1} and after[fresh.key].failures == {}


def test_task_lease_expires_and_another_owner_takes_over(rt, clock):
    task = approved_task(rt)
    token1, rows = claim_tasks(clock.now(), "w1", TTL, 10)
    assert [t.key for t in rows] == [task.key]
    assert claim_tasks(clock.now(), "w2", TTL, 10)[1] == []
    clock.advance(TTL + 1)
    assert rt.engine.reap()["tasks_released"] == 1
    row = Task.get_by_id(task.key)
    # No write was recorded as possible: still approved, an ordinary retry.
    assert (row.status, row.code, row.lease_token) == ("approved", "lease_expired", None)
    assert row.failures == {"submit": 1}
    clock.advance(rt.config.retry.base_delay_s)
    token2, rows = claim_tasks(clock.now(), "w2", TTL, 10)
    assert [t.key for t in rows] == [task.key] and token2 != token1
    assert rows[0].attempts == 2


# -- fencing ---------------------------------------------------------------------

def test_a_write_with_the_old_token_changes_nothing(rt, clock):
    did = enqueue(rt)
    old, rows = claim_deliveries(clock.now(), "w1", TTL, 10)
    # The old owner did the whole read-back and draft, then stalled past its lease.
    host = BatchReads(rt.host(), [rows[0].record_id])
    stalled = [ingest.examine(rt, host, rows[0], rt_monitor(), host.context(), {}, clock.now())]
    assert stalled[0].code == "ready"
    clock.advance(TTL + 1)
    rt.engine.reap()
    clock.advance(rt.config.retry.base_delay_s)
    new, rows2 = claim_deliveries(clock.now(), "w2", TTL, 10)
    assert [r.id for r in rows2] == [did]

    with pytest.raises(Fenced):
        move_delivery(did, ["processing"], "done", clock.now(), token=old, outcome="ready")
    # The late batch write of the old owner is skipped, row by row.
    ingest.write_outcomes(rt, old, "w1", rows, stalled)
    row = delivery(did)
    assert (row.status, row.lease_owner, row.lease_token, row.outcome) == (
        "processing", "w2", new, None)
    assert Inbox.select().count() == 0 and Task.select().count() == 0
    assert history("delivery", did) == [("read", "lease_expired", "w1")]

    # The new owner's write goes through.
    fresh = [ingest.examine(rt, host, rows2[0], rt_monitor(), host.context(), {}, clock.now())]
    ingest.write_outcomes(rt, new, "w2", rows2, fresh)
    row = delivery(did)
    assert (row.status, row.outcome, row.lease_token) == ("done", "ready", None)
    assert Task.select().count() == 1 and Inbox.select().count() == 1


def test_a_late_task_outcome_from_the_old_owner_is_fenced(rt, clock):
    task = approved_task(rt)
    old, rows = claim_tasks(clock.now(), "w1", TTL, 10)
    clock.advance(TTL + 1)
    rt.engine.reap()
    clock.advance(rt.config.retry.base_delay_s)
    new, _ = claim_tasks(clock.now(), "w2", TTL, 10)

    with pytest.raises(Fenced):
        move_task(task.key, ["approved"], "done", clock.now(), token=old)
    late = {task.key: submit.Outcome("blocked", "receipt_mismatch", "confirm")}
    submit.write_outcomes(rt, old, "w1", rows, late)
    row = Task.get_by_id(task.key)
    assert (row.status, row.code, row.lease_owner, row.lease_token) == (
        "approved", "lease_expired", "w2", new)
    # And the old owner cannot mark a write as possible any more.
    assert submit._mark_write_possible(rt, old, rows) == set()
    assert Task.get_by_id(task.key).write_possible is False


# -- the retry policy --------------------------------------------------------------

POLICY = RetryPolicy(read_attempts=5, draft_attempts=3, submit_attempts=8,
                     base_delay_s=0.5, max_delay_s=30.0)


@pytest.mark.backend_independent
def test_backoff_is_exponential_capped_and_jittered():
    top = [backoff(n, POLICY, rng=lambda: 1.0) for n in range(1, 10)]
    assert top == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    bottom = [backoff(n, POLICY, rng=lambda: 0.0) for n in range(1, 10)]
    assert bottom == [d / 2 for d in top]
    assert backoff(3, POLICY, rng=lambda: 0.5) == pytest.approx(1.5)
    rng = random.Random(7)
    for n in range(1, 12):
        cap = min(30.0, 0.5 * 2 ** (n - 1))
        for _ in range(50):
            assert cap / 2 <= backoff(n, POLICY, rng=rng.random) <= cap


@pytest.mark.backend_independent
def test_decide_gives_up_when_the_budget_is_spent():
    assert decide(1, "read", POLICY, rng=lambda: 1.0) == 0.5
    assert decide(4, "read", POLICY, rng=lambda: 1.0) == 4.0
    assert decide(5, "read", POLICY) is None
    assert decide(2, "draft", POLICY, rng=lambda: 1.0) == 1.0
    assert decide(3, "draft", POLICY) is None
    assert decide(7, "submit", POLICY, rng=lambda: 0.0) == 15.0
    assert decide(8, "submit", POLICY) is None


# -- budgets and dead letters -------------------------------------------------------

def test_read_budget_spent_goes_to_dead_letters_and_replay_gets_a_fresh_budget(rt, clock, host):
    host.set_fault("read-timeout", 1000)
    did = enqueue(rt)
    run_step_by_step(rt, clock, lambda: delivery(did).status == "dead")
    row = delivery(did)
    assert row.attempts == 5 and row.failures == {"read": 5} and row.last_code == "TimeoutError"
    assert [h[:2] for h in history("delivery", did)] == [("read", "TimeoutError")] * 5
    [letter] = rt.dead_letters()
    assert (letter["kind"], letter["ref"], letter["step"], letter["code"], letter["attempts"]) == (
        "delivery", str(did), "read", "TimeoutError", 5)
    assert letter["first_at"] == T0 and letter["last_at"] > T0
    assert rt.stats()["dead_letters"]["total"] == 1

    rt.replay(letter["id"])
    assert delivery(did).status == "queued"
    # Still failing: a fresh budget means one more failure is a retry, not a dead letter.
    rt.run_until_idle()
    row = delivery(did)
    assert (row.status, row.failures) == ("retrying", {"read": 1})
    host.clear_faults()
    run_step_by_step(rt, clock, lambda: delivery(did).status == "done")
    assert delivery(did).outcome == "ready"
    assert [t.status for t in Task.select()] == ["ready"]
    assert rt.dead_letters()[0]["replayed"] == 1


def test_a_lease_that_expires_without_outcome_counts_as_an_attempt(rt, clock):
    # An input that kills whichever worker picks it up: the lease just expires.
    did = enqueue(rt)
    for n in range(1, 6):
        clock.advance(30)  # past any backoff
        _, rows = claim_deliveries(clock.now(), f"doomed-{n}", TTL, 10)
        assert [r.id for r in rows] == [did]
        clock.advance(TTL + 1)
        rt.engine.reap()
    row = delivery(did)
    assert (row.status, row.attempts, row.last_code) == ("dead", 5, "lease_expired")
    [letter] = rt.dead_letters()
    assert (letter["kind"], letter["step"], letter["code"], letter["attempts"]) == (
        "delivery", "read", "lease_expired", 5)
    assert claim_deliveries(clock.now(), "w", TTL, 10)[1] == []


def test_a_task_whose_leases_keep_expiring_goes_to_dead_letters(rt, clock, host):
    task = approved_task(rt)
    for n in range(1, 9):
        clock.advance(31)
        _, rows = claim_tasks(clock.now(), f"doomed-{n}", TTL, 10)
        assert [t.key for t in rows] == [task.key]
        clock.advance(TTL + 1)
        rt.engine.reap()
    row = Task.get_by_id(task.key)
    assert (row.status, row.code, row.outcome_unknown) == ("dead", "lease_expired", False)
    [letter] = rt.dead_letters()
    assert (letter["kind"], letter["ref"], letter["code"], letter["attempts"]) == (
        "task", task.key, "lease_expired", 8)
    assert host.results() == []


def test_an_unexpected_exception_in_the_host_is_a_failed_attempt(make_rt, clock):
    rt = make_rt("testhosts:KeyErrorHost", read_attempts=3)
    did = enqueue(rt)
    assert rt.engine.ingest_batch("w1") == (1, False)  # returns normally: the worker lives on
    row = delivery(did)
    assert (row.status, row.last_code, row.lease_token) == ("retrying", "KeyError", None)
    assert history("delivery", did) == [("read", "KeyError", "w1")]
    run_step_by_step(rt, clock, lambda: delivery(did).status == "dead")
    assert rt.dead_letters()[0]["code"] == "KeyError"
    assert delivery(did).attempts == 3


def test_an_uncertain_task_that_dies_keeps_outcome_unknown_and_replay_reads_the_receipt(
        make_rt, clock):
    rt = make_rt("testhosts:FlakyReceiptHost", submit_attempts=4)
    host = rt.host()
    task = approved_task(rt)
    host.set_fault("lose-ack", 1)
    rt.run_until_idle()
    row = Task.get_by_id(task.key)
    assert (row.status, row.code, row.write_possible) == ("uncertain", "TimeoutError", True)
    assert len(host.results()) == 1  # the write happened; only the ack was lost

    arm_receipt_timeouts(host, 1000)
    run_step_by_step(rt, clock, lambda: Task.get_by_id(task.key).status == "dead")
    row = Task.get_by_id(task.key)
    assert (row.status, row.outcome_unknown, row.failures) == ("dead", True, {"submit": 4})
    [letter] = rt.dead_letters()
    assert (letter["kind"], letter["step"], letter["code"]) == ("task", "submit", "TimeoutError")
    assert rt.task(task.key)["state"].startswith("dead, outcome unknown")

    rt.replay(letter["id"])
    row = Task.get_by_id(task.key)
    assert (row.status, row.outcome_unknown) == ("uncertain", True)
    host.clear_faults()
    run_step_by_step(rt, clock, lambda: Task.get_by_id(task.key).status == "done")
    # The replay read the receipt under the same key: the host saw one submit, ever.
    assert [c["outcome"] for c in host.submit_log()] == ["lost_ack"]
    assert host.write_counts() == {task.key: 1}
    assert [r["key"] for r in host.results()] == [task.key]


def test_a_read_retry_landing_past_the_freshness_window_ends_stale(rt, clock, host):
    host.set_fault("read-timeout", 1)
    # Exactly at the edge of the 60 s window: fresh now, stale after any backoff.
    did = enqueue(rt, occurred=int(clock.now()) - 60)
    rt.run_until_idle()
    row = delivery(did)
    assert (row.status, row.outcome) == ("done", "stale_event")
    assert Inbox.get(Inbox.event_id == "evt-1").outcome == "stale_event"
    assert Task.select().count() == 0 and rt.dead_letters() == []
    assert rt.stats()["stale_event_gaps"] == 1
    # The event id is consumed: a redelivery is a duplicate.
    again = enqueue(rt, occurred=int(clock.now()))
    rt.run_until_idle()
    assert delivery(again).outcome == "duplicate"


def test_a_read_retry_inside_the_window_is_retried_not_stale(rt, clock, host):
    host.set_fault("read-timeout", 2)
    did = enqueue(rt, occurred=int(clock.now()) - 50)
    rt.run_until_idle()
    assert delivery(did).status == "retrying"
    run_step_by_step(rt, clock, lambda: delivery(did).status == "done")
    assert delivery(did).outcome == "ready"


def run_with_crashes(rt, clock, finished):
    """Run the worker's steps; a ``WorkerDied`` is a crash: leases are left to expire."""
    from testhosts import WorkerDied
    crashes = 0
    for _ in range(200):
        try:
            rt.run_until_idle()
        except WorkerDied:
            crashes += 1  # the worker died holding its batch; its leases must expire
            clock.advance(TTL + 1)
            rt.engine.reap()
            clock.advance(31)  # the restarted worker finds every released row due at once
            continue
        if finished():
            return crashes
        clock.advance(0.5)
    raise AssertionError("never finished")


def poisoned_home(make_rt):
    rt = make_rt("testhosts:PoisonHost", window_s=3600)
    for n in range(2, 6):
        rt.host().put_record(f"comment-{n}", document="doc-demo")
    return rt


def test_an_input_that_kills_the_worker_does_not_take_its_batch_with_it(make_rt, clock):
    rt = poisoned_home(make_rt)
    (rt.home / "poison").write_text("comment-3\n", encoding="utf-8")
    ids = [enqueue(rt, event_id=f"evt-{n}", record_id=f"comment-{n}") for n in range(1, 6)]
    poison = ids[2]
    crashes = run_with_crashes(
        rt, clock, lambda: all(delivery(i).status in ("done", "dead") for i in ids))
    # The input that kills workers ends in the dead letters, after its budget...
    assert delivery(poison).status == "dead" and crashes == 5
    [letter] = rt.dead_letters()
    assert (letter["ref"], letter["code"]) == (str(poison), "lease_expired")
    # ... and the events that happened to share its batch are not lost with it.
    assert [(delivery(i).status, delivery(i).outcome) for i in ids if i != poison] == [
        ("done", "ready")] * 4


def test_a_task_that_kills_the_worker_does_not_take_its_batch_with_it(make_rt, clock):
    rt = poisoned_home(make_rt)
    host = rt.host()
    for n in range(1, 6):
        enqueue(rt, event_id=f"evt-{n}", record_id=f"comment-{n}")
    rt.run_until_idle()
    tasks = {t.record_id: t.key for t in Task.select()}
    assert len(tasks) == 5
    assert all(isinstance(a, dict) for a in rt.approve_many(
        [(t.key, t.digest) for t in Task.select()]))
    (rt.home / "poison-submit").write_text("comment-3\n", encoding="utf-8")
    crashes = run_with_crashes(rt, clock, lambda: not Task.select().where(
        Task.status.in_(["approved", "uncertain"])).exists())
    assert crashes == rt.config.retry.submit_attempts
    poison = Task.get_by_id(tasks.pop("comment-3"))
    # It may have been written when its worker died: dead, outcome unknown.
    assert (poison.status, poison.code, poison.outcome_unknown) == ("dead", "lease_expired", True)
    assert [d["ref"] for d in rt.dead_letters()] == [poison.key]
    assert {Task.get_by_id(k).status for k in tasks.values()} == {"done"}
    assert sorted(host.write_counts()) == sorted(tasks.values())
    assert set(host.write_counts().values()) == {1}


def test_a_long_batch_renews_its_lease_so_nobody_takes_it_over(make_rt, clock, monkeypatch):
    import testhosts
    rt = make_rt("testhosts:SlowHost", window_s=3600)
    host = rt.host()
    for n in range(2, 5):
        host.put_record(f"comment-{n}", document="doc-demo")
    ids = [enqueue(rt, event_id=f"evt-{n}", record_id=f"comment-{n}") for n in range(1, 5)]
    reaped = []

    def slow_call():
        # Each host call takes 40 % of the lease, and another worker's reaper looks meanwhile.
        clock.advance(0.4 * TTL)
        reaped.append(rt.engine.reap())

    monkeypatch.setattr(testhosts, "SLOW_HOOK", slow_call)
    assert rt.engine.ingest_batch("w1") == (4, False)
    assert [(delivery(i).status, delivery(i).outcome, delivery(i).attempts) for i in ids] == [
        ("done", "ready", 1)] * 4
    assert sum(r["deliveries_released"] for r in reaped) == 0

    monkeypatch.setattr(testhosts, "SLOW_HOOK", None)
    assert all(isinstance(a, dict) for a in rt.approve_many(
        [(t.key, t.digest) for t in Task.select()]))
    monkeypatch.setattr(testhosts, "SLOW_HOOK", slow_call)
    reaped.clear()
    assert rt.engine.submit_batch("w1") == (4, False)
    assert [(t.status, t.attempts) for t in Task.select()] == [("done", 1)] * 4
    assert sum(r["tasks_released"] for r in reaped) == 0
    assert len(host.write_counts()) == 4


@pytest.mark.backend_independent
def test_a_claim_commits_without_an_fsync_and_the_outcome_with_one(tmp_path, clock):
    rt = read_here(Signoff.init(tmp_path / "home", clock=clock))
    try:
        rt.host().put_record("comment-1", document="doc-demo", text="t")
        rt.host().put_material("doc-demo", "2026-11-01")
        rt.bind("doc-demo")
        rt.enqueue_events([make_event()])
        statements = []
        with rt.database.connection_context():
            connection = rt.database.connection()
            connection.set_trace_callback(statements.append)
            try:
                assert rt.engine.ingest_batch("w")[0] == 1
            finally:
                connection.set_trace_callback(None)
            assert rt.database.execute_sql("PRAGMA synchronous").fetchone() == (2,)  # FULL again
        said = [s.split()[0] if not s.startswith("PRAGMA synchronous") else s for s in statements]
        unsynced = said.index("PRAGMA synchronous = NORMAL")
        synced = said.index("PRAGMA synchronous = FULL")
        assert said[unsynced + 1] == "BEGIN" and "UPDATE" in said[unsynced:synced]
        assert said[synced - 1] == "COMMIT"  # the claim's, at NORMAL
        assert "COMMIT" in said[synced + 1:]  # the outcome's, at FULL
    finally:
        rt.close()


@pytest.mark.backend_independent
def test_a_claim_takes_about_a_second_of_work_within_the_batch_size():
    from signoff.steps.claiming import BATCH_S, ClaimSizes
    sizes = ClaimSizes()
    assert sizes.limit("ingest", 200) == 200  # nothing timed yet: a whole batch
    assert sizes.limit("ingest", 200, cautious=True) == 1
    sizes.timed("ingest", 50, BATCH_S * 5)  # 0.1 s a row
    assert sizes.limit("ingest", 200) == 10
    sizes.timed("ingest", 1, BATCH_S * 30)  # one row slower than the whole budget
    assert sizes.limit("ingest", 200) == 1
    sizes.timed("ingest", 200, BATCH_S / 1000)
    assert sizes.limit("ingest", 200) == 200 and sizes.limit("ingest", 7) == 7
    sizes.timed("ingest", 0, 5.0)  # a batch of no rows says nothing
    assert sizes.limit("ingest", 200) == 200 and sizes.limit("submit", 200) == 200
