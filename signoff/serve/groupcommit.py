"""Group commit for ``signoff serve``: requests that arrive while a commit runs share the next.

Each request hands a job to ``GroupCommit.submit`` and waits for its answer on
the event loop; the writing is ``storage.groupcommit``'s (one writer thread,
a short window that lets concurrent requests catch up, an answer only after
the commit). So an answer means durable, and N concurrent requests cost one
fsync instead of N. The webhook endpoint batches its reads (a monitor's secrets,
its MCP Events subscriptions) the same way: requests waiting for a read share
the next one.
"""

import asyncio

from ..storage.groupcommit import MAX_BATCH, GroupCommit as Writer

WINDOW_S = 0.001


class GroupCommit:
    """Batches jobs for ``write(jobs) -> [answer, ...]``, awaited from the event loop."""

    def __init__(self, write, window_s=WINDOW_S, max_batch=MAX_BATCH, name="signoff-commit"):
        self._writer = Writer(write, window_s=window_s, max_batch=max_batch, name=name,
                              deliver=_deliver)

    @property
    def batches(self):
        """Batches written so far."""
        return self._writer.batches

    def start(self):
        """Nothing to start: the writer thread starts with the first job."""

    async def submit(self, job):
        """Queue ``job`` and wait for its answer: given once the transaction that wrote
        it committed (for the reads, once it was read)."""
        future = asyncio.get_running_loop().create_future()
        self._writer.put(job, future)
        return await future

    async def stop(self):
        """Write what is still queued, then stop the writer thread."""
        await asyncio.to_thread(self._writer.close)


def _deliver(futures, answers):
    # In the writer thread: one wake-up of each loop for the whole batch, where a
    # future of another thread per request would wake the loop once per request.
    by_loop = {}
    for future, answer in zip(futures, answers):
        by_loop.setdefault(future.get_loop(), []).append((future, answer))
    for loop, settled in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, settled)
        except RuntimeError:  # the loop closed: nobody is left to answer
            pass


def _settle(settled):
    # In the loop. A request that stopped waiting (its client went away) had
    # its future cancelled; its job was still written, only the answer is dropped.
    for future, answer in settled:
        if future.cancelled():
            continue
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)
