"""Group commit for ``signoff serve``: requests that arrive while a commit runs share the next.

Each request hands a job to ``GroupCommit.submit`` and waits for its answer on
the event loop; the writing is ``storage.groupcommit``'s (one writer thread,
a short window that lets concurrent requests catch up, an answer only after
the commit). So an answer means durable, and N concurrent requests cost one
fsync instead of N.
"""

import asyncio

from ..storage.groupcommit import MAX_BATCH, GroupCommit as Writer

WINDOW_S = 0.001


class GroupCommit:
    """Batches jobs for ``write(jobs) -> [answer, ...]``, awaited from the event loop."""

    def __init__(self, write, window_s=WINDOW_S, max_batch=MAX_BATCH):
        self._writer = Writer(write, window_s=window_s, max_batch=max_batch)

    @property
    def batches(self):
        """Batches written so far."""
        return self._writer.batches

    def start(self):
        """Nothing to start: the writer thread starts with the first job."""

    async def submit(self, job):
        """Queue ``job`` and wait until the transaction that wrote it committed."""
        return await asyncio.wrap_future(self._writer.submit(job))

    async def stop(self):
        """Write what is still queued, then stop the writer thread."""
        await asyncio.to_thread(self._writer.close)
