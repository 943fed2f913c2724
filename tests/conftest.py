"""Shared fixtures: a fresh home per test, with a fake clock and the reference host.

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
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backends import Backends
from signoff import storage
from signoff.app import Signoff
from signoff.clock import FakeClock
from signoff.config import DEFAULT_TOML

T0 = 1_000_000
ROOT = Path(__file__).resolve().parent.parent
PLUGINS = Path(__file__).resolve().parent / "plugins"


def make_event(**changes):
    """A matching event for the default fixture record, at the fake clock's start."""
    event = {"event_id": "evt-1", "name": "comment.created", "document": "doc-demo",
             "record_id": "comment-1", "occurred": T0, "text": "wake only"}
    event.update(changes)
    return event


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


def parent_of(pid):
    """``pid``'s parent process id, or ``None`` once it has exited (or is a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[1])


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


def pytest_sessionfinish(session):
    BACKENDS.close()


@pytest.fixture
def home(tmp_path, backend):
    """Where the test's home goes; on a server backend its signoff.toml names it."""
    path = tmp_path / "home"
    if backend is not None:
        backend.write_config(path)
    return path


def state_tables(rt):
    """Every table of ``rt``'s state database: ``{name: [row tuples]}``, on any backend."""
    database = rt.database
    return {t: [tuple(r) for r in database.execute_sql(f'SELECT * FROM "{t}"').fetchall()]
            for t in database.get_tables()}


def set_keys(home, **values):
    """Give keys of the home's ``signoff.toml`` new values (keys that appear once, as
    init writes them)."""
    config = home / "signoff.toml"
    text = config.read_text(encoding="utf-8")
    for key, value in values.items():
        text = re.sub(f"(?m)^{key} = .*$", f"{key} = {value}", text)
    config.write_text(text, encoding="utf-8")


def open_home(home, factory, clock=None, records=1, options="", **keys):
    """Init ``home`` on host ``factory`` (``options``: lines of its ``[host.options]``;
    ``keys``: other config values) with open records ``comment-0`` … and doc-demo's
    material, bound as monitor ``default`` with an hour's window; the caller closes the
    runtime it returns."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "signoff.toml"
    text = config.read_text(encoding="utf-8") if config.exists() else DEFAULT_TOML
    text = text.replace('"signoff.hosts.reference:ReferenceHost"', f'"{factory}"')
    config.write_text(text.replace("[host.options]\n", f"[host.options]\n{options}\n", 1),
                      encoding="utf-8")
    set_keys(home, **keys)
    app = Signoff.init(home, clock=clock)
    host = app.host()
    for n in range(records):
        host.put_record(f"comment-{n}", document="doc-demo", text="add the date")
    host.put_material("doc-demo", "2026-11-01")
    app.bind("doc-demo", window_s=3600)
    return read_here(app)


_READS = []  # the open test's bindings, ended at its teardown


@pytest.fixture(autouse=True)
def _test_reads():
    with contextlib.ExitStack() as stack:
        _READS.append(stack)
        yield
        _READS.remove(stack)


def read_here(app):
    """Let this test's own model queries read ``app``'s database until it ends.

    signoff's code never needs this (every ``Signoff`` method binds its own
    database); a test that looks at rows directly does.
    """
    _READS[-1].enter_context(storage.bind(app.database))
    return app


@pytest.fixture
def rt(home, clock):
    """An initialised home with one open record, its material and a bound monitor."""
    app = Signoff.init(home, clock=clock)
    host = app.host()
    host.put_record("comment-1", document="doc-demo", text="please add the demo date")
    host.put_material("doc-demo", "2026-11-01")
    app.bind("doc-demo")
    yield read_here(app)
    app.close()


@pytest.fixture
def host(rt):
    return rt.host()


def signoff_cmd(home, *args):
    """The argv that runs the signoff CLI on ``home`` in a child process."""
    return [sys.executable, "-m", "signoff", "--home", str(home), *args]


def child_env(**extra):
    """Environment for child processes: the test plug-ins importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), str(ROOT),
                                                      env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def wait_for(predicate, timeout=60.0, interval=0.05, what="condition"):
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def start_worker(home, *args, env=None):
    """Start ``signoff worker`` as a real child process."""
    return subprocess.Popen(signoff_cmd(home, "worker", *args), env=env or child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
