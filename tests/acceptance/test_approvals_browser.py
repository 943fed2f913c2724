"""Approvals as people give them, on the review pages in headless Chromium: edit then
approve, a quorum of two (a page and a CLI approver), reasons, hidden characters
marked and acknowledged, and bulk approval showing each draft.

Run with ``python -m pytest -m browser``. With ``SIGNOFF_SCREENSHOTS=DIR`` set the
tests save screenshots of an edit, a quorum of two and a marked bidi draft there.
"""

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import OPERATOR, log_in, read_here, shown_status, start_worker
from servekit import Server, event, make_home
from signoff.app import Signoff
from signoff.cli import main
from signoff.models import Task
from signoff.rules.text import visible

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EDITED = "Suggested demo date for doc-demo: 2026-11-02\nThe room is booked."


def start_site(home, material="2026-11-01", records=1, approvals=1):
    """A home with ``records`` ready tasks of monitor ``q`` (``approvals`` needed), a
    reviewer ``alice`` and a running server."""
    rt = make_home(home)
    rt.host().put_material("doc-demo", material)
    rt.bind("doc-demo", "q", window_s=3600, approvals=approvals)
    for n in range(1, records + 1):
        rt.host().put_record(f"comment-{n}", document="doc-demo", text=f"comment {n}")
    rt.enqueue_events([event(n) for n in range(1, records + 1)], monitor_id="q")
    rt.run_until_idle()
    token = rt.add_reviewer("alice")["token"]
    return rt, Server(home), token


@pytest.fixture
def sites(home):
    made = []

    def make(**kw):
        made.append(start_site(home, **kw))
        return made[-1]
    yield make
    for rt, server, _ in made:
        assert server.stop() == 0, server.stderr()
        rt.close()


def screenshot(page, name):
    folder = os.environ.get("SIGNOFF_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def open_task(page, server, key):
    page.goto(f"{server.url}/tasks/{key}")
    return shown_status(page)


def drain(rt):
    worker = start_worker(rt.home, "--drain")
    assert worker.wait(120) == 0, worker.stderr.read().decode()
    worker.stdout.close()
    worker.stderr.close()


def cli(home, *args):
    result = CliRunner().invoke(main, ["--home", str(home), *args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_edit_then_approve_on_the_page_submits_the_edited_text_once(browser, sites):
    rt, server, token = sites(approvals=2)
    [task] = rt.tasks("ready")
    key, drafted = task["key"], task["digest"]
    context = browser.new_context()
    page = context.new_page()
    page.goto(server.url + "/login")
    page.fill("input[name=name]", "alice")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    stale = context.new_page()  # the same reviewer, an older tab
    assert open_task(stale, server, key) == "ready"
    assert open_task(page, server, key) == "ready"
    page.click("#edit-box summary")
    page.fill("#edit", EDITED)
    screenshot(page, "edit-before-approving")
    page.click("#approve-edited")
    assert shown_status(page) == "ready"  # the editor's approval is the first of two
    assert page.get_attribute("#approvals", "data-missing") == "1"
    shown = rt.task(key)
    assert shown["result"]["draft"] == EDITED and shown["drafted_digest"] == drafted
    assert shown["edits"][0]["by"] == "alice" and shown["edits"][0]["channel"] == "page"
    assert [a["by"] for a in shown["approvals"]] == ["alice"]
    assert page.locator("#drafted-digest").inner_text() == drafted
    assert "The room is booked." in page.inner_text("#edit-1")
    screenshot(page, "edit-approved-by-the-editor")
    # The older tab still carries the drafted digest: refused, nothing changes.
    stale.click("#edit-box summary")
    stale.fill("#edit", "something else")
    with stale.expect_response(lambda r: r.request.method == "POST") as answer:
        stale.click("#approve-edited")
    assert answer.value.status == 409 and "digest_mismatch" in stale.content()
    assert rt.task(key)["result"]["draft"] == EDITED and rt.task(key)["digest"] == shown["digest"]
    code, answer = cli(rt.home, "approve", key, "--digest", shown["digest"], "--by", "bob")
    assert code == 0 and answer["status"] == "approved", answer
    drain(rt)
    assert rt.task(key)["status"] == "done"
    [written] = rt.host().results()
    assert written["result"]["draft"] == EDITED and rt.host().receipt(key) == shown["result"]


def test_a_quorum_of_two_with_a_page_and_a_cli_approver(browser, sites):
    rt, server, token = sites(approvals=2)
    [task] = rt.tasks("ready")
    key, d = task["key"], task["digest"]
    page = log_in(browser, server, "alice", token)
    open_task(page, server, key)
    page.click("#approve")
    assert shown_status(page) == "ready"
    assert page.get_attribute("#approvals", "data-missing") == "1"
    page.click("#approve")  # the same reviewer again counts once
    assert page.get_attribute("#approvals", "data-missing") == "1"
    assert "alice" in page.inner_text("#approvals") and page.locator("#approved-by-you").count() == 1
    screenshot(page, "quorum-1-of-2")
    code, answer = cli(rt.home, "approve", key, "--digest", d, "--by", "bob")
    assert code == 0 and answer["status"] == "approved", answer
    page.reload()
    assert shown_status(page) == "approved"
    approvals = page.inner_text("#approvals")
    assert "alice" in approvals and "page" in approvals and "cli" in approvals
    # The command line's approval is its OS account's; its --by word is a note beside it.
    assert OPERATOR in approvals and "note “bob”" in approvals
    screenshot(page, "quorum-2-of-2")
    assert rt.task(key)["approved_by"] == OPERATOR


def test_reject_with_a_reason_on_the_page(browser, sites):
    rt, server, token = sites(approvals=2)
    [task] = rt.tasks("ready")
    key = task["key"]
    page = log_in(browser, server, "alice", token)
    open_task(page, server, key)
    page.fill("#reject-reason-input", "x\u202ey")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.click("#reject")
    assert answer.value.status == 400 and "invalid_reason" in page.content()
    open_task(page, server, key)
    page.fill("#reject-reason-input", "The demo moved to December")
    page.click("#reject")
    assert shown_status(page) == "rejected"
    assert page.inner_text("#reject-reason") == "The demo moved to December"
    assert "alice" in page.inner_text("#rejected")
    shown = rt.task(key)
    assert (shown["rejected_by"], shown["reject_reason"]) == ("alice", "The demo moved to December")


def test_a_bidi_draft_is_shown_marked_and_needs_the_acknowledgement(browser, sites):
    rt, server, token = sites(material="2026-11-01\u202e 000,05$ refsnarT")
    [task] = rt.tasks("ready")
    key = task["key"]
    page = log_in(browser, server, "alice", token)
    open_task(page, server, key)
    assert "⟨U+202E⟩" in page.inner_text("#draft")
    assert "U+202E" in page.inner_text("#hidden-characters")
    screenshot(page, "bidi-draft-marked")
    with page.expect_response(lambda r: r.request.method == "POST") as answer:
        page.click("#approve")
    assert answer.value.status == 400 and "hidden_characters" in page.content()
    assert rt.task(key)["status"] == "ready"
    open_task(page, server, key)
    page.check("#ack-hidden")
    page.click("#approve")
    assert shown_status(page) == "approved"


def test_bulk_approval_shows_each_draft_beside_its_checkbox(browser, sites):
    rt, server, token = sites(records=2)
    page = log_in(browser, server, "alice", token)
    page.goto(server.url + "/?status=ready")
    tasks = rt.tasks("ready")
    assert len(tasks) == 2
    for t in tasks:
        cell = page.inner_text(f"#draft-{t['key'][:12]}")
        assert cell.startswith("Suggested demo date for doc-demo: 2026-11-01")
    screenshot(page, "bulk-with-drafts")
    for box in page.locator("input[name=task]").all():
        box.check()
    page.click("#approve-selected")
    assert all(t["status"] == "approved" for t in rt.tasks())
    assert re.search(r"approved", page.content())


# A bidi override and a variation selector: each renders otherwise than it reads.
MODEL = "gpt\u202e-4o-mini\U000e0100"
RECORD = "Please add the date \u202e0$ refsnarT\U000e0100"
REASON = "not \u202enow\U000e0100"


def drafted_by(home, model):
    """``home`` initialised with a drafter whose calls record ``model`` as their model."""
    Signoff.init(home).close()
    config = home / "signoff.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        'factory = "signoff.drafters.template:template"', 'factory = "testdrafters:with_meta"').replace(
        "[drafter.options]\n", f"[drafter.options]\nmodel = {json.dumps(model, ensure_ascii=False)}\n"),
        encoding="utf-8")
    return read_here(Signoff(home))


def test_hidden_characters_are_marked_wherever_a_person_reads_them(browser, home):
    rt = drafted_by(home, MODEL)
    rt.host().put_material("doc-demo", "2026-11-01")
    rt.host().put_record("comment-1", document="doc-demo", text=RECORD)
    rt.host().put_record("comment-2", document="doc-demo", text="comment 2")
    rt.bind("doc-demo", window_s=3600)
    rt.enqueue_events([event(1), event(2)])
    rt.run_until_idle()
    marked, rejected = (next(t for t in rt.tasks() if t["record_id"] == f"comment-{n}")["key"]
                        for n in (1, 2))
    assert rt.task(marked)["draft_meta"]["model"] == MODEL
    rt.reject(rejected, reason="not now")
    # A reason kept before reasons were checked (the pages mark whatever is stored).
    Task.update(reject_reason=REASON).where(Task.key == rejected).execute()
    token = rt.add_reviewer("alice")["token"]
    server = Server(home)
    try:
        page = log_in(browser, server, "alice", token)
        page.goto(f"{server.url}/tasks/{marked}")
        screenshot(page, "hidden-characters-marked")
        drafted = page.inner_text("#draft-meta")
        assert drafted.startswith(visible(MODEL) + " · response") and "⟨U+202E⟩" in drafted
        record = page.inner_text("pre.record")
        assert record == visible(RECORD) and "\u202e" not in record
        # The edit box sends the draft back as it is: marks there would change it.
        assert page.input_value("#edit") == rt.task(marked)["result"]["draft"]
        page.goto(f"{server.url}/tasks/{rejected}")
        assert page.inner_text("#reject-reason") == visible(REASON)
        assert "⟨U+202E⟩" in page.inner_text("#reject-reason")
    finally:
        assert server.stop() == 0, server.stderr()
        rt.close()
