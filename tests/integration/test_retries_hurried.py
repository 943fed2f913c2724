"""Retries an operator can hurry: what `worker --drain` waits for and what it leaves,
and `events retry`, which makes a retrying delivery due now."""

import json

import pytest
from click.testing import CliRunner
from helpers import OPERATOR, make_event, state_tables

from signoff.cli import main
from signoff.errors import Refused
from signoff.models import Delivery, Task
from signoff.worker import can_progress, left_waiting


def retrying_delivery(rt, host, clock):
    """One event whose read failed once: its delivery, retrying after a backoff."""
    host.set_fault("read-timeout", times=1)
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    [row] = Delivery.select()
    assert row.status == "retrying" and row.next_at > clock.now()
    return row


def test_a_drain_counts_a_delivery_retry_only_when_it_is_due_within_the_wait(rt, host, clock):
    row = retrying_delivery(rt, host, clock)
    assert can_progress() and can_progress(due_by=row.next_at)
    assert not can_progress(due_by=row.next_at - 0.001)
    assert left_waiting(row.next_at - 0.001) == {"deliveries": 1, "tasks": 0,
                                                 "next_due_at": row.next_at}
    assert left_waiting(row.next_at) == {"deliveries": 0, "tasks": 0, "next_due_at": None}


def test_a_drain_counts_a_task_retry_only_when_it_is_due_within_the_wait(rt, host, clock):
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    [task] = Task.select()
    rt.approve(task.key, task.digest)
    host.set_fault("lose-ack", times=1)  # the write's answer is lost: read again later
    rt.run_until_idle()
    task = Task.get_by_id(task.key)
    assert task.status == "uncertain" and task.next_at > clock.now()
    assert can_progress(due_by=task.next_at) and not can_progress(due_by=task.next_at - 0.001)
    assert left_waiting(clock.now()) == {"deliveries": 0, "tasks": 1,
                                         "next_due_at": task.next_at}
    # A task a worker holds is in progress, whenever its next try was due.
    Task.update(lease_token="held", next_at=clock.now() + 3600).where(
        Task.key == task.key).execute()
    assert can_progress(due_by=clock.now())
    assert left_waiting(clock.now())["tasks"] == 0


# -- events retry: a retrying delivery made due now ----------------------------------

def test_a_retrying_delivery_made_due_now_is_tried_at_once_and_audited(rt, host, clock):
    row = retrying_delivery(rt, host, clock)
    answer = rt.retry_delivery(row.id, by="alice")
    assert (answer["delivery"], answer["status"], answer["next_at"]) == (
        row.id, "retrying", clock.now())
    assert Delivery.get_by_id(row.id).next_at == clock.now()
    [audited] = [a for a in rt.audit() if a["code"] == "retry"]
    assert (audited["event_id"], audited["monitor"], audited["actor"], audited["channel"],
            audited["note"]) == ("evt-1", "default", OPERATOR, "cli", "alice")
    rt.run_until_idle()  # no clock moved: it was due now
    row = Delivery.get_by_id(row.id)
    assert (row.status, row.outcome, row.attempts) == ("done", "ready", 2)


def cli(home, *args):
    """``signoff --home HOME ARGS`` in this process: ``(exit code, stdout)``."""
    done = CliRunner().invoke(main, ["--home", str(home), *args])
    assert "Traceback" not in done.output
    return done.exit_code, done.stdout


def test_events_retry_refuses_what_is_not_retrying_and_changes_nothing(rt, home):
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    [row] = Delivery.select()
    assert row.status == "done"
    before = (state_tables(rt)["delivery"], len(rt.audit()))
    for args, code in (([str(row.id)], "not_retrying"), (["999"], "unknown_delivery")):
        status, out = cli(home, "events", "retry", *args, "--json")
        assert status == 1 and json.loads(out)["error"] == code, out
    assert cli(home, "events", "retry", str(row.id))[0] == 1
    assert "is done, not retrying" in CliRunner().invoke(
        main, ["--home", str(home), "events", "retry", str(row.id)]).stderr
    # The listing's options before `retry` are a usage error, not silently dropped.
    assert cli(home, "events", "--status", "done", "retry", str(row.id))[0] == 2
    assert cli(home, "events", "retry", "-1")[0] == 2
    assert (state_tables(rt)["delivery"], len(rt.audit())) == before
    with pytest.raises(Refused) as refused:
        rt.retry_delivery("1")
    assert refused.value.code == "unknown_delivery"


def test_events_retry_answers_the_delivery_due_now(rt, host, clock, home):
    row = retrying_delivery(rt, host, clock)
    status, out = cli(home, "events", "retry", str(row.id), "--json")
    assert status == 0, out
    answer = json.loads(out)
    assert set(answer) == {"delivery", "event_id", "monitor", "status", "outcome", "task_key",
                           "attempts", "last_code", "last_reason", "next_at"}
    assert (answer["status"], answer["last_code"]) == ("retrying", "TimeoutError")
    assert Delivery.get_by_id(row.id).next_at == answer["next_at"]
    assert cli(home, "events", "retry", str(row.id))[1] == \
        f"delivery {row.id}: retrying, due now (TimeoutError)\n"
