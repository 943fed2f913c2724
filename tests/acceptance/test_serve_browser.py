"""The review pages in headless Chromium (Debian's, driven by playwright).

Run with ``python -m pytest -m browser``; the default run leaves them out.
"""

import pytest

from helpers import log_in, shown_status, start_worker
from servekit import Server, event, make_home

pytestmark = [pytest.mark.browser, pytest.mark.slow]

@pytest.fixture
def site(home):
    rt = make_home(home)
    rt.enqueue_events([event(1)])
    rt.run_until_idle()
    tokens = {"alice": rt.add_reviewer("alice")["token"],
              "rita": rt.add_reviewer("rita", read_only=True)["token"]}
    server = Server(home)
    yield rt, server, tokens
    assert server.stop() == 0, server.stderr()
    rt.close()


def open_ready_task(page, rt):
    [task] = rt.tasks("ready")
    page.click(f"a[href='/tasks/{task['key']}']")
    assert shown_status(page) == "ready"
    assert page.inner_text("h1") == "Waiting for approval"
    return task["key"]


def test_log_in_approve_and_see_it_done_after_the_worker(browser, site, tmp_path):
    rt, server, tokens = site
    page = log_in(browser, server, "alice", tokens["alice"])
    key = open_ready_task(page, rt)
    assert page.inner_text("#digest") == rt.task(key)["digest"]
    assert "2026-11-01" in page.inner_text("#draft")
    page.screenshot(path=str(tmp_path / "task-page.png"), full_page=True)
    page.click("#approve")
    assert shown_status(page) == "approved" and page.inner_text("h1") == "Approved"
    assert rt.task(key)["approved_by"] == "alice"
    worker = start_worker(rt.home, "--drain")
    assert worker.wait(120) == 0, worker.stderr.read().decode()
    worker.stdout.close()
    worker.stderr.close()
    page.reload()
    assert shown_status(page) == "done"


def test_pause_and_unpause_a_monitor_by_its_button(browser, site):
    from playwright.sync_api import expect
    rt, server, tokens = site
    page = log_in(browser, server, "alice", tokens["alice"])
    page.goto(server.url + "/monitors")
    badge = page.locator(".badge.paused")
    # A click returns once the page after the redirect began loading, not once it
    # is drawn: the badge is waited for (a look right away can see the page half made).
    page.click("#pause-default")
    expect(badge).to_be_visible(timeout=60_000)
    assert page.url == server.url + "/monitors" and rt.monitors()[0]["paused"]
    page.click("#unpause-default")
    expect(badge).to_be_hidden(timeout=60_000)
    assert not rt.monitors()[0]["paused"]


def test_a_page_gone_stale_is_refused(browser, site):
    rt, server, tokens = site
    page = log_in(browser, server, "alice", tokens["alice"])
    key = open_ready_task(page, rt)
    assert page.locator("#record-changed").count() == 0
    rt.host().put_record("comment-1", version=2, text="edited while the page was open")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.click("#approve")
    assert posted.value.status == 409
    assert "source_changed" in page.inner_text("main")
    assert rt.task(key)["status"] == "blocked"


def test_a_form_without_its_csrf_token_is_refused(browser, site):
    rt, server, tokens = site
    page = log_in(browser, server, "alice", tokens["alice"])
    key = open_ready_task(page, rt)
    page.locator("form:has(#approve) input[name=csrf_token]").evaluate("e => e.remove()")
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.click("#approve")
    assert posted.value.status == 403
    assert "bad_csrf_token" in page.inner_text("main")
    assert rt.task(key)["status"] == "ready"


def test_a_read_only_reviewer_sees_no_approve_button_and_cannot_forge_one(browser, site):
    rt, server, tokens = site
    page = log_in(browser, server, "rita", tokens["rita"])
    assert page.locator("input[name=task]").count() == 0
    key = open_ready_task(page, rt)
    assert page.locator("#approve").count() == 0
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    forged = page.request.post(f"{server.url}/tasks/{key}/approve",
                               form={"digest": rt.task(key)["digest"], "csrf_token": token})
    assert forged.status == 403
    assert rt.task(key)["status"] == "ready"


PHONE = {"width": 390, "height": 844}


def test_a_notification_link_lands_on_its_task_after_login(browser, site):
    rt, server, tokens = site
    [task] = rt.tasks("ready")
    page = browser.new_page(viewport=PHONE)
    page.goto(f"{server.url}/tasks/{task['key']}")
    assert "/login?next=" in page.url
    page.fill("input[name=name]", "alice")
    page.fill("input[name=token]", tokens["alice"])
    page.click("button[type=submit]")
    assert page.url == f"{server.url}/tasks/{task['key']}"
    assert shown_status(page) == "ready"


def test_every_page_fits_a_phone_without_sideways_scrolling(browser, home, tmp_path):
    rt = make_home(home)
    long_id = "c" * 120  # an id with nowhere to break
    rt.host().put_record(long_id, document="doc-demo", text="x" * 5000)
    rt.enqueue_events([event(1), event(2, record_id=long_id)])
    rt.run_until_idle()
    for task in rt.tasks("ready"):  # one parked, one uncertain: the longest states
        rt.approve(task["key"], task["digest"])
    rt.host().put_grant(actions=["read", "draft"])
    rt.run_until_idle()
    rt.host().put_grant(actions=["read", "draft", "submit_review"])
    token = rt.add_reviewer("alice")["token"]
    server = Server(home)
    try:
        page = log_in(browser, server, "alice", token)
        keys = [t["key"] for t in rt.tasks()]
        for name, path in [("index", "/?status=all"), ("parked", "/?status=all&parked=1"),
                           *[(f"task-{k[:8]}", f"/tasks/{k}") for k in keys],
                           ("dead-letters", "/dead-letters"), ("gaps", "/gaps"),
                           ("monitors", "/monitors")]:
            page.goto(server.url + path)
            page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
            wide = page.evaluate("document.documentElement.scrollWidth")
            assert wide <= PHONE["width"], (path, wide)
    finally:
        assert server.stop() == 0, server.stderr()
        rt.close()


# The words of the table cells that the layout split over two lines (a word: letters
# and digits; a line may still end after a hyphen or a dot between words).
SPLIT_WORDS = """() => {
  const split = [];
  for (const cell of document.querySelectorAll("td, th")) {
    const texts = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = texts.nextNode(); node; node = texts.nextNode()) {
      for (const word of node.data.matchAll(/\\w+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (lines.size > 1) split.push(word[0]);
      }
    }
  }
  return split;
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_the_monitors_table_keeps_its_words_whole(browser, site, width):
    rt, server, tokens = site
    rt.bind("doc-demo", "reviews-of-the-quarterly-report", window_s=3600,
            event_names=["comment.created", "comment.updated"])
    rt.pause("default", by="ops")
    page = log_in(browser, server, "alice", tokens["alice"])
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(server.url + "/monitors")
    assert page.locator("#unpause-default").count() == 1
    assert page.evaluate(SPLIT_WORDS) == []
    assert page.evaluate("document.documentElement.scrollWidth") <= width
