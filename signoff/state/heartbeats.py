"""Worker heartbeats: one row per running worker process, beaten by its own loop.

The row says where the worker runs (host, pid), how many threads it has, when
it started and when its loop last came round. A clean stop deletes it; a worker
killed with SIGKILL leaves it behind, its beat growing old, and any worker
prunes such rows once they are far older than anyone would wait for.
"""

import os
import socket
import uuid

from ..models import WorkerBeat

LIVE_S = 30.0  # a worker that beat within this is live (`healthcheck --max-age` default)
PRUNE_AFTER_S = 3600.0  # a row this silent is no worker any more: dropped


class Heartbeat:
    """The heartbeat row of this worker process: written by ``beat``, deleted by ``stop``."""

    def __init__(self, clock, threads):
        self.clock = clock
        self.row = {"id": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid(),
                    "threads": threads}
        self.started_at = None

    def beat(self):
        """Say the loop came round: one small UPDATE (the first beat, or one after the
        row was pruned during a long pause, writes the row)."""
        now = self.clock.now()
        if self.started_at is None:
            self.started_at = now
            self._insert(now)
        elif not WorkerBeat.update(beat_at=now).where(WorkerBeat.id == self.row["id"]).execute():
            self._insert(now)

    def stop(self):
        """Delete the row: a clean stop leaves no worker to look for."""
        WorkerBeat.delete().where(WorkerBeat.id == self.row["id"]).execute()

    def _insert(self, now):
        WorkerBeat.insert(started_at=self.started_at, beat_at=now, **self.row).on_conflict(
            conflict_target=[WorkerBeat.id], update={WorkerBeat.beat_at: now}).execute()


def prune(now):
    """Drop the rows of workers silent for ``PRUNE_AFTER_S``; returns how many."""
    return WorkerBeat.delete().where(WorkerBeat.beat_at < now - PRUNE_AFTER_S).execute()


def summary(now, max_age=LIVE_S):
    """The workers known: ``{"live", "max_age_s", "freshest_age_s", "workers": [...]}``.

    A worker is live when it beat within ``max_age`` seconds; ``freshest_age_s``
    is the age of the most recent beat of any row (``None`` with no row).
    """
    rows = []
    for w in WorkerBeat.select().order_by(WorkerBeat.beat_at.desc(), WorkerBeat.id):
        age = max(0.0, now - w.beat_at)
        rows.append({"host": w.host, "pid": w.pid, "threads": w.threads,
                     "started_at": w.started_at, "beat_at": w.beat_at,
                     "age_s": round(age, 3), "live": age <= max_age})
    return {"live": sum(r["live"] for r in rows), "max_age_s": max_age,
            "freshest_age_s": rows[0]["age_s"] if rows else None, "workers": rows}
