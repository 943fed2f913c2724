"""Approvals as people give them (docs/concepts.md, docs/serve.md): edit then approve, a quorum of
distinct approvers on one digest, who decided and why, hidden characters.

Python API and CLI on a real home (SQLite by default; PostgreSQL/Redis with the
``SIGNOFF_TEST_*`` variables); processing is synchronous (``run_until_idle``).
"""

import json
import threading

import pytest
from click.testing import CliRunner
from conftest import make_event, read_here
from helpers import OPERATOR, ready_task, refusal

from signoff.app import Signoff
from signoff.cli import main
from signoff.models import Approval, Audit, Task
from signoff.rules.auditchain import task_chain
from signoff.rules.canonical import digest
from signoff.rules.text import check_reason, hidden_characters, visible

EDITED = "Suggested demo date for doc-demo: 2026-11-02 (moved by a day)"


def audit_rows(rt, key):
    return [(a.code, a.actor, a.channel) for a in
            Audit.select().where(Audit.task_key == key).order_by(Audit.seq)]


@pytest.fixture
def quorum(rt):
    """A second monitor, ``q``, whose tasks need two distinct approvers."""
    rt.bind("doc-demo", "q", approvals=2)
    return rt


# -- edit, then approve ----------------------------------------------------------

def test_edit_then_approve_submits_the_edited_text_once_and_the_receipt_matches(rt, host):
    key, drafted = ready_task(rt)
    answer = rt.approve(key, drafted, by="ana", edit=EDITED)
    assert answer["status"] == "approved" and answer["digest"] != drafted
    task = rt.task(key)
    assert task["result"]["draft"] == EDITED
    assert task["result"]["sources"]  # sources stay as drafted
    assert task["digest"] == digest(task["result"]) == task["approved_digest"] == answer["digest"]
    assert task["drafted_digest"] == drafted
    [edit] = task["edits"]
    assert (edit["by"], edit["note"], edit["channel"], edit["from_digest"], edit["to_digest"]) == (
        OPERATOR, "ana", "cli", drafted, task["digest"])
    assert "+" + EDITED in edit["diff"]
    rt.run_until_idle()
    assert rt.task(key)["status"] == "done"
    [written] = host.results()
    assert written["result"]["draft"] == EDITED and host.receipt(key) == task["result"]
    assert ("edited", OPERATOR, "cli") in audit_rows(rt, key)
    assert ("approved", OPERATOR, "cli") in audit_rows(rt, key)


def test_a_stale_edit_is_refused_and_nothing_changes(rt):
    key, drafted = ready_task(rt)
    before = Task.get_by_id(key).__data__
    assert refusal(rt.approve, key, "0" * 64, by="ana", edit=EDITED) == "digest_mismatch"
    assert Task.get_by_id(key).__data__ == before
    assert not Approval.select().exists()
    assert "edited" not in [c for c, _, _ in audit_rows(rt, key)]


def test_an_edit_is_checked_again(rt):
    key, drafted = ready_task(rt)
    assert refusal(rt.approve, key, drafted, by="ana", edit="   ") == "acceptance_failed"
    assert refusal(rt.approve, key, drafted, by="ana", edit=b"bytes") == "invalid_edit"
    assert refusal(rt.approve, key, drafted, by="ana", edit="pay \u202eevil") == "hidden_characters"
    task = rt.task(key)
    assert task["status"] == "ready" and task["digest"] == drafted and task["edits"] == []


def test_bulk_approval_binds_each_digest_and_never_edits(rt, host):
    host.put_record("comment-2", document="doc-demo", text="x")
    k1, d1 = ready_task(rt)
    k2, d2 = ready_task(rt, record_id="comment-2", event_id="evt-2")
    out = rt.approve_many([(k1, d1), (k2, "f" * 64)], by="ana")
    assert out[0]["status"] == "approved" and out[1].code == "digest_mismatch"
    assert rt.task(k1)["edits"] == [] and rt.task(k2)["status"] == "ready"


def test_a_bulk_approval_keeps_each_task_its_own_approved_digest(rt, host):
    pairs = []
    for n in range(1, 6):
        host.put_record(f"comment-{n}", document="doc-demo", text=f"text {n}")
        pairs.append(ready_task(rt, record_id=f"comment-{n}", event_id=f"evt-{n}"))
    assert len({d for _, d in pairs}) == 5
    out = rt.approve_many(pairs, by="ana")
    assert [a["approved_digest"] for a in out] == [d for _, d in pairs]
    assert [rt.task(k)["approved_digest"] for k, _ in pairs] == [d for _, d in pairs]


@pytest.mark.parametrize("edit", [None, EDITED], ids=["approve", "edit"])
def test_the_answer_is_what_the_approval_did_even_when_a_worker_submits_at_once(rt, host,
                                                                                monkeypatch, edit):
    # A worker woken by the approval may submit the task before the approver is answered.
    key, d = ready_task(rt)
    wake = rt.wakers.wake

    def wake_and_work(kind, rows=1):
        wake(kind, rows)
        rt.run_until_idle()

    monkeypatch.setattr(rt.wakers, "wake", wake_and_work)
    answer = rt.approve(key, d, by="ana", edit=edit)
    assert answer["status"] == "approved"
    assert rt.task(key)["status"] == "done" and len(host.results()) == 1


# -- quorum ----------------------------------------------------------------------

def test_a_quorum_of_two_needs_two_distinct_approvers_of_one_digest(quorum, host):
    rt = quorum
    key, d = ready_task(rt, "q")
    first = rt.approve(key, d, by="ana", channel="api")
    assert first["status"] == "ready" and first["approvals_missing"] == 1
    again = rt.approve(key, d, by="ana", channel="page")  # the same identity again: a no-op
    assert again["status"] == "ready" and again["approvals_missing"] == 1
    assert Approval.select().where(Approval.task_key == key).count() == 1
    shown = rt.task(key)
    assert [a["by"] for a in shown["approvals"]] == ["ana"] and shown["approvals_missing"] == 1
    done = rt.approve(key, d, by="bob", channel="page")
    assert done["status"] == "approved" and done["approved_digest"] == d
    shown = rt.task(key)
    assert shown["approved_by"] == "bob"
    assert [(a["by"], a["channel"]) for a in shown["approvals"]] == [("ana", "api"), ("bob", "page")]
    assert [c for c, _, _ in audit_rows(rt, key)].count("approved") == 1
    assert ("approval_added", "ana", "api") in audit_rows(rt, key)
    rt.run_until_idle()
    assert rt.task(key)["status"] == "done" and len(host.results()) == 1


def test_an_edit_between_two_approvals_restarts_the_count(quorum):
    rt = quorum
    key, d = ready_task(rt, "q")
    rt.approve(key, d, by="ana", channel="api")
    edited = rt.approve(key, d, by="bob", channel="api", edit=EDITED)
    assert edited["status"] == "ready" and edited["approvals_missing"] == 1
    shown = rt.task(key)
    assert [a["by"] for a in shown["approvals"]] == ["bob"]  # the editor's is the first
    assert refusal(rt.approve, key, d, by="ana", channel="api") == "digest_mismatch"
    # The editor again, through another face: still one place.
    assert rt.approve(key, edited["digest"], by="bob", channel="page")["approvals_missing"] == 1
    assert rt.approve(key, edited["digest"], by="ana", channel="api")["status"] == "approved"
    assert rt.task(key)["approved_digest"] == edited["digest"]


def test_a_reject_ends_the_quorum_and_its_reason_is_kept(quorum):
    rt = quorum
    key, d = ready_task(rt, "q")
    rt.approve(key, d, by="ana")
    assert refusal(rt.reject, key, reason="bad \u202e reason", by="carl") == "invalid_reason"
    assert refusal(rt.reject, key, reason="x" * 201, by="carl") == "invalid_reason"
    assert rt.task(key)["status"] == "ready"
    answer = rt.reject(key, reason="wrong date: the demo moved", by="carl", channel="page")
    assert answer["status"] == "rejected"
    shown = rt.task(key)
    assert (shown["rejected_by"], shown["reject_reason"]) == ("carl", "wrong date: the demo moved")
    assert ("rejected", "carl", "page") in audit_rows(rt, key)
    assert refusal(rt.approve, key, d, by="bob") == "not_ready"


def test_a_redraft_restarts_the_count_at_zero(quorum, host):
    rt = quorum
    key, d = ready_task(rt, "q")
    rt.approve(key, d, by="ana", channel="api")
    host.put_material("doc-demo", "2026-12-01")
    rt.redraft(key, by="ana", channel="page")
    shown = rt.task(key)
    assert shown["approvals"] == [] and shown["approvals_missing"] == 2
    assert ("redrafted", "ana", "page") in audit_rows(rt, key)


def test_a_standing_policy_fills_at_most_one_place(quorum):
    rt = quorum
    key, d = ready_task(rt, "q")
    rt.add_policy("q", include_waiting=True)
    shown = rt.task(key)
    assert shown["status"] == "ready" and [a["channel"] for a in shown["approvals"]] == ["policy"]
    rt.run_until_idle()
    assert rt.task(key)["status"] == "ready"
    assert rt.approve(key, d, by="ana")["status"] == "approved"


def test_a_revoked_policy_gives_up_its_place_in_an_open_quorum(quorum):
    rt = quorum
    key, d = ready_task(rt, "q")
    policy = rt.add_policy("q", include_waiting=True)
    assert len(rt.task(key)["approvals"]) == 1
    rt.revoke_policy(policy["policy"], by="ana")
    shown = rt.task(key)
    assert shown["approvals"] == [] and shown["approvals_missing"] == 2
    ended = Audit.get(Audit.code == "policy_ended")
    assert (ended.actor, ended.channel, ended.note, ended.subject) == (
        OPERATOR, "cli", "ana", f"policy:{policy['policy']}")
    # The withdrawn place says so, on the task's own trail.
    assert audit_rows(rt, key)[-1] == ("approval_withdrawn", None, None)
    assert Audit.get(Audit.code == "approval_withdrawn").subject == f"policy:{policy['policy']}"


def test_other_decisions_name_who_made_them(rt):
    rt.reject(ready_task(rt)[0], by="dora")
    rt.cancel("default", by="erin")
    rows = {(a.code, a.actor, a.channel, a.note) for a in Audit.select()}
    assert {("rejected", OPERATOR, "cli", "dora"), ("cancelled", OPERATOR, "cli", "erin")} <= rows
    assert refusal(rt.cancel, "default", by="bad\nname") == "invalid_name"


def test_bind_refuses_a_quorum_out_of_range(rt):
    assert refusal(rt.bind, "doc-demo", "zero", approvals=0) == "invalid_monitor"
    assert refusal(rt.bind, "doc-demo", "many", approvals=True) == "invalid_monitor"


def test_concurrent_approvals_from_two_homes_approve_once_and_lose_none(home, clock):
    """Two runtimes (two servers) approve the same tasks at once, each with its own name."""
    setup = read_here(Signoff.init(home, clock=clock))
    host = setup.host()
    host.put_material("doc-demo", "2026-11-01")
    setup.bind("doc-demo", "q", approvals=2)
    tasks = []
    for n in range(8):
        host.put_record(f"comment-{n}", document="doc-demo", text="t")
        tasks.append(ready_task(setup, "q", f"comment-{n}", f"evt-{n}"))
    setup.close()
    barrier, errors = threading.Barrier(2), []

    def approver(name):
        app = Signoff(home, clock=clock)
        try:
            barrier.wait(timeout=30)
            for key, d in tasks:
                app.approve(key, d, by=name, channel="api")
        except Exception as exc:  # reported below, with the thread's name
            errors.append((name, exc))
        finally:
            app.close()

    threads = [threading.Thread(target=approver, args=(n,)) for n in ("ana", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    check = read_here(Signoff(home, clock=clock))
    try:
        for key, d in tasks:
            row = Task.get_by_id(key)
            assert row.status == "approved" and row.approved_digest == d
            assert Approval.select().where(Approval.task_key == key).count() == 2
            assert Audit.select().where(Audit.task_key == key, Audit.code == "approved").count() == 1
            # Both wrote to the task's audit chain at once: it stays one line.
            chain = list(Audit.select().where(Audit.chain == task_chain(key)).order_by(Audit.seq))
            assert [a.code for a in chain] == ["ready", "approval_added", "approved"]
            assert [a.prev for a in chain] == [None, *[a.hash for a in chain[:-1]]]
    finally:
        check.close()


# -- hidden characters -------------------------------------------------------------

@pytest.mark.backend_independent
def test_text_rules():
    assert hidden_characters("ok\n\tfine") == []
    assert hidden_characters("a\u202eb\u200bc\ufeffd\u0007") == ["U+202E", "U+200B", "U+FEFF", "U+0007"]
    assert visible("pay\u202e 05$") == "pay⟨U+202E⟩ 05$"
    assert check_reason("  fine  ") == "fine" and check_reason(None) is None
    for bad in ("", "a\nb", "\u2066x", "x" * 201, 5):
        assert refusal(check_reason, bad) == "invalid_reason"


def test_a_bidi_draft_needs_the_acknowledgement(rt, host):
    host.put_material("doc-demo", "2026-11-01\u202e tsaf")
    key, d = ready_task(rt)
    assert rt.task(key)["hidden_characters"] == ["U+202E"]
    assert refusal(rt.approve, key, d, by="ana") == "hidden_characters"
    assert rt.task(key)["status"] == "ready" and not Approval.select().exists()
    [out] = rt.approve_many([(key, d)], by="ana")
    assert out.code == "hidden_characters"
    assert rt.approve(key, d, by="ana", ack_hidden_characters=True)["status"] == "approved"


def test_an_edit_hiding_text_in_variation_selectors_is_marked_for_the_next_approver(quorum, host):
    rt = quorum
    key, d = ready_task(rt, "q")
    hidden = "".join(chr(0xE0100 + b) for b in "wire 50k to acct 999".encode())
    text = rt.task(key)["result"]["draft"] + hidden
    assert refusal(rt.approve, key, d, by="bob", channel="api", edit=text) == "hidden_characters"
    edited = rt.approve(key, d, by="bob", channel="api", edit=text, ack_hidden_characters=True)
    shown = rt.task(key)
    assert shown["hidden_characters"][:2] == ["U+E0177", "U+E0169"]  # "w", "i"
    [edit] = shown["edits"]
    assert "⟨U+E0177⟩⟨U+E0169⟩" in edit["diff"]  # the second line is not the first again
    assert refusal(rt.approve, key, edited["digest"], by="carol", channel="api") == \
        "hidden_characters"
    assert rt.task(key)["status"] == "ready" and host.results() == []


# -- the CLI ---------------------------------------------------------------------

def cli(home, *args, code=0):
    result = CliRunner().invoke(main, ["--home", str(home), *args])
    assert result.exit_code == code, result.output
    return result.stdout


def cli_json(home, *args, code=0):
    return json.loads(cli(home, *args, "--json", code=code))


@pytest.fixture
def cli_home(tmp_path, backend):
    path = tmp_path / "home"
    if backend is not None:
        backend.write_config(path)
    cli(path, "init")
    cli(path, "host", "record", "--id", "comment-1", "--document", "doc-demo")
    cli(path, "host", "material", "--document", "doc-demo", "--demo-date", "2026-11-01\u202e")
    cli(path, "monitor", "bind", "--document", "doc-demo", "--approvals", "2", "--window", "3600")
    app = Signoff(path)
    try:
        [line] = app.enqueue_events([make_event(occurred=int(app.clock.now()))])
        assert line.accepted, line.reason
        app.run_until_idle()
        [task] = app.tasks()
    finally:
        app.close()
    return path, task["key"], task["digest"]


def test_cli_marks_hidden_characters_and_needs_the_acknowledgement(cli_home):
    home, key, d = cli_home
    shown = cli(home, "tasks", "show", key)
    assert "⟨U+202E⟩" in shown and "\u202e" not in shown and "--ack-hidden-characters" in shown
    assert cli_json(home, "approve", key, "--digest", d, "--by", "ana", code=1)["error"] == \
        "hidden_characters"
    answer = cli_json(home, "approve", key, "--digest", d, "--by", "ana", "--ack-hidden-characters")
    assert answer["status"] == "ready" and answer["approvals_missing"] == 1
    assert f'approvals {OPERATOR} (cli, note "ana"); 2 needed, 1 missing' in \
        cli(home, "tasks", "show", key)


def test_no_variable_acknowledges_edits_or_decides_for_the_command_line(cli_home, tmp_path):
    home, key, d = cli_home
    leftover = tmp_path / "leftover.txt"
    leftover.write_text(EDITED, encoding="utf-8")
    env = {"SIGNOFF_APPROVE_ACK_HIDDEN_CHARACTERS": "1", "SIGNOFF_APPROVE_EDIT_FILE": str(leftover),
           "SIGNOFF_APPROVE_DIGEST": d, "SIGNOFF_APPROVE_BY": "someone-else",
           "SIGNOFF_MONITOR_BIND_APPROVALS": "5"}
    result = CliRunner().invoke(main, ["--home", str(home), "approve", key, "--json"], env=env)
    assert result.exit_code == 2 and "--digest" in result.output  # the digest is not taken either
    refused = CliRunner().invoke(main, ["--home", str(home), "approve", key, "--digest", d,
                                        "--json"], env=env)
    assert refused.exit_code == 1 and json.loads(refused.stdout)["error"] == "hidden_characters"
    answer = CliRunner().invoke(main, ["--home", str(home), "approve", key, "--digest", d,
                                       "--ack-hidden-characters", "--json"], env=env)
    assert answer.exit_code == 0, answer.output
    shown = cli_json(home, "tasks", "show", key)
    assert shown["edits"] == [] and shown["digest"] == d  # the leftover file replaced nothing
    assert [(a["by"], a["note"]) for a in shown["approvals"]] == [(OPERATOR, None)]
    bound = CliRunner().invoke(main, ["--home", str(home), "monitor", "bind", "--id", "q2",
                                      "--document", "doc-demo", "--json"], env=env)
    assert json.loads(bound.stdout)["approvals"] == 1


def test_cli_edit_then_quorum_then_reject_reason(cli_home, tmp_path):
    home, key, d = cli_home
    edit = tmp_path / "edit.txt"
    edit.write_text(EDITED, encoding="utf-8")
    answer = cli_json(home, "approve", key, "--digest", d, "--by", "ana", "--edit", str(edit))
    assert answer["status"] == "ready" and answer["approvals_missing"] == 1
    stale = cli_json(home, "approve", key, "--digest", d, "--by", "bob", "--edit", str(edit), code=1)
    assert stale["error"] == "digest_mismatch"
    edit.write_bytes(b"\xff\xfe")
    assert cli_json(home, "approve", key, "--digest", answer["digest"], "--by", "bob", "--edit",
                    str(edit), code=1)["error"] == "invalid_edit"
    shown = cli_json(home, "tasks", "show", key)
    assert shown["drafted_digest"] == d and shown["edits"][0]["by"] == OPERATOR
    assert shown["edits"][0]["note"] == "ana"
    assert shown["approvals"][0]["by"] == OPERATOR and shown["approvals_missing"] == 1
    # One account under another --by word is the same operator: it counts once.
    again = cli_json(home, "approve", key, "--digest", answer["digest"], "--by", "bob")
    assert again["status"] == "ready" and again["approvals_missing"] == 1
    assert "edited" in cli(home, "tasks", "show", key)
    rejected = cli_json(home, "reject", key, "--reason", "the date is wrong", "--by", "carl")
    assert rejected["status"] == "rejected"
    text = cli(home, "tasks", "show", key)
    assert f"rejected  by {OPERATOR}: the date is wrong" in text
    assert any(" rejected " in line and line.endswith(f'{OPERATOR} (cli, note "carl")')
               for line in text.splitlines())
    audit = cli_json(home, "audit", "--all")
    assert {"code": "edited", "actor": OPERATOR, "channel": "cli"}.items() <= \
        next(a for a in audit if a["code"] == "edited").items()


def test_cli_bind_approvals_shows_on_the_monitor(cli_home):
    home, _, _ = cli_home
    [m] = cli_json(home, "monitor", "list")
    assert m["approvals"] == 2


# -- the page forms, over plain HTTP ---------------------------------------------------

def test_page_forms_edit_reason_acknowledgement_and_bulk_drafts(tmp_path, backend):
    import re

    import httpx
    from helpers import LOCAL_TLS
    from servekit import Server, csrf, event, make_home, post_login

    home = tmp_path / "site"
    if backend is not None:
        backend.write_config(home)
    rt = make_home(home)
    rt.host().put_material("doc-demo", "2026-11-01\u200b")
    rt.bind("doc-demo", "q", window_s=3600, approvals=2)
    rt.host().put_record("comment-2", document="doc-demo", text="two")
    rt.enqueue_events([event(1), event(2)], monitor_id="q")
    rt.run_until_idle()
    token = rt.add_reviewer("alice")["token"]
    server = Server(home)
    try:
        with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c:
            assert post_login(c, "alice", token).status_code == 303
            listing = c.get("/?status=ready").text
            assert listing.count("2026-11-01⟨U+200B⟩") == 2 and "approve it on its page" in listing
            k1, k2 = sorted(t["key"] for t in rt.tasks("ready"))
            d1 = rt.task(k1)["digest"]
            page = c.get(f"/tasks/{k1}").text
            assert 'id="hidden-characters"' in page and 'name="edit"' in page
            token_ = csrf(page)
            r = c.post(f"/tasks/{k1}/approve", data={"digest": d1, "csrf_token": token_})
            assert r.status_code == 400 and "hidden_characters" in r.text
            r = c.post(f"/tasks/{k1}/approve", data={"digest": d1, "csrf_token": token_,
                                                      "edit": "Plain text\r\nnow"})
            assert r.status_code == 303, r.text
            shown = rt.task(k1)
            assert shown["result"]["draft"] == "Plain text\nnow" and shown["approvals_missing"] == 1
            assert shown["approvals"][0]["channel"] == "page"
            r = c.post(f"/tasks/{k1}/approve", data={"digest": d1, "csrf_token": token_,
                                                      "edit": "stale"})
            assert r.status_code == 409 and "digest_mismatch" in r.text
            assert "Plain text" in c.get(f"/tasks/{k1}").text
            d2 = rt.task(k2)["digest"]
            r = c.post(f"/tasks/{k2}/reject", data={"digest": d2, "csrf_token": token_,
                                                     "reason": "a\u202eb"})
            assert r.status_code == 400 and "invalid_reason" in r.text
            r = c.post(f"/tasks/{k2}/reject", data={"digest": d2, "csrf_token": token_,
                                                     "reason": "not needed"})
            assert r.status_code == 303
            page = c.get(f"/tasks/{k2}").text
            assert re.search(r'id="reject-reason">not needed<', page)
            assert "alice (page)" in page  # the timeline names who decided
            assert rt.task(k2)["rejected_by"] == "alice"
    finally:
        assert server.stop() == 0, server.stderr()
        rt.close()
