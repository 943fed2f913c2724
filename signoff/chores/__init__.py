"""Chores: what workers do in the background, beside the pipeline.

A chore is a name, what it runs, and how often: every pass of the worker loop
(each worker does its own), or once an interval for the whole fleet
(``shared``): however many workers run, exactly one of them runs it each
interval, the one that moves its row of ``Chore`` forward (``claim``). The worker
loop lists its chores (``worker.CHORES``) and runs them through ``Schedule``; a
new background job is one more ``Chore``, with no claim of its own to write.

The notify outbox (``notify``) and retention (``retention``) live here; chores
whose work belongs to a step or a decision (closing record batches, a standing
policy's pass) are run from their homes.
"""

import logging
import time
from dataclasses import dataclass
from typing import Callable

from ..models import Chore as ChoreRow
from ..storage import log_failed_pass

log = logging.getLogger("signoff.chores")


@dataclass(frozen=True)
class Chore:
    """A background job: ``run(rt)`` (its summary, or ``None``), every ``every_s``
    seconds (0: every pass of the loop); ``shared``: once an interval for the fleet."""

    name: str
    run: Callable
    every_s: float = 0.0
    shared: bool = False


def claim(name, every_s, now):
    """True for the one worker that takes this interval's run of shared chore ``name``.

    Its row's ``last_run_at`` is moved to ``now`` only if the last run was at
    least ``every_s`` ago: of many workers asking at once, one update matches.
    The common case (not due) is a read, with no write lock.
    """
    row = ChoreRow.get_or_none(ChoreRow.name == name)
    if row is not None and row.last_run_at > now - every_s:
        return False
    if row is None:
        ChoreRow.insert(name=name, last_run_at=0.0).on_conflict_ignore().execute()
    return ChoreRow.update(last_run_at=now).where(
        ChoreRow.name == name, ChoreRow.last_run_at <= now - every_s).execute() == 1


def run_shared(rt, chore):
    """Run shared ``chore`` if this worker claims its interval; its summary (kept on its
    row for ``stats``), or ``None`` when it was not due or another worker took it."""
    if not claim(chore.name, chore.every_s, rt.clock.now()):
        return None
    summary = chore.run(rt)
    ChoreRow.update(last_summary=summary).where(ChoreRow.name == chore.name).execute()
    return summary


class Schedule:
    """When each chore of one worker is next due, by this process's monotonic clock.

    A shared chore is asked about at least once a minute (``ASK_S``): its claim,
    not this schedule, decides whether it runs.
    """

    ASK_S = 60.0

    def __init__(self, chores):
        self.chores = list(chores)
        self.next_at = {chore.name: 0.0 for chore in self.chores}

    def run_due(self, rt):
        """Run the chores due now; one failing is logged and leaves the others to run."""
        for chore in self.chores:
            if time.monotonic() < self.next_at[chore.name]:
                continue
            step = min(chore.every_s, self.ASK_S) if chore.shared else chore.every_s
            self.next_at[chore.name] = time.monotonic() + step
            try:
                run_shared(rt, chore) if chore.shared else chore.run(rt)
            except Exception:
                log_failed_pass(log, f"chore {chore.name}", "it runs again when next due")
