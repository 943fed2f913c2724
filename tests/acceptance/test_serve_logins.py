"""Logins to a real ``signoff serve``: the throttle, the audit rows, the counts, the log lines.

Client addresses come from ``X-Forwarded-For``: the test talks from 127.0.0.1,
which these homes name as their trusted proxy, so each header value is a client of
its own. Without that setting the header is nobody's to believe.
"""

import json
import re
import subprocess

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import LOCAL_TLS, child_env, signoff_cmd, state_tables, wait_for
from servekit import Server, make_home

PASTED = "sor_" + "Q" * 43  # a token typed into the name field by mistake


@pytest.fixture
def site(home):
    rt = make_home(home)
    tokens = {name: rt.add_reviewer(name)["token"] for name in ("alice", "bob")}
    servers = []

    def serve(*args, toml="", trusted='trusted_proxies = "127.0.0.1"\n'):
        if not servers:  # the home's [serve] table, written once
            with open(home / "signoff.toml", "a", encoding="utf-8") as f:
                f.write("\n[serve]\n" + trusted + toml)
        servers.append(Server(home, *args))
        return servers[-1]
    yield rt, tokens, serve
    for server in servers:
        assert server.stop() == 0, server.stderr()
    rt.close()


def log_in(server, name, token, client):
    """Open the login form and post it as ``client``; the response (not followed)."""
    headers = {"x-forwarded-for": client}
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c:
        page = c.get("/login", headers=headers).text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        return c.post("/login", data={"name": name, "token": token, "csrf_token": csrf},
                      headers=headers)


def logins_total(server):
    text = httpx.get(server.url + "/metrics", verify=LOCAL_TLS, timeout=30).text
    return {s.labels["outcome"]: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "signoff_logins_total"}


def test_failed_logins_from_one_client_for_many_names_throttle_that_client_alone(site):
    rt, tokens, serve = site
    server = serve(toml="login_client_failures = 8\n")
    for n in range(8):  # never five for one name: the client's own count holds it back
        assert log_in(server, f"name-{n % 4}", "sor_wrong", "10.0.0.1").status_code == 401
    throttled = log_in(server, "alice", tokens["alice"], "10.0.0.1")  # even the right token
    assert throttled.status_code == 429
    assert "signoff_session" not in throttled.headers.get("set-cookie", "")
    assert 1 <= int(throttled.headers["retry-after"]) <= 60
    assert "Too many failed logins" in throttled.text
    # Another client is not held back, and its success resets nobody's count.
    assert log_in(server, "alice", tokens["alice"], "10.0.0.2").status_code == 303
    assert log_in(server, "bob", tokens["bob"], "10.0.0.1").status_code == 429
    assert logins_total(server) == {"ok": 1, "failed": 8, "throttled": 2}


def test_failed_logins_for_one_name_throttle_that_client_and_name_alone(site):
    rt, tokens, serve = site
    server = serve()
    for _ in range(5):
        assert log_in(server, "alice", "sor_wrong", "10.0.1.1").status_code == 401
    assert log_in(server, "alice", tokens["alice"], "10.0.1.1").status_code == 429
    assert log_in(server, "bob", tokens["bob"], "10.0.1.1").status_code == 303  # another name
    assert log_in(server, "alice", tokens["alice"], "10.0.1.2").status_code == 303  # elsewhere


def test_wrong_logins_from_many_addresses_never_lock_a_reviewer_out(site):
    rt, tokens, serve = site
    server = serve()
    for n in range(12):
        assert log_in(server, "alice", "sor_wrong", f"10.0.2.{n}").status_code == 401
    assert log_in(server, "alice", tokens["alice"], "10.0.3.1").status_code == 303


def answers(server, name, client, attempts=6):
    """``attempts`` wrong logins for ``name`` from ``client`` through one login form:
    each answer's status, headers (but the date) and body."""
    headers = {"x-forwarded-for": client}
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as c:
        page = c.get("/login", headers=headers).text
        value = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        seen = []
        for _ in range(attempts):
            r = c.post("/login", data={"name": name, "token": "sor_wrong", "csrf_token": value},
                       headers=headers)
            shown = [(k, v.replace(value, "V")) for k, v in r.headers.multi_items() if k != "date"]
            seen.append((r.status_code, sorted(shown), r.text.replace(value, "V")))
        return seen


def test_a_wrong_token_is_answered_alike_whether_the_name_is_a_reviewers_or_not(site):
    rt, tokens, serve = site
    server = serve()
    # Each login form has a random value of its own (V here); the rest is the same
    # to the byte, the throttle included.
    alice, nobody = answers(server, "alice", "10.0.4.1"), answers(server, "zed", "10.0.4.2")
    assert alice == nobody
    assert [status for status, _, _ in alice] == [401] * 5 + [429]
    # Wrong tokens for a reviewer's name from many addresses: the next address sees
    # the 401 any name gets, not a throttle that tells the name is a reviewer's.
    for n in range(5):
        assert log_in(server, "bob", "sor_wrong", f"10.0.5.{n}").status_code == 401
    assert log_in(server, "bob", "sor_wrong", "10.0.6.1").status_code == 401


def test_failed_api_tokens_from_one_client_are_throttled_as_failed_logins_are(site):
    rt, tokens, serve = site
    server = serve(toml="login_client_failures = 5\n")

    def call(token, client):
        return httpx.get(server.url + "/api/v1/tasks", verify=LOCAL_TLS, timeout=30, headers={
            "x-forwarded-for": client, "authorization": f"Bearer {token}"})
    assert call(tokens["alice"], "10.0.3.1").status_code == 200
    for _ in range(4):
        assert call("sor_wrong", "10.0.3.1").status_code == 401
    assert log_in(server, "nobody", "sor_wrong", "10.0.3.1").status_code == 401  # the fifth
    throttled = call(tokens["alice"], "10.0.3.1")  # even the right token
    assert throttled.status_code == 429 and throttled.json()["error"] == "throttled"
    assert 1 <= int(throttled.headers["retry-after"]) <= 60
    assert log_in(server, "alice", tokens["alice"], "10.0.3.1").status_code == 429
    assert call(tokens["alice"], "10.0.3.2").status_code == 200  # another client
    assert logins_total(server) == {"ok": 0, "failed": 5, "throttled": 2}


def test_x_forwarded_for_is_not_believed_unless_its_sender_is_a_trusted_proxy(site):
    rt, tokens, serve = site
    server = serve(toml="login_client_failures = 5\n", trusted="")

    def call(token, client):
        return httpx.get(server.url + "/api/v1/tasks", verify=LOCAL_TLS, timeout=30, headers={
            "x-forwarded-for": client, "authorization": f"Bearer {token}"})
    # A new made-up address for each wrong token: all of them are one client, 127.0.0.1.
    assert [call("sor_wrong", f"10.0.4.{n}").status_code for n in range(5)] == [401] * 5
    assert call("sor_wrong", "10.0.4.99").status_code == 429
    assert call(tokens["alice"], "10.0.5.1").status_code == 429


def test_the_throttle_lifts_when_its_window_has_passed(site):
    rt, tokens, serve = site
    server = serve(toml="login_failures = 2\nlogin_window_s = 1.5\n")
    for _ in range(2):
        assert log_in(server, "alice", "sor_wrong", "10.0.0.1").status_code == 401
    first = log_in(server, "alice", tokens["alice"], "10.0.0.1")
    assert first.status_code == 429 and int(first.headers["retry-after"]) in (1, 2)
    wait_for(lambda: log_in(server, "alice", tokens["alice"], "10.0.0.1").status_code == 303,
             timeout=60, what="the throttle to lift")


def test_logins_are_audited_and_logged_without_tokens_or_unknown_names(site):
    rt, tokens, serve = site
    server = serve()
    assert log_in(server, "alice", "sor_wrong-token", "10.0.0.1").status_code == 401
    assert log_in(server, PASTED, "x", "10.0.0.2").status_code == 401
    assert log_in(server, "alice", tokens["alice"], "10.0.0.3").status_code == 303
    logins = [(a["code"], a["reviewer"]) for a in rt.audit() if a["code"].startswith("login")]
    assert logins == [("login_failed", "alice"), ("login_failed", None), ("login", "alice")]
    stored = json.dumps(state_tables(rt), default=str)
    log = server.stderr()
    for secret in (PASTED, "sor_wrong-token", tokens["alice"]):
        assert secret not in stored and secret not in log
    failed = [line for line in log.splitlines() if "login_failed" in line]
    assert len(failed) == 2, log
    assert "reviewer=alice" in failed[0] and "client=10.0.0.1" in failed[0]
    assert "reviewer=-" in failed[1] and "client=10.0.0.2" in failed[1]
    out = subprocess.run(signoff_cmd(rt.home, "audit", "--json"), env=child_env(),
                         capture_output=True, text=True, timeout=60)
    newest = json.loads(out.stdout)[0]
    assert (newest["code"], newest["reviewer"]) == ("login", "alice")


def test_a_throttle_is_one_log_line_not_one_per_request(site):
    rt, tokens, serve = site
    server = serve()
    for _ in range(5):
        log_in(server, "nobody", "sor_wrong", "10.0.0.9")
    for _ in range(3):
        assert log_in(server, "nobody", "sor_wrong", "10.0.0.9").status_code == 429
    lines = [line for line in server.stderr().splitlines() if "login_throttled" in line]
    assert len(lines) == 1 and "client=10.0.0.9" in lines[0], lines


def test_access_log_is_off_by_default_and_on_with_the_option(site):
    rt, tokens, serve = site
    quiet = serve()
    assert httpx.get(quiet.url + "/healthz", verify=LOCAL_TLS, timeout=30).status_code == 200
    loud = serve("--access-log")
    assert httpx.get(loud.url + "/healthz", verify=LOCAL_TLS, timeout=30).status_code == 200
    wait_for(lambda: '"GET /healthz HTTP/1.1" 200' in loud.stderr(), what="the access line")
    assert "/healthz" not in quiet.stderr()
