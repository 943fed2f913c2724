"""Operator hardening at the command line: arguments, JSON errors, keys, listings, names.

Uses the CLI helpers and the real-clock ``home`` / ``ready`` fixtures of
``test_cli.py``; the same rules through the Python API are in ``test_hardening.py``.
"""

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, child_env, signoff_cmd
from test_cli import event, home, invoke, jsonl, ok, process, ready, refused  # noqa: F401

TASK_STATUSES = ["approved", "blocked", "cancelled", "dead", "done", "expired", "ready",
                 "rejected", "uncertain"]


# -- 3. redraft -------------------------------------------------------------------------

def test_tasks_redraft_gives_a_blocked_task_a_way_forward(ready):
    home, task = ready
    ok(home, "host", "record", "--id", "comment-1", "--text", "edited, same version")
    ok(home, "host", "material", "--document", "doc-demo", "--demo-date", "2026-12-24")
    refused(home, "approve", task["key"], "--digest", task["digest"], code="source_changed")
    refused(home, "tasks", "retry", task["key"], code="not_retryable")
    answer = ok(home, "tasks", "redraft", task["key"])
    assert (answer["key"], answer["status"], answer["changed"]) == (task["key"], "ready", True)
    shown = ok(home, "tasks", "show", task["key"])
    assert shown["digest"] == answer["digest"] != task["digest"]
    assert [d["digest"] for d in shown["previous_drafts"]] == [task["digest"]]
    human = invoke(home, "tasks", "show", task["key"]).stdout
    assert "what changed in the draft:" in human
    assert "-Suggested demo date for doc-demo: 2026-11-01" in human
    assert "+Suggested demo date for doc-demo: 2026-12-24" in human
    refused(home, "tasks", "redraft", "0" * 64, code="unknown_task")
    ok(home, "reject", task["key"])
    refused(home, "tasks", "redraft", task["key"], code="not_redraftable")


# -- 4. arguments validated ------------------------------------------------------------------

@pytest.mark.parametrize("args, valid", [
    (["tasks", "list", "--status", "uncertian"], TASK_STATUSES),
    (["events", "--status", "finished"], ["dead", "done", "processing", "queued", "retrying"]),
])
def test_a_status_filter_must_be_a_real_status(home, args, valid):
    human = invoke(home, *args)
    assert human.exit_code == 2 and all(v in human.stderr for v in valid), human.stderr
    answer = json.loads(invoke(home, *args, "--json").stdout)
    assert answer["error"] == "usage" and all(v in answer["message"] for v in valid)


def test_an_empty_home_is_a_usage_error_never_a_fall_back(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in (["--home", "", "tasks", "list"], ["--home", " ", "init"]):
        result = invoke_env(args, SIGNOFF_HOME=str(home))
        assert result.exit_code == 2 and "--home" in result.stderr, result.output
        answer = json.loads(invoke_env(args + ["--json"], SIGNOFF_HOME=str(home)).stdout)
        assert answer["error"] == "usage" and "--home" in answer["message"]
    assert not (tmp_path / ".signoff").exists()


def invoke_env(args, **env):
    from click.testing import CliRunner
    from signoff.cli import main
    return CliRunner().invoke(main, args, env=env)


def test_bind_refuses_a_document_the_grant_does_not_cover(home):
    answer = refused(home, "monitor", "bind", "--id", "m2", "--document", "doc-secret",
                     code="access")
    assert "doc-secret" in answer["message"]
    assert [m["id"] for m in ok(home, "monitor", "list")] == ["default"]


# -- 5. --json means JSON ----------------------------------------------------------------------

def test_usage_errors_under_json_are_one_json_document(home):
    for args in (["approve", "k", "--json"], ["--json-typo"], ["tasks", "list", "--json",
                                                               "--limit", "0"]):
        result = invoke(home, *args)
        assert result.exit_code == 2
        if "--json" in args:
            assert set(json.loads(result.stdout)) == {"error", "message"}
        else:
            assert result.stdout == ""


def test_an_interrupted_enqueue_still_prints_valid_json(home):
    lines = jsonl(*(event(f"e{i}") for i in range(2500)))  # more than one stored chunk
    proc = subprocess.Popen(signoff_cmd(home, "enqueue", "--json"), env=child_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdin.write(lines.encode())
    proc.stdin.flush()  # stdin stays open: the command waits for more lines
    # The list opens, then the first chunk's answers follow its commit: once
    # one answer is out, the first chunk is stored and the rest is not. Read
    # the pipe unbuffered: communicate() below reads the rest from the same fd.
    first = b""
    while b"}" not in first:
        chunk = os.read(proc.stdout.fileno(), 65536)
        assert chunk, (first, proc.stderr.read())
        first += chunk
    assert first.startswith(b"[\n{"), first
    _wait_for_stored(home, 2000)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    answers = json.loads(first + out)
    assert answers and all(a["accepted"] for a in answers)
    assert proc.returncode == 1 and b"interrupted" in err and b"Traceback" not in err
    stored = {r["delivery"] for r in ok(home, "events", "--all")}
    assert len(stored) == 2000  # the first chunk; the rest was never read
    assert {a["delivery"] for a in answers} <= stored  # every answer printed was stored


def _wait_for_stored(home, count):
    from helpers import wait_for
    from signoff.app import Signoff
    rt = Signoff(home)
    try:
        wait_for(lambda: len(rt.events()) >= count, what=f"{count} stored deliveries")
    finally:
        rt.close()


def test_watch_json_help_says_it_streams_one_snapshot_per_line(home):
    text = " ".join(invoke(home, "watch", "--help").stdout.split())
    assert "one JSON snapshot" in text and "per line" in text


# -- 6. keys as people use them -----------------------------------------------------------------

def test_a_key_prefix_works_in_every_command(ready):
    home, task = ready
    prefix = task["key"][:8]
    assert ok(home, "tasks", "show", prefix)["key"] == task["key"]
    assert ok(home, "approve", prefix, "--digest", task["digest"])["key"] == task["key"]
    assert ok(home, "tasks", "retry", prefix)["key"] == task["key"]
    answer = refused(home, "tasks", "show", task["key"][:6], code="unknown_task")
    assert "at least 8" in answer["message"]


def test_listings_say_where_key_and_digest_come_from(ready):
    home, _ = ready
    for args in (["tasks", "list"], ["events"]):
        text = invoke(home, *args).stdout
        assert "KEY" in text and "DIGEST" in text and "tasks show KEY" in text


# -- 7. bounded listings ------------------------------------------------------------------------

def test_listings_are_bounded_newest_first_with_a_line_for_the_rest(home):
    ok(home, "enqueue", input=jsonl(*(event(f"e{i:02}") for i in range(60))))
    human = invoke(home, "events").stdout.splitlines()
    assert "10 more; use --limit N or --all to see them" in human
    rows = [line for line in human if len(line.split()) == 9 and line.split()[0].isdigit()]
    assert len(rows) == 50 and rows[0].split()[1] == "e59"
    result = invoke(home, "events", "--json")
    assert [r["event_id"] for r in json.loads(result.stdout)][:2] == ["e59", "e58"]
    assert len(json.loads(result.stdout)) == 50 and "10 more" in result.stderr
    assert len(ok(home, "events", "--all")) == 60
    assert [r["event_id"] for r in ok(home, "events", "--limit", "2")] == ["e59", "e58"]
    assert invoke(home, "events", "--limit", "2", "--all").exit_code == 2
    assert [r["code"] for r in ok(home, "audit", "--all")] == ["bound"]  # accepting audits nothing
    assert ok(home, "dlq", "list") == [] and ok(home, "tasks", "list", "--all") == []


# -- 8. names from people --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["", "eve\nFAKE approved by admin", "eve\u202enimda"])
def test_approve_by_refuses_names_that_could_forge_a_view(ready, name):
    home, task = ready
    refused(home, "approve", task["key"], "--digest", task["digest"], "--by", name,
            code="invalid_name")
    assert ok(home, "tasks", "show", task["key"])["status"] == "ready"
    human = invoke(home, "approve", task["key"], "--digest", task["digest"], "--by", name)
    assert human.exit_code == 1 and len(human.stderr.strip().splitlines()) == 1


# -- 9. private by default -------------------------------------------------------------------------

def test_init_and_work_keep_the_home_private(ready):
    home, task = ready
    ok(home, "approve", task["key"], "--digest", task["digest"])
    process(home)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in home.iterdir()}
    assert modes and modes == {name: 0o600 for name in modes}


# -- 11. the demo keeps its report ---------------------------------------------------------------

def test_demo_prints_where_its_report_is_and_keeps_it(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "signoff", "demo"], cwd=ROOT,
                          env=child_env(TMPDIR=str(tmp_path)), capture_output=True, text=True,
                          timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("report: ")]
    report = json.loads(Path(line[len("report: "):]).read_text(encoding="utf-8"))
    assert report["passed"] is True and report["report"] == line[len("report: "):]
    folder = os.path.dirname(report["report"])
    assert folder.startswith(str(tmp_path)) and os.listdir(folder) == ["report.json"]
