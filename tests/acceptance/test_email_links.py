"""Email links against a real ``signoff serve``: GET never decides, the page's button
does once (channel ``email``), and a used, outdated, expired or unknown link decides
nothing; the same links in headless Chromium (``browser``)."""

import json
import re
import subprocess

import httpx
import pytest

from helpers import LOCAL_TLS, child_env, shown_status, signoff_cmd, wait_for
from mailkit import inbox, link_of, toml  # noqa: F401 (inbox: a fixture)
from servekit import Server, event, make_home
from signoff.chores import mail, notify, reminders
from signoff.models import Audit


@pytest.fixture
def served(home, inbox):
    """A home mailing through ``inbox``, reviewer alice, and its ``signoff serve``."""
    rt = make_home(home, extra_toml=toml(inbox, public_url="https://review.example"))
    rt.add_reviewer("alice", email="alice@example.com")
    notify.collect(rt.clock.now(), webhook=False, email=True)  # the cursor starts here
    server = Server(home)
    yield rt, server
    assert server.stop() == 0, server.stderr()
    rt.close()


def mailed_link(rt, inbox, n=1):
    """Make record comment-<n>'s task ready, mail it, and return ``(task, token)``."""
    if n != 1:
        rt.host().put_record(f"comment-{n}", document="doc-demo", text=f"comment {n}")
    rt.enqueue_events([event(n)])
    rt.run_until_idle()
    [task] = [t for t in rt.tasks("ready") if t["record_id"] == f"comment-{n}"]
    before = len(inbox.to("alice@example.com"))
    notify.collect(rt.clock.now(), webhook=False, email=True)
    notify.send_due(rt, None, None, mail.email_settings(rt.home))
    message = wait_for(lambda: inbox.to("alice@example.com")[before:], timeout=30,
                       what="the message")[0]
    return task, link_of(message)[1]


def form_csrf(page):
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def client_of(server):
    return httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30)


def test_a_get_decides_nothing_and_the_button_decides_once(served, inbox):
    rt, server = served
    task, token = mailed_link(rt, inbox)
    with client_of(server) as client:
        for _ in range(3):
            page = client.get(f"/r/{token}")
            assert page.status_code == 200 and 'data-status="ready"' in page.text
            assert "please add the demo date" in page.text and task["key"] in page.text
        assert rt.task(task["key"])["approvals"] == []
        # The link's cookie is scoped to its own path: no other page is open to it.
        assert client.get("/", follow_redirects=False).status_code == 303
        assert client.get(f"/tasks/{task['key']}", follow_redirects=False).status_code == 303
        csrf = form_csrf(page.text)
        done = client.post(f"/r/{token}/approve", data={"csrf_token": csrf},
                           follow_redirects=False)
        assert done.status_code == 303
        again = client.post(f"/r/{token}/approve", data={"csrf_token": csrf})
        assert again.status_code == 409 and "link_used" in again.text
        assert 'data-problem="link_used"' in client.get(f"/r/{token}").text
    detail = rt.task(task["key"])
    assert detail["status"] == "approved" and detail["approved_by"] == "alice"
    assert [(a["by"], a["channel"]) for a in detail["approvals"]] == [("alice", "email")]
    assert Audit.get(Audit.code == "approved").channel == "email"


def test_refused_posts_leave_the_link_usable(served, inbox):
    rt, server = served
    task, token = mailed_link(rt, inbox)
    with client_of(server) as stranger:  # never opened the page: no cookie
        assert stranger.post(f"/r/{token}/approve", data={"csrf_token": "x"}).status_code == 403
    with client_of(server) as client:
        csrf = form_csrf(client.get(f"/r/{token}").text)
        assert client.post(f"/r/{token}/approve",
                           data={"csrf_token": "wrong"}).status_code == 403
        bad_reason = client.post(f"/r/{token}/reject", data={"csrf_token": csrf,
                                                             "reason": "no\u202eway"})
        assert bad_reason.status_code == 400 and "invalid_reason" in bad_reason.text
        assert rt.task(task["key"])["status"] == "ready"
        assert client.post(f"/r/{token}/reject", data={"csrf_token": csrf, "reason": "not now"},
                           follow_redirects=False).status_code == 303
    detail = rt.task(task["key"])
    assert (detail["status"], detail["rejected_by"], detail["reject_reason"]) == (
        "rejected", "alice", "not now")


def test_an_outdated_an_expired_and_an_unknown_link_decide_nothing(served, inbox, home):
    rt, server = served
    task, token = mailed_link(rt, inbox)
    with client_of(server) as client:
        assert client.get("/r/sol_nothing").status_code == 404
        csrf = form_csrf(client.get(f"/r/{token}").text)
        rt.host().put_material("doc-demo", "2026-12-24")
        assert rt.redraft(task["key"])["key"] == task["key"]
        page = client.get(f"/r/{token}").text
        assert 'data-problem="draft_changed"' in page and "the draft changed" in page
        refused = client.post(f"/r/{token}/approve", data={"csrf_token": csrf})
        assert refused.status_code == 409 and "draft_changed" in refused.text
        assert rt.task(task["key"])["approvals"] == []
    with open(home / "signoff.toml", "a", encoding="utf-8") as f:
        f.write("link_ttl_s = 1\n")  # [notify.email] is the file's last table
    _, short = mailed_link(rt, inbox, n=2)
    with client_of(server) as client:
        wait_for(lambda: 'data-problem="link_expired"' in client.get(f"/r/{short}").text,
                 timeout=30, what="the link to expire")
        csrf = client.cookies.get("signoff_link", path=f"/r/{short}")
        expired = client.post(f"/r/{short}/approve", data={"csrf_token": csrf})
        assert expired.status_code == 410 and "link_expired" in expired.text
    assert all(t["status"] == "ready" for t in rt.tasks())


@pytest.mark.browser
def test_a_link_followed_in_chromium(served, inbox, browser):
    rt, server = served
    task, token = mailed_link(rt, inbox)
    page = browser.new_page()
    page.goto(f"{server.url}/r/{token}")
    assert shown_status(page) == "ready" and page.is_visible("#approve")
    page.reload()  # opening it again decides nothing either
    assert rt.task(task["key"])["approvals"] == []
    page.click("#approve")
    page.wait_for_url(f"{server.url}/r/{token}")
    assert page.get_attribute("#link-problem", "data-problem") == "link_used"
    assert shown_status(page) == "approved"
    assert rt.task(task["key"])["approvals"][0]["channel"] == "email"
    second, other = mailed_link(rt, inbox, n=2)
    page.goto(f"{server.url}/r/{other}")
    rt.host().put_material("doc-demo", "2026-12-24")
    rt.redraft(second["key"])
    page.click("#approve")  # the page still shows the old draft; the server refuses it
    assert "draft_changed" in page.content()
    page.goto(f"{server.url}/r/{other}")
    assert page.get_attribute("#link-problem", "data-problem") == "draft_changed"
    assert "the draft changed" in page.inner_text("#link-problem")
    assert not page.is_visible("#approve")
    assert rt.task(second["key"])["status"] == "ready"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_approves_a_task_from_an_email_link(tmp_path):
    keep = tmp_path / "demo"
    proc = subprocess.run(signoff_cmd(tmp_path, "demo", "--channels", "--keep", str(keep),
                                      "--json"),
                          env=child_env(), capture_output=True, text=True, timeout=240)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["passed"] is True and all(s["ok"] for s in report["steps"])
    assert report["seconds"] < 60
    counts = report["counts"]
    assert counts["messages"] == 1 and counts["results_on_host"] == 2
    assert counts["tasks"]["done"] == 2 and counts["seconds_ready_to_mail"] >= 0


def test_an_escalated_reviewer_limited_to_other_monitors_decides_that_task_alone(home):
    rt = make_home(home)
    rt.bind("doc-demo", "other")
    bob = rt.add_reviewer("bob", monitors=["other"])["token"]
    rt.bind("doc-demo", "nudged", window_s=3600, escalate_after_s=1, escalate_to=["bob"])
    rt.enqueue_events([event(1)], "nudged")
    rt.enqueue_events([event(1, event_id="evt-default")])
    rt.run_until_idle()
    [task] = [t for t in rt.tasks("ready") if t["monitor"] == "nudged"]
    [elsewhere] = [t for t in rt.tasks("ready") if t["monitor"] == "default"]
    server = Server(home)
    try:
        with client_of(server) as api:
            api.headers["authorization"] = f"Bearer {bob}"
            approve = {"digest": task["digest"]}
            assert api.get(f"/api/v1/tasks/{task['key']}").status_code == 404
            assert api.post(f"/api/v1/tasks/{task['key']}/approve", json=approve).status_code == 404
            wait_for(lambda: reminders.run(rt)["escalated"], timeout=30, what="the escalation")
            assert api.get(f"/api/v1/tasks/{task['key']}").status_code == 200
            assert api.get(f"/api/v1/tasks/{elsewhere['key']}").status_code == 404
            assert [t["key"] for t in api.get("/api/v1/tasks").json()["tasks"]] == []
            answer = api.post(f"/api/v1/tasks/{task['key']}/approve", json=approve)
            assert answer.status_code == 200 and answer.json()["status"] == "approved"
    finally:
        assert server.stop() == 0, server.stderr()
    assert rt.task(task["key"])["approvals"][0]["by"] == "bob"
    rt.close()
