"""``signoff serve`` webhook ingest against a real server process (docs/serve.md).

Each request kind is sent to a real ``signoff serve`` on a free port; the test
then reads the home to see what was stored: a delivery and a webhook-id
answer for an accepted event, one audit row and nothing else for a refusal.

The tests that only post and read share one room, a home and its server started
once for the module; each posts to a monitor of its own there (``desk``), and
counts what its requests added. Those that stop the server, or purge the home,
have one of their own (``served``).
"""

import concurrent.futures
import datetime
import itertools
import json
import re
import socket
import threading

import httpx
import pytest
from peewee import fn

from helpers import (LOCAL_TLS, child_env, invoke, make_event, read_here, signoff_cmd,
                     state_tables, wait_for)
from servekit import SECRET_TEXT, Server, event, init_home, make_home, signed
from signoff.chores import retention
from signoff.errors import Refused
from signoff.rules.events import parse_line
from signoff.models import Audit, Delivery, WebhookAnswer, WebhookRefusal
from signoff.intake import webhooks
from signoff.admin import secrets
from signoff.rules import signatures
from signoff.serve.site import Site

import subprocess


class Desk:
    """A monitor with a secret, a server that ingests its webhooks and a client of it."""

    def __init__(self, rt, server, monitor):
        self.rt, self.server, self.monitor = rt, server, monitor
        self.secret = rt.add_secret(monitor)["secret"]
        self.client = httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30)

    def post(self, ev, msg_id, secret=None, monitor=None, at=None):
        """POST ``ev`` signed under ``secret`` (the desk's) to ``monitor`` (the desk's)."""
        return post(self.client, secret or self.secret, ev, msg_id, monitor or self.monitor, at)

    def events(self):
        return [e for e in self.rt.events() if e["monitor"] == self.monitor]

    def refusals(self, code):
        """``signoff_webhook_refusals_total`` of ``code`` on the server's /metrics."""
        found = re.search(rf'^signoff_webhook_refusals_total{{code="{code}"}} (\S+)$',
                          self.client.get("/metrics").text, re.M)
        return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module")
def room(room_home, room_env):
    """The module's home (monitor ``default``) and its server."""
    rt = init_home(room_home)
    server = Server(room_home, env=room_env)
    yield rt, server
    assert server.stop() == 0, server.stderr()
    rt.close()


MONITORS = itertools.count(1)


@pytest.fixture
def desk(room, in_room):
    """A monitor of this test's own in the room."""
    rt, server = room
    read_here(rt)
    made = Desk(rt, server, rt.bind("doc-demo", f"hooks-{next(MONITORS)}", window_s=3600)["id"])
    yield made
    made.client.close()
    assert server.proc.poll() is None, server.stderr()


@pytest.fixture
def served(home):
    """A home and a server of this test's own."""
    rt = make_home(home)
    server = Server(home)
    made = Desk(rt, server, "default")
    yield made
    made.client.close()
    assert server.stop() == 0, server.stderr()
    rt.close()


def test_serve_stopped_the_moment_it_says_it_listens_stops_cleanly(home):
    # A supervisor may send SIGTERM as soon as the listening line is out, before
    # uvicorn has taken the signals over; that stop must not be lost.
    make_home(home).close()
    for _ in range(3):
        server = Server(home)
        try:
            assert server.stop() == 0, server.stderr()
        finally:
            server.kill()


def test_an_address_serve_cannot_listen_on_is_named_in_a_clear_error(home):
    make_home(home).close()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        done = subprocess.run(signoff_cmd(home, "serve", "--port", str(port), "--json"),
                              env=child_env(), capture_output=True, text=True, timeout=60)
    finally:
        taken.close()
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout) == {
        "error": "os_error", "message": f"Address already in use: 127.0.0.1:{port}"}
    assert "Traceback" not in done.stderr


def counts():
    return {"deliveries": Delivery.select().count(), "answers": WebhookAnswer.select().count(),
            "audit": Audit.select().count()}


def post(client, secret, ev, msg_id, monitor="default", at=None):
    body = json.dumps(ev)
    return client.post(f"/hooks/{monitor}", content=body, headers=signed(secret, body, msg_id, at))


def assert_refused_once(before, code):
    """Nothing stored but one audit row with ``code`` and no content."""
    after = counts()
    assert after == dict(before, audit=before["audit"] + 1), (before, after)
    row = Audit.select().order_by(Audit.seq.desc()).get()
    assert (row.code, row.event_id, row.task_key) == (code, None, None)


def test_good_request_is_stored_durably_and_text_is_not(desk):
    rt = desk.rt
    before = counts()
    r = desk.post(event(), "msg-good")
    assert r.status_code == 202, r.text
    answer = r.json()
    assert answer == {"delivery": answer["delivery"], "event_id": "evt-1", "accepted": True}
    assert counts() == dict(before, deliveries=before["deliveries"] + 1,
                            answers=before["answers"] + 1)
    [row] = desk.events()
    assert (row["delivery"], row["event_id"], row["status"]) == (answer["delivery"], "evt-1", "queued")
    rt.run_until_idle()
    [task] = rt.monitor_tasks(desk.monitor)
    assert task["status"] == "ready"
    # Every table on any backend: the event's text is nowhere in them.
    assert SECRET_TEXT not in repr(state_tables(rt))


def reuses(monitor):
    return (WebhookRefusal.select(fn.SUM(WebhookRefusal.count))
            .where(WebhookRefusal.code == "webhook_id_reused", WebhookRefusal.monitor == monitor)
            .scalar() or 0)


def test_replayed_webhook_id_answers_the_first_answer_whatever_the_body(desk):
    # One event, sent twice: event() reads the clock, and a second between the
    # two calls would make the retry another body.
    sent = event()
    reused = desk.refusals("webhook_id_reused")
    first = desk.post(sent, "msg-1")
    assert first.status_code == 202
    before = counts()
    again = desk.post(sent, "msg-1")
    assert (again.status_code, again.json()) == (200, dict(first.json(), duplicate=True))
    assert counts() == before and reuses(desk.monitor) == 0  # the same body: a retry, not a reuse
    for n, other in enumerate([event(event_id="evt-other"), event(text="another text"),
                               {"not": "an event"}], 1):
        r = desk.post(other, "msg-1")
        assert (r.status_code, r.json()) == (200, dict(first.json(), duplicate=True)), other
        assert_refused_once(dict(before, audit=before["audit"] + n - 1), "webhook_id_reused")
        assert reuses(desk.monitor) == n
    assert [e["event_id"] for e in desk.events()] == ["evt-1"]
    assert desk.refusals("webhook_id_reused") == reused + 3


def test_a_reused_webhook_id_in_one_batch_is_counted_too(site):
    body = json.dumps(make_event()).encode()
    other = json.dumps(make_event(event_id="evt-2")).encode()
    jobs = [webhooks.Accept("default", "msg-b", parse_line(raw, "body"), webhooks.body_digest(raw))
            for raw in (body, body, other)]
    answers = site.write_webhooks(jobs)
    assert [status for status, _ in answers] == [202, 200, 200]
    assert reuses("default") == 1 and last_audit() == ("webhook_id_reused", "default")
    again = site.write_webhooks([webhooks.Accept("default", "msg-b", parse_line(other, "body"),
                                                  webhooks.body_digest(other))])
    assert again[0][0] == 200 and reuses("default") == 2
    assert Delivery.select().count() == 1


def test_secret_ids_are_never_given_again(rt):
    ids = [rt.add_secret("default")["secret_id"] for _ in range(3)]
    secrets.remove(rt, "default", ids[2])
    secrets.remove(rt, "default", ids[1])
    new = rt.add_secret("default")["secret_id"]
    assert new > ids[2], (ids, new)
    assert [s["secret_id"] for s in secrets.listing("default")] == [ids[0], new]
    with pytest.raises(Refused) as info:
        secrets.remove(rt, "default", ids[2])
    assert info.value.code == "unknown_secret"
    assert len(secrets.current("default")[1]) == 2


def test_a_webhook_id_retried_after_retention_dropped_its_answer_is_still_a_duplicate(served):
    rt = served.rt  # the purge is the whole home's
    first = served.post(event(), "msg-1")
    assert first.status_code == 202
    rt.run_until_idle()
    assert wait_for(lambda: retention.purge(rt, older_than_days=0)["webhook_answers"],
                    what="the answer to age past a period of 0 days") == 1
    again = served.post(event(), "msg-1")
    assert again.status_code == 202, again.text  # no answer left: a new delivery
    assert again.json()["delivery"] != first.json()["delivery"]
    rt.run_until_idle()
    assert len(rt.tasks()) == 1
    outcomes = {e["delivery"]: e["outcome"] for e in rt.events()}
    assert outcomes == {first.json()["delivery"]: "ready", again.json()["delivery"]: "duplicate"}


def test_concurrent_copies_of_one_webhook_id_store_one_delivery(desk):
    body = json.dumps(event())
    headers = signed(desk.secret, body, "msg-race")
    answers = []

    def send():
        with httpx.Client(verify=LOCAL_TLS, base_url=desk.server.url, timeout=30) as c:
            answers.append(c.post(f"/hooks/{desk.monitor}", content=body, headers=headers))
    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in answers)
    assert codes == [200] * 5 + [202], [r.text for r in answers]
    [stored] = desk.events()
    assert {r.json()["delivery"] for r in answers} == {stored["delivery"]}
    assert Delivery.select().where(Delivery.monitor == desk.monitor).count() == 1


@pytest.mark.parametrize("case", ["unsigned", "bad_signature", "wrong_secret", "stale",
                                  "future", "garbled_signature"])
def test_unverified_requests_answer_401_and_store_only_an_audit_row(desk, case):
    secret = desk.secret
    body = json.dumps(event())
    now = datetime.datetime.now(datetime.timezone.utc)
    headers = {
        "unsigned": {"content-type": "application/json"},
        "bad_signature": dict(signed(secret, body, "m"), **{"webhook-signature": "v1,AAAA"}),
        "wrong_secret": signed(signatures.generate(), body, "m"),
        "stale": signed(secret, body, "m", at=now - datetime.timedelta(minutes=6)),
        "future": signed(secret, body, "m", at=now + datetime.timedelta(minutes=6)),
        "garbled_signature": dict(signed(secret, body, "m"), **{"webhook-signature": "nonsense"}),
    }[case]
    before = counts()
    r = desk.client.post(f"/hooks/{desk.monitor}", content=body, headers=headers)
    assert (r.status_code, r.json()) == (401, {"error": "bad_signature"})
    assert_refused_once(before, "bad_signature")


def test_a_body_signed_for_another_id_is_refused(desk):
    body = json.dumps(event())
    headers = dict(signed(desk.secret, body, "msg-a"), **{"webhook-id": "msg-b"})
    assert desk.client.post(f"/hooks/{desk.monitor}", content=body,
                            headers=headers).status_code == 401


def test_rotation_every_current_secret_verifies_and_a_removed_one_stops(desk):
    rt, secret, monitor = desk.rt, desk.secret, desk.monitor
    added = rt.add_secret(monitor)
    assert desk.post(event(1), "rot-1", secret=added["secret"]).status_code == 202
    assert desk.post(event(1, event_id="evt-2"), "rot-2").status_code == 202
    # a sender mid-rotation signs with both: either signature is enough
    body = json.dumps(event(1, event_id="evt-3"))
    both = signed(secret, body, "rot-3")
    both["webhook-signature"] += " " + signed(added["secret"], body, "rot-3")["webhook-signature"]
    assert desk.client.post(f"/hooks/{monitor}", content=body, headers=both).status_code == 202
    first_id = secrets.listing(monitor)[0]["secret_id"]
    secrets.remove(rt, monitor, first_id)
    before = counts()
    assert desk.post(event(1, event_id="evt-4"), "rot-4").status_code == 401
    assert_refused_once(before, "bad_signature")
    assert desk.post(event(1, event_id="evt-5"), "rot-5", secret=added["secret"]).status_code == 202


def test_concurrent_requests_for_two_monitors_are_each_checked_against_their_own(desk):
    # Requests waiting for secrets share one read: a batch that mixes monitors
    # must still give each request its own monitor's secrets, and a monitor
    # bound after the server started is seen by the next request.
    rt, secret, first = desk.rt, desk.secret, desk.monitor
    second = f"{first}-second"
    rt.bind("doc-demo", second, window_s=3600)
    other_secret = rt.add_secret(second)["secret"]
    with Site(rt.home) as site:  # what the server reads, a monitor named twice read once
        assert site.webhook_secrets([second, "nobody", first, second]) == [
            (True, [other_secret]), (False, []), (True, [secret]), (True, [other_secret])]
    own = {first: secret, second: other_secret}
    other = {first: other_secret, second: secret}

    def send(n, keys):
        monitor = (first, second)[n % 2]
        ev = event(1, event_id=f"two-{n}-{keys is own}")
        return desk.post(ev, f"two-{n}-{keys is own}", secret=keys[monitor], monitor=monitor)
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        right = list(pool.map(lambda n: send(n, own), range(30)))
        wrong = list(pool.map(lambda n: send(n, other), range(30)))
    assert [r.status_code for r in right] == [202] * 30
    assert [r.status_code for r in wrong] == [401] * 30


def test_a_batch_of_reads_that_mixes_kinds_and_monitors_answers_each_in_its_place(home):
    from signoff.models import Subscription
    from signoff.serve.hooks import reader
    rt = make_home(home)
    secret = rt.add_secret("default")["secret"]
    Subscription.create(monitor="default", name="comment.created", arguments={}, field_map={},
                        url="https://signoff.example/hooks/default", secret=signatures.generate(),
                        ttl_s=3600.0, status="pending", created_at=1.0, updated_at=1.0)
    jobs = [("subscriptions", "default"), ("secrets", "nobody"), ("secrets", "default"),
            ("subscriptions", "nobody"), ("secrets", "default")]
    with Site(home) as site:
        answers = reader(site)(jobs)
    assert answers[1] == (False, []) and answers[2] == answers[4] == (True, [secret])
    assert answers[3] == [] and [row["status"] for row in answers[0]] == ["pending"]
    rt.close()


def last_audit():
    row = Audit.select().order_by(Audit.seq.desc()).get()
    return row.code, row.monitor


def test_an_unknown_monitor_answers_as_a_wrong_signature_does(desk):
    client, secret = desk.client, desk.secret
    unknown = desk.refusals("unknown_monitor")
    wrong = desk.post(event(), "m-wrong", secret=signatures.generate())
    assert (wrong.status_code, wrong.json()) == (401, {"error": "bad_signature"})
    for case in ("signed", "unsigned"):
        before = counts()
        if case == "signed":  # even under a secret the server knows
            r = desk.post(event(), "m", monitor="nobody")
        else:
            r = client.post("/hooks/nobody", content=json.dumps(event()))
        assert (r.status_code, r.json()) == (wrong.status_code, wrong.json()), case
        assert r.headers["content-type"] == wrong.headers["content-type"]
        assert_refused_once(before, "unknown_monitor")
        assert last_audit() == ("unknown_monitor", None)  # the name asked for is not stored
    # the checks before the signature say nothing of the monitor and store no name either
    r = client.post("/hooks/nobody", content=b"\xff", headers=signed(secret, "x", "m"))
    assert r.status_code == 400 and last_audit() == ("invalid_event", None)
    assert desk.refusals("unknown_monitor") == unknown + 2


def test_a_content_type_other_than_json_answers_415_once_signed(desk):
    client, secret, hook = desk.client, desk.secret, f"/hooks/{desk.monitor}"
    unsupported = desk.refusals("unsupported_media_type")
    body = json.dumps(event())
    for n, ctype in enumerate(["text/plain", "application/x-www-form-urlencoded",
                               "application/jsonx", ""]):
        before = counts()
        r = client.post(hook, content=body,
                        headers=dict(signed(secret, body, f"ct-{n}"), **{"content-type": ctype}))
        assert (r.status_code, r.json()) == (415, {"error": "unsupported_media_type"}), ctype
        assert_refused_once(before, "unsupported_media_type")
    unsigned = client.post(hook, content=body, headers={"content-type": "text/plain"})
    assert unsigned.status_code == 401  # the signature first: nothing said to a stranger
    assert desk.refusals("unsupported_media_type") == unsupported + 4
    for n, ctype in enumerate(["application/json; charset=utf-8", "Application/JSON", None]):
        ev = event(1, event_id=f"evt-ct-{n}")
        headers = signed(secret, json.dumps(ev), f"ok-{n}")
        if ctype is None:
            del headers["content-type"]
        else:
            headers["content-type"] = ctype
        r = client.post(hook, content=json.dumps(ev), headers=headers)
        assert r.status_code == 202, (ctype, r.text)


def test_oversized_bodies_are_refused_before_being_read_whole(desk):
    big = json.dumps(event(text="x" * 70_000))
    before = counts()
    r = desk.client.post(f"/hooks/{desk.monitor}", content=big,
                         headers=signed(desk.secret, big, "big"))
    assert (r.status_code, r.json()) == (413, {"error": "too_large"})
    assert_refused_once(before, "too_large")

    def chunks():  # no Content-Length: counted while streaming
        for _ in range(100):
            yield b"x" * 1024
    before = counts()
    r = desk.client.post(f"/hooks/{desk.monitor}", content=chunks(),
                         headers=signed(desk.secret, "", "big2"))
    assert (r.status_code, r.json()) == (413, {"error": "too_large"})
    assert_refused_once(before, "too_large")


def test_a_lying_content_length_is_refused_without_waiting_for_the_body(desk):
    host, port = desk.server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST /hooks/{desk.monitor} HTTP/1.1\r\nHost: x\r\n"
                     "Content-Length: 10000000\r\n\r\n".encode())
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer


@pytest.mark.parametrize("body, reason", [
    (b"\xff\xfe{}", "body: not valid UTF-8"),
    (b'{"event_id": "e", ', "body: broken JSON"),
    (json.dumps(event()).replace('"name": ', '"name": "x", "name": ').encode(),
     'body: an object names the key "name" twice'),
    (json.dumps(event(extra={"a": 1})).replace('"a": 1', '"a": 1, "a": 2').encode(),
     'body: an object names the key "a" twice'),
    (b"[1, 2]", "event: must be one JSON object"),
    (json.dumps({k: v for k, v in event().items() if k != "record_id"}).encode(), "record_id: missing"),
    (json.dumps(event(occurred=1.5)).encode(), "occurred: must be an integer"),
], ids=["utf8", "broken", "twice", "twice-nested", "array", "no-record", "float-time"])
def test_invalid_bodies_answer_400_with_a_reason(desk, body, reason):
    text = body.decode("utf-8", "replace")
    headers = signed(desk.secret, text, "bad-body")
    before = counts()
    r = desk.client.post(f"/hooks/{desk.monitor}", content=body, headers=headers)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "invalid_event" and r.json()["reason"].startswith(reason)
    assert_refused_once(before, "invalid_event")


def test_refusals_past_60_a_minute_are_only_counted(desk):
    bad_signatures = desk.refusals("bad_signature")
    body = json.dumps(event())
    for _ in range(70):
        assert desk.client.post(f"/hooks/{desk.monitor}", content=body).status_code == 401
    buckets = list(WebhookRefusal.select().where(WebhookRefusal.monitor == desk.monitor))
    assert sum(b.count for b in buckets) == 70
    for b in buckets:  # the counter may straddle a minute; each minute holds at most 60
        audited = Audit.select().where(Audit.code == "bad_signature", Audit.monitor == desk.monitor,
                                       Audit.at >= b.minute * 60,
                                       Audit.at < (b.minute + 1) * 60).count()
        assert audited == min(60, b.count)
    assert desk.refusals("bad_signature") == bad_signatures + 70


def test_healthz_reports_what_failed(desk):
    r = desk.client.get("/healthz")
    assert (r.status_code, r.json()) == (200, {"database": "ok", "queue": "ok", "ok": True})
    # A second server whose queue cannot be reached: 503 naming the queue. The
    # environment overrides signoff.toml on every backend.
    broken = Server(desk.rt.home, env=child_env(SIGNOFF_QUEUE_URL="redis://127.0.0.1:1/0"))
    try:
        r = httpx.get(broken.url + "/healthz", verify=LOCAL_TLS, timeout=30)
        assert r.status_code == 503
        assert r.json()["database"] == "ok" and r.json()["queue"].startswith("error")
    finally:
        assert broken.stop() == 0


def test_sigterm_answers_the_request_in_flight(served):
    server = served.server  # this test's own: it stops it
    body = json.dumps(event()).encode()
    headers = signed(served.secret, body.decode(), "in-flight")
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        sock.sendall(f"POST /hooks/default HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                     f"{head}\r\n".encode() + body[:10])
        # A request on a second connection, answered: the server's loop has by then
        # accepted the first one (connections are accepted in order) and read what
        # arrived on it before, the headers of a request now in flight.
        assert served.client.get("/healthz").status_code == 200
        server.proc.send_signal(15)
        sock.sendall(body[10:])
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 202"), answer
    assert server.proc.wait(30) == 0
    assert [e["event_id"] for e in served.rt.events()] == ["evt-1"]


@pytest.mark.slow  # chaos: serve SIGKILLed under load; CI runs the slow tests
def test_kill_9_while_8_clients_post_loses_no_202(home):
    rt = make_home(home)
    secret = rt.add_secret("default")["secret"]
    server = Server(home)
    accepted, stop = [], threading.Event()

    def client(n):
        with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=60) as c:
            for i in range(100_000):
                if stop.is_set():
                    return
                ev = event(1, event_id=f"c{n}-{i}")
                try:
                    r = post(c, secret, ev, f"m-{n}-{i}")
                except httpx.HTTPError:
                    return  # the server died under this request: no answer, no promise
                if r.status_code == 202:
                    accepted.append(ev["event_id"])
    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    try:
        from helpers import wait_for
        wait_for(lambda: len(accepted) >= 200, timeout=60, what="200 accepted events")
        server.kill()
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    stored = {e["event_id"] for e in rt.events()}
    assert accepted and set(accepted) <= stored
    # the webhook-id answers survived too: a sender's retry after the crash is a duplicate
    again = Server(home)
    try:
        n, i = accepted[0].removeprefix("c").split("-")
        with httpx.Client(verify=LOCAL_TLS, base_url=again.url, timeout=30) as c:
            r = post(c, secret, event(1, event_id=accepted[0]), f"m-{n}-{i}")
        assert r.status_code == 200 and r.json()["duplicate"] is True
        assert len(rt.events()) == len(stored)
    finally:
        assert again.stop() == 0
    rt.close()


def test_secret_cli_shows_a_secret_once_and_never_again(home):
    rt = make_home(home)

    def cli(*args):
        out = invoke(home, *args, "--json")
        return out.exit_code, out.stdout
    code, out = cli("monitor", "secret", "add", "default")
    added = json.loads(out)
    assert code == 0 and set(added) == {"monitor", "secret_id", "secret"}
    assert added["secret"].startswith("whsec_")
    given = signatures.generate()
    code, out = cli("monitor", "secret", "add", "default", "--secret", given)
    assert code == 0 and json.loads(out)["secret"] == given
    code, out = cli("monitor", "secret", "list", "default")
    assert code == 0 and [set(r) for r in json.loads(out)] == [{"secret_id", "created_at"}] * 2
    for shown in (out, json.dumps(rt.audit()), invoke(home, "stats", "--json").stdout):
        assert added["secret"] not in shown and given not in shown
    code, out = cli("monitor", "secret", "add", "default", "--secret", "whsec_c2hvcnQ=")
    assert (code, json.loads(out)["error"]) == (1, "invalid_secret")
    code, out = cli("monitor", "secret", "add", "nobody")
    assert (code, json.loads(out)["error"]) == (1, "unknown_monitor")
    code, out = cli("monitor", "secret", "remove", "default", str(added["secret_id"]))
    assert code == 0
    code, out = cli("monitor", "secret", "remove", "default", str(added["secret_id"]))
    assert (code, json.loads(out)["error"]) == (1, "unknown_secret")
    rt.close()
