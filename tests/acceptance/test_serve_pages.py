"""The review pages of a real ``signoff serve``, driven with plain HTTP (no browser).

Sessions, CSRF, read-only reviewers, approve/reject/bulk/retry/replay forms,
stale digests and changed records, and that GET changes nothing.

Most tests share one room: a home and its server, started once for the module, with
reviewers alice and rita. Each such test has a desk there (``desk``): a monitor of its
own with three ready tasks, of records of its own; a test that changes a reviewer or
a document's material changes one of its own. The tests that change the host's grant
or faults, move a clock, or count the whole home have a home and server of their own
(``site``).
"""

import itertools
import json
import re
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import LOCAL_TLS, invoke, read_here
from servekit import (Server, csrf, event, init_home, logged_in, make_home, post_login,
                      ready_home, ready_monitor)
from signoff.app import Signoff
from signoff.clock import FakeClock
from signoff.models import MODELS, Task


class Desk:
    """A server, a monitor with ready tasks, and its reviewers' tokens and clients."""

    def __init__(self, rt, server, tokens, monitor, document="doc-demo",
                 records=("comment-1", "comment-2", "comment-3")):
        self.rt, self.server, self.tokens = rt, server, dict(tokens)
        self.monitor, self.document, self.records = monitor, document, records
        self.clients = []

    def login(self, name):
        """A client logged in as ``name``."""
        client = httpx.Client(verify=LOCAL_TLS, base_url=self.server.url, timeout=30)
        self.clients.append(client)
        r = post_login(client, name, self.tokens[name])
        assert r.status_code == 303, r.text
        return client

    def person(self, name, **options):
        """A reviewer of this test's own (``add_reviewer`` options), whom it may change."""
        name = f"{name}-{next(PEOPLE)}"
        self.tokens[name] = self.rt.add_reviewer(name, **options)["token"]
        return name

    def keys(self):
        """The keys of the monitor's ready tasks, oldest first."""
        return [t["key"] for t in self.rt.monitor_tasks(self.monitor, "ready")]

    def close(self):
        for client in self.clients:
            client.close()


@pytest.fixture
def site(home):
    """A home with three ready tasks of monitor ``default``, and its server, of the test's own."""
    rt = ready_home(home)
    tokens = {"alice": rt.add_reviewer("alice")["token"],
              "rita": rt.add_reviewer("rita", read_only=True)["token"]}
    server = Server(home)
    made = Desk(rt, server, tokens, "default")
    yield made
    made.close()
    assert server.stop() == 0, server.stderr()
    rt.close()


@pytest.fixture(scope="module")
def room(room_home, room_env):
    """The module's home, its reviewers and its server: ``(rt, server, tokens)``."""
    rt = init_home(room_home)
    rt.host().put_grant(docs=["doc-demo", "doc-redraft"])  # doc-redraft: the redraft test's
    rt.host().put_material("doc-redraft", "2026-11-01")
    tokens = {"alice": rt.add_reviewer("alice")["token"],
              "rita": rt.add_reviewer("rita", read_only=True)["token"]}
    server = Server(room_home, env=room_env)
    yield rt, server, tokens
    assert server.stop() == 0, server.stderr()
    rt.close()


DESKS, PEOPLE = itertools.count(1), itertools.count(1)


def _desk(room, document="doc-demo"):
    rt, server, tokens = room
    read_here(rt)
    n = next(DESKS)
    made = Desk(rt, server, tokens, f"pages-{n}", document,
                [f"comment-{n}-{k}" for k in (1, 2, 3)])
    ready_monitor(rt, made.monitor, made.records, document)
    assert len(made.keys()) == 3
    yield made
    made.close()
    assert server.proc.poll() is None, server.stderr()


@pytest.fixture
def desk(room, in_room, request):
    """A monitor of this test's own in the room, with three ready tasks, on doc-demo or on
    the document a test that changes one's material names
    (``parametrize("desk", [document], indirect=True)``)."""
    yield from _desk(room, getattr(request, "param", "doc-demo"))


def snapshot():
    return {m.__name__: m.select().count() for m in MODELS}


def test_without_a_session_pages_redirect_and_posts_answer_401(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    key = desk.keys()[0]
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c:
        for path, back in (("/", ""), (f"/tasks/{key}", f"?next=%2Ftasks%2F{key}"),
                           ("/dead-letters", "?next=%2Fdead-letters")):
            r = c.get(path)
            assert (r.status_code, r.headers["location"]) == (303, "/login" + back)
        r = c.post(f"/tasks/{key}/approve", data={"digest": rt.task(key)["digest"]})
        assert r.status_code == 401
        assert post_login(c, "alice", "sor_wrong").status_code == 401
        assert post_login(c, "nobody", tokens["alice"]).status_code == 401
        # the right token without the login form's CSRF pair is refused too
        c.cookies.clear()
        r = c.post("/login", data={"name": "alice", "token": tokens["alice"]})
        assert r.status_code == 403 and "bad_csrf_token" in r.text and "set-cookie" not in r.headers
    assert rt.task(key)["status"] == "ready"


def test_login_sets_a_strict_httponly_cookie_and_logout_ends_it(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c:
        r = post_login(c, "alice", tokens["alice"])
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "secure" not in cookie
        page = c.get("/").text
        assert c.post("/logout", data={"csrf_token": csrf(page)}).status_code == 303
        assert c.get("/").status_code == 303


def test_approve_needs_the_csrf_token_and_binds_the_reviewer(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    key = desk.keys()[0]
    c = login("alice")
    page = c.get(f"/tasks/{key}").text
    digest = rt.task(key)["digest"]
    assert digest in page and 'id="approve"' in page
    for form in ({"digest": digest}, {"digest": digest, "csrf_token": "0" * 64}):
        assert c.post(f"/tasks/{key}/approve", data=form).status_code == 403
    assert rt.task(key)["status"] == "ready"
    r = c.post(f"/tasks/{key}/approve", data={"digest": digest},
               headers={"X-CSRF-Token": csrf(page)})
    assert (r.status_code, r.headers["location"]) == (303, f"/tasks/{key}")
    t = rt.task(key)
    assert (t["status"], t["approved_by"], t["approved_digest"]) == ("approved", "alice", digest)


def test_a_stale_digest_is_409_digest_mismatch_and_approves_nothing(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    key = desk.keys()[0]
    c = login("alice")
    token = csrf(c.get(f"/tasks/{key}").text)
    r = c.post(f"/tasks/{key}/approve", data={"digest": "f" * 64, "csrf_token": token})
    assert r.status_code == 409 and "digest_mismatch" in r.text
    assert rt.task(key)["status"] == "ready"


def test_a_changed_record_is_flagged_on_the_page_and_refused(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    key = desk.keys()[0]
    record_id = rt.task(key)["record_id"]
    c = login("alice")
    assert 'id="record-changed"' not in c.get(f"/tasks/{key}").text
    rt.host().put_record(record_id, version=2, text="edited after the draft")
    page = c.get(f"/tasks/{key}").text
    assert 'id="record-changed"' in page and 'id="current-version">2<' in page
    r = c.post(f"/tasks/{key}/approve", data={"digest": rt.task(key)["digest"],
                                               "csrf_token": csrf(page)})
    assert r.status_code == 409 and "source_changed" in r.text
    assert rt.task(key)["status"] == "blocked"


def test_read_only_reviewers_see_no_actions_and_forged_posts_are_403(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    key = desk.keys()[0]
    c = login("rita")
    index, page = c.get(f"/?monitor={desk.monitor}").text, c.get(f"/tasks/{key}").text
    assert key[:12] in index and 'type="checkbox" name="task"' not in index
    assert 'id="approve"' not in page and "read-only" in page
    digest = rt.task(key)["digest"]
    for path, form in ((f"/tasks/{key}/approve", {"digest": digest}),
                       (f"/tasks/{key}/reject", {"digest": digest}),
                       ("/approve", {"task": f"{key}:{digest}"})):
        r = c.post(path, data=dict(form, csrf_token=csrf(page)))
        assert r.status_code == 403, (path, r.text)
    assert rt.task(key)["status"] == "ready"


def test_bulk_approve_binds_each_task_to_its_own_digest(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    k1, k2, k3 = desk.keys()
    c = login("alice")
    index = c.get(f"/?status=ready&monitor={desk.monitor}").text
    assert all(f'value="{k}:{rt.task(k)["digest"]}"' in index for k in (k1, k2, k3))
    form = {"csrf_token": csrf(index),
            "task": [f"{k1}:{rt.task(k1)['digest']}", f"{k2}:{rt.task(k1)['digest']}"]}
    r = c.post("/approve", data=form)
    assert r.status_code == 409 and "digest_mismatch" in r.text and "approved" in r.text
    assert [rt.task(k)["status"] for k in (k1, k2, k3)] == ["approved", "ready", "ready"]
    assert rt.task(k1)["approved_by"] == "alice"


def test_reject_carries_the_digest(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    key = desk.keys()[0]
    c = login("alice")
    token = csrf(c.get(f"/tasks/{key}").text)
    assert c.post(f"/tasks/{key}/reject", data={"digest": "0" * 64, "csrf_token": token}).status_code == 409
    assert rt.task(key)["status"] == "ready"
    r = c.post(f"/tasks/{key}/reject", data={"digest": rt.task(key)["digest"], "csrf_token": token})
    assert r.status_code == 303 and rt.task(key)["status"] == "rejected"


def test_parked_uncertain_and_dead_letters_are_shown_with_their_actions(site, home):
    rt, server, tokens, login = site.rt, site.server, site.tokens, site.login
    k1, k2, k3 = site.keys()
    clock = FakeClock(time.time())
    fake = Signoff(home, clock=clock)
    read_here(fake)
    # k1 parks at submit (the grant lost submit_review); k2 ends uncertain (lost ack)
    fake.approve(k1, fake.task(k1)["digest"])
    fake.host().put_grant(actions=["read", "draft"])
    fake.run_until_idle()
    fake.host().put_grant(actions=["read", "draft", "submit_review"])
    # a delivery whose read budget is spent becomes a dead letter
    fake.host().set_fault("read-timeout", 100)
    fake.enqueue_events([event(3, event_id="evt-dead")])
    for _ in range(20):
        fake.run_until_idle()
        clock.advance(60)
    fake.host().clear_faults()
    fake.host().set_fault("lose-ack", 1)
    fake.approve(k2, fake.task(k2)["digest"])
    fake.run_until_idle()
    assert rt.task(k1)["parked"] and rt.task(k2)["status"] == "uncertain"
    [letter] = rt.dead_letters()

    c = login("alice")
    parked = c.get("/?status=all&parked=1").text
    assert k1[:12] in parked and k2[:12] not in parked
    assert "may have been written" in c.get("/?status=uncertain").text
    page = c.get(f"/tasks/{k2}").text
    assert 'id="may-be-written"' in page and 'id="retry"' in page
    page = c.get(f"/tasks/{k1}").text
    assert 'id="retry"' in page
    assert c.post(f"/tasks/{k1}/retry", data={"csrf_token": csrf(page)}).status_code == 303
    assert not rt.task(k1)["parked"]
    dead = c.get("/dead-letters").text
    assert f"/dead-letters/{letter['id']}/replay" in dead
    r = c.post(f"/dead-letters/{letter['id']}/replay", data={"csrf_token": csrf(dead)})
    assert r.status_code == 303 and rt.dead_letters()[0]["replayed"] == 1
    fake.close()


def test_get_requests_change_nothing(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    c = login("alice")
    before = snapshot()
    for path in ["/", "/?status=all", "/dead-letters", "/metrics", "/healthz", "/login",
                 *[f"/tasks/{k}" for k in desk.keys()], "/tasks/nope"]:
        assert c.get(path).status_code in (200, 404)
    assert snapshot() == before


def test_removing_a_reviewer_ends_their_sessions(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    alice = desk.person("alice")  # whom this test removes
    c = login(alice)
    assert c.get("/").status_code == 200
    out = invoke(rt.home, "reviewer", "remove", alice, "--json")
    assert out.exit_code == 0 and json.loads(out.stdout)["sessions_ended"] == 1
    assert c.get("/").status_code == 303


def test_reviewer_cli_shapes_and_refusals(home):
    rt = make_home(home)

    def cli(*args):
        out = invoke(home, "reviewer", *args, "--json")
        return out.exit_code, json.loads(out.stdout)
    code, added = cli("add", "sam", "--read-only")
    assert code == 0 and set(added) == {"name", "token", "read_only", "monitors", "email",
                                        "slack_user"}
    assert added["read_only"] and added["monitors"] is None
    assert cli("add", "sam")[1]["error"] == "reviewer_exists"
    assert cli("add", "bad\x07name")[1]["error"] == "invalid_name"
    code, rows = cli("list")
    assert rows == [{"name": "sam", "read_only": True, "monitors": None, "email": None,
                     "slack_user": None, "delegate": None, "created_at": rows[0]["created_at"]}]
    assert cli("set", "sam", "--email", "Sam <sam@example.com>")[1]["error"] == "invalid_email"
    assert cli("add", "tia", "--email", "tia@example")[1]["error"] == "invalid_email"
    assert cli("set", "nobody", "--email", "n@example.com")[1]["error"] == "unknown_reviewer"
    assert cli("set", "sam", "--email", "sam@example.com") == (0, dict(
        rows[0], email="sam@example.com"))
    assert cli("add", "tia", "--email", "tia@example.com")[1]["email"] == "tia@example.com"
    assert [r["email"] for r in cli("list")[1]] == ["sam@example.com", "tia@example.com"]
    assert cli("set", "sam", "--email", "")[1]["email"] is None
    assert added["token"] not in json.dumps(rows) + json.dumps(rt.audit())
    assert "sam@example.com" not in json.dumps(rt.audit())
    assert cli("remove", "nobody")[1]["error"] == "unknown_reviewer"
    rt.close()


def test_metrics_match_stats(site, home):
    rt, server, tokens, login = site.rt, site.server, site.tokens, site.login
    k1 = site.keys()[0]
    rt.approve(k1, rt.task(k1)["digest"])
    rt.run_until_idle()
    stats = json.loads(invoke(home, "stats", "--json").stdout)
    text = httpx.get(server.url + "/metrics", verify=LOCAL_TLS, timeout=30).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    by = lambda name, label: {dict(k)[label]: v for k, v in samples[name].items()}  # noqa: E731
    assert by("signoff_deliveries", "status") == stats["deliveries"]
    assert by("signoff_tasks", "status") == stats["tasks"] == {"done": 1, "ready": 2}
    assert samples["signoff_dead_letters"][()] == stats["dead_letters"]["total"]
    assert samples["signoff_lease_takeovers_total"][()] == stats["lease_expiries"]
    assert samples["signoff_uncertain_recovered_total"][()] == stats["uncertain"]["recovered"]
    assert samples["signoff_stale_events_total"][()] == stats["stale_event_gaps"]
    assert samples["signoff_oldest_ready_seconds"][()] > 0
    attempts = samples["signoff_attempts_total"]
    assert sum(attempts.values()) == sum(1 for _ in rt.task(k1)["history"]) + len(rt.events())


def test_record_and_draft_text_cannot_script_or_forge_a_form(home):
    rt = make_home(home)
    hostile = '<script>alert(1)</script><form method="post" action="/approve"><button>go</button></form>'
    rt.host().put_record("comment-1", text=hostile)
    rt.enqueue_events([event(1)])
    rt.run_until_idle()
    token = rt.add_reviewer("alice")["token"]
    server = Server(home)
    try:
        with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c:
            post_login(c, "alice", token)
            [task] = rt.tasks("ready")
            r = c.get(f"/tasks/{task['key']}")
        assert "&lt;script&gt;" in r.text and "<script" not in r.text
        # Log out, approve, reject, edit, redraft, cancel: none from the record.
        assert r.text.count("<form") == 6
        csp = r.headers["content-security-policy"]
        # Scripts from this site alone (the passkeys' file), none inline.
        assert "default-src 'none'" in csp and "script-src 'self';" in csp
        assert "unsafe-inline" not in csp
        assert r.headers["x-frame-options"] == "DENY"
    finally:
        assert server.stop() == 0
        rt.close()


def test_what_was_not_observed_is_on_the_review_page(site):
    rt, server, tokens, login = site.rt, site.server, site.tokens, site.login
    client = login("rita")  # read-only reviewers see it too
    assert 'id="unobserved"' not in client.get("/").text
    assert client.get("/gaps").text.count("None.") == 3  # resume gaps, lapses, stale events
    rt.enqueue_events([event(7, occurred=int(time.time()) - 7200)])  # outside the 1 h window
    rt.run_until_idle()
    rt.cancel("default")
    gap = rt.resume("default", "default-2", "new_only")["gap"]
    index = client.get("/").text
    assert 'id="unobserved"' in index and "1 resume gap(s)" in index and "1 stale event(s)" in index
    page = client.get("/gaps")
    assert page.status_code == 200 and page.text.count("None.") == 1  # no lapsed subscription
    assert "default → default-2" in page.text and gap["observed"] in page.text
    assert "evt-7" in page.text and "comment-7" in page.text


def test_login_returns_to_the_page_asked_for_and_only_on_this_site(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    key = desk.keys()[0]
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c:
        # A notification's link, opened without a session.
        r = c.get(f"/tasks/{key}?from=notification")
        assert r.status_code == 303
        form = c.get(r.headers["location"]).text
        assert f'name="next" value="/tasks/{key}?from=notification"' in form
        r = post_login(c, "alice", tokens["alice"], next=f"/tasks/{key}?from=notification")
        assert (r.status_code, r.headers["location"]) == (303, f"/tasks/{key}?from=notification")
        assert c.get(r.headers["location"]).status_code == 200
    for hostile in ("https://evil.example/", "//evil.example/x", "/\\evil.example",
                    "javascript:alert(1)", "/x\r\nSet-Cookie: a=b", "tasks/x"):
        with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c:
            assert 'name="next"' not in c.get("/login", params={"next": hostile}).text
            r = post_login(c, "alice", tokens["alice"], next=hostile)
            assert (r.status_code, r.headers["location"]) == (303, "/"), hostile


def top_of(page):
    """The task page's text above its first section: the heading and the state in words."""
    return re.sub(r"<[^>]+>", " ", page[page.index("<main>"):page.index("<section")])


def test_the_task_page_says_its_state_once_and_in_the_past_after_a_decision(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    k1, k2 = desk.keys()[:2]
    c = login("alice")
    page = c.get(f"/tasks/{k1}").text
    assert re.search(r"<h1[^>]*>\s*Waiting for approval", page)
    assert "ready" not in top_of(page).lower()
    r = c.post(f"/tasks/{k1}/approve", data={"digest": rt.task(k1)["digest"],
                                              "csrf_token": csrf(page)}, follow_redirects=True)
    assert re.search(r"<h1[^>]*>\s*Approved", r.text)
    assert top_of(r.text).lower().count("approved") == 1
    assert 'id="retry"' not in r.text  # merely approved: nothing to retry
    page = c.get(f"/tasks/{k2}").text
    r = c.post(f"/tasks/{k2}/reject", data={"digest": rt.task(k2)["digest"],
                                             "csrf_token": csrf(page)}, follow_redirects=True)
    assert re.search(r"<h1[^>]*>\s*Rejected", r.text)
    assert top_of(r.text).lower().count("rejected") == 1


def test_long_record_text_and_drafts_are_collapsed_and_the_page_stays_bounded(home):
    rt = make_home(home)
    # ~210 KB: past every fold of the page, within [host] max_record_bytes (256 KiB).
    record = "".join(f"line {n:07d} of a very long comment\n" for n in range(6_000))
    rt.host().put_record("comment-1", text=record)
    rt.enqueue_events([event(1)])
    rt.run_until_idle()
    [task] = rt.tasks("ready")
    Task.update(result=dict(Task.get_by_id(task["key"]).result, draft="d" * 3000)).where(
        Task.key == task["key"]).execute()
    token = rt.add_reviewer("alice")["token"]
    server = Server(home)
    try:
        with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=60) as c:
            post_login(c, "alice", token)
            page = c.get(f"/tasks/{task['key']}").text
    finally:
        assert server.stop() == 0
        rt.close()
    assert len(page) < 400_000  # the record alone is 2 MB
    head = re.search(r'<pre class="record"[^>]*>(.*?)</pre>', page, re.S).group(1)
    assert head == record[:2000]
    assert "<details" in page and record[2000:2100] in page
    assert f"{len(record) - 100_000:,} more characters" in page
    # The draft is shown whole, its rest behind a <details> too.
    draft_head = re.search(r'<pre class="draft" id="draft">(.*?)</pre>', page, re.S).group(1)
    assert draft_head == "d" * 2000 and "d" * 1000 in page.split('id="draft"')[1]


def test_dead_letters_link_to_their_delivery_or_task_and_show_the_code(home):
    config = home / "signoff.toml"
    rt = make_home(home)
    config.write_text(config.read_text().replace("read_attempts = 5", "read_attempts = 1"))
    rt.close()
    rt = Signoff(home)
    read_here(rt)
    rt.host().set_fault("read-timeout", times=1)
    rt.enqueue_events([event(1)])
    rt.run_until_idle()
    [letter] = rt.dead_letters()
    token = rt.add_reviewer("alice")["token"]
    try:
        with logged_in(home, "alice", token) as c:
            listing = c.get("/dead-letters").text
            assert f'href="/deliveries/{letter["ref"]}"' in listing
            assert "<code>TimeoutError</code>" in listing
            delivery = c.get(f"/deliveries/{letter['ref']}")
            assert delivery.status_code == 200
            assert "evt-1" in delivery.text and "comment-1" in delivery.text
            assert "TimeoutError" in delivery.text and "dead" in delivery.text
            assert c.get("/deliveries/999999").status_code == 404
    finally:
        rt.close()


def test_a_limited_reviewer_sees_and_replays_its_monitors_dead_letters_alone(home):
    rt = make_home(home)
    rt.bind("doc-demo", "other", window_s=3600)
    clock = FakeClock(time.time())
    fake = Signoff(home, clock=clock)
    read_here(fake)
    fake.host().set_fault("read-timeout", 100)
    fake.enqueue_events([event(1, event_id="evt-mine")])
    fake.enqueue_events([event(1, event_id="evt-theirs")], "other")
    for _ in range(20):
        fake.run_until_idle()
        clock.advance(60)
    fake.host().clear_faults()
    letters = {rt.delivery(int(x["ref"]))["monitor"]: x for x in rt.dead_letters()}
    assert set(letters) == {"default", "other"}
    token = rt.add_reviewer("lee", monitors=["default"])["token"]
    server = Server(home)
    try:
        with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c:
            assert post_login(c, "lee", token).status_code == 303
            page = c.get("/dead-letters").text
            assert f"/dead-letters/{letters['default']['id']}/replay" in page
            assert f"/dead-letters/{letters['other']['id']}/replay" not in page
            r = c.post(f"/dead-letters/{letters['other']['id']}/replay", data={"csrf_token": csrf(page)})
            assert r.status_code == 404 and "unknown_dead_letter" in r.text
            assert [x["replayed"] for x in rt.dead_letters()] == [0, 0]
    finally:
        assert server.stop() == 0, server.stderr()
        fake.close()
        rt.close()


def test_a_reviewer_pauses_and_unpauses_a_monitor_from_the_monitors_page(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    mine, other, missing = desk.monitor, f"{desk.monitor}-other", f"{desk.monitor}x"
    rt.bind("doc-demo", other, window_s=3600)
    lee = desk.person("lee", monitors=[other])
    c = login("alice")
    page = c.get("/monitors").text
    assert f'id="pause-{mine}"' in page and f'id="unpause-{mine}"' not in page
    r = c.post(f"/monitors/{mine}/pause", data={"csrf_token": csrf(page)})
    assert r.status_code == 303 and r.headers["location"] == "/monitors"
    paused = {m["id"]: m["paused"] for m in rt.monitors() if m["id"] in (mine, other)}
    assert paused == {mine: True, other: False}
    page = c.get("/monitors").text
    assert f'id="unpause-{mine}"' in page and f'id="pause-{other}"' in page
    assert c.post(f"/monitors/{mine}/unpause", data={"csrf_token": csrf(page)}).status_code == 303
    assert [(a["code"], a["actor"], a["channel"]) for a in rt.audit()
            if a["code"] in ("paused", "unpaused") and a["monitor"] == mine] == [
        ("paused", "alice", "page"), ("unpaused", "alice", "page")]
    # Refused, changing nothing: a read-only reviewer, another monitor's reviewer, no monitor.
    rita = login("rita")
    assert 'id="pause-' not in rita.get("/monitors").text
    token = csrf(rita.get("/monitors").text)
    assert rita.post(f"/monitors/{mine}/pause", data={"csrf_token": token}).status_code == 403
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as theirs:
        assert post_login(theirs, lee, tokens[lee]).status_code == 303
        token = csrf(theirs.get("/monitors").text)
        r = theirs.post(f"/monitors/{mine}/pause", data={"csrf_token": token})
        none = theirs.post(f"/monitors/{missing}/pause", data={"csrf_token": token})
        assert (r.status_code, none.status_code) == (404, 404) and "unknown_monitor" in r.text
        assert r.text.replace(mine, "M") == none.text.replace(missing, "M")
    assert c.post("/monitors/nothing/pause", data={"csrf_token": csrf(page)}).status_code == 404
    assert not any(m["paused"] for m in rt.monitors() if m["id"] in (mine, other))


@pytest.mark.parametrize("desk", ["doc-redraft"], indirect=True)  # its material changes
def test_cancel_and_redraft_from_the_task_page_by_the_reviewer(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    first, second = desk.keys()[:2]
    alice, rita = login("alice"), login("rita")
    page = alice.get(f"/tasks/{first}").text
    assert 'id="redraft"' in page and 'id="cancel"' in page
    shown = rita.get(f"/tasks/{first}").text
    assert 'id="redraft"' not in shown and 'id="cancel"' not in shown
    before = snapshot()
    for action in ("cancel", "redraft"):
        assert rita.post(f"/tasks/{first}/{action}",
                         data={"csrf_token": csrf(shown)}).status_code == 403
        assert alice.post(f"/tasks/{first}/{action}", data={}).status_code == 403  # no CSRF
    assert snapshot() == before
    drafted = rt.task(first)["digest"]
    rt.host().put_material(desk.document, "2026-12-24")
    r = alice.post(f"/tasks/{first[:12]}/redraft", data={"csrf_token": csrf(page)})
    assert r.status_code == 303 and r.headers["location"] == f"/tasks/{first}"
    redrafted = rt.task(first)
    assert redrafted["status"] == "ready" and redrafted["digest"] != drafted
    assert "2026-12-24" in redrafted["result"]["draft"]
    r = alice.post(f"/tasks/{second}/cancel", data={"csrf_token": csrf(page)})
    assert r.status_code == 303 and r.headers["location"] == f"/tasks/{second}"
    assert rt.task(second)["status"] == "cancelled"
    ended = alice.get(f"/tasks/{second}").text
    assert 'id="cancel"' not in ended and 'id="redraft"' not in ended
    assert [(a["code"], a["actor"], a["channel"]) for a in rt.audit()
            if a["code"] in ("redrafted", "cancelled") and a["task_key"] in (first, second)] == [
        ("redrafted", "alice", "page"), ("cancelled", "alice", "page")]
    again = alice.post(f"/tasks/{second}/cancel", data={"csrf_token": csrf(page)})
    assert again.status_code == 409 and "not_cancellable" in again.text
    # A newer record version: the redraft makes a new task, and the page goes there.
    record = desk.records[2]
    third = next(t for t in rt.monitor_tasks(desk.monitor, "ready")
                 if t["record_id"] == record)["key"]
    rt.host().put_record(record, version=2, text="comment 3, edited")
    r = alice.post(f"/tasks/{third}/redraft", data={"csrf_token": csrf(page)})
    successor = rt.task(third)["superseded_by"]
    assert successor and r.status_code == 303 and r.headers["location"] == f"/tasks/{successor}"


def test_the_task_list_shows_how_far_each_quorum_has_come(desk):
    rt, server, tokens, login = desk.rt, desk.server, desk.tokens, desk.login
    pair = f"{desk.monitor}-pair"
    rt.bind(desk.document, pair, window_s=3600, approvals=2)
    rt.enqueue_events([event(1, event_id=f"evt-{pair}", record_id=desk.records[0],
                             document=desk.document)], monitor_id=pair)
    rt.run_until_idle()
    [paired] = rt.monitor_tasks(pair)
    single = rt.monitor_tasks(desk.monitor)[0]
    alice = login("alice")
    listed = alice.get(f"/?monitor={pair}").text
    assert f'id="quorum-{paired["key"][:12]}">0 of 2 approvals<' in listed
    shown = alice.get(f"/?monitor={desk.monitor}").text
    assert single["key"][:12] in shown
    assert f'id="quorum-{single["key"][:12]}"' not in shown  # one approval: nothing to count
    r = alice.post(f"/tasks/{paired['key']}/approve",
                   data={"digest": paired["digest"], "csrf_token": csrf(listed)})
    assert r.status_code == 303 and rt.task(paired["key"])["status"] == "ready"
    assert f'id="quorum-{paired["key"][:12]}">1 of 2 approvals<' in alice.get(
        f"/?monitor={pair}").text
