"""Retrying a task from `signoff serve`: the JSON API's route and the task page's button,
as `signoff tasks retry` does it, with the reviewer's rights."""

import time

import httpx

from helpers import LOCAL_TLS
from servekit import csrf, post_login
from signoff.models import Task
from test_api import site, snapshot, task_of  # noqa: F401 (site: a fixture)


def approved(rt, monitor="default", record_id="comment-1"):
    """A task of ``monitor`` approved (no worker runs: it waits for its submit)."""
    t = task_of(rt, monitor, record_id)
    assert rt.approve(t["key"], t["digest"], by="bob")["status"] == "approved"
    return rt.task(t["key"])


def retried_by(rt, key):
    return [(a["actor"], a["channel"]) for a in rt.audit()
            if a["code"] == "retry" and a["task_key"] == key]


def test_retry_over_the_api_queues_an_approved_task_now_with_who_and_through_what(site):
    rt, server, tokens, client = site
    alice, ready = client("alice"), task_of(rt, "default", "comment-2")
    r = alice.post(f"/tasks/{ready['key']}/retry")
    assert (r.status_code, r.json()["error"]) == (409, "needs_approval")
    t = approved(rt)
    r = alice.post(f"/tasks/{t['key'][:12]}/retry", json={})
    assert r.status_code == 200, r.text
    assert r.json() == {"key": t["key"], "status": "approved", "approved_digest": t["digest"]}
    assert retried_by(rt, t["key"]) == [("alice", "api")]
    assert rt.task(t["key"])["next_at"] >= t["next_at"]


def test_retry_over_the_api_is_refused_as_approve_is_and_changes_nothing(site):
    rt, server, tokens, client = site
    t, theirs = approved(rt), approved(rt, "other", "comment-3")
    before = snapshot(rt)
    for name, key, body, status, code in (
            ("rita", t["key"], b"", 403, "read_only"),
            ("olga", t["key"], b"", 404, "unknown_task"),
            ("alice", "0" * 64, b"", 404, "unknown_task"),
            ("alice", t["key"], b'{"by": "mallory"}', 400, "invalid_body")):
        r = client(name).post(f"/tasks/{key}/retry", content=body)
        assert (r.status_code, r.json()["error"]) == (status, code), (name, r.text)
    assert snapshot(rt) == before and retried_by(rt, t["key"]) == []
    # A limited reviewer retries its own monitor's tasks.
    assert client("olga").post(f"/tasks/{theirs['key']}/retry").status_code == 200
    assert retried_by(rt, theirs["key"]) == [("olga", "api")]


def waiting(t):
    """``t`` (approved) with its next try an hour away, as a failed submit's backoff
    leaves it."""
    Task.update(next_at=time.time() + 3600).where(Task.key == t["key"]).execute()
    return dict(t, next_at=Task.get_by_id(t["key"]).next_at)


def test_the_task_page_offers_retry_for_a_waiting_approved_task_and_its_form_queues_it(site):
    rt, server, tokens, client = site
    t = waiting(approved(rt))
    due_now = approved(rt, record_id="comment-2")
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c, \
            httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as reader:
        assert post_login(c, "alice", tokens["alice"]).status_code == 303
        assert 'id="retry"' not in c.get(f"/tasks/{due_now['key']}").text  # the worker's now
        page = c.get(f"/tasks/{t['key']}").text
        assert 'id="retry"' in page and "Retry now" in page and 'id="next-try"' in page
        assert post_login(reader, "rita", tokens["rita"]).status_code == 303
        shown = reader.get(f"/tasks/{t['key']}").text
        assert 'id="retry"' not in shown
        r = reader.post(f"/tasks/{t['key']}/retry", data={"csrf_token": csrf(shown)})
        assert r.status_code == 403 and retried_by(rt, t["key"]) == []
        r = c.post(f"/tasks/{t['key']}/retry", data={"csrf_token": csrf(page)})
        assert r.status_code == 303
    assert retried_by(rt, t["key"]) == [("alice", "page")]
    assert rt.task(t["key"])["next_at"] < t["next_at"]  # due now
