"""Retries an operator can hurry: what `worker --drain` waits for, and what it leaves."""

from helpers import make_event

from signoff.models import Delivery, Task
from signoff.worker import can_progress, left_waiting


def test_a_drain_counts_a_delivery_retry_only_when_it_is_due_within_the_wait(rt, host, clock):
    host.set_fault("read-timeout", times=1)
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    [row] = Delivery.select()
    assert row.status == "retrying" and row.next_at > clock.now()
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
