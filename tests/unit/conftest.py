"""The unit tier's home: the same fixtures as every tier, over ``signoff.testing.MemoryHost``.

``rt`` and ``host`` here shadow the ones of ``tests/conftest.py``: the home's host is
the in-memory one (``[host] factory = "signoff.testing:MemoryHost"``), so a unit test
runs the pipeline's rules in this process with no host file and no child process.
The state and queue stay real: SQLite files in the test's folder, or, under the
backend switch, the test's own PostgreSQL database and queue (a rule that moves a
status is a statement on that database, so it runs on every backend pair); a test
that touches neither is marked ``backend_independent``.
"""

import shutil

import pytest
from helpers import read_here

from signoff.app import Signoff
from signoff.testing import forget, write_config

_TEMPLATE = []  # a memory-host home `Signoff.init` made, once per process, copied by `rt`


def _memory_home(home, clock, backend, tmp_path_factory):
    """A home on the memory host, initialised; on SQLite, a copy of one init made once."""
    if backend is not None:  # the test's database is a clone of a template already
        write_config(home)
        return Signoff.init(home, clock=clock)
    if not _TEMPLATE:
        made = tmp_path_factory.mktemp("memory") / "home"
        write_config(made)
        Signoff.init(made).close()
        _TEMPLATE.append(made)
    shutil.copytree(_TEMPLATE[0], home)
    return Signoff(home, clock=clock)


@pytest.fixture
def rt(home, clock, backend, tmp_path_factory):
    """A home on the memory host with one open record, its material and a bound monitor."""
    app = _memory_home(home, clock, backend, tmp_path_factory)
    host = app.host()
    host.now = clock.now
    host.put_record("comment-1", document="doc-demo", text="please add the demo date")
    host.put_material("doc-demo", "2026-11-01")
    app.bind("doc-demo")
    yield read_here(app)
    app.close()
    forget(home)


@pytest.fixture
def host(rt):
    return rt.host()
