"""Group commit: requests that arrive while a commit runs share the next one.

Each request hands a job to ``GroupCommit.submit`` and waits for its answer.
One writer thread takes every job waiting (after a short window that lets
concurrent requests catch up), writes them in one transaction, and resolves
each job's future only after that transaction committed. So an answer means
durable, and N concurrent requests cost one fsync instead of N.
"""

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("signoff.serve")

WINDOW_S = 0.001
MAX_BATCH = 500


class GroupCommit:
    """Batches jobs for ``write(jobs) -> [answer, ...]``, run in one writer thread."""

    def __init__(self, write, window_s=WINDOW_S, max_batch=MAX_BATCH):
        self.write = write
        self.window_s = window_s
        self.max_batch = max_batch
        self.batches = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="signoff-commit")
        self._queue = None
        self._task = None

    def start(self):
        """Start the batching loop on the running event loop."""
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def submit(self, job):
        """Queue ``job`` and wait until the transaction that wrote it committed."""
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((job, future))
        return await future

    async def stop(self):
        """Write what is still queued, then stop the loop and the writer thread."""
        if self._task is not None:
            self._queue.put_nowait(None)
            await self._task
        self._pool.shutdown(wait=True)

    async def _run(self):
        while True:
            first = await self._queue.get()
            if first is None:
                return
            batch = [first]
            stopping = self._take(batch)
            if not stopping and len(batch) < self.max_batch and self.window_s:
                await asyncio.sleep(self.window_s)
                stopping = self._take(batch)
            await self._commit(batch)
            if stopping:
                return

    def _take(self, batch):
        # True when the stop marker was among the jobs taken.
        while len(batch) < self.max_batch and not self._queue.empty():
            item = self._queue.get_nowait()
            if item is None:
                return True
            batch.append(item)
        return False

    async def _commit(self, batch):
        jobs = [job for job, _ in batch]
        try:
            answers = await asyncio.get_running_loop().run_in_executor(self._pool, self.write, jobs)
        except Exception as exc:
            log.error("group commit of %d job(s) failed: %s", len(jobs), type(exc).__name__)
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        self.batches += 1
        for (_, future), answer in zip(batch, answers):
            if not future.done():  # a client that went away cancelled its wait
                future.set_result(answer)
