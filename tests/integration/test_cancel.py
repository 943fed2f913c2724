"""Cancelling a monitor while workers submit its tasks.

What has not started its write is cancelled; what has ends as its receipt says:
``done`` when the receipt confirms it, else ``cancelled`` with ``outcome_unknown``.
A task the host holds a result for is never plain ``cancelled``, and the cancel
never fails as a whole. The in-process tests cancel from inside the host's
``submit`` (a write in flight, exactly); the last one races real worker
processes against a cancel on every backend.
"""

import signal
import subprocess
import time

import pytest

from helpers import child_env, make_event, open_home, read_here, signoff_cmd, stop_worker, wait_for
from signoff.state.statuses import TASK_OPEN
from signoff.models import Attempt, Task

import testhosts  # noqa: E402


@pytest.fixture
def hooked_home(home, clock):
    """Make a home on ``HookHost`` with ``records`` approved tasks; returns its runtime."""
    opened = []

    def make(records):
        rt = open_home(home, "testhosts:HookHost", clock, records)
        read_here(rt)
        opened.append(rt)
        rt.enqueue_events([make_event(event_id=f"evt-{n}", record_id=f"comment-{n}")
                           for n in range(records)])
        rt.run_until_idle()
        answers = rt.approve_many([(t.key, t.digest) for t in Task.select()])
        assert [a["status"] for a in answers] == ["approved"] * records
        return rt

    yield make
    for rt in opened:
        rt.close()


@pytest.fixture
def cancel_in_first_write(hooked_home, monkeypatch):
    """Run one submit batch over ``records`` approved tasks, cancelling the monitor
    when the first write starts; returns ``(rt, key written first, cancel's answer)``.

    ``fault`` arms a reference-host fault first.
    """
    def run(records, fault=None):
        rt = hooked_home(records)
        if fault:
            rt.host().set_fault(fault)
        answers = []

        def hook(key):
            if not answers:
                answers.append((key, rt.cancel("default")))
        monkeypatch.setattr(testhosts, "BEFORE_SUBMIT", hook)
        rt.engine.submit_batch("w1")
        [(key, answer)] = answers
        return rt, key, answer
    return run


def test_a_write_in_flight_at_the_cancel_ends_done_when_its_receipt_confirms(
        cancel_in_first_write):
    rt, key, answer = cancel_in_first_write(1)
    assert answer["active"] is False and answer["writes_in_flight"] == 1
    task = Task.get_by_id(key)
    assert (task.status, task.outcome_unknown, task.lease_token) == ("done", False, None)
    assert rt.host().receipt(key) == task.result


def test_a_cancel_stops_the_writes_of_a_batch_that_have_not_started(cancel_in_first_write):
    rt, written, _ = cancel_in_first_write(3)
    host = rt.host()
    assert [call["key"] for call in host.submit_log()] == [written]
    tasks = {t.key: t for t in Task.select()}
    assert (tasks.pop(written).status) == "done"
    # Never written and never to be: cancelled, and known not to have been written.
    assert [(t.status, t.outcome_unknown, t.write_possible, t.lease_token)
            for t in tasks.values()] == [("cancelled", False, False, None)] * 2
    assert all(host.receipt(key) is None for key in tasks)


def test_a_write_in_flight_whose_receipt_cannot_be_read_ends_cancelled_with_outcome_unknown(
        cancel_in_first_write, clock):
    rt, key, _ = cancel_in_first_write(1, fault="lose-ack")
    task = Task.get_by_id(key)
    assert (task.status, task.outcome_unknown, task.lease_token) == ("cancelled", True, None)
    assert rt.host().receipt(key) == task.result  # written: never reported as plain cancelled
    clock.advance(3600)
    rt.run_until_idle()  # nothing is left to retry, and no lease expires later
    assert Task.get_by_id(key).status == "cancelled"
    assert len(rt.host().submit_log()) == 1
    assert not Attempt.select().where(Attempt.code == "lease_expired").exists()


def test_cancel_ends_ready_approved_and_uncertain_tasks_each_as_it_stands(hooked_home):
    rt = hooked_home(3)
    ready, approved, uncertain = (t.key for t in Task.select().order_by(Task.record_id))
    rt.host().set_fault("lose-ack")
    Task.update(status="ready", approved_digest=None).where(Task.key == ready).execute()
    Task.update(parked=True).where(Task.key == approved).execute()
    rt.engine.submit_batch("w1")
    assert Task.get_by_id(uncertain).status == "uncertain"
    answer = rt.cancel("default")
    assert (answer["tasks_cancelled"], answer["writes_in_flight"]) == (3, 0)
    assert {k: (t.status, t.outcome_unknown, t.parked) for k, t in (
        (k, Task.get_by_id(k)) for k in (ready, approved, uncertain))} == {
        ready: ("cancelled", False, False), approved: ("cancelled", False, False),
        uncertain: ("cancelled", True, False)}


# -- pause, then cancel ------------------------------------------------------------------

def test_a_cancel_ends_a_pause_so_held_and_later_deliveries_end_cancelled(rt, clock):
    rt.pause("default", by="ops", channel="cli")
    rt.enqueue_events([make_event(event_id="evt-held")])
    rt.run_until_idle()
    assert [(e["event_id"], e["status"]) for e in rt.events()] == [("evt-held", "queued")]

    answer = rt.cancel("default", by="ops")
    assert (answer["active"], answer["paused"]) == (False, False)
    rt.enqueue_events([make_event(event_id="evt-later", occurred=int(clock.now()))])
    rt.run_until_idle()
    assert {e["event_id"]: (e["status"], e["outcome"]) for e in rt.events()} == {
        "evt-held": ("done", "cancelled"), "evt-later": ("done", "cancelled")}
    assert [m["paused"] for m in rt.monitors()] == [False]


# -- a real race: worker processes submitting, a cancel landing among them ---------------

RECORDS = 160
# Writes take up to 30 ms, a tenth of the acknowledgements are lost, batches are small.
RACE_HOST_OPTIONS = """
seed = 19
read_timeout_p = 0.0
lose_ack_p = 0.1
submit_latency_s = 0.03
"""


def race_home(home):
    """A home with ``RECORDS`` approved tasks on a host whose writes take a while."""
    rt = open_home(home, "testhosts:ChaosHost", records=RECORDS, options=RACE_HOST_OPTIONS,
                   base_delay_s=0.05, max_delay_s=0.2, batch_size=10)
    read_here(rt)
    now = int(time.time())
    rt.enqueue_events([make_event(event_id=f"evt-{n}", record_id=f"comment-{n}", occurred=now)
                       for n in range(RECORDS)])
    rt.run_until_idle()
    approved = rt.approve_many([(t.key, t.digest) for t in Task.select()])
    assert {a["status"] for a in approved} == {"approved"}
    return rt


def cancel_among_writes(rt, home):
    """Start two worker processes of two threads, cancel once writes flow, let all settle."""
    workers = [subprocess.Popen(signoff_cmd(home, "worker", "--workers", "2"), env=child_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for _ in range(2)]
    try:
        wait_for(lambda: len(rt.host().results()) >= 12, timeout=120, what="the first writes")
        answer = rt.cancel("default")  # among four threads' writes: it must not fail
        wait_for(lambda: not Task.select().where(
            Task.status.in_(list(TASK_OPEN)) | Task.lease_token.is_null(False)).exists(),
            timeout=120, what="every task to settle")
    finally:
        for proc in workers:  # both stop at once; stop_worker's own SIGTERM changes nothing
            proc.send_signal(signal.SIGTERM)
        errors = "".join(stop_worker(proc)[1].decode(errors="replace") for proc in workers)
    assert "Traceback" not in errors, errors
    return answer


def test_a_cancel_racing_worker_processes_never_hides_a_written_result(tmp_path, backend):
    rt = race_home(tmp_path / "home")
    try:
        answer = cancel_among_writes(rt, tmp_path / "home")
        host = rt.host()
        results = {r["key"]: r["result"] for r in host.results()}
        tasks = list(Task.select())
        for task in tasks:
            assert task.status in ("done", "cancelled"), (task.key, task.status)
            if task.status == "done":
                assert results.get(task.key) == task.result
            elif task.key in results:
                assert task.outcome_unknown, f"{task.key} was written but shows plain cancelled"
        cancelled = sum(t.status == "cancelled" for t in tasks)
        assert 0 < cancelled <= answer["tasks_cancelled"] and len(results) < RECORDS
        assert set(host.write_counts().values()) == {1}
    finally:
        rt.close()
