"""Batches (docs/policies-and-batches.md): one task per document per window, with the fake clock.

The crash tests at the end run real worker processes on a real home and SIGKILL
one while a batch is open, and one while it is being closed.
"""

import json
import signal

import pytest
from click.testing import CliRunner
from helpers import make_event, wait_for, read_here

from signoff.steps import recordbatches
from signoff.app import Signoff
from signoff.rules.canonical import digest
from signoff.cli import main
from signoff.errors import Refused
from signoff.models import BatchMember, Delivery, RecordBatch, Task

from crashhome import Home
from testhosts import arm_crash, crash_armed  # noqa: E402

WINDOW = 30


@pytest.fixture
def brt(rt, host):
    """``rt`` with a batching monitor ``b`` and five open records."""
    for n in range(1, 6):
        host.put_record(f"c{n}", document="doc-demo")
    rt.bind("doc-demo", "b", batch_window_s=WINDOW)
    return rt


def arrive(rt, n, event_id=None):
    [line] = rt.enqueue_events([make_event(event_id=event_id or f"e{n}", record_id=f"c{n}",
                                           occurred=int(rt.clock.now()))], monitor_id="b")
    assert line.accepted
    rt.run_until_idle()
    return Delivery.get_by_id(line.delivery)


def test_records_within_the_window_become_one_task_drafted_from_all(brt, clock, host):
    rt = brt
    for n in (1, 2, 3):
        assert arrive(rt, n).outcome == "batched"
        clock.advance(10)
    assert Task.select().count() == 0 and recordbatches.holds_drain()
    assert recordbatches.close_due(rt) == 1  # T0 + 30: the window has passed
    [task] = Task.select()
    covers = [["c1", 1], ["c2", 1], ["c3", 1]]
    [monitor] = [m for m in rt.monitors() if m["id"] == "b"]
    assert monitor["batch_window_s"] == WINDOW
    assert task.key == digest(["b", monitor["grant_digest"], covers])
    assert task.result["records"] == covers and task.status == "ready"
    assert task.result["sources"][:3] == [f"reference://doc-demo/c{n}" for n in (1, 2, 3)]
    assert "3 comments" in task.result["draft"]
    assert [r["id"] for r in task.record] == ["c1", "c2", "c3"]
    shown = rt.task(task.key)
    assert shown["covers"] == covers
    assert not recordbatches.holds_drain()
    assert {d["task_key"] for d in rt.events()} == {task.key}
    assert recordbatches.close_due(rt) == 0  # closing again changes nothing
    assert Task.select().count() == 1
    arrive(rt, 1)  # a redelivery is a duplicate of the batch's task
    assert rt.events()[-1]["outcome"] == "duplicate"
    assert rt.events()[-1]["task_key"] == task.key


def test_event_ids_stored_escaped_are_linked_to_their_batch_task(brt, clock):
    # U+F0000 is a valid label character that text columns store escaped: the
    # link from each event to the batch's task must find the stored form.
    rt = brt
    ids = ["e-\U000F0000-1", "e-\U000F0000-2"]
    for n, event_id in enumerate(ids, 1):
        assert arrive(rt, n, event_id=event_id).outcome == "batched"
    clock.advance(WINDOW)
    assert recordbatches.close_due(rt) == 1
    [task] = Task.select()
    linked = {d["event_id"]: d["task_key"] for d in rt.events()}
    assert linked == {event_id: task.key for event_id in ids}


def test_a_record_after_the_window_starts_a_new_batch(brt, clock):
    rt = brt
    arrive(rt, 1)
    clock.advance(WINDOW)
    arrive(rt, 2)  # the first window is over, even though nobody closed it yet
    assert RecordBatch.select().count() == 2
    assert recordbatches.close_due(rt) == 1
    clock.advance(WINDOW)
    assert recordbatches.close_due(rt) == 1
    assert sorted(t.result["records"] for t in Task.select()) == [[["c1", 1]], [["c2", 1]]]


def test_two_workers_joining_at_once_open_one_batch(brt, clock, home):
    # The second joiner runs on its own connection while the first holds its
    # transaction open: without a lock on the (monitor, document) pair both
    # would find no open batch and open one each.
    import threading
    from signoff import storage
    from signoff.models import db
    other = Signoff(home, clock=clock)
    read_here(other)
    first_in, release, done = threading.Event(), threading.Event(), []

    def join(rt, record_id, hold):
        try:
            with storage.session(rt.database), db.atomic():
                recordbatches.join([{"monitor": "b", "document": "doc-demo", "record_id": record_id,
                                "version": 1, "event_id": f"e-{record_id}",
                                "window_s": WINDOW}], clock.now())
                if hold:
                    first_in.set()
                    release.wait(30)
            done.append(record_id)
        finally:
            rt.close()  # this thread's connections

    a = threading.Thread(target=join, args=(brt, "c1", True))
    b = threading.Thread(target=join, args=(other, "c2", False))
    a.start()
    assert first_in.wait(30)
    b.start()
    b.join(0.5)  # the second joiner waits for the first transaction (or would race it)
    release.set()
    a.join(30), b.join(30)
    assert sorted(done) == ["c1", "c2"]
    assert RecordBatch.select().count() == 1
    assert {m.batch for m in BatchMember.select()} == {RecordBatch.get().id}


def test_a_record_version_is_in_one_batch_only(brt, clock):
    rt = brt
    arrive(rt, 1, "first-copy")
    arrive(rt, 1, "second-copy")  # another event id, the same record version
    assert BatchMember.select().count() == 1
    clock.advance(WINDOW)
    arrive(rt, 1, "third-copy")
    assert BatchMember.select().count() == 1
    recordbatches.close_due(rt)
    clock.advance(WINDOW)
    recordbatches.close_due(rt)
    [task] = Task.select()
    assert task.result["records"] == [["c1", 1]]


def test_every_record_is_read_back_before_drafting(brt, clock, host):
    rt = brt
    for n in (1, 2, 3):
        arrive(rt, n)
    host.put_record("c2", status="closed")
    host.put_record("c3", version=2)
    clock.advance(WINDOW)
    recordbatches.close_due(rt)
    [task] = Task.select()
    assert task.result["records"] == [["c1", 1]]
    assert {(m.record_id, m.kept) for m in BatchMember.select()} == {
        ("c1", True), ("c2", False), ("c3", False)}


def test_a_batch_nothing_of_which_is_still_open_closes_without_a_task(brt, clock, host):
    rt = brt
    arrive(rt, 1)
    host.put_record("c1", status="closed")
    clock.advance(WINDOW)
    assert recordbatches.close_due(rt) == 1
    assert Task.select().count() == 0
    assert RecordBatch.get().code == "source_nonmatch"


def batch_of_two(rt, clock):
    """Records c1 and c2 in one batch, closed into its ready task."""
    arrive(rt, 1)
    arrive(rt, 2)
    clock.advance(WINDOW)
    recordbatches.close_due(rt)
    [task] = Task.select()
    return task


def test_an_approved_batch_is_written_once_and_never_changes(brt, clock, host):
    rt = brt
    task = batch_of_two(rt, clock)
    assert rt.approve(task.key, task.digest)["status"] == "approved"
    arrive(rt, 3)  # arrives after the close: a new batch, the approved one is untouched
    rt.run_until_idle()
    assert Task.get_by_id(task.key).status == "done"
    assert Task.get_by_id(task.key).result["records"] == [["c1", 1], ["c2", 1]]
    assert [r["key"] for r in host.results()] == [task.key]
    assert RecordBatch.select().where(RecordBatch.closed_at.is_null()).count() == 1


def test_approval_reads_back_every_record_of_the_batch(brt, clock, host):
    rt = brt
    task = batch_of_two(rt, clock)
    host.put_record("c2", version=5)
    with pytest.raises(Refused) as info:
        rt.approve(task.key, task.digest)
    assert info.value.code == "source_changed"
    assert Task.get_by_id(task.key).status == "blocked"


def test_a_close_whose_members_changed_meanwhile_does_not_commit(brt, clock):
    rt = brt
    arrive(rt, 1)
    batch = RecordBatch.get()
    stale = list(BatchMember.select())
    arrive(rt, 2)  # joined after ``stale`` was read
    assert recordbatches._commit(batch, stale, clock.now(), code="test") == 0
    assert RecordBatch.get_by_id(batch.id).closed_at is None


def test_without_a_batch_window_the_single_record_path_is_unchanged(rt):
    [line] = rt.enqueue_events([make_event()])
    rt.run_until_idle()
    assert Delivery.get_by_id(line.delivery).outcome == "ready"
    assert RecordBatch.select().count() == 0
    assert rt.monitors()[0]["batch_window_s"] is None
    assert rt.task(Task.get().key)["covers"] is None


def test_bind_batch_window_cli(tmp_path):
    home = tmp_path / "cli-home"
    Signoff.init(home).close()
    run = CliRunner().invoke(main, ["--home", str(home), "monitor", "bind", "--document",
                                    "doc-demo", "--batch-window", "5", "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["batch_window_s"] == 5
    bad = CliRunner().invoke(main, ["--home", str(home), "monitor", "bind", "--id", "x",
                                    "--document", "doc-demo", "--batch-window", "0", "--json"])
    assert bad.exit_code == 1 and json.loads(bad.stdout)["error"] == "invalid_monitor"


# -- crashes, with real worker processes --------------------------------------------

@pytest.fixture
def batch_home(tmp_path):
    h = Home(tmp_path / "home", records=4)
    h.rt.bind("doc-demo", "b", window_s=600, batch_window_s=3)
    yield h
    h.close()


def events_for(h, ns, prefix="evt"):
    return [dict(h.event(n, f"{prefix}-{n}")) for n in ns]


def assert_one_batch_each(h, expected):
    members = list(BatchMember.select())
    assert sorted(m.record_id for m in members) == sorted(expected)  # none lost, none twice
    tasks = list(Task.select())
    covered = sorted(rid for t in tasks for rid, _ in t.result["records"])
    assert covered == sorted(expected)
    assert "Traceback" not in h.stderr(), h.stderr()


@pytest.mark.slow  # chaos: a SIGKILL and a restart; CI runs the slow tests
def test_a_worker_killed_while_a_batch_is_open_loses_nothing(batch_home):
    h = batch_home
    h.rt.enqueue_events(events_for(h, [0, 1]), monitor_id="b")
    victim = h.worker()
    wait_for(lambda: Delivery.select().where(Delivery.outcome == "batched").count() == 2,
             what="both records in the open batch")
    assert recordbatches.holds_drain()
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=30) == -signal.SIGKILL
    h.rt.enqueue_events(events_for(h, [1, 2], "again"), monitor_id="b")  # a copy, and a new one
    h.drain()  # returns only once the open batch has closed
    assert not recordbatches.holds_drain()
    assert_one_batch_each(h, ["comment-0", "comment-1", "comment-2"])


@pytest.mark.slow  # chaos: a SIGKILL and a restart; CI runs the slow tests
def test_a_worker_killed_while_closing_a_batch_closes_it_once_after_restart(batch_home):
    h = batch_home
    h.rt.enqueue_events(events_for(h, [0, 1, 3]), monitor_id="b")
    h.rt.run_until_idle()  # ingest here, in this process: the batch is open for 3 s
    assert Delivery.select().where(Delivery.outcome == "batched").count() == 3
    assert recordbatches.holds_drain()
    arm_crash(h.path, "after-get")  # the close's first read-back kills the worker
    assert h.drain_through_crashes() >= 1
    assert crash_armed(h.path) is None
    assert RecordBatch.select().where(RecordBatch.closed_at.is_null()).count() == 0
    assert_one_batch_each(h, ["comment-0", "comment-1", "comment-3"])


def test_a_failing_close_is_retried_with_backoff_then_closes_without_a_task(brt, clock, host):
    rt = brt
    arrive(rt, 1)
    clock.advance(WINDOW)
    host.set_fault("read-timeout", 2)
    assert recordbatches.close_due(rt) == 0
    batch = RecordBatch.get()
    assert (batch.attempts, batch.code, batch.closed_at) == (1, "TimeoutError", None)
    assert batch.next_at > clock.now()
    assert recordbatches.close_due(rt) == 0  # not due again yet: nothing is read
    assert host.faults() == {"read-timeout": 1}
    clock.advance(60)
    assert recordbatches.close_due(rt) == 0
    clock.advance(60)
    assert recordbatches.close_due(rt) == 1  # the host answers again
    assert Task.get().result["records"] == [["c1", 1]]
    arrive(rt, 2)
    host.set_fault("read-timeout", 1000)  # from now on the host never answers
    clock.advance(WINDOW)
    for _ in range(rt.config.retry.read_attempts):
        assert recordbatches.holds_drain()
        recordbatches.close_due(rt)
        clock.advance(60)
    assert not recordbatches.holds_drain()  # the read budget is spent: closed, and says why
    last = RecordBatch.select().order_by(RecordBatch.id.desc()).get()
    assert (last.task_key, last.code) == (None, "TimeoutError")
    assert Task.select().count() == 1
