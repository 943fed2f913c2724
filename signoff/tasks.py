"""Huey tasks: the wake-ups that make workers ingest deliveries and submit tasks.

A message carries nothing but "there is work": the rows say what. Huey deletes
a message before running it, so a task that dies mid-way loses nothing but the
wake-up, and the reaper sends another.
"""

import logging
import os
import socket
import threading
import time

from peewee import InterfaceError, OperationalError

from .storage import log_failed_pass
from .wakeups import WakePolicy

log = logging.getLogger("signoff.worker")

# How long one wake-up keeps claiming batches before yielding its thread.
SLICE_S = 1.0


def worker_name():
    """This thread's name as it appears in leases and attempt history."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.current_thread().name}"


class Wakers:
    """The two Huey tasks bound to one runtime, and the wake-up policy that sends them.

    Callers ask for wake-ups with ``wake`` / ``top_up`` (see ``signoff.wakeups``)
    and ``flush`` what is held before closing; ``ingest`` and ``submit`` send
    unconditionally and are the policy's own.
    """

    def __init__(self, queue, runtime):
        self.queue = queue
        self.policy = WakePolicy(self, runtime.claim_limit)

        @queue.task(name="signoff.ingest")
        def ingest():
            _drain_for_a_while("ingest", runtime.ingest_batch,
                               lambda: self.top_up({"ingest": 1}))

        @queue.task(name="signoff.submit")
        def submit():
            _drain_for_a_while("submit", runtime.submit_batch,
                               lambda: self.top_up({"submit": 1}))

        self._ingest, self._submit = ingest, submit
        # Messages name their task as Huey's registry does: read it off one.
        self._kind_of = {queue.serializer.deserialize(queue.serialize_task(task.s())).name: kind
                         for task, kind in ((ingest, "ingest"), (submit, "submit"))}

    def wake(self, kind, rows=1):
        """Make sure wake-ups will be waiting for ``rows`` newly claimable rows of ``kind``."""
        return self.policy.wake(kind, rows)

    def top_up(self, backlog):
        """Make sure wake-ups are waiting for ``{kind: claimable rows}``, now."""
        return self.policy.top_up(backlog)

    def flush(self):
        """Send the wake-ups ``wake`` is holding back, now."""
        return self.policy.flush()

    @property
    def unreachable(self):
        """Why the last send failed, while the queue cannot be reached; else ``None``."""
        return self.policy.unreachable

    def send(self, kind, count):
        """Send ``count`` wake-ups of ``kind`` (ingest or submit)."""
        getattr(self, kind)(count)

    def ingest(self, count=1):
        """Send ``count`` wake-ups for waiting deliveries."""
        for _ in range(count):
            self._ingest()

    def submit(self, count=1):
        """Send ``count`` wake-ups for approved or uncertain tasks."""
        for _ in range(count):
            self._submit()

    def pending(self):
        """Wake-ups waiting in the queue."""
        return self.queue.pending_count()

    def pending_by_kind(self, limit):
        """``{kind: wake-ups waiting}`` among the next ``limit`` messages of the queue."""
        counts = dict.fromkeys(self._kind_of.values(), 0)
        for data in self.queue.storage.enqueued_items(limit):
            # The message's name only: a task this process does not know (another
            # version's) is counted as nothing instead of logged as broken.
            kind = self._kind_of.get(self.queue.serializer.deserialize(data).name)
            if kind is not None:
                counts[kind] += 1
        return counts


def _drain_for_a_while(step, batch, wake_again):
    deadline = time.monotonic() + SLICE_S
    while True:
        try:
            claimed, full = batch(worker_name())
        except (OperationalError, InterfaceError):
            # The database stayed out of reach for the batch's whole reconnect
            # window: one line, not Huey's traceback. What the batch claimed
            # waits for its lease to end; the reaper wakes it again.
            log_failed_pass(log, f"{step} batch", "its rows wait for the reaper")
            return
        if not full:
            return
        if time.monotonic() >= deadline:
            # More is waiting: hand the rest to the next free thread.
            wake_again()
            return
