"""The JSON API of a real ``signoff serve`` (``/api/v1``), over HTTP with bearer tokens.

Tokens (401), read-only reviewers (403) and monitor-limited ones (404 for what
they may not see, on the API and on the pages), stale digests (409), bad bodies
(400), and an approval that is submitted exactly once.

The tests that decide one task, or read one, share a room: a home and its server
started once for the module, where each has a monitor of its own with two ready
tasks (``desk``), and a document of its own when it changes one's material. Those
that list every task, or count failed tokens, have a home of their own (``site``).
"""

import itertools

import httpx
import pytest

from helpers import LOCAL_TLS, read_here
from servekit import Server, csrf, event, init_home, make_home, post_login, ready_monitor
from signoff.models import MODELS


@pytest.fixture
def site(home):
    """A served home: tasks of monitor ``default`` (comment-1, 2) and ``other`` (comment-3);
    reviewers alice (every monitor), rita (read-only) and olga (``other`` only)."""
    rt = make_home(home, '[serve]\ntrusted_proxies = "127.0.0.1"\n')  # X-Forwarded-For below
    rt.bind("doc-demo", "other", window_s=3600)
    for n in (2, 3):
        rt.host().put_record(f"comment-{n}", document="doc-demo", text=f"comment {n}")
    rt.enqueue_events([event(1), event(2)])
    rt.enqueue_events([event(3)], monitor_id="other")
    rt.run_until_idle()
    tokens = {"alice": rt.add_reviewer("alice")["token"],
              "rita": rt.add_reviewer("rita", read_only=True)["token"],
              "olga": rt.add_reviewer("olga", monitors=["other"])["token"]}
    server = Server(home)
    client, close = bearer_clients(server.url, tokens)
    yield rt, server, tokens, client
    close()
    assert server.stop() == 0, server.stderr()
    rt.close()


def task_of(rt, monitor, record_id="comment-1"):
    return next(t for t in rt.tasks() if t["monitor"] == monitor and t["record_id"] == record_id)


def snapshot(rt):
    return {m.__name__: m.select().count() for m in MODELS}, [
        (t["key"], t["status"]) for t in rt.tasks()]


def bearer_clients(url, tokens):
    """``client(name=None, token=None)``: an API client with ``name``'s token (or ``token``),
    and ``close()`` for every client it made."""
    clients = []

    def client(name=None, token=None):
        headers = {}
        if name or token:
            headers["authorization"] = f"Bearer {token or tokens[name]}"
        c = httpx.Client(verify=LOCAL_TLS, base_url=url + "/api/v1", headers=headers, timeout=30)
        clients.append(c)
        return c

    def close():
        for c in clients:
            c.close()
    return client, close


@pytest.fixture(scope="module")
def room(room_home, room_env):
    """The module's home, its reviewers (as ``site``'s) and its server."""
    rt = init_home(room_home, '[serve]\ntrusted_proxies = "127.0.0.1"\n')
    rt.host().put_grant(docs=["doc-demo", "doc-redraft", "doc-hidden"])  # for those two tests
    for document in ("doc-redraft", "doc-hidden"):
        rt.host().put_material(document, "2026-11-01")
    rt.bind("doc-demo", "other", window_s=3600)
    tokens = {"alice": rt.add_reviewer("alice")["token"],
              "rita": rt.add_reviewer("rita", read_only=True)["token"],
              "olga": rt.add_reviewer("olga", monitors=["other"])["token"]}
    server = Server(room_home, env=room_env)
    yield rt, server, tokens
    assert server.stop() == 0, server.stderr()
    rt.close()


DESKS = itertools.count(1)


def _desk(room, document="doc-demo"):
    """``(rt, server, tokens, client, monitor, records)``: a monitor of the test's own on
    ``document``, with ready tasks of records of its own."""
    rt, server, tokens = room
    read_here(rt)
    n = next(DESKS)
    monitor, records = f"api-{n}", [f"comment-{n}-{k}" for k in (1, 2)]
    ready_monitor(rt, monitor, records, document)
    client, close = bearer_clients(server.url, tokens)
    yield rt, server, tokens, client, monitor, records
    close()
    assert server.proc.poll() is None, server.stderr()


@pytest.fixture
def desk(room, in_room, request):
    """``_desk`` on doc-demo, or on the document a test that changes one's material names
    (``parametrize("desk", [document], indirect=True)``)."""
    yield from _desk(room, getattr(request, "param", "doc-demo"))


def test_no_token_or_a_wrong_one_is_401_and_changes_nothing(site):
    rt, server, tokens, client = site
    t = task_of(rt, "default")
    before = snapshot(rt)
    for n, c in enumerate((client(), client(token="sor_not-a-token"),
                           client(token=tokens["alice"] + "x")), 1):
        # An address each (X-Forwarded-For, from the trusted 127.0.0.1): seven failed
        # tokens from one address would be throttled (429) after the fifth.
        c.headers["x-forwarded-for"] = f"10.0.9.{n}"
        assert c.get("/tasks").status_code == 401
        r = c.post(f"/tasks/{t['key']}/approve", json={"digest": t["digest"]})
        assert (r.status_code, r.json()["error"]) == (401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
    # Another scheme is no token.
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c:
        r = c.get("/api/v1/tasks", headers={"authorization": f"Basic {tokens['alice']}"})
        assert r.status_code == 401
    assert snapshot(rt) == before


def unknown_twin(key):
    """A key no task has, differing from ``key`` in its last character."""
    return key[:-1] + ("0" if key[-1] != "0" else "1")


def test_a_reviewer_outside_the_monitor_gets_what_a_task_that_does_not_exist_gets(site):
    rt, server, tokens, client = site
    olga = client("olga")
    mine, theirs = task_of(rt, "other", "comment-3"), task_of(rt, "default")
    listed = olga.get("/tasks").json()
    assert [t["key"] for t in listed["tasks"]] == [mine["key"]] and listed["more"] == 0
    assert olga.get("/tasks", params={"status": "ready"}).json()["tasks"][0]["key"] == mine["key"]
    # Another monitor lists as a monitor with no tasks does.
    assert olga.get("/tasks", params={"monitor": "default"}).json() == olga.get(
        "/tasks", params={"monitor": "nothing"}).json() == {
        "tasks": [], "more": 0, "limit": 50, "offset": 0}
    before = snapshot(rt)
    key, none = theirs["key"], unknown_twin(theirs["key"])
    for shown in (key, key[:12]):  # a full key and a prefix
        r, unknown = olga.get(f"/tasks/{shown}"), olga.get(f"/tasks/{none[:len(shown)]}")
        assert (r.status_code, r.json()["error"]) == (404, "unknown_task")
        assert r.json()["message"].replace(shown, "K") == unknown.json()["message"].replace(
            none[:len(shown)], "K")
    for action, body in (("approve", {"digest": theirs["digest"]}), ("reject", {"reason": "no"}),
                         ("cancel", {})):
        r = olga.post(f"/tasks/{key}/{action}", json=body)
        unknown = olga.post(f"/tasks/{none}/{action}", json=body)
        assert (r.status_code, r.json()["error"]) == (404, "unknown_task"), action
        assert r.text.replace(key, "K") == unknown.text.replace(none, "K")
    assert snapshot(rt) == before
    # Its own monitor's task it may decide.
    r = olga.post(f"/tasks/{mine['key']}/reject", json={"reason": "not needed"})
    assert (r.status_code, r.json()["status"]) == (200, "rejected")
    alice = client("alice")
    assert {t["monitor"] for t in alice.get("/tasks").json()["tasks"]} == {"default", "other"}


def test_a_read_only_reviewer_reads_and_may_not_decide(desk):
    rt, server, tokens, client, monitor, records = desk
    rita = client("rita")
    t = task_of(rt, monitor, records[0])
    assert rita.get(f"/tasks/{t['key']}").json()["digest"] == t["digest"]
    r = rita.post(f"/tasks/{t['key']}/approve", json={"digest": t["digest"]})
    assert (r.status_code, r.json()["error"]) == (403, "read_only")
    assert rt.task(t["key"])["status"] == "ready"


def test_a_stale_digest_is_409_and_nothing_is_approved(desk):
    rt, server, tokens, client, monitor, records = desk
    t = task_of(rt, monitor, records[0])
    before = snapshot(rt)
    r = client("alice").post(f"/tasks/{t['key']}/approve", json={"digest": "0" * 64})
    assert (r.status_code, r.json()["error"]) == (409, "digest_mismatch")
    assert snapshot(rt) == before


def test_approve_over_the_api_is_submitted_once_with_who_and_through_what(desk):
    rt, server, tokens, client, monitor, records = desk
    alice = client("alice")
    t = task_of(rt, monitor, records[0])
    shown = alice.get(f"/tasks/{t['key'][:12]}").json()  # a unique key prefix, as the CLI
    assert shown["key"] == t["key"] and shown["status"] == "ready"
    r = alice.post(f"/tasks/{t['key']}/approve", json={"digest": shown["digest"]})
    assert r.status_code == 200
    assert r.json() == {"key": t["key"], "status": "approved", "approved_digest": t["digest"]}
    again = alice.post(f"/tasks/{t['key']}/approve", json={"digest": shown["digest"]})
    assert (again.status_code, again.json()["status"]) == (200, "approved")  # nothing new queued
    rt.run_until_idle()
    rt.run_until_idle()
    detail = alice.get(f"/tasks/{t['key']}").json()
    assert (detail["status"], detail["approved_by"]) == ("done", "alice")
    written = [r for r in rt.host().results() if r["key"] == t["key"]]
    assert len(written) == 1 and written[0]["result"] == detail["result"]
    row = next(a for a in rt.audit() if a["code"] == "approved" and a["task_key"] == t["key"])
    assert (row["actor"], row["channel"]) == ("alice", "api")
    r = alice.post(f"/tasks/{t['key']}/cancel")
    assert (r.status_code, r.json()["error"]) == (409, "not_cancellable")


def test_cancel_over_the_api(desk):
    rt, server, tokens, client, monitor, records = desk
    t = task_of(rt, monitor, records[1])
    r = client("alice").post(f"/tasks/{t['key']}/cancel", content=b"")
    assert r.status_code == 200
    assert (r.json()["status"], r.json()["outcome_unknown"]) == ("cancelled", False)
    row = next(a for a in rt.audit() if a["code"] == "cancelled" and a["task_key"] == t["key"])
    assert (row["actor"], row["channel"]) == ("alice", "api")


@pytest.mark.parametrize("body, reason", [
    (b'{"digest": "a", "digest": "b"}', "twice"),
    (b'["digest"]', "one JSON object"),
    (b'{"digest": 5}', "digest: must be a str"),
    (b'{"digest": "a", "by": "mallory"}', "by: not a field"),
    (b'{"digest": ', "broken JSON"),
    (b'\xff\xfe', "not UTF-8"),
    (b'{}', "digest: missing"),
    (b'{"digest": "a", "ack_hidden_characters": "yes"}', "must be a bool"),
])
def test_a_bad_body_is_400_and_changes_nothing(desk, body, reason):
    rt, server, tokens, client, monitor, records = desk
    t = task_of(rt, monitor, records[0])
    before = snapshot(rt)
    r = client("alice").post(f"/tasks/{t['key']}/approve", content=body,
                             headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["error"]) == (400, "invalid_body")
    assert reason in r.json()["message"]
    assert snapshot(rt) == before


def test_unknown_tasks_404_and_listing_pages(site):
    rt, server, tokens, client = site
    alice = client("alice")
    r = alice.get("/tasks/" + "0" * 64)
    assert (r.status_code, r.json()["error"]) == (404, "unknown_task")
    assert alice.post("/tasks/" + "0" * 64 + "/reject", json={}).status_code == 404
    first = alice.get("/tasks", params={"limit": 2}).json()
    rest = alice.get("/tasks", params={"limit": 2, "offset": 2}).json()
    assert (len(first["tasks"]), first["more"], len(rest["tasks"]), rest["more"]) == (2, 1, 1, 0)
    every = [t["key"] for t in first["tasks"] + rest["tasks"]]
    assert every == [t["key"] for t in rt.tasks(newest_first=True)]
    assert alice.get("/tasks", params={"limit": 0}).status_code == 400
    assert alice.get("/tasks", params={"status": "nope"}).status_code == 400
    assert alice.get("/tasks", params={"status": "done"}).json()["tasks"] == []


def test_a_limited_reviewer_on_the_pages(site):
    rt, server, tokens, client = site
    theirs, mine = task_of(rt, "default"), task_of(rt, "other", "comment-3")
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c:
        assert post_login(c, "olga", tokens["olga"]).status_code == 303
        index = c.get("/", params={"status": "all"}).text
        assert mine["key"] in index and theirs["key"] not in index
        assert c.get(f"/tasks/{mine['key']}").status_code == 200
        key, none = theirs["key"], unknown_twin(theirs["key"])
        r, unknown = c.get(f"/tasks/{key}"), c.get(f"/tasks/{none}")
        assert r.status_code == 404 and "unknown_task" in r.text
        assert r.text.replace(key, "K") == unknown.text.replace(none, "K")
        token = csrf(c.get(f"/tasks/{mine['key']}").text)
        before = snapshot(rt)
        for action in ("approve", "reject", "retry"):
            r = c.post(f"/tasks/{key}/{action}", data={"digest": theirs["digest"],
                                                       "csrf_token": token})
            unknown = c.post(f"/tasks/{none}/{action}", data={"digest": theirs["digest"],
                                                              "csrf_token": token})
            assert r.status_code == 404 and "unknown_task" in r.text, action
            assert r.text.replace(key, "K") == unknown.text.replace(none, "K")
        r = c.post("/approve", data={"task": [f"{key}:{theirs['digest']}",
                                              f"{mine['key']}:{mine['digest']}"],
                                     "csrf_token": token})
        assert r.status_code == 409 and "unknown_task" in r.text
        assert snapshot(rt)[1] == [(k, "approved" if k == mine["key"] else s)
                                   for k, s in before[1]]
        delivery = next(e["delivery"] for e in rt.events() if e["monitor"] == "default")
        r, unknown = c.get(f"/deliveries/{delivery}"), c.get("/deliveries/999999")
        assert r.status_code == 404 and "unknown_delivery" in r.text
        assert r.text.replace(f"delivery {delivery}", "D") == unknown.text.replace(
            "delivery 999999", "D")
        rt.pause("other", by="ops")
        monitors = c.get("/monitors").text
        assert "paused" in monitors and "/?status=all&amp;monitor=other" in monitors
        assert "monitor=default" not in monitors


@pytest.mark.parametrize("desk", ["doc-hidden"], indirect=True)
def test_the_api_and_the_pages_answer_each_refusal_with_the_same_status(desk):
    rt, server, tokens, client, monitor, records = desk
    # The next draft of the desk's document holds a bidi control.
    rt.host().put_material("doc-hidden", "2026-11-01\u202e")
    record = f"{monitor}-comment-4"
    rt.host().put_record(record, document="doc-hidden", text="comment 4")
    rt.enqueue_events([event(4, event_id=f"evt-{record}", record_id=record,
                             document="doc-hidden")], monitor_id=monitor)
    rt.run_until_idle()
    hidden, plain = task_of(rt, monitor, record), task_of(rt, monitor, records[0])
    api, rita = client("alice"), client("rita")
    none = "0" * 64
    # (path, JSON body, form fields, code): one refusal each, sent both ways.
    cases = [(f"{hidden['key']}/approve", {"digest": hidden["digest"]},
              {"digest": hidden["digest"]}, "hidden_characters"),
             (f"{plain['key']}/reject", {"reason": "x\u202ey"},
              {"digest": plain["digest"], "reason": "x\u202ey"}, "invalid_reason"),
             (f"{plain['key']}/approve", {"digest": none}, {"digest": none}, "digest_mismatch"),
             (f"{none}/approve", {"digest": none}, {"digest": none}, "unknown_task")]
    before = snapshot(rt)
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as pages:
        assert post_login(pages, "alice", tokens["alice"]).status_code == 303
        token = csrf(pages.get("/").text)
        for path, body, form, code in cases:
            by_api = api.post(f"/tasks/{path}", json=body)
            by_page = pages.post(f"/tasks/{path}", data=dict(form, csrf_token=token))
            assert by_api.json()["error"] == code and code in by_page.text, (path, code)
            assert by_api.status_code == by_page.status_code, (code, by_api.status_code,
                                                               by_page.status_code)
        too_big = {"content-type": "application/x-www-form-urlencoded", "x-csrf-token": token}
        by_page = pages.post(f"/tasks/{plain['key']}/reject", content=b"x" * (2 << 20),
                             headers=too_big)
        by_api = api.post(f"/tasks/{plain['key']}/reject", content=b"x" * (2 << 20))
        assert (by_api.status_code, by_page.status_code) == (413, 413)
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as pages:
        assert post_login(pages, "rita", tokens["rita"]).status_code == 303
        by_page = pages.post(f"/tasks/{plain['key']}/approve",
                             data={"digest": plain["digest"], "csrf_token": csrf(pages.get("/").text)})
    by_api = rita.post(f"/tasks/{plain['key']}/approve", json={"digest": plain["digest"]})
    assert (by_api.status_code, by_page.status_code) == (403, 403)
    after = snapshot(rt)  # logins wrote their sessions and audit rows, and nothing else
    assert after[1] == before[1] and after[0]["Approval"] == before[0]["Approval"]


def test_status_all_lists_every_status_on_the_api_as_on_the_pages(site):
    rt, server, tokens, client = site
    alice = client("alice")
    t = task_of(rt, "default")
    assert alice.post(f"/tasks/{t['key']}/reject", json={}).status_code == 200
    every = alice.get("/tasks", params={"status": "all"}).json()
    assert [r["key"] for r in every["tasks"]] == [r["key"] for r in rt.tasks(newest_first=True)]
    assert {r["status"] for r in every["tasks"]} == {"ready", "rejected"}
    assert every == alice.get("/tasks").json()


@pytest.mark.parametrize("desk", ["doc-redraft"], indirect=True)
def test_redraft_over_the_api(desk):
    rt, server, tokens, client, monitor, records = desk
    t = task_of(rt, monitor, records[0])
    theirs = task_of(rt, monitor, records[1])
    rt.host().put_material("doc-redraft", "2026-12-24")
    r = client("rita").post(f"/tasks/{t['key']}/redraft")
    assert (r.status_code, r.json()["error"]) == (403, "read_only")
    r = client("olga").post(f"/tasks/{theirs['key']}/redraft")
    assert (r.status_code, r.json()["error"]) == (404, "unknown_task")
    assert client("alice").post(f"/tasks/{t['key']}/redraft", json={"x": 1}).status_code == 400
    assert rt.task(t["key"])["digest"] == t["digest"]
    r = client("alice").post(f"/tasks/{t['key']}/redraft")
    assert r.status_code == 200 and r.json()["key"] == t["key"]
    assert r.json()["digest"] == rt.task(t["key"])["digest"] != t["digest"]
    row = next(a for a in rt.audit() if a["code"] == "redrafted" and a["task_key"] == t["key"])
    assert (row["actor"], row["channel"], row["task_key"]) == ("alice", "api", t["key"])


def test_each_text_a_person_reads_says_which_hidden_characters_it_holds(desk):
    rt, server, tokens, client, monitor, records = desk
    record = f"{monitor}-comment-5"
    rt.host().put_record(record, document="doc-demo", text="pay \u202e0$ now")
    rt.enqueue_events([event(5, event_id=f"evt-{record}", record_id=record)], monitor_id=monitor)
    rt.run_until_idle()
    t = client("alice").get(f"/tasks/{task_of(rt, monitor, record)['key']}").json()
    found = t["hidden_characters_by_field"]
    assert found["record"] == ["U+202E"]
    assert found["result"] == found["monitor"] == found["draft_meta"] == []
    assert t["hidden_characters"] == []  # the draft's own list, as before
