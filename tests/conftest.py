"""Shared fixtures: a fresh home per test, with a fake clock and the reference host (the
memory host of ``signoff.testing`` in ``tests/unit``).

Backends: with ``SIGNOFF_TEST_DATABASE_URL`` (e.g. postgresql://postgres@127.0.0.1/test)
and/or ``SIGNOFF_TEST_QUEUE_URL`` (redis://... or postgresql://...) set, every test
runs on them: it gets its own PostgreSQL database, cloned from a template that
holds the schema, and its own queue name. They reach every home of the test,
in this process and in child processes, through the ``SIGNOFF_DATABASE_URL`` /
``SIGNOFF_QUEUE_URL`` / ``SIGNOFF_QUEUE_NAME`` overrides, and through the
home's ``signoff.toml`` for homes made by the ``home`` fixture. A server that
is set but unreachable fails the tests; it never skips them.
"""

import contextlib
import gc
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

# Keep the compiled test modules. pytest rewrites the asserts of every test module,
# and of the plug-ins' packages (hypothesis, anyio), in each of the four xdist
# workers: with PYTHONDONTWRITEBYTECODE set (as in this machine's shells)
# nothing is kept, and every worker spent ~6 s of CPU rewriting them again on
# every run. The modules this process imports later are cached the same way; the
# children the tests start still read those caches, and write none themselves.
sys.dont_write_bytecode = False

from backends import Backends
# The helpers stay importable from here for tests that still name conftest.
from helpers import (ARGS, CHROMIUM, PLUGINS, ROOT, T0, child_env, examples, make_event,  # noqa: F401
                     open_home, parent_of, read_here, set_keys, signoff_cmd, start_worker, state_tables,
                     reads_for_one_test, wait_for)
from hypothesis import settings as hypothesis_settings
from signoff import storage
from signoff.app import Signoff
from signoff.clock import FakeClock
from signoff.serve.site import Site
from signoff.testing import forget, write_config


# The property tests that name no number of cases try hypothesis's 100 in a thorough
# run, 25 in the default one (as ``examples`` in tests/helpers does for the others).
hypothesis_settings.register_profile("quick", max_examples=examples(100))
hypothesis_settings.load_profile("quick")


@pytest.fixture
def clock():
    return FakeClock(T0)


BACKENDS = Backends(os.environ.get("SIGNOFF_TEST_DATABASE_URL") or None,
                    os.environ.get("SIGNOFF_TEST_QUEUE_URL") or None)


@pytest.fixture(autouse=True)
def backend(monkeypatch, request):
    """This test's database and queue (SQLite files in the home when nothing is set)."""
    if not BACKENDS.active:
        yield None
        return
    settings = BACKENDS.allocate(request.node.name)
    for name, value in settings.env().items():
        monkeypatch.setenv(name, value)
    try:
        yield settings
    finally:
        if storage.db.obj is not None:  # models used directly reopen the last database
            storage.drop_connection(storage.db.obj)
        # A connection the test left open is reported now, against this test,
        # rather than whenever the collector next runs, in some later test. The
        # young generations hold what the test made; a full pass costs ~0.3 s.
        gc.collect(1)
        BACKENDS.release(settings)


@pytest.fixture(scope="module")
def room_backend(request):
    """The backends of a module's room (``None`` when nothing is set).

    A room is one home, its worker and its server, started once for the tests of a
    module that only read and post; it gets a database and a queue of its own, as a
    test does, allocated before the module's first test and released after its last.
    Each test in a room looks only at what its own ids name (its monitor, task,
    event), so the tests stay independent of their order.
    """
    if not BACKENDS.active:
        yield None
        return
    settings = BACKENDS.allocate(request.module.__name__)
    try:
        yield settings
    finally:
        BACKENDS.release(settings)


@pytest.fixture(scope="module")
def room_home(tmp_path_factory, room_backend):
    """Where the module's room lives; on a server backend its signoff.toml names the room's."""
    path = tmp_path_factory.mktemp("room") / "home"
    if room_backend is not None:
        room_backend.write_config(path)
    return path


@pytest.fixture(scope="module")
def room_env(room_backend):
    """The environment of a room's children (its worker, its server): on its backends."""
    return child_env(**(room_backend.env() if room_backend else {}))


@pytest.fixture
def in_room(room_backend, monkeypatch):
    """This test's homes and children on the room's backends rather than its own."""
    for name, value in (room_backend.env() if room_backend else {}).items():
        monkeypatch.setenv(name, value)
    return room_backend


@contextlib.contextmanager
def example_backends():
    """Fresh backends for one hypothesis example that makes its own home.

    The ``backend`` fixture's database is the test's, shared by all its examples;
    an example that starts from an empty home needs an empty database too.
    """
    if not BACKENDS.active:
        yield None
        return
    settings = BACKENDS.allocate("example")
    saved = {name: os.environ.get(name) for name in settings.env()}
    os.environ.update(settings.env())
    try:
        yield settings
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if storage.db.obj is not None:
            storage.drop_connection(storage.db.obj)
        BACKENDS.release(settings)


@pytest.fixture
def empty_database(backend):
    """Environment naming a database with no schema at all ({} on SQLite: the home's file)."""
    if backend is None or not backend.database_url:
        yield {}
        return
    name, url = BACKENDS.allocate_empty()
    try:
        yield {"SIGNOFF_DATABASE_URL": url}
    finally:
        BACKENDS.drop(name)


def pytest_configure(config):
    """Let the children that tests interrupt see Ctrl-C.

    A suite started in the background (``nohup``, ``&`` in a script) inherits
    SIGINT ignored, Python then leaves it ignored, and every child inherits
    that: ``signoff watch`` would never see the SIGINT a test sends it. A
    handled signal is reset to the default in a child at exec.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionstart(session):
    """Clear what an earlier run that was killed left behind (once, not per xdist worker)."""
    if hasattr(session.config, "workerinput"):
        return
    _stop_orphaned_test_children()
    if BACKENDS.active:
        BACKENDS.sweep_leftovers()


def _stop_orphaned_test_children():
    # A killed run's `signoff worker` children go on polling forever, re-parented
    # to init: a process of this suite's (its home is under pytest's temporary
    # folder) whose parent is gone.
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or parent_of(entry.name) != 1:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if b"signoff" in b" ".join(argv) and any(b"/pytest-of-" in a for a in argv):
            with contextlib.suppress(OSError):
                os.kill(int(entry.name), signal.SIGKILL)


def pytest_collection_modifyitems(config, items):
    """Under the backend switch, skip what would only run the SQLite stage's test again."""
    if not BACKENDS.active:
        return
    skip = pytest.mark.skip(reason="backend-independent: runs when no backend is set")
    for item in items:
        if item.get_closest_marker("backend_independent"):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    """Print the figures tests record (``record_property``), such as the chaos tests'.

    xdist brings a test's properties back from its worker, where a print would stay:
    the figures reach CI's log whatever ``-n`` is.
    """
    for reports in list(terminalreporter.stats.values()):
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if getattr(report, "when", None) == "call":
                    terminalreporter.write_line(f"{name}: {value}")


def pytest_sessionfinish(session):
    BACKENDS.close()


@pytest.fixture
def home(tmp_path, backend):
    """Where the test's home goes; on a server backend its signoff.toml names it."""
    path = tmp_path / "home"
    if backend is not None:
        backend.write_config(path)
    return path


@pytest.fixture
def browser():
    """Debian's headless Chromium through playwright (a missing one fails the test)."""
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(autouse=True)
def _test_reads():
    with reads_for_one_test():
        yield


_INITIALISED = []  # a home `Signoff.init` made, once per process, copied by `rt`


def _initialised_copy(home, clock, tmp_path_factory):
    """``Signoff.init(home, clock=clock)``; on SQLite, a copy of a home init made once.

    Init builds the whole schema (~30 ms of CPU, ~70 ms with its fsyncs) and ``rt``
    serves some 200 tests; opening a copy checks the schema as every command does.
    What init itself does is tested where it is called directly.
    """
    if BACKENDS.active or home.exists():  # server databases are cloned per test already;
        return Signoff.init(home, clock=clock)  # a home a fixture began is init's to finish
    if not _INITIALISED:
        made = tmp_path_factory.mktemp("initialised") / "home"
        Signoff.init(made).close()
        _INITIALISED.append(made)
    shutil.copytree(_INITIALISED[0], home)  # modes too: the home 700, its files 600
    return Signoff(home, clock=clock)


UNIT = ROOT / "tests" / "unit"
_MEMORY = []  # the same, for a home on the memory host


def _memory_copy(home, clock, tmp_path_factory):
    """A home on ``signoff.testing.MemoryHost``, initialised as ``_initialised_copy`` does."""
    if BACKENDS.active:
        write_config(home)
        return Signoff.init(home, clock=clock)
    if not _MEMORY:
        made = tmp_path_factory.mktemp("memory") / "home"
        write_config(made)
        Signoff.init(made).close()
        _MEMORY.append(made)
    shutil.copytree(_MEMORY[0], home)
    return Signoff(home, clock=clock)


@pytest.fixture
def rt(home, clock, tmp_path_factory, request):
    """An initialised home with one open record, its material and a bound monitor.

    In ``tests/unit`` its host is the memory host (``signoff.testing``): the tier's
    tests run the rules in this process with no host file; elsewhere it is the
    reference host. The state and queue are the same either way: SQLite files in
    the test's folder, or the test's server databases under the backend switch.
    """
    unit = UNIT in request.path.parents
    app = (_memory_copy if unit else _initialised_copy)(home, clock, tmp_path_factory)
    host = app.host()
    if unit:
        host.now = clock.now  # when its records change, for `changes`
    host.put_record("comment-1", document="doc-demo", text="please add the demo date")
    host.put_material("doc-demo", "2026-11-01")
    app.bind("doc-demo")
    yield read_here(app)
    app.close()
    forget(home)


@pytest.fixture
def site(rt, clock):
    """``rt``'s home opened again as ``signoff serve`` opens it (a ``Site``), on its clock."""
    opened = Site(rt.home, clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def host(rt):
    return rt.host()


