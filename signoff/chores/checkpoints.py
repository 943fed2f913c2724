"""The audit's checkpoints, made by the fleet once a minute (state/checkpoints.py).

Each pass seals what the entries written since the last checkpoint have
advanced and logs the new head: a line an operator can ship out of the home
(docs/audit.md, "Keeping heads outside the home").
"""

import logging

from ..models import db
from ..state.checkpoints import SECTION_LIMIT, seal
from ..storage.homekey import home_id, load_home_key
from . import Chore

log = logging.getLogger("signoff.audit")

EVERY_S = 60.0


def seal_all(rt, key=None, passes=None):
    """Seal the entries no checkpoint covers yet, ``SECTION_LIMIT`` a checkpoint (at most
    ``passes`` checkpoints; all of them when ``None``); the checkpoint rows made."""
    key = key or load_home_key(rt.home)
    made = []
    while passes is None or len(made) < passes:
        with db.atomic():
            row, sealed = seal(key, home_id(key), rt.clock.now())
        if row is not None:
            made.append(row)
            log.info("audit checkpoint %d sealed %d entries; head %s", row.id, sealed, row.hash)
        if sealed < SECTION_LIMIT:
            break
    return made


def _chore(rt):
    made = seal_all(rt, passes=10)
    return {"checkpoints": len(made), "head": made[-1].hash if made else None}


CHECKPOINTS = Chore("audit checkpoints", _chore, EVERY_S, shared=True)
