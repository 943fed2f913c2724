"""The group commit: concurrent jobs share one write, and nobody is answered before it."""

import asyncio
import threading

import pytest

from signoff.serve.groupcommit import GroupCommit

from conftest import wait_for

# The group commit with in-memory writes: no home, no database, no queue.
pytestmark = pytest.mark.backend_independent


def test_concurrent_jobs_share_writes_and_answers_follow_the_write():
    batches, written = [], set()
    gate = threading.Event()

    def write(jobs):
        gate.wait(10)  # the first write is slow, so the others pile up behind it
        batches.append(list(jobs))
        written.update(jobs)
        return [f"ok {j}" for j in jobs]

    async def main():
        commits = GroupCommit(write)
        commits.start()

        async def one(n):
            answer = await commits.submit(n)
            assert n in written  # answered only once its write returned
            return answer
        tasks = [asyncio.create_task(one(n)) for n in range(100)]
        await asyncio.sleep(0.05)
        gate.set()
        answers = await asyncio.gather(*tasks)
        await commits.stop()
        return answers
    answers = asyncio.run(main())
    assert answers == [f"ok {n}" for n in range(100)]
    assert sorted(j for b in batches for j in b) == list(range(100))
    assert len(batches) <= 3, [len(b) for b in batches]


def test_a_failed_write_fails_every_job_of_its_batch_and_the_next_batch_goes_on():
    calls = []

    def write(jobs):
        calls.append(list(jobs))
        if len(calls) == 1:
            raise OSError("disk full")
        return list(jobs)

    async def main():
        commits = GroupCommit(write, window_s=0.05)
        commits.start()
        first = await asyncio.gather(commits.submit(1), commits.submit(2), return_exceptions=True)
        second = await commits.submit(3)
        await commits.stop()
        return first, second
    first, second = asyncio.run(main())
    assert all(isinstance(e, OSError) for e in first) and second == 3


def test_stop_writes_what_is_still_queued():
    done = []

    async def main():
        commits = GroupCommit(lambda jobs: done.extend(jobs) or list(jobs), window_s=0.05)
        commits.start()
        waiting = [asyncio.create_task(commits.submit(n)) for n in range(5)]
        await asyncio.sleep(0)
        await commits.stop()
        return await asyncio.gather(*waiting)
    assert asyncio.run(main()) == list(range(5)) and done == list(range(5))


def test_a_single_job_is_not_held_back():
    async def main():
        commits = GroupCommit(lambda jobs: list(jobs), window_s=0)
        commits.start()
        answer = await asyncio.wait_for(commits.submit(7), timeout=60)
        await commits.stop()
        return answer
    assert asyncio.run(main()) == 7


def test_a_batch_wakes_the_loop_once_and_a_request_gone_away_is_still_written():
    gate, entered, written = threading.Event(), threading.Event(), []

    def write(jobs):
        entered.set()
        gate.wait(60)
        written.extend(jobs)
        return list(jobs)

    class CountingLoop(asyncio.SelectorEventLoop):
        wake_ups = 0

        def call_soon_threadsafe(self, *args, **kwargs):
            CountingLoop.wake_ups += 1
            return super().call_soon_threadsafe(*args, **kwargs)

    async def main():
        commits = GroupCommit(write)
        first = asyncio.create_task(commits.submit("first"))  # the write the rest wait behind
        assert await asyncio.to_thread(entered.wait, 60)
        rest = [asyncio.create_task(commits.submit(n)) for n in range(20)]
        await asyncio.sleep(0)  # each task queues its job before it first waits
        rest[3].cancel()  # its client went away while the first write ran
        before = CountingLoop.wake_ups
        gate.set()
        answers = await asyncio.gather(first, *rest, return_exceptions=True)
        wake_ups = CountingLoop.wake_ups - before
        after = await commits.submit("after")  # the writer thread is still there
        await commits.stop()
        return answers, wake_ups, after
    with asyncio.Runner(loop_factory=CountingLoop) as runner:
        answers, wake_ups, after = runner.run(main())
    assert isinstance(answers[4], asyncio.CancelledError)
    assert answers[:4] + answers[5:] == ["first", *range(3), *range(4, 20)]
    assert sorted(written[1:-1]) == list(range(20)) and after == "after"  # 3 written too
    assert wake_ups == 2  # one per batch: "first", then the 20 behind it


def test_a_caller_writing_alone_and_the_writer_thread_never_write_at_once():
    # In one process, two writers at once would only queue for SQLite's lock
    # and pay its pauses; the writer thread waits for a lone caller instead.
    from signoff.storage.groupcommit import GroupCommit as Writer
    inside, most, lock = [0], [0], threading.Lock()
    entered = {1: threading.Event(), 2: threading.Event()}

    def write(jobs):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        for job in jobs:
            entered[job].set()
        if 1 in jobs:  # the lone caller stays in its write while job 2 is handed over
            entered[2].wait(0.5)
        with lock:
            inside[0] -= 1
        return [f"ok {j}" for j in jobs]

    commits = Writer(write)
    alone = threading.Thread(target=lambda: commits.run(1))
    alone.start()
    assert entered[1].wait(10)
    second = []  # job 2 finds the lone caller writing: the writer thread takes it
    handed = threading.Thread(target=lambda: second.append(commits.run(2)))
    handed.start()
    handed.join(10)
    alone.join(10)
    assert second == ["ok 2"] and commits.batches == 1
    commits.close()
    assert most[0] == 1


def test_the_writer_thread_runs_finish_in_itself_as_it_stops():
    # What its writes opened (a database connection of its own) is closed there.
    from signoff.storage.groupcommit import GroupCommit as Writer
    finished, delivered = [], []
    commits = Writer(lambda jobs: jobs, name="writer-under-test",
                     deliver=lambda waiters, answers: delivered.extend(zip(waiters, answers)),
                     finish=lambda: finished.append(threading.current_thread().name))
    commits.put(1, "waiter of 1")
    wait_for(lambda: delivered == [("waiter of 1", 1)], what="the writer thread's answer")
    assert finished == []
    commits.close()
    assert finished == ["writer-under-test"]


def _writer_recording(gather_s, batches, gate):
    # A writer whose first write waits for ``gate``; jobs ``put`` without a
    # waiter (None) are answered to nobody, ``run``'s callers as usual.
    from signoff.storage.groupcommit import GroupCommit as Writer

    def write(jobs):
        if not batches:
            assert gate.wait(10)
        batches.append((list(jobs), threading.current_thread().name))
        return list(jobs)

    def deliver(waiters, answers):
        for waiter, answer in zip(waiters, answers):
            if waiter is not None:
                waiter.settle(answer)
    return Writer(write, name="writer-under-test", gather_s=gather_s, deliver=deliver)


def _batch_of_three(commits, batches, gate):
    # A first batch of one, written while three jobs queue behind it: the second.
    commits.put("a", None)
    wait_for(lambda: commits._queue.qsize() == 0, what="the writer taking the first job")
    for job in "bcd":
        commits.put(job, None)
    gate.set()
    wait_for(lambda: [b for b, _ in batches] == [["a"], ["b", "c", "d"]], what="two batches")


def test_a_batch_after_one_of_several_waits_for_as_many_jobs():
    # Callers that shared a commit come back together: the next batch waits for them.
    batches, gate = [], threading.Event()
    commits = _writer_recording(60.0, batches, gate)
    _batch_of_three(commits, batches, gate)
    commits.put("e", None)
    wait_for(lambda: commits._queue.qsize() == 0, what="the writer taking e")
    commits.put("f", None)
    commits.put("g", None)
    wait_for(lambda: len(batches) == 3, what="the third batch")
    commits.close()
    assert batches[2][0] == ["e", "f", "g"]


def test_no_caller_writes_alone_while_several_are_expected_and_then_again():
    batches, gate = [], threading.Event()
    commits = _writer_recording(0.05, batches, gate)
    _batch_of_three(commits, batches, gate)
    # Three are expected: this caller's job goes to the writer thread, which waits
    # out its gathering time for the other two and writes it alone.
    assert commits.run("h") == "h" and batches[2] == (["h"], "writer-under-test")
    # That batch held one job: the next caller writes in its own thread again.
    assert commits.run("i") == "i" and batches[3] == (["i"], threading.current_thread().name)
    commits.close()
