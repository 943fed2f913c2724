"""The tamper-evident audit (docs/audit.md): the hash chain, its checkpoints, the
export and its offline check, and submit refusing a task whose approvals are not
in its chain; against a forger who holds the database but not the home key.

Each forger writes rows around signoff, as SQL would (the models' plain
inserts and updates, never ``state``); then the home exports and the export is
verified.
"""

import json
import logging
import subprocess

import pytest
from click.testing import CliRunner
from helpers import OPERATOR, child_env, ready_task, signoff_cmd

from signoff.app import Signoff
from signoff.chores import checkpoints
from signoff.cli import main
from signoff.models import Approval, Audit, Checkpoint, Task
from signoff.rules.auditchain import entry_hash, task_chain
from signoff.rules.auditverify import read_public_key, verify_lines
from signoff.storage.homekey import home_id


def export(rt, since=None):
    lines = []
    head = rt.audit_export(lines.append, since)
    return lines, head


def verify(rt, lines, head=None):
    key = read_public_key(Signoff.audit_key(rt.home)["public_key"])
    return verify_lines(lines, key, home_id(key), head)


def done_task(rt, record_id="comment-1", event_id="evt-1"):
    rt.host().put_record(record_id, document="doc-demo", text="please add the date")
    key, digest = ready_task(rt, record_id=record_id, event_id=event_id)
    rt.approve(key, digest)
    rt.run_until_idle()
    assert Task.get_by_id(key).status == "done"
    return key


def entries(lines):
    return [json.loads(line) for line in lines]


def test_an_honest_history_exports_and_verifies(rt):
    first, second = done_task(rt), done_task(rt, "comment-2", "evt-2")
    lines, head = export(rt)
    report = verify(rt, lines)
    assert report["ok"], report["failure"]
    assert report["head"] == head == Checkpoint.select().order_by(Checkpoint.id.desc()).get().hash
    chained = [e for e in entries(lines) if e.get("chain") == task_chain(first)]
    assert [e["code"] for e in chained] == ["ready", "approved", "done"]
    assert chained[0]["data"]["quorum"] == 1
    assert chained[1]["actor"] == OPERATOR and chained[1]["data"]["digest"] == chained[0]["data"]["digest"]
    assert chained[2]["data"] == {"digest": chained[0]["data"]["digest"],
                                  "receipt": chained[0]["data"]["digest"]}
    states = [e for e in entries(lines) if e["kind"] == "task"]
    assert {(s["key"], s["status"]) for s in states} == {(first, "done"), (second, "done")}


def test_every_entry_links_to_its_chain_and_a_checkpoint_seals_it(rt):
    key = done_task(rt)
    export(rt)
    rows = list(Audit.select().where(Audit.chain == task_chain(key)).order_by(Audit.seq).dicts())
    assert rows[0]["prev"] is None
    assert [r["prev"] for r in rows[1:]] == [r["hash"] for r in rows[:-1]]
    assert all(r["hash"] == entry_hash(r) for r in rows)
    assert Audit.select().where(Audit.checkpoint.is_null()).count() == 0


def test_a_second_export_goes_on_from_the_first_and_an_export_since_a_head_verifies(rt):
    done_task(rt)
    lines, head = export(rt)
    done_task(rt, "comment-2", "evt-2")
    later, later_head = export(rt)
    assert later_head != head
    assert verify(rt, later, head=head)["ok"]  # the head published earlier is in the later file
    since, _ = export(rt, since=head)
    report = verify(rt, since)
    assert report["ok"], report["failure"]
    assert report["since"] == head and report["entries"] < verify(rt, later)["entries"]


def test_a_task_marked_approved_by_sql_is_named_and_never_submitted(rt):
    key, digest = ready_task(rt)
    Task.update(status="approved", approved_digest=digest, approved_by="mallory").where(
        Task.key == key).execute()
    report = verify(rt, export(rt)[0])
    assert not report["ok"]
    assert (report["failure"]["code"], report["failure"]["task"]) == ("quorum_short", key)
    rt.run_until_idle()
    task = Task.get_by_id(key)
    assert (task.status, task.code) == ("blocked", "chain_broken")
    assert rt.host().results() == []


def test_an_approval_row_added_by_sql_does_not_complete_a_quorum(rt):
    rt.bind("doc-demo", "q", approvals=2)
    key, digest = ready_task(rt, monitor_id="q")
    Approval.insert(task_key=key, digest=digest, by="mallory", channel="api", at=0.0).execute()
    rt.approve(key, digest, by="ana", channel="api")  # the count signoff reads says two
    assert Task.get_by_id(key).status == "approved"
    report = verify(rt, export(rt)[0])
    assert (report["ok"], report["failure"]["code"], report["failure"]["task"]) == (
        False, "quorum_short", key)
    rt.run_until_idle()
    assert (Task.get_by_id(key).status, Task.get_by_id(key).code) == ("blocked", "chain_broken")
    assert rt.host().results() == []


def test_an_audit_row_added_by_sql_breaks_the_chain_it_claims(rt):
    key, digest = ready_task(rt)
    Audit.insert(at=rt.clock.now(), code="approved", task_key=key, monitor="default",
                 actor="mallory", channel="api", chain=task_chain(key),
                 data={"digest": digest, "quorum": 1}).execute()
    Task.update(status="approved", approved_digest=digest).where(Task.key == key).execute()
    report = verify(rt, export(rt)[0])
    assert (report["ok"], report["failure"]["code"], report["failure"]["task"]) == (
        False, "chain_broken", key)
    rt.run_until_idle()
    assert Task.get_by_id(key).code == "chain_broken"


def test_an_entry_rewritten_after_its_checkpoint_is_found_though_its_links_were_redone(rt):
    key = done_task(rt)
    export(rt)  # sealed: a checkpoint names the chain's head
    rows = list(Audit.select().where(Audit.chain == task_chain(key)).order_by(Audit.seq))
    prev = rows[0].hash
    for row in rows[1:]:  # the forger changes who approved and links every entry again
        changes = {"actor": "mallory"} if row.code == "approved" else {}
        fields = {**{f: getattr(row, f) for f in ("chain", "at", "monitor", "event_id",
                                                  "task_key", "code", "actor", "channel",
                                                  "note", "subject", "data")},
                  **changes, "prev": prev}
        prev = entry_hash(fields)
        Audit.update(**changes, prev=fields["prev"], hash=prev).where(Audit.seq == row.seq).execute()
    report = verify(rt, export(rt)[0])
    assert (report["ok"], report["failure"]["code"], report["failure"]["task"]) == (
        False, "chain_broken", key)


@pytest.fixture
def honest(rt):
    keys = [done_task(rt), done_task(rt, "comment-2", "evt-2")]
    lines, head = export(rt)
    assert verify(rt, lines)["ok"]
    return rt, keys, lines, head


def first_entry(lines, key, code):
    return next(i for i, e in enumerate(entries(lines))
                if e.get("task_key") == key and e.get("code") == code)


def failure_of(rt, lines, head=None):
    report = verify(rt, lines, head)
    assert not report["ok"]
    return report["failure"]


def test_a_deleted_line_is_named(honest):
    rt, [key, _], lines, _ = honest
    at = first_entry(lines, key, "approved")
    failure = failure_of(rt, lines[:at] + lines[at + 1:])
    assert (failure["code"], failure["task"], failure["line"]) == ("chain_broken", key, at + 1)


def test_swapped_lines_are_named(honest):
    rt, [key, _], lines, _ = honest
    at = first_entry(lines, key, "approved")
    swapped = lines[:at] + [lines[at + 1], lines[at]] + lines[at + 2:]
    failure = failure_of(rt, swapped)
    assert (failure["code"], failure["task"]) == ("chain_broken", key)


def test_an_edited_line_is_named(honest):
    rt, [key, _], lines, _ = honest
    at = first_entry(lines, key, "done")
    edited = entries(lines)[at]
    edited["data"]["digest"] = "0" * 64
    failure = failure_of(rt, lines[:at] + [json.dumps(edited)] + lines[at + 1:])
    assert (failure["code"], failure["task"]) == ("chain_broken", key)


def test_a_truncated_export_is_named_and_a_head_not_in_it_too(honest):
    rt, _, lines, head = honest
    assert failure_of(rt, lines[:-3])["code"] == "chain_broken"
    last = max(i for i, e in enumerate(entries(lines)) if e["kind"] == "checkpoint")
    assert failure_of(rt, lines[:last])["code"] == "chain_broken"
    failure = failure_of(rt, lines, head="f" * 64)
    assert (failure["code"], failure["line"]) == ("head_mismatch", None)


def test_a_checkpoint_not_signed_by_the_home_key_is_named(honest):
    rt, _, lines, _ = honest
    at = max(i for i, e in enumerate(entries(lines)) if e["kind"] == "checkpoint")
    changed = entries(lines)[at]
    changed["at"] += 1
    assert failure_of(rt, lines[:at] + [json.dumps(changed)] + lines[at + 1:])["code"] == (
        "bad_signature")


def test_the_export_verifies_on_the_command_line_with_the_home_moved_away(honest, tmp_path):
    rt, _, lines, head = honest
    (tmp_path / "audit.jsonl").write_text("".join(lines), encoding="utf-8")
    key = subprocess.run(signoff_cmd(rt.home, "audit", "key"), env=child_env(),
                         capture_output=True, text=True, timeout=120)
    assert key.returncode == 0, key.stderr
    assert key.stdout.splitlines()[-1].startswith("fingerprint: SHA256:")
    (tmp_path / "home.pub").write_text(key.stdout)
    rt.close()
    rt.home.rename(tmp_path / "moved")
    # No home, and a database URL nothing answers: verify needs neither.
    env = child_env(SIGNOFF_DATABASE_URL="postgresql://nobody@127.0.0.1:9/none")
    done = subprocess.run(signoff_cmd(tmp_path / "nowhere", "audit", "verify",
                                      str(tmp_path / "audit.jsonl"), "--home-key",
                                      str(tmp_path / "home.pub"), "--head", head, "--json"),
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["head"] == head and report["failure"] is None
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "audit.jsonl").write_text("".join(lines[:2] + lines[3:]), encoding="utf-8")
    broken = subprocess.run(signoff_cmd(tmp_path / "nowhere", "audit", "verify",
                                        str(tmp_path / "audit.jsonl"), "--home-key",
                                        str(tmp_path / "home.pub")),
                            env=env, capture_output=True, text=True, timeout=120)
    assert broken.returncode == 1
    assert broken.stdout.startswith("chain_broken: line 3")


def test_the_workers_chore_seals_what_was_written_and_logs_the_head(rt, caplog):
    key = done_task(rt)
    with caplog.at_level(logging.INFO, logger="signoff.audit"):
        [made] = checkpoints.seal_all(rt)
    assert made.id == 1 and made.statement["heads"][task_chain(key)]
    assert f"head {made.hash}" in caplog.text
    assert Audit.select().where(Audit.checkpoint.is_null()).count() == 0
    assert checkpoints.seal_all(rt) == []  # nothing new: no checkpoint
    lines, head = export(rt)
    assert head == made.hash and verify(rt, lines)["ok"]


def test_the_listing_keeps_its_options_beside_its_subcommands(rt):
    done_task(rt)

    def run(*args):
        result = CliRunner().invoke(main, ["--home", str(rt.home), "audit", *args])
        assert "Traceback" not in result.output
        return result

    listed = run("--limit", "2", "--json")
    assert listed.exit_code == 0 and len(json.loads(listed.stdout)) == 2
    assert [r["code"] for r in json.loads(listed.stdout)] == ["done", "approved"]
    key = run("key", "--json")
    assert key.exit_code == 0
    shown = json.loads(key.stdout)
    assert set(shown) == {"public_key", "fingerprint", "home", "path"}
    assert shown["fingerprint"].startswith("SHA256:" + shown["home"])
    exported = run("export", "--json")
    assert exported.exit_code == 0
    assert json.loads(exported.stderr)["head"] == verify(rt, exported.stdout.splitlines())["head"]
    unknown = run("export", "--since", "0" * 64, "--json")
    assert unknown.exit_code == 1 and json.loads(unknown.stdout)["error"] == "unknown_head"
