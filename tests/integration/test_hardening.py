"""Operator hardening through the Python API: what a careless or hostile operator hits.

Each test drives a real home (SQLite files in a temporary folder) with the fake
clock; the CLI side of the same rules is in ``test_cli_hardening.py``.
"""

import io
import json
import os
import re
import stat
import threading
from pathlib import Path

import pytest
from helpers import ROOT, make_event

from signoff import views
from signoff.app import Signoff
from signoff.rules.canonical import task_key
from signoff.errors import ConfigError, InvalidEvent, Refused
from signoff.rules.events import check_label, parse_line
from signoff.models import Audit, Delivery, Inbox, Monitor, Task, insert_rows
from signoff.commands.render import render_task

BIDI_AND_SEPARATORS = ["\u202e", "\u202a", "\u2066", "\u2069", "\u200f", "\u061c", "\u2028"]


def jsonl(*events):
    return b"".join((json.dumps(e) + "\n").encode() for e in events)


def refusal(call, *args, **kwargs):
    with pytest.raises(Refused) as info:
        call(*args, **kwargs)
    return info.value


def ready_task(rt, **changes):
    """Process one event into a ready task; its detail."""
    [line] = rt.enqueue_events([make_event(**changes)])
    assert line.accepted, line.reason
    rt.run_until_idle()
    key = Delivery.get_by_id(line.delivery).task_key
    assert key, "the event did not make a task"
    return rt.task(key)


def blocked_task(rt, host):
    """A task blocked with ``source_changed``: its record was edited at the same version."""
    task = ready_task(rt)
    host.put_record("comment-1", text="edited at the same version")
    assert refusal(rt.approve, task["key"], task["digest"], by="ana").code == "source_changed"
    assert rt.task(task["key"])["status"] == "blocked"
    return task


# -- 2. the Python API never drops work -------------------------------------------

def test_enqueue_commits_even_when_the_answers_are_never_read(rt):
    rt.enqueue(io.BytesIO(jsonl(make_event(), make_event(event_id="evt-2"))), "default")
    assert [d.event_id for d in Delivery.select().order_by(Delivery.id)] == ["evt-1", "evt-2"]


def test_enqueue_returns_one_answer_per_line(rt):
    answers = rt.enqueue(io.BytesIO(jsonl(make_event()) + b"{broken\n"), "default")
    assert [a.accepted for a in answers] == [True, False]


# -- 3. redraft --------------------------------------------------------------------

def test_a_task_blocked_by_an_edit_at_the_same_version_is_redrafted(rt, host):
    task = blocked_task(rt, host)
    assert refusal(rt.retry, task["key"]).code == "not_retryable"
    host.put_material("doc-demo", "2026-12-24")
    answer = rt.redraft(task["key"])
    again = rt.task(task["key"])
    assert answer == {"key": task["key"], "status": "ready", "digest": again["digest"],
                      "changed": True, "replaces": None}
    assert (again["status"], again["code"]) == ("ready", None)
    assert again["record"]["text"] == "edited at the same version"
    assert again["digest"] != task["digest"] and "2026-12-24" in again["result"]["draft"]
    [earlier] = again["previous_drafts"]
    assert (earlier["digest"], earlier["result"], earlier["record"]) == (
        task["digest"], task["result"], task["record"])
    assert "-Suggested demo date for doc-demo: 2026-11-01" in again["draft_changes"]
    assert "+Suggested demo date for doc-demo: 2026-12-24" in again["draft_changes"]
    assert [a["code"] for a in again["audit"]][-1] == "redrafted"
    assert refusal(rt.approve, task["key"], task["digest"], by="ana").code == "digest_mismatch"
    assert rt.approve(task["key"], again["digest"], by="ana")["status"] == "approved"
    rt.run_until_idle()
    assert [r["key"] for r in host.results()] == [task["key"]]


def test_a_new_record_version_makes_a_new_task_and_supersedes_the_old(rt, host):
    task = blocked_task(rt, host)
    host.put_record("comment-1", version=2)
    inbox = list(Inbox.select().tuples())
    answer = rt.redraft(task["key"][:10])  # a unique prefix works here too
    monitor = Monitor.get_by_id("default")
    new_key = task_key("default", monitor.grant_digest, "comment-1", 2)
    assert answer == {"key": new_key, "status": "ready", "digest": rt.task(new_key)["digest"],
                      "changed": True, "replaces": task["key"]}
    old, new = rt.task(task["key"]), rt.task(new_key)
    assert (old["status"], old["code"], old["superseded_by"]) == ("blocked", "superseded", new_key)
    assert new["version"] == 2 and new["record"]["version"] == 2
    assert [d["digest"] for d in new["previous_drafts"]] == [task["digest"]]
    assert new["draft_changes"] is not None
    assert list(Inbox.select().tuples()) == inbox  # the inbox is the events', not redraft's
    assert refusal(rt.redraft, task["key"]).code == "not_redraftable"
    # A later event about version 2 finds the task already there.
    [line] = rt.enqueue_events([make_event(event_id="evt-2")])
    rt.run_until_idle()
    assert Delivery.get_by_id(line.delivery).task_key == new_key
    assert Task.select().count() == 2


def test_redraft_of_an_unchanged_ready_task_changes_nothing(rt):
    task = ready_task(rt)
    audit_rows = Audit.select().count()
    assert rt.redraft(task["key"]) == {"key": task["key"], "status": "ready",
                                       "digest": task["digest"], "changed": False,
                                       "replaces": None}
    assert rt.task(task["key"])["previous_drafts"] == []
    assert Audit.select().count() == audit_rows


def test_redraft_runs_the_gate_first_and_refuses_finished_tasks(rt, host):
    task = blocked_task(rt, host)
    host.put_grant(revision=2)
    assert refusal(rt.redraft, task["key"]).code == "scope_changed"
    after = rt.task(task["key"])
    assert (after["status"], after["digest"], after["previous_drafts"]) == (
        "blocked", task["digest"], [])
    host.put_grant(revision=1)
    assert rt.redraft(task["key"])["status"] == "ready"  # the gate holds again
    rt.reject(task["key"])
    assert refusal(rt.redraft, task["key"]).code == "not_redraftable"


# -- 4. arguments validated ------------------------------------------------------------

def test_bind_refuses_a_document_outside_the_grant(rt):
    assert refusal(rt.bind, "doc-other", "m2").code == "access"
    assert [m["id"] for m in rt.monitors()] == ["default"]


def test_an_empty_home_is_an_error_not_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv("SIGNOFF_HOME", str(tmp_path / "elsewhere"))
    with pytest.raises(ValueError):
        Signoff("")
    assert not (tmp_path / "elsewhere").exists()


# -- 6. key prefixes ---------------------------------------------------------------------

def _twin(key):
    """A key that shares the first 8 characters of ``key`` and no more."""
    other = "e" if key[8] == "f" else "f"
    return key[:8] + other * 56


def test_a_unique_prefix_works_wherever_a_key_does(rt):
    task = ready_task(rt)
    prefix = task["key"][:8]
    assert rt.task(prefix)["key"] == task["key"]
    assert rt.task(prefix.upper())["key"] == task["key"]
    [answer] = rt.approve_many([(prefix, task["digest"])], by="ana")
    assert answer["key"] == task["key"] and answer["status"] == "approved"
    assert rt.approve(prefix, task["digest"], by="ana")["key"] == task["key"]  # answers again
    assert rt.retry(prefix)["key"] == task["key"]


def test_an_ambiguous_or_short_prefix_is_refused(rt):
    task = ready_task(rt)
    row = Task.get_by_id(task["key"]).__data__
    insert_rows(Task, [dict(row, key=_twin(task["key"]))])
    ambiguous = refusal(rt.task, task["key"][:8])
    assert ambiguous.code == "ambiguous_key"
    assert task["key"] in ambiguous.message and _twin(task["key"]) in ambiguous.message
    assert rt.task(task["key"][:9])["key"] == task["key"]
    assert refusal(rt.reject, task["key"][:8]).code == "ambiguous_key"
    short = refusal(rt.task, task["key"][:7])
    assert short.code == "unknown_task" and "at least 8" in short.message
    assert refusal(rt.task, "zzzzzzzzzz").code == "unknown_task"
    assert rt.task(task["key"])["status"] == "ready"


# -- 7. bounded listings and one stats snapshot -----------------------------------------

def test_listings_are_newest_first_bounded_and_count_the_rest(rt):
    rt.enqueue_events([make_event(event_id=f"e{i}") for i in range(7)])
    rows, more = views.listing("events", limit=3)
    assert [r["event_id"] for r in rows] == ["e6", "e5", "e4"] and more == 4
    rows, more = views.listing("events")
    assert len(list(rows)) == 7 and more == 0
    rows, more = views.listing("audit", limit=1)
    assert [r["code"] for r in rows] == ["bound"] and more == 0
    assert [r["event_id"] for r in rt.events()][:2] == ["e0", "e1"]  # the API keeps its order
    assert [r["event_id"] for r in rt.events(limit=2, newest_first=True)] == ["e6", "e5"]


def test_stats_is_one_consistent_snapshot_while_a_worker_commits(rt, monkeypatch):
    rt.enqueue_events([make_event(event_id=f"e{i}") for i in range(3)])
    first_count = views._delivery_tallies
    worked = []

    def count_then_let_a_worker_commit(*args):
        counts = first_count(*args)
        if not worked:
            worker = threading.Thread(target=_process_in_another_thread, args=(rt, worked))
            worker.start()
            worker.join(timeout=60)
        return counts

    monkeypatch.setattr(views, "_delivery_tallies", count_then_let_a_worker_commit)
    snapshot = rt.stats()
    assert worked == [3], "the other thread did not commit its batch"
    assert snapshot["deliveries"] == {"queued": 3}
    assert snapshot["outcomes"] == {} and snapshot["tasks"] == {}
    monkeypatch.undo()
    assert rt.stats()["deliveries"] == {"done": 3}


def _process_in_another_thread(rt, worked):
    with rt.database.connection_context():
        worked.append(rt.engine.ingest_batch("other-thread")[0])


# -- 8. names from people -----------------------------------------------------------------

@pytest.mark.parametrize("name", ["", "eve\nFAKE approved by admin", "a" * 129, "x\x1b[2J",
                                  *(f"eve{c}nimda" for c in BIDI_AND_SEPARATORS), "\ud800"])
def test_approver_names_follow_the_label_rule(rt, name):
    task = ready_task(rt)
    assert refusal(rt.approve, task["key"], task["digest"], by=name).code == "invalid_name"
    assert refusal(rt.approve_many, [(task["key"], task["digest"])], by=name).code == "invalid_name"
    assert rt.task(task["key"])["status"] == "ready"


@pytest.mark.parametrize("char", BIDI_AND_SEPARATORS)
def test_event_labels_refuse_bidi_controls_and_line_separators(rt, char):
    [line] = rt.enqueue_events([make_event(event_id=f"evt{char}1")])
    assert (line.accepted, line.code) == (False, "invalid_event")
    assert line.reason.startswith("event_id:") and f"U+{ord(char):04X}" in line.reason
    with pytest.raises(InvalidEvent):
        check_label("name", f"a{char}")


def test_task_show_cannot_be_forged_by_stored_values(rt):
    task = ready_task(rt)
    forged = "eve\nFAKE approved by admin\r\u2028\u202eFAKE2"
    Task.update(approved_by=forged, monitor="m\nFAKE3").where(Task.key == task["key"]).execute()
    text = render_task(rt.task(task["key"]))
    assert not any(line.lstrip().startswith("FAKE") for line in text.splitlines())
    assert "\u202e" not in text and "\u2028" not in text and "\r" not in text
    assert "eve\\x0aFAKE approved by admin" in text


# -- 9. private by default ------------------------------------------------------------------

def _modes(home):
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in Path(home).iterdir()}


def _expected_files(backend):
    # The reference host's file is always there; state and queue only when SQLite holds them.
    files = {"signoff.toml", "host.db"}
    if backend is None or not backend.database_url:
        files.add("signoff.db")
    if backend is None or not backend.queue_url:
        files.add("queue.db")
    return files


def test_home_is_700_and_every_file_600_as_work_happens(rt, home, backend):
    task = ready_task(rt)
    rt.approve(task["key"], task["digest"], by="ana")
    rt.run_until_idle()
    modes = _modes(home)
    assert _expected_files(backend) <= set(modes)
    assert any(name.endswith("-wal") for name in modes)  # journals created since init
    assert modes == {name: 0o600 for name in modes}
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_init_tightens_an_existing_open_home(tmp_path, clock):
    home = tmp_path / "open"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    (home / "notes.txt").write_text("the operator's own file")
    os.chmod(home / "notes.txt", 0o644)
    Signoff.init(home, clock=clock).close()
    modes = _modes(home)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert modes.pop("notes.txt") == 0o644  # not signoff's: left alone
    assert modes == {name: 0o600 for name in modes}


# -- 10. reasons for people ------------------------------------------------------------------

PYTHON_WORDING = re.compile(r"Expecting|delimiter|char \d|JSONDecodeError|Error\b|line \d+ column")


@pytest.mark.parametrize("raw, words", [
    (b"{not json", "object key must be a string in double quotes"),
    (b'{"event_id": "a" "name": "b"}', "a comma is missing"),
    (b'{"event_id" "a"}', "a colon is missing"),
    (b'{"event_id": "a', "a string is not closed"),
    (b'{"event_id": 1} {"x": 2}', "more than one JSON value"),
    (b'{"occurred": NaN}', "NaN is not a JSON number"),
    (b'{"event_id": "a\\qb"}', "unknown backslash escape"),
    (b"[" * 100_000, None),
    (b"", "a value was expected"),
])
@pytest.mark.backend_independent
def test_broken_json_reasons_are_written_for_people(raw, words):
    with pytest.raises(InvalidEvent) as info:
        parse_line(raw if raw else b" ")
    reason = info.value.reason
    assert reason.startswith("line: "), reason
    assert not PYTHON_WORDING.search(reason), reason
    if words:
        assert words in reason, reason
        assert "column" in reason or "NaN" in words, reason


def test_field_reasons_say_what_is_allowed(rt):
    lines = rt.enqueue_events([
        [1, 2], {**make_event(), "occurred": "soon"},
        {k: v for k, v in make_event().items() if k != "record_id"},
        {**make_event(), "event_id": "a" * 200},
    ])
    reasons = [line.reason for line in lines]
    assert reasons[0].startswith("event: must be one JSON object") and "a list" in reasons[0]
    assert reasons[1].startswith("occurred: must be an integer of Unix seconds")
    assert "got a string" in reasons[1]
    assert reasons[2].startswith("record_id: missing") and "occurred" in reasons[2]
    assert "1-128 characters" in reasons[3] and "got 200" in reasons[3]
    assert not any(PYTHON_WORDING.search(r) or "str" in r.split() for r in reasons)


def twice(event, key, value):
    """The JSON line of ``event`` naming ``key`` once more, with ``value``, at its end."""
    return json.dumps(event)[:-1].encode() + b", " + json.dumps({key: value})[1:].encode()


@pytest.mark.parametrize("raw, key", [
    (twice(make_event(event_id="evt-a"), "event_id", "evt-b"), '"event_id"'),
    (twice(make_event(), "text", "the other text"), '"text"'),
    (twice(make_event(), "occurred", 5), '"occurred"'),
    (json.dumps(make_event(extra={"deep": [1, {"x": 1}]})).replace('"x": 1', '"x": 1, "x": 2')
     .encode(), '"x"'),
], ids=["event_id", "ignored-text", "occurred", "nested-ignored"])
def test_a_line_naming_a_key_twice_is_refused_naming_the_key(rt, raw, key):
    before = Audit.select().where(Audit.code == "invalid_event").count()
    good = jsonl(make_event(event_id="evt-good"))
    bad, ok = rt.enqueue(io.BytesIO(raw + b"\n" + good), "default")
    assert (bad.accepted, bad.code, bad.delivery) == (False, "invalid_event", None)
    assert bad.reason.startswith("line: ") and f"key {key} twice" in bad.reason, bad.reason
    assert ok.accepted
    assert [d.event_id for d in Delivery.select()] == ["evt-good"]
    assert Audit.select().where(Audit.code == "invalid_event").count() == before + 1


def test_a_pretty_printed_event_naming_a_key_twice_is_refused_as_one_event(rt):
    raw = json.dumps(make_event(), indent=2).replace('"name": ', '"name": "x",\n  "name": ')
    [answer] = rt.enqueue(io.BytesIO(raw.encode()), "default")
    assert answer.line == 1 and answer.code == "invalid_event"
    assert 'key "name" twice' in answer.reason
    assert Delivery.select().count() == 0


def config_error(home, text):
    """The ``ConfigError`` opening ``home`` and its host raises with ``text`` as config."""
    (home / "signoff.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        rt = Signoff(home)  # a broken file is refused here, before anything is opened
        try:
            rt.host()
        finally:
            rt.close()
    return info.value


def test_plugin_and_config_errors_say_what_to_do(rt, home):
    rt.database.close()
    error = config_error(home, '[host]\nfactory = "no_such_plugin_mod:Host"\n')
    assert error.code == "plugin_import"
    assert "PYTHONPATH" in error.message and "no_such_plugin_mod" in error.message
    assert "ModuleNotFoundError" not in error.message
    error = config_error(home, '[host.options]\ntimeout = 2\ncolour = "red"\n')
    assert error.code == "bad_config"
    assert "'colour'" in error.message and "timeout" in error.message
    assert "unexpected keyword" not in error.message
    error = config_error(home, "[host\n")
    assert error.code == "bad_config" and ": not valid TOML: line 1" in error.message


# -- 11. the codes page lists every code ------------------------------------------------

# Where a code leaves the source on its way to a person: raised or answered as a
# refusal, sent in an HTTP or MCP answer, written as an audit row, stored on a row
# (an attempt's or a task's code), or printed as a warning.
CODE_PATTERNS = [re.compile(pattern) for pattern in (
    r'(?<!\w)(?:Refused|Blocked|ConfigError|NoHome|StorageError|AttemptFailed|fail|error_result'
    r'|refuse\((?:\w+,\s*){1,2}|Outcome\("(?:final|blocked)",)\(?\s*"([a-z_]+)"',
    r'"error":\s*"([a-z_]+)"',
    r'(?<![\w.])audit\(\w+,\s*"([a-z_]+)"',
    r'(?<!\w)(?:audit_code|code|last_code)="([a-z_]+)"',
    r'log\.warning\("([a-z_]+):',
)]
# Codes the patterns cannot see: chosen at run time, or printed by the CLI itself.
OTHER_CODES = {"usage", "database_error", "internal_error", "interrupted", "ready",
               "superseded", "redrafted", "scope_changed", "read_only_home", "monitor_exists",
               "uncertain", "done", "outcome_unknown"}


def source_codes():
    """Every code the package's source can hand to a person."""
    codes = set(OTHER_CODES)
    for path in (ROOT / "signoff").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for pattern in CODE_PATTERNS:
            codes |= set(pattern.findall(text))
    return codes


@pytest.mark.backend_independent
def test_the_codes_page_lists_every_code_the_cli_can_print():
    page = (ROOT / "docs" / "codes.md").read_text(encoding="utf-8")
    missing = sorted(c for c in source_codes() if f"`{c}`" not in page)
    assert not missing, f"codes missing from docs/codes.md: {missing}"


@pytest.mark.backend_independent
def test_the_code_patterns_find_the_codes_of_every_kind_of_source():
    # Each pattern must keep finding what it is there for, or the test above
    # would pass by finding nothing.
    found = source_codes() - OTHER_CODES
    for code in ("unknown_task", "schema_mismatch", "invalid_arguments", "bad_signature",
                 "policy_added", "no_receipt", "queue_unreachable", "approval_mismatch"):
        assert code in found, code
