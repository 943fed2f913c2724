"""Helpers shared by every tier of the suite (fixtures live in ``tests/conftest.py``).

This folder is on the test path (``pythonpath`` in pyproject.toml) as well as the
``helpers`` package: its modules are imported by their own names (``backends``,
``servekit``, ``modelserver``) and the functions below as ``from helpers import …``,
from unit, integration and acceptance tests alike.
"""

import contextlib
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from signoff import storage
from signoff.app import Signoff
from signoff.config import DEFAULT_TOML
from signoff.rules.names import os_account

T0 = 1_000_000
ROOT = Path(__file__).resolve().parent.parent.parent
PLUGINS = ROOT / "tests" / "plugins"
# Who a CLI decision (and a Python API one on its default channel) is counted as.
OPERATOR = "operator:" + os_account()
# The tests' HTTP clients speak plain HTTP to servers on 127.0.0.1, and httpx
# builds a TLS context for every client all the same, loading the CA bundle
# (30 ms each). Handed this one, a client costs a tenth of a millisecond.
LOCAL_TLS = ssl.create_default_context()


# A property test tries ``examples(n)`` cases: all ``n`` where SIGNOFF_TEST_THOROUGH is
# set (.ci/run sets it for every run), a quarter of them (10 at least) in the default
# run people wait for. The cases are drawn afresh on each run, so the quick runs
# still add up; the thorough one is what CI holds every change to.
THOROUGH = bool(os.environ.get("SIGNOFF_TEST_THOROUGH"))


def examples(n):
    """How many cases a property test written for ``n`` tries in this run."""
    return n if THOROUGH else max(10, n // 4)


def make_event(**changes):
    """A matching event for the default fixture record, at the fake clock's start."""
    event = {"event_id": "evt-1", "name": "comment.created", "document": "doc-demo",
             "record_id": "comment-1", "occurred": T0, "text": "wake only"}
    event.update(changes)
    return event


def parent_of(pid):
    """``pid``'s parent process id, or ``None`` once it has exited (or is a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[1])


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


READS = []  # the open test's bindings (conftest opens and ends one per test)


def read_here(app):
    """Let this test's own model queries read ``app``'s database until it ends.

    signoff's code never needs this (every ``Signoff`` method binds its own
    database); a test that looks at rows directly does.
    """
    READS[-1].enter_context(storage.bind(app.database))
    return app


@contextlib.contextmanager
def reads_for_one_test():
    """The bindings ``read_here`` makes in one test, ended when it ends."""
    with contextlib.ExitStack() as stack:
        READS.append(stack)
        try:
            yield
        finally:
            READS.remove(stack)


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


def seed_records(host, count):
    """Put open records ``comment-0`` … ``comment-<count - 1>`` of doc-demo and its material
    into the reference ``host``, in one transaction (not one fsync a record)."""
    from signoff.rules.canonical import canonical
    with host._write():
        for n in range(count):
            host.conn.execute("INSERT INTO records VALUES (?, ?)", (f"comment-{n}", canonical(
                {"id": f"comment-{n}", "document": "doc-demo", "version": 1, "status": "open",
                 "kind": "review", "tenant": "demo-tenant", "text": "add the date",
                 "source": f"reference://doc-demo/comment-{n}"})))
    host.put_material("doc-demo", "2026-11-01")


def ready_task(rt, monitor_id="default", record_id="comment-1", event_id="evt-1"):
    """Enqueue one event for ``record_id`` on ``monitor_id``, process it, and return the
    ``(key, digest)`` of the ready task it made."""
    [line] = rt.enqueue_events([make_event(event_id=event_id, record_id=record_id)],
                               monitor_id=monitor_id)
    assert line.accepted, line.reason
    rt.run_until_idle()
    [task] = [t for t in rt.tasks() if t["record_id"] == record_id and t["monitor"] == monitor_id]
    assert task["status"] == "ready"
    return task["key"], task["digest"]


def refusal(call, *args, **kwargs):
    """The code of the ``Refused`` that ``call(*args, **kwargs)`` raises."""
    from signoff.errors import Refused
    with pytest.raises(Refused) as info:
        call(*args, **kwargs)
    return info.value.code


def signoff_cmd(home, *args):
    """The argv that runs the signoff CLI on ``home`` in a child process."""
    return [sys.executable, "-m", "signoff", "--home", str(home), *args]


def invoke(home, *args, input=None):
    """Run ``signoff --home HOME ARGS`` in this process (click's CliRunner), where what a
    command answers is the point rather than its process; no command may end in a
    traceback."""
    from click.testing import CliRunner
    from signoff.cli import main
    result = CliRunner().invoke(main, ["--home", str(home), *args], input=input)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"signoff {' '.join(args)} raised {result.exception!r}")
    assert "Traceback" not in result.output
    return result


# The ``signoff`` command in a ``python -c`` child, run as its console script runs it;
# the lines appended after it report on what the process did.
AS_CONSOLE_SCRIPT = """
import json, sys
from signoff.__main__ import main
sys.argv = ["signoff", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
"""


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


def stop_worker(proc, timeout=60.0):
    """SIGTERM a worker child started with pipes; its ``(stdout, stderr)`` once it exits.

    One still running after ``timeout`` fails the test with the end of its log, its
    threads' stacks (SIGUSR2) included: what it was waiting for.
    """
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR2)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=5)  # the stacks reach the pipe meanwhile
        proc.kill()
        err = proc.communicate()[1].decode(errors="replace")
        raise AssertionError(f"the worker did not stop within {timeout:g} s:\n{err[-8000:]}")


# -- the review pages in Chromium (browser tests) ------------------------------------

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def log_in(browser, server, name, token):
    """A new page of ``browser`` logged in to ``server`` as ``name``, at a phone's width."""
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(server.url + "/")
    assert page.url.endswith("/login")
    page.fill("input[name=name]", name)
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    assert page.url == server.url + "/"
    return page


def shown_status(page):
    """The status the task page says it shows."""
    return page.get_attribute("#status", "data-status")


def write_mcp_host(home, command, args, pythonpath, extra=""):
    """Point ``home``'s host at the MCP server ``command args`` (``McpHost`` over stdio),
    then the TOML ``extra``. The host tables the home had, and those ``extra`` sets, are
    replaced (a table runs to the next header); the others are kept."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "signoff.toml"
    text = config.read_text(encoding="utf-8") if config.exists() else ""
    names = ["host", r"host\.[\w.]+", *map(re.escape, re.findall(r"(?m)^\[([\w.]+)\]", extra))]
    text = re.sub(rf"(?ms)^\[({'|'.join(names)})\]\n.*?(?=^\[|\Z)", "", text)
    config.write_text(text + f"""
[host]
factory = "signoff.hosts.mcp:McpHost"
[host.options]
command = {json.dumps(command)}
args = {json.dumps(args)}
env = {{ PYTHONPATH = {json.dumps(pythonpath)} }}
timeout_s = 30
{extra}""", encoding="utf-8")
