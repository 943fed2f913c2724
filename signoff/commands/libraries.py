"""Peewee and Huey, imported by the ``signoff`` command as its home needs them.

Both libraries import psycopg and redis at their own import whenever those are
installed, which costs the command more than the rest of its start-up
(docs/performance.md). The command owns its process and knows its home before
anything imports either library, so it imports them as an install without the
drivers its home does not use would: while they import, an import of such a
driver fails (a ``None`` entry in ``sys.modules``, the import system's own way
of saying "not here"). Nothing is changed afterwards: each library keeps what
its own import found, and the home never asks for what was held back.

A driver is used when the home's ``[database]`` or ``[queue]`` url (or the
variable that overrides it) names its server. Nothing is held back when a
plug-in from outside the ``signoff`` package is configured (it may use either
library itself), nor when the home's configuration cannot be read (the command
then refuses, or ``init`` makes the home).
"""

import sys

from ..config import EXTRAS, kind_of, load_config, resolve_home
from ..errors import SignoffError


def import_libraries(home):
    """Import Huey and Peewee for ``home``, without the server drivers it does not use.

    Does nothing when either library is imported already: a library is imported once.
    """
    if "huey" in sys.modules or "peewee" in sys.modules:
        return
    held = [name for name in unused_drivers(home) if name not in sys.modules]
    for name in held:
        sys.modules[name] = None
    try:
        import huey  # noqa: F401 (imported while the unused drivers are held back)
        import peewee  # noqa: F401
    finally:
        for name in held:
            del sys.modules[name]


def unused_drivers(home):
    """The server drivers (``psycopg``, ``redis``) ``home`` never uses; none when that
    cannot be told."""
    try:
        config = load_config(resolve_home(home))
        kinds = {kind_of(config.database_url), kind_of(config.queue_url)}
    except (SignoffError, OSError, ValueError):
        return ()
    if not all(spec.startswith("signoff.") for spec in (config.host_factory,
                                                          config.drafter_factory)):
        return ()
    used = {EXTRAS[kind][1] for kind in kinds if kind in EXTRAS}
    return tuple(module for _, module in EXTRAS.values() if module not in used)
