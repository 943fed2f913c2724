"""Group commit: concurrent writers share one transaction, each answered after its commit.

Callers hand a job over and wait for its answer. One writer thread takes every
job waiting (after ``window_s``, which lets concurrent callers catch up; with 0
it takes only what is already waiting), writes them with ``write(jobs)`` in
one transaction, and answers each job only once that transaction committed.
So an answer means durable, and N concurrent callers cost one commit instead
of N: on SQLite they would otherwise queue for its one write lock and pay a
commit each, on PostgreSQL a WAL flush and a round trip each.

``write`` returns one answer per job; an exception as a job's answer is raised
in that job's caller alone (the others of the batch were written). An
exception raised by ``write`` itself is raised in every caller of the batch.

``signoff serve`` waits from its event loop (``put`` with an asyncio future,
and a ``deliver`` that answers a whole batch in one wake-up of the loop); the
Python API waits in its callers' threads
(``run``), where a caller alone writes in its own thread, with no hand-over.
The writer thread waits for such a caller's write to end before it writes: two
writers of one process at once would only queue for SQLite's lock, in pauses
(8 callers enqueueing one event a call: 1,970 calls/s before, 2,570 after),
and on PostgreSQL each would pay a commit where one can wait and share the next.

Callers that shared a commit tend to come back together (a webhook server's
threads, a pool of agents), so with ``gather_s`` a batch that follows one of N
jobs waits up to ``gather_s`` for N jobs, and meanwhile no caller writes
alone. Without that, the first caller back after each commit wrote alone and
the rest queued behind it: 8 threads enqueueing one event a call wrote 2,540
commits for 10,000 calls, 1,600 of them holding one call. Gathering, they
write 1,250 of 8 calls, and on SQLite hold the write lock, which the workers
need too, half as often. Once a batch holds one job (concurrency has ended,
after one wait of at most ``gather_s``), callers write alone again.
"""

import logging
import queue
import threading
import time

log = logging.getLogger("signoff.storage")

MAX_BATCH = 500
# How long the API's batches wait for as many jobs as the last one held. Eight
# callers on two cores that two worker processes also use came back within
# 4 ms nearly always (1,255 commits for 10,000 calls; waiting 2 ms, 1,340 to
# 1,500). A caller that does not come back costs one batch this much, and the
# next batch expects one caller fewer.
GATHER_S = 0.004
_STOP = object()


class GroupCommit:
    """Batches jobs for ``write(jobs) -> [answer, ...]``, run by one writer thread."""

    def __init__(self, write, window_s=0.0, max_batch=MAX_BATCH, name="signoff-commit",
                 deliver=None, finish=None, gather_s=0.0):
        self.write = write
        # ``finish()``, in the writer thread as it stops: to close what its writes opened.
        self.finish = finish
        # ``deliver(waiters, answers)``, in the writer thread once a batch committed
        # (or failed): by default the waiters are ``run``'s callers.
        self.deliver = deliver or _deliver_to_waiters
        self.window_s = window_s
        self.gather_s = gather_s
        self._expected = 1  # jobs in the last batch: what the next one waits for
        self.max_batch = max_batch
        self.name = name
        self.batches = 0  # batches the writer thread wrote
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._alone = threading.Lock()  # held by whoever writes: a lone caller or the thread
        self._thread = None

    def put(self, job, waiter):
        """Queue ``job``; ``deliver`` gets ``waiter`` with its answer after the commit."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._queue.put((job, waiter))

    def run(self, job):
        """Write ``job`` and return its answer once committed (raise its error).

        A caller with no other call being written writes at once in its own
        thread, unless the last batch held several (with ``gather_s``); callers
        arriving meanwhile are grouped by the writer thread.
        """
        if self._expected <= 1 and self._alone.acquire(blocking=False):
            try:
                return _outcome(self.write([job])[0])
            finally:
                self._alone.release()
        waiter = _Waiter()
        self.put(job, waiter)
        return waiter.wait()

    def close(self):
        """Write what is still queued, then stop the writer thread."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._queue.put(_STOP)
        thread.join()

    def _run(self):
        try:
            while True:
                first = self._queue.get()
                if first is _STOP:
                    return
                batch = [first]
                stopping = self._take(batch)
                if not stopping and len(batch) < self._expected:
                    stopping = self._gather(batch)
                if not stopping and len(batch) < self.max_batch and self.window_s:
                    time.sleep(self.window_s)
                    stopping = self._take(batch)
                self._commit(batch)
                if stopping:
                    return
        finally:
            if self.finish is not None:
                self.finish()

    def _gather(self, batch):
        # Wait for the jobs the last batch's callers are expected to bring, up to
        # ``gather_s``; True when the stop marker came meanwhile.
        deadline = time.monotonic() + self.gather_s
        while len(batch) < self._expected:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                item = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if item is _STOP:
                return True
            batch.append(item)
        return self._take(batch)

    def _take(self, batch):
        # True when the stop marker was among the jobs taken.
        while len(batch) < self.max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is _STOP:
                return True
            batch.append(item)
        return False

    def _commit(self, batch):
        jobs = [job for job, _ in batch]
        try:
            with self._alone:
                answers = self.write(jobs)
        except Exception as exc:
            log.error("%s: a batch of %d job(s) failed: %s", self.name, len(batch),
                      type(exc).__name__)
            answers = [exc] * len(batch)
        else:
            self.batches += 1
        if self.gather_s:
            self._expected = len(batch)
        self.deliver([waiter for _, waiter in batch], answers)


class _Waiter:
    """A waiting ``run`` caller's answer: a lock held until the answer is in.

    A ``Future`` waits on a ``Condition``, which allocates a lock and takes two
    more per call. Eight threads enqueueing one event a call beside two worker
    processes (``bench --concurrent --events 10000``) spent 159 µs of CPU a call
    with it, 146 µs with this.
    """

    __slots__ = ("_pending", "answer")

    def __init__(self):
        self._pending = threading.Lock()
        self._pending.acquire()
        self.answer = None

    def settle(self, answer):
        """Hand ``answer`` over and wake the caller (in the writer thread)."""
        self.answer = answer
        self._pending.release()

    def wait(self):
        """The answer once given (its exception raised)."""
        self._pending.acquire()
        return _outcome(self.answer)


def _deliver_to_waiters(waiters, answers):
    for waiter, answer in zip(waiters, answers):
        waiter.settle(answer)


def _outcome(answer):
    if isinstance(answer, BaseException):
        raise answer
    return answer

