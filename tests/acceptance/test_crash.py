"""Crash safety with real processes: SIGKILL at each point, restart, check the end state.

Each test runs real ``signoff worker`` processes on a real home (SQLite files in
a temporary folder), kills one with SIGKILL at a chosen point (a test host
plug-in kills its own process there, once), restarts with ``worker --drain``
and checks that the result was written exactly once. Leases are 1 s and
backoff is short, so each test takes seconds. Waits are conditions with
deadlines, never bare sleeps.
"""

import json
import signal
import subprocess
import sys

import pytest

from helpers import child_env, signoff_cmd, wait_for
from signoff.models import Attempt, Delivery, Inbox, Task

from testhosts import arm_crash, crash_armed  # noqa: E402

from crashhome import DRAIN_TIMEOUT, Home, assert_exactly_one_result


@pytest.fixture
def real_home(tmp_path):
    homes = []

    def make(**kw):
        h = Home(tmp_path / "home", **kw)
        homes.append(h)
        return h

    yield make
    for h in homes:
        h.close()


def task_history(key):
    return [(a.step, a.code) for a in Attempt.select().where(
        Attempt.kind == "task", Attempt.ref == key).order_by(Attempt.id)]


def approve_and_submit(h):
    [key] = h.approve_all()
    h.drain()
    assert_exactly_one_result(h, key)
    return key


# -- (a) between the delivery row and the wake-up ------------------------------------

INTAKE_THEN_DIE = """
import os, signal, sys, json
import signoff.tasks

def die_instead_of_waking(self, count=1):
    os.kill(os.getpid(), signal.SIGKILL)

signoff.tasks.Wakers.ingest = die_instead_of_waking
from signoff.app import Signoff
Signoff(sys.argv[1]).enqueue_events(json.loads(sys.argv[2]))
print("the wake-up was sent: the patch did not take")
"""


@pytest.mark.slow  # chaos: a SIGKILL and a restart; CI runs the slow tests
def test_kill_after_the_delivery_is_written_before_the_queue_is_woken(real_home):
    h = real_home()
    child = subprocess.run([sys.executable, "-c", INTAKE_THEN_DIE, str(h.path),
                            json.dumps([h.event()])], env=child_env(), capture_output=True,
                           timeout=30)
    assert child.returncode == -signal.SIGKILL, child
    [row] = Delivery.select()
    assert row.status == "queued"  # durable before the wake-up
    assert h.rt.queue.pending_count() == 0  # and no wake-up was sent
    h.drain()  # only the reaper can find it
    row = Delivery.get_by_id(row.id)
    assert (row.status, row.outcome, row.attempts) == ("done", "ready", 1)
    approve_and_submit(h)


APPROVE_THEN_DIE = """
import os, signal, sys
import signoff.tasks

def die_instead_of_waking(self, count=1):
    os.kill(os.getpid(), signal.SIGKILL)

signoff.tasks.Wakers.submit = die_instead_of_waking
from signoff.app import Signoff
Signoff(sys.argv[1]).approve(sys.argv[2], sys.argv[3])
print("the wake-up was sent: the patch did not take")
"""


@pytest.mark.slow  # chaos: a SIGKILL and a restart; CI runs the slow tests
def test_kill_after_the_approval_is_written_before_the_queue_is_woken(real_home):
    h = real_home()
    h.enqueue([h.event()])
    h.drain()
    [task] = Task.select()
    child = subprocess.run([sys.executable, "-c", APPROVE_THEN_DIE, str(h.path), task.key,
                            task.digest], env=child_env(), capture_output=True, timeout=30)
    assert child.returncode == -signal.SIGKILL, child
    assert Task.get_by_id(task.key).status == "approved"
    assert h.rt.queue.pending_count() == 0
    h.drain()
    assert_exactly_one_result(h, task.key)


# -- (b) after read-back ---------------------------------------------------------

@pytest.mark.slow  # chaos: a SIGKILL and a restart; CI runs the slow tests
def test_kill_after_read_back(real_home):
    h = real_home()
    arm_crash(h.path, "after-get")
    [did] = h.enqueue([h.event()])
    victim = h.worker()
    assert victim.wait(timeout=DRAIN_TIMEOUT) == -signal.SIGKILL
    assert crash_armed(h.path) is None
    row = Delivery.get_by_id(did)
    assert row.status == "processing" and row.lease_token is not None  # orphaned
    assert Task.select().count() == 0 and Inbox.select().count() == 0

    h.drain()
    row = Delivery.get_by_id(did)
    assert (row.status, row.outcome, row.attempts) == ("done", "ready", 2)
    codes = [a.code for a in Attempt.select().where(Attempt.kind == "delivery").order_by(Attempt.id)]
    assert codes == ["lease_expired", "ready"]
    assert Task.select().count() == 1
    approve_and_submit(h)


# -- (c) after the host wrote, before the worker recorded it -------------------------

@pytest.mark.slow  # chaos: a SIGKILL and a restart; CI runs the slow tests
def test_kill_after_the_host_wrote_before_the_worker_recorded_it(real_home):
    h = real_home()
    h.enqueue([h.event()])
    h.drain()
    [key] = h.approve_all()
    arm_crash(h.path, "after-submit-write")
    victim = h.worker()
    assert victim.wait(timeout=DRAIN_TIMEOUT) == -signal.SIGKILL
    assert crash_armed(h.path) is None
    task = Task.get_by_id(key)
    # The write happened, the worker never heard of it: leased, a write possible.
    assert (task.status, task.write_possible) == ("approved", True)
    assert task.lease_token is not None
    assert [r["key"] for r in h.host.results()] == [key]
    # Once the lease expires, a reaper pass says what is known: it may have been written.
    wait_for(lambda: h.rt.engine.reap()["tasks_released"], timeout=60, what="the lease to expire")
    task = Task.get_by_id(key)
    assert (task.status, task.code, task.lease_token) == ("uncertain", "lease_expired", None)

    h.drain()
    assert_exactly_one_result(h, key)
    # Recovered as uncertain by reading the receipt under the same key: no second submit.
    assert task_history(key) == [("submit", "lease_expired"), ("confirm", "done")]
    assert [c["outcome"] for c in h.host.submit_log()] == ["wrote"]
    assert Task.get_by_id(key).outcome_unknown is False
    # The operator sees the takeover in `tasks show`.
    shown = subprocess.run(signoff_cmd(h.path, "tasks", "show", key, "--json"), env=child_env(),
                           capture_output=True, timeout=30, check=True)
    history = [(e["step"], e["code"]) for e in json.loads(shown.stdout)["history"]]
    assert history == [("submit", "lease_expired"), ("confirm", "done")]


# -- (d) while uncertain ---------------------------------------------------------

@pytest.mark.slow  # chaos: a SIGKILL and a restart; CI runs the slow tests
def test_kill_while_uncertain(real_home):
    # A long first backoff keeps the task uncertain long enough to kill the worker then.
    h = real_home(base_delay_s=2.0, max_delay_s=2.0)
    h.enqueue([h.event()])
    h.drain()
    [key] = h.approve_all()
    h.host.set_fault("lose-ack", 1)
    victim = h.worker()
    wait_for(lambda: Task.get_by_id(key).status == "uncertain", timeout=DRAIN_TIMEOUT,
             what="the task to become uncertain")
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=60) == -signal.SIGKILL
    task = Task.get_by_id(key)
    assert task.status == "uncertain", (task.status, task.code)
    assert [r["key"] for r in h.host.results()] == [key]

    h.drain()
    assert_exactly_one_result(h, key)
    assert [c["outcome"] for c in h.host.submit_log()] == ["lost_ack"]
    assert task_history(key)[-1] == ("confirm", "done")


# -- a call that hangs past its lease ------------------------------------------------

@pytest.mark.slow  # chaos: a SIGKILL and a restart; CI runs the slow tests
def test_a_submit_that_hangs_past_its_lease_is_taken_over_and_its_late_write_fenced(real_home):
    h = real_home()
    h.enqueue([h.event()])
    h.drain()
    (h.path / "hang-submit").write_text("60", encoding="utf-8")
    [key] = h.approve_all()
    # One thread each: the hung worker cannot take its own task over. On a busy
    # machine more leases may expire than the hung one (each is one more claim
    # and one more attempt row); what must hold is said by the checks below.
    workers = [h.worker("--workers", "1", lease="3"), h.worker("--workers", "1", lease="3")]
    wait_for(lambda: Task.get_by_id(key).status == "done", timeout=90, what="the task to be done")
    late = wait_for(lambda: [c for c in h.host.submit_log() if c["outcome"] == "idempotent"],
                    timeout=90, what="the hung submit to return")
    for proc in workers:
        proc.terminate()  # graceful: the hung worker finishes its batch first
    assert [proc.wait(timeout=DRAIN_TIMEOUT) for proc in workers] == [0, 0], h.stderr()
    calls = h.host.submit_log()
    [wrote] = [c for c in calls if c["outcome"] == "wrote"]
    # The hung call returned after another worker wrote: the host kept one write.
    hung = late[0]["pid"]
    assert hung != wrote["pid"]
    assert_exactly_one_result(h, key)
    history = [(a.code, int(a.worker.split(":")[1])) for a in
               Attempt.select().where(Attempt.kind == "task").order_by(Attempt.id)]
    assert ("lease_expired", hung) in history  # its lease expired: that is the takeover
    assert history[-1][0] == "done"
    # Every claim ends in exactly one attempt row. The hung worker's late
    # outcome was fenced off: had it been written, there would be one more.
    assert len(history) == Task.get_by_id(key).attempts, history


# -- two workers on one home ------------------------------------------------------

def test_two_worker_processes_on_one_home(real_home):
    n = 200
    h = real_home(records=n, lease_ttl_s=30.0)
    events = [h.event(i) for i in range(n)]
    # Redeliveries of the same event id, and a second event about the same record version.
    events += [h.event(i) for i in range(0, n, 10)]
    events += [h.event(i, event_id=f"other-{i}") for i in range(0, n, 20)]
    h.enqueue(events)
    a = h.worker("--drain", "--workers", "2")
    b = h.worker("--drain", "--workers", "2")
    assert a.wait(timeout=60) == 0 and b.wait(timeout=60) == 0, h.stderr()
    err = h.stderr()
    assert "database is locked" not in err and "Traceback" not in err, err

    deliveries = list(Delivery.select())
    assert len(deliveries) == len(events)
    assert {d.status for d in deliveries} == {"done"}
    twice = [(d.id, d.attempts, [(a.code, a.worker) for a in Attempt.select().where(
        Attempt.kind == "delivery", Attempt.ref == str(d.id)).order_by(Attempt.id)])
        for d in deliveries if d.attempts != 1]
    assert not twice, f"claimed more than once (id, attempts, their codes and workers): {twice}"
    outcomes = sorted(d.outcome for d in deliveries)
    assert outcomes.count("duplicate") == n // 10
    assert outcomes.count("ready") == n + n // 20
    tasks = list(Task.select())
    assert len(tasks) == n and {t.status for t in tasks} == {"ready"}
    assert len({(t.record_id, t.version) for t in tasks}) == n
    assert Inbox.select().count() == n + n // 20


# -- an input that kills every worker that reads it ------------------------------

@pytest.mark.slow  # chaos: a SIGKILL and a restart; CI runs the slow tests
def test_an_input_that_kills_workers_ends_in_the_dead_letters(real_home):
    h = real_home(records=3, factory="testhosts:PoisonHost", host_options="sigkill = true",
                  read_attempts=3)
    (h.path / "poison").write_text("comment-1\n", encoding="utf-8")
    ids = h.enqueue([h.event(n) for n in range(3)])
    assert h.drain_through_crashes() == 3  # the read budget, not forever
    poison = Delivery.get_by_id(ids[1])
    assert (poison.status, poison.last_code, poison.attempts) == ("dead", "lease_expired", 3)
    [letter] = h.rt.dead_letters()
    assert (letter["ref"], letter["step"], letter["code"]) == (str(ids[1]), "read", "lease_expired")
    # The events that shared its batch were not charged into the dead letters with it.
    for did in (ids[0], ids[2]):
        row = Delivery.get_by_id(did)
        assert (row.status, row.outcome) == ("done", "ready")
    assert sorted(t.record_id for t in Task.select()) == ["comment-0", "comment-2"]
