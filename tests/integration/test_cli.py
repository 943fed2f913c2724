"""The command line contract (docs/cli.md): exit codes, JSON shapes, refusals.

Every command runs through click's CliRunner on a fresh home under ``tmp_path``;
the work between commands is done in-process with ``Signoff.run_until_idle``.
"""

import hashlib
import json
import re
import subprocess
import sys
import time

import pytest

from signoff.app import Signoff
from signoff.cli import AUDIT_COLUMNS

from helpers import OPERATOR, ROOT, child_env, invoke

SECRET_TEXT = "event text that must never be stored"
MONITOR_KEYS = {"id", "document", "event_names", "active", "expires_at", "window_s",
                "grant_digest"}
TASK_KEYS = {"key", "monitor", "record_id", "version", "status", "code", "outcome_unknown",
             "attempts", "updated_at"}
SHOW_KEYS = TASK_KEYS | {"record", "result", "digest", "approved_digest", "approved_by",
                         "history"}
EVENT_KEYS = {"delivery", "event_id", "monitor", "status", "outcome", "task_key", "attempts",
              "last_code", "last_reason"}
LINE_KEYS = {"line", "event_id", "accepted", "delivery", "code", "reason"}
DLQ_KEYS = {"id", "kind", "ref", "step", "code", "attempts", "first_at", "last_at", "replayed",
            "reason"}
AUDIT_KEYS = {"seq", "at", "monitor", "event_id", "task_key", "code", "actor", "channel",
              "note", "subject", "reviewer"}
STATS_KEYS = {"at", "deliveries", "outcomes", "tasks", "in_flight", "retries_waiting",
              "uncertain", "parked", "dead_letters", "stale_event_gaps", "lease_expiries"}


# -- helpers ---------------------------------------------------------------

def ok(home, *args, input=None):
    """A command that must succeed with ``--json``: its parsed document."""
    result = invoke(home, *args, "--json", input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def refused(home, *args, code, input=None):
    """A command that must be refused with ``code``: exit 1 and one error document."""
    result = invoke(home, *args, "--json", input=input)
    assert result.exit_code == 1, result.output
    answer = json.loads(result.stdout)
    assert set(answer) == {"error", "message"}
    assert answer["error"] == code, answer
    assert isinstance(answer["message"], str) and answer["message"]
    return answer


def event(event_id="evt-1", **changes):
    ev = {"event_id": event_id, "name": "comment.created", "document": "doc-demo",
          "record_id": "comment-1", "occurred": int(time.time()), "text": SECRET_TEXT}
    ev.update(changes)
    return ev


def jsonl(*events):
    return "".join(json.dumps(e) + "\n" for e in events)


def process(home):
    """Do every piece of work that is due now, in this process."""
    rt = Signoff(home)
    try:
        rt.run_until_idle()
    finally:
        rt.close()


def sha256_canonical(value):
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture
def home(tmp_path):
    """An initialised home with one open record, its material and a bound monitor."""
    path = tmp_path / "home"
    ok(path, "init")
    ok(path, "host", "record", "--id", "comment-1", "--document", "doc-demo",
       "--text", "please add the demo date")
    ok(path, "host", "material", "--document", "doc-demo", "--demo-date", "2026-11-01")
    ok(path, "monitor", "bind", "--document", "doc-demo")
    return path


@pytest.fixture
def ready(home):
    """``(home, task)``: one event processed into a ``ready`` task."""
    lines = ok(home, "enqueue", input=jsonl(event()))
    assert lines[0]["accepted"] is True
    process(home)
    [task] = ok(home, "tasks", "list")
    assert task["status"] == "ready"
    return home, ok(home, "tasks", "show", task["key"])


# -- exit codes and refusals -------------------------------------------------------

def test_missing_home_is_refused_and_nothing_is_created(tmp_path):
    missing = tmp_path / "nowhere"
    for args in (["tasks", "list"], ["events"], ["host", "record", "--id", "r",
                                                  "--document", "d"], ["monitor", "list"]):
        answer = refused(missing, *args, code="no_home")
        assert "signoff init" in answer["message"]
    assert not missing.exists()
    human = invoke(missing, "stats")
    assert human.exit_code == 1
    assert human.stdout == ""
    assert "no_home" in human.stderr and "signoff init" in human.stderr


def test_malformed_config_is_bad_config(tmp_path):
    home = tmp_path / "home"
    ok(home, "init")
    (home / "signoff.toml").write_text("[host\nfactory = ", encoding="utf-8")
    refused(home, "tasks", "list", code="bad_config")
    refused(home, "init", code="bad_config")
    (home / "signoff.toml").write_text('[retry]\nbase_delay_s = "soon"\n', encoding="utf-8")
    answer = refused(home, "events", code="bad_config")
    assert "base_delay_s" in answer["message"]


def test_config_that_cannot_be_read_is_one_line_error(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "signoff.toml").mkdir()  # a folder where the file should be
    refused(home, "tasks", "list", code="bad_config")
    human = invoke(home, "tasks", "list")
    assert human.exit_code == 1
    assert human.stderr.startswith("error: bad_config: ")
    assert len(human.stderr.strip().splitlines()) == 1


def test_host_plugin_that_does_not_import(tmp_path):
    home = tmp_path / "home"
    ok(home, "init")
    (home / "signoff.toml").write_text('[host]\nfactory = "nonexistent_mod:Host"\n',
                                       encoding="utf-8")
    answer = refused(home, "monitor", "bind", "--document", "doc-demo", code="plugin_import")
    assert "nonexistent_mod" in answer["message"]
    refused(home, "init", code="plugin_import")
    assert ok(home, "monitor", "list") == []  # nothing was bound


def test_unknown_task_key(home):
    for args in (["tasks", "show", "nope"], ["tasks", "retry", "nope"],
                 ["approve", "nope", "--digest", "0" * 64], ["reject", "nope"]):
        refused(home, *args, code="unknown_task")


def test_unknown_monitor_refuses_the_whole_enqueue(home):
    audit_before = ok(home, "audit")
    answer = refused(home, "enqueue", "--monitor", "nope",
                     input=jsonl(event("a"), {"broken": True}, event("b")), code="unknown_monitor")
    assert "nope" in answer["message"]
    assert ok(home, "events") == []
    assert ok(home, "audit") == audit_before
    human = invoke(home, "enqueue", "--monitor", "nope", input=jsonl(event("c")))
    assert human.exit_code == 1
    assert "unknown_monitor" in human.stderr
    assert ok(home, "events") == []


def test_enqueue_bad_line_is_reported_and_good_lines_accepted(home):
    text = jsonl(event("a")) + "{not json\n" + jsonl(event("c", occurred=1.5), event("d"))
    result = invoke(home, "enqueue", "--json", input=text)
    assert result.exit_code == 1
    lines = json.loads(result.stdout)
    assert [set(r) for r in lines] == [LINE_KEYS] * 4
    assert [r["line"] for r in lines] == [1, 2, 3, 4]
    assert [r["accepted"] for r in lines] == [True, False, False, True]
    assert [r["event_id"] for r in lines] == ["a", None, None, "d"]
    assert lines[1]["code"] == lines[2]["code"] == "invalid_event"
    assert lines[1]["reason"].startswith("line:")
    assert lines[2]["reason"].startswith("occurred:")
    assert lines[1]["delivery"] is None
    assert lines[0]["code"] is None and lines[0]["reason"] is None
    rows = ok(home, "events")[::-1]  # newest first
    assert [r["event_id"] for r in rows] == ["a", "d"]
    assert [r["delivery"] for r in rows] == [lines[0]["delivery"], lines[3]["delivery"]]
    assert [r["code"] for r in ok(home, "audit")].count("invalid_event") == 2
    human = invoke(home, "enqueue", input=text.replace('"a"', '"a2"').replace('"d"', '"d2"'))
    assert human.exit_code == 1
    assert "line 2: rejected: invalid_event" in human.stdout
    assert "accepted 2, rejected 2" in human.stdout


def test_enqueue_all_good_exits_zero_and_accepts_a_pretty_printed_object(home, tmp_path):
    assert [r["accepted"] for r in ok(home, "enqueue", input=jsonl(event("a"), event("b")))] \
        == [True, True]
    pretty = tmp_path / "one.json"
    pretty.write_text(json.dumps(event("p"), indent=2), encoding="utf-8")
    [line] = ok(home, "enqueue", str(pretty))
    assert line["line"] == 1 and line["accepted"] is True and line["event_id"] == "p"
    assert ok(home, "enqueue", input="") == []


def test_approve_with_the_wrong_digest(ready):
    home, task = ready
    refused(home, "approve", task["key"], "--digest", "f" * 64, code="digest_mismatch")
    assert ok(home, "tasks", "show", task["key"])["status"] == "ready"


def test_usage_errors_exit_2(home):
    for args in (["no-such-command"], ["approve", "k"], ["dlq", "replay", "abc"],
                 ["monitor", "bind", "--document", "doc-demo", "--ttl", "inf"],
                 ["host", "fault", "lose-ack", "--times", "0"], ["tasks", "list", "--bogus"]):
        result = invoke(home, *args, "--json")
        assert result.exit_code == 2, (args, result.output)
        answer = json.loads(result.stdout)
        assert answer["error"] == "usage" and answer["message"], (args, answer)
        assert set(answer) == {"error", "message"}
        human = invoke(home, *args)
        assert human.exit_code == 2 and human.stdout == "", (args, human.output)


# -- init and the reference host ----------------------------------------------------

def test_init_is_idempotent_and_never_resets_data(ready):
    home, task = ready
    config = home / "signoff.toml"
    config.write_text(config.read_text(encoding="utf-8") + "\n# an operator's note\n",
                      encoding="utf-8")
    before = {name: ok(home, *args) for name, args in
              [("tasks", ["tasks", "list"]), ("events", ["events"]),
               ("monitors", ["monitor", "list"]), ("audit", ["audit"])]}
    answer = ok(home, "init")
    assert answer == {"home": str(home), "config": str(config)}
    assert "# an operator's note" in config.read_text(encoding="utf-8")
    after = {name: ok(home, *args) for name, args in
             [("tasks", ["tasks", "list"]), ("events", ["events"]),
              ("monitors", ["monitor", "list"]), ("audit", ["audit"])]}
    assert after == before
    assert ok(home, "host", "record", "--id", "comment-1")["text"] == "please add the demo date"


def test_host_record_defaults_and_update_keeps_unspecified_options(home):
    grant = ok(home, "host", "grant")
    new = ok(home, "host", "record", "--id", "r-2", "--document", "doc-demo", "--text", "hello")
    assert (new["version"], new["status"], new["kind"], new["tenant"]) == \
        (1, "open", "review", grant["tenant"])
    closed = ok(home, "host", "record", "--id", "r-2", "--status", "closed")
    assert closed == dict(new, status="closed")
    bumped = ok(home, "host", "record", "--id", "r-2", "--version", "2", "--kind", "note")
    assert bumped == dict(new, status="closed", version=2, kind="note")
    refused(home, "host", "record", "--id", "r-3", code="missing_option")


def test_host_grant_keeps_unspecified_options(home):
    grant = ok(home, "host", "grant")
    assert grant == {"tenant": "demo-tenant", "user": "demo-owner", "docs": ["doc-demo"],
                     "actions": ["read", "draft", "submit_review"], "revision": 1}
    assert ok(home, "host", "grant", "--revision", "2") == dict(grant, revision=2)
    changed = ok(home, "host", "grant", "--doc", "a", "--doc", "b", "--user", "u2")
    assert changed == dict(grant, revision=2, docs=["a", "b"], user="u2")
    assert ok(home, "host", "grant") == changed


def test_host_faults_and_results(ready):
    home, task = ready
    assert ok(home, "host", "fault", "lose-ack") == {"faults": {"lose-ack": 1}}
    assert ok(home, "host", "fault", "read-timeout", "--times", "3")["faults"] == \
        {"lose-ack": 1, "read-timeout": 3}
    refused(home, "host", "fault", "melt", code="unknown_fault")
    assert ok(home, "host", "fault", "clear") == {"faults": {}}
    assert ok(home, "host", "results") == []
    ok(home, "approve", task["key"], "--digest", task["digest"])
    process(home)
    assert ok(home, "host", "results") == [{"key": task["key"], "result": task["result"]}]


# -- monitors -----------------------------------------------------------------

def test_monitor_bind_from_the_grant_list_and_cancel(tmp_path):
    home = tmp_path / "home"
    ok(home, "init")
    grant = ok(home, "host", "grant", "--doc", "doc-demo", "--doc", "doc-x")
    t0 = time.time()
    bound = ok(home, "monitor", "bind", "--id", "m1", "--document", "doc-demo")
    assert bound["grant_digest"] == sha256_canonical(grant)
    assert bound["event_names"] == ["comment.created"] and bound["window_s"] == 60
    assert t0 + 24 * 3600 - 5 <= bound["expires_at"] <= time.time() + 24 * 3600 + 5
    ok(home, "monitor", "bind", "--id", "m2", "--document", "doc-x", "--event", "a.b",
       "--event", "c.d", "--ttl", "100", "--window", "30")
    rows = ok(home, "monitor", "list")
    assert [r["id"] for r in rows] == ["m1", "m2"]
    assert all(MONITOR_KEYS <= set(r) for r in rows)
    assert rows[1]["event_names"] == ["a.b", "c.d"] and rows[1]["window_s"] == 30
    assert rows[1]["expires_at"] - rows[0]["expires_at"] < 100 - 24 * 3600 + 5
    refused(home, "monitor", "bind", "--id", "m1", "--document", "doc-demo",
            code="monitor_exists")

    cancelled = ok(home, "monitor", "cancel", "m1")
    assert cancelled["active"] is False and cancelled["tasks_cancelled"] == 0
    refused(home, "monitor", "bind", "--id", "m1", "--document", "doc-demo", code="cancelled")
    assert [r["active"] for r in ok(home, "monitor", "list")] == [False, True]
    refused(home, "monitor", "cancel", "nope", code="unknown_monitor")

    ok(home, "host", "grant", "--action", "read")
    refused(home, "monitor", "bind", "--id", "m3", "--document", "doc-demo", code="action")
    assert "m3" not in [r["id"] for r in ok(home, "monitor", "list")]


def test_cancel_ends_ready_tasks_and_gates_new_events(ready):
    home, task = ready
    assert ok(home, "monitor", "cancel", "default")["tasks_cancelled"] == 1
    assert ok(home, "tasks", "show", task["key"])["status"] == "cancelled"
    ok(home, "enqueue", input=jsonl(event("evt-2")))
    process(home)
    assert ok(home, "events")[0]["outcome"] == "cancelled"  # newest first


# -- tasks, approval, dead letters and views -------------------------------------------

def test_tasks_list_show_retry_and_approve_shapes(ready):
    home, task = ready
    key = task["key"]
    [row] = ok(home, "tasks", "list")
    assert TASK_KEYS <= set(row)
    assert row["key"] == key and row["record_id"] == "comment-1" and row["version"] == 1
    assert SHOW_KEYS <= set(task)
    assert task["record"]["id"] == "comment-1"
    assert task["result"]["record_id"] == "comment-1" and task["result"]["version"] == 1
    assert task["digest"] == sha256_canonical(task["result"])
    assert task["approved_digest"] is None and task["approved_by"] is None
    assert isinstance(task["history"], list)
    assert SECRET_TEXT not in json.dumps(task)

    refused(home, "tasks", "retry", key, code="needs_approval")
    approved = ok(home, "approve", key, "--digest", task["digest"], "--by", "ana")
    assert approved == {"key": key, "status": "approved", "approved_digest": task["digest"]}
    assert ok(home, "tasks", "retry", key) == approved
    assert ok(home, "tasks", "list", "--status", "approved")[0]["key"] == key
    assert ok(home, "tasks", "list", "--status", "ready") == []
    process(home)

    done = ok(home, "tasks", "show", key)
    assert done["status"] == "done" and done["approved_by"] == OPERATOR
    assert done["approved_digest"] == task["digest"]
    assert [(h["step"], h["code"]) for h in done["history"]][-1] == ("confirm", "done")
    assert all({"at", "step", "code"} <= set(h) for h in done["history"])
    again = ok(home, "approve", key, "--digest", task["digest"])
    assert again == dict(approved, status="done")
    refused(home, "approve", key, "--digest", "0" * 64, code="not_ready")
    refused(home, "tasks", "retry", key, code="not_retryable")
    refused(home, "reject", key, code="not_ready")


def test_reject_answer(ready):
    home, task = ready
    answer = ok(home, "reject", task["key"], "--reason", "not now")
    assert answer == {"key": task["key"], "status": "rejected", "approved_digest": None}
    refused(home, "approve", task["key"], "--digest", task["digest"], code="not_ready")


def test_dlq_list_and_replay(home):
    assert ok(home, "dlq", "list") == []
    config = home / "signoff.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        "read_attempts = 5", "read_attempts = 1"), encoding="utf-8")
    ok(home, "host", "fault", "read-timeout")
    ok(home, "enqueue", input=jsonl(event()))
    process(home)
    [letter] = ok(home, "dlq", "list")
    assert set(letter) == DLQ_KEYS
    assert (letter["kind"], letter["step"], letter["code"], letter["replayed"]) == \
        ("delivery", "read", "TimeoutError", 0)
    [delivery] = ok(home, "events")
    assert letter["ref"] == str(delivery["delivery"]) and delivery["status"] == "dead"
    refused(home, "dlq", "replay", "999", code="unknown_dead_letter")
    assert ok(home, "dlq", "replay", str(letter["id"]))["replayed"] == 1
    process(home)
    assert ok(home, "events")[0]["outcome"] == "ready"


def test_audit_rows_have_identifiers_and_codes_only(ready):
    home, task = ready
    rows = ok(home, "audit")
    assert rows and all(set(r) == AUDIT_KEYS for r in rows)
    assert [r["seq"] for r in rows] == sorted((r["seq"] for r in rows), reverse=True)
    assert [r["code"] for r in rows] == ["ready", "bound"]
    assert rows[0]["event_id"] == "evt-1" and rows[0]["task_key"] == task["key"]
    assert len(ok(home, "audit", "--limit", "1")) == 1
    assert SECRET_TEXT not in invoke(home, "audit", "--json").stdout


def test_audit_rows_of_monitor_and_secret_changes_name_their_subject(home):
    added = ok(home, "monitor", "secret", "add", "default", "--by", "ops")
    secret_id = str(added["secret_id"])
    ok(home, "monitor", "secret", "remove", "default", secret_id, "--by", "ops")
    for change in ("pause", "unpause", "cancel"):
        ok(home, "monitor", change, "default", "--by", "ops")
    rows = ok(home, "audit")
    assert [(r["code"], r["subject"]) for r in rows] == [
        ("cancelled", "default"), ("unpaused", "default"), ("paused", "default"),
        ("secret_removed", secret_id), ("secret_added", secret_id), ("bound", "default")]
    assert all(r["actor"] and r["channel"] == "cli" for r in rows[:-1])
    assert added["secret"] not in invoke(home, "audit", "--json").stdout

    header, *lines = invoke(home, "audit").stdout.splitlines()
    assert header.split() == AUDIT_COLUMNS
    shown = [dict(zip(AUDIT_COLUMNS, re.split(r"\s{2,}", line))) for line in lines]
    assert [(r["code"], r["actor"], r["channel"], r["subject"]) for r in shown] == [
        (r["code"], r["actor"] or "-", r["channel"] or "-", r["subject"]) for r in rows]


def test_stats_and_events_json(ready):
    home, task = ready
    stats = ok(home, "stats")
    assert STATS_KEYS <= set(stats)
    assert stats["tasks"] == {"ready": 1}
    assert stats["deliveries"] == {"done": 1} and stats["outcomes"] == {"ready": 1}
    [row] = ok(home, "events")
    assert set(row) == EVENT_KEYS
    assert (row["event_id"], row["monitor"], row["status"], row["outcome"], row["task_key"],
            row["attempts"]) == ("evt-1", "default", "done", "ready", task["key"], 1)
    assert ok(home, "events", "--status", "queued") == []


def test_human_views_render_without_errors(ready):
    home, task = ready
    for args in (["tasks", "list"], ["tasks", "show", task["key"]], ["events"], ["audit"],
                 ["stats"], ["dlq", "list"], ["monitor", "list"], ["host", "results"]):
        result = invoke(home, *args)
        assert result.exit_code == 0, (args, result.output)
        assert result.stdout.strip()
    assert task["key"] in invoke(home, "tasks", "list").stdout


# -- the demo -------------------------------------------------------------------

def test_demo_runs_the_whole_story(tmp_path):
    keep = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "signoff", "demo", "--keep", str(keep), "--json"],
                          cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=90)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["passed"] is True
    assert report["steps"] and all(s["ok"] for s in report["steps"])
    assert all(set(s) == {"name", "expected", "got", "ok", "seconds"} for s in report["steps"])
    names = " ".join(s["name"] for s in report["steps"])
    for word in ("ready", "needs_approval", "uncertain", "kill", "done", "duplicate",
                 "cancelled"):
        assert word in names
    counts = report["counts"]
    assert counts["results_on_host"] == 1
    assert counts["worker_kills"] == 1
    assert counts["tasks"] == {"done": 1}
    assert counts["deliveries"] == 3
    assert counts["outcomes"] == {"ready": 1, "duplicate": 1, "cancelled": 1}
    assert counts["audit_rows"] > 0
    assert json.loads((keep / "report.json").read_text(encoding="utf-8")) == report
    assert "[ok]" in proc.stderr and str(keep) in proc.stderr
