"""``signoff demo``: the whole story in a fresh home, end to end.

Every step goes through the real command line (its ``main``, handed in by the
``demo`` command and run in this process with ``--json``) and the work is done by real ``signoff worker`` processes: one is
killed with SIGKILL while its task is ``uncertain`` and a new one resolves it by
reading the receipt under the same key. Each step is printed as it ends, and
``report.json`` in the home records what was expected and what happened; it
is kept, and its path printed, on every run.
"""

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from ..config import private_file
from ..state.statuses import TaskStatus as T

RECORD_ID = "comment-1"
DOCUMENT = "doc-demo"
DEMO_DATE = "2026-11-01"
# A retry that waits this long leaves the task visibly `uncertain` until the kill.
BASE_DELAY_S = 3.0
# How long a step may wait for its condition. Generous: on a loaded machine a
# worker's start alone (Python, then an MCP server per thread with --mcp) can
# take most of 15 s; a step that holds returns as soon as it does.
WAIT_S = 60.0
POLL_S = 0.05
REPORT_NAME = "report.json"
# Every variable under this prefix names where signoff's state lives or how a command
# runs: the demo's processes get none of them (see ``sealed_env``).
SEALED_PREFIX = "SIGNOFF_"


class StepFailed(Exception):
    """A step could not reach its result; ``got`` says what happened instead."""

    def __init__(self, got):
        super().__init__(got)
        self.got = got


def run_demo(cli, keep=None, as_json=False, story_class=None):
    """Run the demo; return the report (``report["passed"]`` is the verdict).

    ``cli``: the click group the steps run (``signoff.cli.main``).
    ``keep``: run in this folder and leave it. Otherwise a new temporary folder
    is used; once every step held, everything in it but ``report.json`` is
    removed (a failed run keeps it all). Either way the report's path is
    printed at the end and is in the report (``report``).
    ``as_json``: step lines go to standard error, so the caller can print the
    report as the only document on standard output.
    ``story_class``: the story told (``Demo``, the default; ``signoff.demo`` picks
    the MCP and MCP Events variants).

    The steps read this process's environment as any command does, and its
    processes get ``sealed_env()``: call it where ``sealed()`` holds (the ``demo``
    command starts ``run_sealed`` otherwise).
    """
    started = time.monotonic()
    if keep is not None:
        home, temporary = Path(keep).absolute(), False
    else:
        home, temporary = Path(tempfile.mkdtemp(prefix="signoff-demo-")), True
    demo = (story_class or Demo)(cli, home, as_json)
    demo.say(f"signoff demo in {home}" + (" (kept)" if keep is not None else ""))
    try:
        demo.run()
    finally:
        demo.stop_workers()
    report = demo.report(round(time.monotonic() - started, 2))
    report_path = home / REPORT_NAME
    if demo.home_is_ours:
        report["kept"] = not temporary or not report["passed"]
        report["report"] = str(report_path)
        with contextlib.suppress(OSError):
            with private_file(report_path) as out:
                out.write(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
        if temporary and report["passed"]:
            _remove_all_but(home, REPORT_NAME)
    else:
        report["kept"] = True  # a folder that was not empty is left exactly as it was
        report["report"] = None
    ok = sum(s["ok"] for s in report["steps"])
    verdict = "passed" if report["passed"] else "FAILED"
    demo.say(f"demo {verdict}: {ok}/{len(report['steps'])} steps in {report['seconds']}s")
    if report["kept"]:
        demo.say(f"home: {home}")
    if report["report"]:
        demo.say(f"report: {report_path}")
    return report


def sealed():
    """True when this process's environment holds no ``SIGNOFF_*`` variable."""
    return not any(name.startswith(SEALED_PREFIX) for name in os.environ)


def sealed_env():
    """This process's environment without its ``SIGNOFF_*`` variables, this signoff
    importable: the environment of every process the demo starts.

    The variables an operator exports on a real machine (``SIGNOFF_HOME``,
    ``SIGNOFF_DATABASE_URL``, ``SIGNOFF_QUEUE_URL``, ``SIGNOFF_QUEUE_NAME``, an
    option's ``SIGNOFF_<COMMAND>_<OPTION>``) name that machine's home, database
    and queue; the demo's throw-away home must never reach them.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(SEALED_PREFIX)}
    package_root = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    return env


def run_sealed(keep=None, as_json=False, mcp=False, events=False, channels=False):
    """Run ``signoff demo`` with these options in a child process whose environment is
    ``sealed_env()``, its output straight to this one's; returns its exit code.

    The demo runs its steps through the command line in its own process, and every
    command there reads the environment: sealing the process seals them all.
    """
    args = [*(["--keep", str(keep)] if keep is not None else []), *(["--json"] if as_json else []),
            *(["--mcp"] if mcp else []), *(["--events"] if events else []),
            *(["--channels"] if channels else [])]
    proc = subprocess.Popen([sys.executable, "-m", "signoff", "demo", *args],
                            stdin=subprocess.DEVNULL, env=sealed_env())
    try:
        return proc.wait()
    except KeyboardInterrupt:  # Ctrl-C reached the demo too: it stops its workers first
        proc.wait()
        raise


def _remove_all_but(folder, name):
    """Remove everything in ``folder`` except the file ``name``."""
    for path in folder.iterdir():
        if path.name == name:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()


class Demo:
    """The story's state: the home, the workers started, the steps so far."""

    def __init__(self, cli, home, as_json):
        self.main = cli
        self.home = home
        self.as_json = as_json
        self.steps = []
        self.workers = []
        self.logs = []
        self.kills = 0
        self.finished = False
        self.home_is_ours = False
        self.key = None
        self.digest = None

    # -- output and steps ------------------------------------------------

    def say(self, line):
        click.echo(line, err=self.as_json)

    def step(self, name, expected, action):
        """Run ``action``; the step holds if it returns ``expected``. Raises on failure."""
        t0 = time.monotonic()
        try:
            got = action()
        except StepFailed as exc:
            got = exc.got
        except Exception as exc:  # a failed step ends the demo, never with a traceback
            got = f"{type(exc).__name__}: {exc}"
        seconds = round(time.monotonic() - t0, 2)
        ok = got == expected
        self.steps.append({"name": name, "expected": expected, "got": got, "ok": ok,
                           "seconds": seconds})
        if ok:
            self.say(f"[ok] {name} ({seconds}s)")
        else:
            self.say(f"[FAIL] {name}: expected {_show(expected)}, got {_show(got)} ({seconds}s)")
            raise StepFailed(got)
        return got

    def run(self):
        try:
            self.story()
        except StepFailed:
            pass  # already reported; the remaining steps are not run

    # -- the command line, in this process ---------------------------------

    def cli(self, *args):
        """Run ``signoff --home HOME ARGS --json``; return ``(exit code, parsed stdout)``."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                self.main.main(args=["--home", str(self.home), *args, "--json"],
                          prog_name="signoff", standalone_mode=True)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        text = out.getvalue()
        try:
            data = json.loads(text) if text.strip() else None
        except ValueError:
            data = text.strip()
        return code, data

    def ok(self, *args):
        """Run a command that must succeed; its JSON answer."""
        code, data = self.cli(*args)
        if code != 0:
            detail = data.get("error") if isinstance(data, dict) else data
            raise StepFailed(f"`signoff {' '.join(args)}` exit {code}: {detail}")
        return data

    def refused(self, *args):
        """Run a command that must be refused; its error code."""
        code, data = self.cli(*args)
        if code == 0:
            return f"accepted: {_show(data)}"
        return data.get("error") if isinstance(data, dict) else f"exit {code}"

    # -- workers --------------------------------------------------------------

    def child_env(self):
        """The environment of the demo's processes (``sealed_env``)."""
        return sealed_env()

    def start_worker(self, *args):
        n = len(self.workers) + 1
        log = private_file(self.home / f"worker-{n}.log", "wb")
        self.logs.append(log)
        proc = subprocess.Popen(
            [sys.executable, "-m", "signoff", "--home", str(self.home), "worker", *args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.child_env())
        self.workers.append(proc)
        return proc

    def drain(self):
        """Run ``worker --drain`` to its end; fail the step if it does not exit 0."""
        proc = self.start_worker("--drain")
        try:
            code = proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            raise StepFailed(f"worker --drain still running after {WAIT_S}s") from None
        if code != 0:
            raise StepFailed(f"worker --drain exited {code} (see worker-{len(self.workers)}.log)")

    def stop_workers(self):
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(timeout=10)
        for log in self.logs:
            log.close()

    def wait_for(self, probe, what, proc=None):
        """Poll ``probe`` until it returns something other than ``None``."""
        deadline = time.monotonic() + WAIT_S
        while True:
            value = probe()
            if value is not None:
                return value
            if proc is not None and proc.poll() is not None:
                raise StepFailed(f"the worker exited ({proc.returncode}) while waiting for {what}")
            if time.monotonic() >= deadline:
                raise StepFailed(f"no {what} after {WAIT_S}s")
            time.sleep(POLL_S)

    # -- probes ---------------------------------------------------------------

    def delivery(self, number):
        """Delivery ``number`` (1-based) once the worker has finished with it."""
        rows = self.ok("events", "--all")[::-1]  # oldest first
        if len(rows) >= number and rows[number - 1]["status"] in ("done", "dead"):
            return rows[number - 1]
        return None

    def task(self):
        return self.ok("tasks", "show", self.key)

    def enqueue(self, event_id, record_id=RECORD_ID, monitor="default"):
        event = {"event_id": event_id, "name": "comment.created", "document": DOCUMENT,
                 "record_id": record_id, "occurred": int(time.time()),
                 "text": "please add the demo date"}
        path = self.home / f"{event_id}.json"
        with private_file(path) as out:
            out.write(json.dumps(event) + "\n")
        lines = self.ok("enqueue", "--monitor", monitor, str(path))
        if not (len(lines) == 1 and lines[0]["accepted"]):
            raise StepFailed(f"event not accepted: {_show(lines)}")

    # -- the story ------------------------------------------------------------

    def story(self):
        self.step("fresh home", "empty folder", self.fresh_home)
        self.step(f"init (retry base delay {BASE_DELAY_S:g}s)", "initialised", self.init)
        self.step("host record + material", f"{RECORD_ID} v1 open review; material for {DOCUMENT}",
                  self.host_setup)
        self.step("bind monitor from the grant", f"default active on {DOCUMENT}", self.bind)
        self.step("event → ready", "ready", self.first_event)
        self.step("finish before approval → needs_approval", "needs_approval",
                  lambda: self.refused("tasks", "retry", self.key))
        self.lost_ack_and_kill()
        self.step("same event again → duplicate", "duplicate", self.duplicate)
        self.step("results on the host → 1", 1, self.results)
        self.step("cancel the monitor", "inactive", self.cancel)
        self.step("new event → cancelled", "cancelled", self.after_cancel)
        self.finished = True

    def lost_ack_and_kill(self):
        """The ready task approved, its acknowledgement lost, the worker killed and replaced."""
        self.step("arm lose-ack", {"lose-ack": 1},
                  lambda: self.ok("host", "fault", "lose-ack", "--times", "1")["faults"])
        self.step("approve with the task's digest → approved", "approved",
                  lambda: self.ok("approve", self.key, "--digest", self.digest,
                                  "--by", "demo-owner")["status"])
        self.step("submit loses the ack → uncertain", "uncertain", self.uncertain)
        self.step("kill -9 the worker", "killed", self.kill)
        self.step("new worker --drain → done (receipt read under the same key)", "done",
                  self.recover)

    def fresh_home(self):
        if self.home.exists() and (not self.home.is_dir() or any(self.home.iterdir())):
            return f"{self.home} is not an empty folder"
        self.home.mkdir(parents=True, exist_ok=True)
        self.home_is_ours = True
        return "empty folder"

    def init(self):
        self.ok("init")
        config = self.home / "signoff.toml"
        text = config.read_text(encoding="utf-8")
        line = f"base_delay_s = {BASE_DELAY_S}"
        text, n = re.subn(r"(?m)^base_delay_s\s*=.*$", line, text, count=1)
        if not n:
            text, n = re.subn(r"(?m)^\[retry\]\s*$", "[retry]\n" + line, text, count=1)
        if not n:
            text += f"\n[retry]\n{line}\n"
        config.write_text(text, encoding="utf-8")
        from ..config import load_config
        delay = load_config(self.home).retry.base_delay_s
        return "initialised" if delay == BASE_DELAY_S else f"base_delay_s is {delay}"

    def host_setup(self):
        record = self.ok("host", "record", "--id", RECORD_ID, "--document", DOCUMENT,
                         "--text", "Which date is the demo? (text is read back, never trusted)")
        material = self.ok("host", "material", "--document", DOCUMENT, "--demo-date", DEMO_DATE)
        return (f"{record['id']} v{record['version']} {record['status']} {record['kind']}; "
                f"material for {material['document']}")

    def bind(self):
        m = self.ok("monitor", "bind", "--document", DOCUMENT)
        return f"{m['id']} {'active' if m['active'] else 'inactive'} on {m['document']}"

    def first_event(self):
        worker = self.start_worker("--workers", "2")
        self.enqueue("evt-1")
        row = self.wait_for(lambda: self.delivery(1), "outcome for evt-1", worker)
        if row["outcome"] != "ready" or not row["task_key"]:
            return row["outcome"] or row["last_code"]
        self.key = row["task_key"]
        task = self.task()
        self.digest = task["digest"]
        return task["status"]

    def uncertain(self):
        worker = self.workers[-1]

        def moved():
            status = self.task()["status"]
            return None if status == T.APPROVED else status
        return self.wait_for(moved, "submit outcome", worker)

    def kill(self):
        worker = self.workers[-1]
        if worker.poll() is not None:
            return f"the worker had already exited ({worker.returncode})"
        worker.send_signal(signal.SIGKILL)
        code = worker.wait(timeout=10)
        self.kills += 1
        return "killed" if code == -signal.SIGKILL else f"exit {code}"

    def recover(self):
        self.drain()
        task = self.task()
        confirmed = [h for h in task["history"] if h["step"] == "confirm" and h["code"] == "done"]
        if task["status"] == T.DONE and not confirmed:
            return "done without a confirmed receipt"
        return task["status"]

    def duplicate(self):
        self.enqueue("evt-1")
        self.drain()
        row = self.delivery(2)
        if row is None:
            return "the second delivery was not processed"
        if row["outcome"] == "duplicate" and row["task_key"] != self.key:
            return "duplicate linked to another task"
        return row["outcome"]

    def results(self):
        rows = self.ok("host", "results")
        if len(rows) == 1 and rows[0]["key"] != self.key:
            return "1, under another key"
        if len(rows) == 1 and rows[0]["result"] != self.task()["result"]:
            return "1, with another result"
        return len(rows)

    def cancel(self):
        m = self.ok("monitor", "cancel", "default")
        return "inactive" if not m["active"] else "still active"

    def after_cancel(self):
        self.enqueue("evt-2")
        self.drain()
        row = self.delivery(3)
        return row["outcome"] if row is not None else "the third delivery was not processed"

    # -- the report -------------------------------------------------------------

    def counts(self):
        counts = {"worker_kills": self.kills, "workers_started": len(self.workers)}
        if not self.home_is_ours or not (self.home / "signoff.toml").exists():
            return counts
        with contextlib.suppress(StepFailed, Exception):
            stats = self.ok("stats")
            events = self.ok("events", "--all")
            counts.update(
                deliveries=len(events),
                outcomes=stats["outcomes"],
                tasks=stats["tasks"],
                results_on_host=len(self.ok("host", "results")),
                audit_rows=len(self.ok("audit", "--all")),
                uncertain_recovered=stats["uncertain"]["recovered"],
                dead_letters=stats["dead_letters"]["total"],
            )
        return counts

    def report(self, seconds):
        passed = self.finished and all(s["ok"] for s in self.steps)
        return {"passed": passed, "home": str(self.home), "seconds": seconds,
                "steps": self.steps, "counts": self.counts()}


def _show(value):
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
