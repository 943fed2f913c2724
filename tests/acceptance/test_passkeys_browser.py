"""Passkeys on the review pages, in headless Chromium with a virtual authenticator
(user verification on): a reviewer registers a passkey at ``/keys``, then approves a
task of a monitor with signed approvals from its page; the assertion signs the
task's statement, and the approval keeps it.

Run with ``python -m pytest -m browser``.
"""

import pytest

from helpers import read_here, shown_status
from servekit import Server, event, make_home
from signoff.models import Approval, Audit, ReviewerKey

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def site(home):
    """Monitor ``s`` (signed approvals) with two ready tasks, reviewer alice, a server."""
    rt = read_here(make_home(home))
    rt.bind("doc-demo", "s", window_s=3600, signed_approvals=True)
    rt.host().put_record("comment-2", document="doc-demo", text="comment 2")
    rt.enqueue_events([event(1), event(2)], monitor_id="s")
    rt.run_until_idle()
    token = rt.add_reviewer("alice")["token"]
    server = Server(home)
    yield rt, server, token
    assert server.stop() == 0, server.stderr()
    rt.close()


def log_in_at(page, base, name, token):
    page.goto(base + "/")
    page.fill("input[name=name]", name)
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    assert page.url == base + "/"


def test_a_passkey_registered_on_the_keys_page_approves_and_rejects_signed_tasks(browser, site):
    rt, server, token = site
    # A passkey's relying party is a host name, never an address: localhost is this server.
    base = server.url.replace("127.0.0.1", "localhost")
    page = browser.new_page()
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
        "protocol": "ctap2", "transport": "internal", "hasResidentKey": True,
        "hasUserVerification": True, "isUserVerified": True}})
    log_in_at(page, base, "alice", token)
    task, other = sorted(rt.tasks("ready"), key=lambda t: t["record_id"])
    # Unsigned, the page's approval would not count: the page offers the passkey instead.
    page.goto(f"{base}/tasks/{task['key']}")
    assert page.locator("#approve").count() == 0 and page.locator("#approve-signed").count() == 1
    page.goto(base + "/keys")
    assert page.locator("#no-keys").count() == 1
    page.click("#add-passkey")
    page.wait_for_selector("#keys", timeout=30_000)
    [key] = ReviewerKey.select()
    assert (key.reviewer, key.kind) == ("alice", "webauthn") and key.credential_id
    added = Audit.get(Audit.code == "reviewer_key_added")
    assert (added.actor, added.channel, added.data["kind"]) == ("alice", "page", "webauthn")
    page.goto(f"{base}/tasks/{task['key']}")
    page.click("#approve-signed")
    # The page reloads once the approval counted (a selector: the CSP allows no eval).
    page.wait_for_selector('#status[data-status="approved"]', timeout=30_000)
    assert shown_status(page) == "approved", page.inner_text("#passkey-outcome")
    [approval] = Approval.select().where(Approval.task_key == task["key"])
    assert approval.by == "alice" and approval.channel == "page"
    assert set(approval.signature["webauthn"]) == {"credential_id", "authenticator_data",
                                                   "client_data_json", "signature"}
    assert '"decision":"approve"' in approval.statement
    rt.run_until_idle()
    assert rt.task(task["key"])["status"] == "done"
    # The other one rejected, with a reason, signed by the same passkey.
    page.goto(f"{base}/tasks/{other['key']}")
    page.fill("#reject-reason-input", "not this week")
    page.click("#reject-signed")
    page.wait_for_selector('#status[data-status="rejected"]', timeout=30_000)
    rejected = rt.task(other["key"])
    assert (rejected["rejected_by"], rejected["reject_reason"]) == ("alice", "not this week")
    assert set(rejected["reject_proof"]["webauthn"]) == {
        "credential_id", "authenticator_data", "client_data_json", "signature"}
