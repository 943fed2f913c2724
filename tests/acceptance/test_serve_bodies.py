"""Request bodies on a real ``signoff serve``: every route that takes one refuses an
oversized body while reading it, never waiting for (or holding) the whole of it.

The routes are read from the app itself, so a route added later is checked too.
Each request is sent by hand over a socket, chunked, and never finished: a route
that buffered the body before judging its size would never answer.
"""

import re
import socket
import time

import httpx
import pytest

from helpers import LOCAL_TLS
from servekit import Server, csrf, post_login, ready_home
from signoff.models import MODELS
from signoff.serve import bodies
from signoff.serve.site import Site
from signoff.serve.web import build_app

CHUNK = b"a" * 16384
# More than any route takes, and the body's last chunk is never sent.
SENT = max(bodies.LIMITS) + len(CHUNK)
VALUES = {"monitor": "default", "letter": "1", "delivery": "1"}


@pytest.fixture
def site(home):
    rt = ready_home(home)
    token = rt.add_reviewer("alice")["token"]
    server = Server(home)
    with httpx.Client(verify=LOCAL_TLS, base_url=server.url, timeout=30) as client:
        assert post_login(client, "alice", token).status_code == 303
        headers = {"cookie": f"signoff_session={client.cookies['signoff_session']}",
                   "x-csrf-token": csrf(client.get("/").text),
                   "authorization": f"Bearer {token}",
                   "content-type": "application/x-www-form-urlencoded"}
    yield rt, server, headers
    assert server.stop() == 0, server.stderr()
    rt.close()


def post_paths(rt):
    """Every POST route of the app, its path parameters filled in."""
    key = rt.tasks("ready")[0]["key"]
    with Site(rt.home) as site:
        routes = [r for r in build_app(site).app.routes if "POST" in (r.methods or ())]
    fill = dict(VALUES, key=key)
    return [re.sub(r"\{(\w+)(:\w+)?\}", lambda m: fill[m.group(1)], r.path) for r in routes]


def address(server):
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def answer_head(sock, timeout=30.0):
    """The status line and headers of the answer, read until they are whole."""
    deadline, data = time.monotonic() + timeout, b""
    while b"\r\n\r\n" not in data:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            more = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"no answer within {timeout:g} s: the body is being "
                                 "waited for") from None
        if not more:
            break
        data += more
    return data.split(b"\r\n\r\n", 1)[0].decode("latin-1")


def post_unfinished(server, path, headers):
    """POST ``SENT`` bytes as a chunked body that never ends; the answer's head."""
    with socket.create_connection(address(server), timeout=30) as sock:
        lines = [f"POST {path} HTTP/1.1", "Host: signoff.test", "Transfer-Encoding: chunked",
                 *(f"{k}: {v}" for k, v in headers.items())]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        frame = b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK)
        try:
            for _ in range(SENT // len(CHUNK)):
                sock.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and hung up: the answer is still read
        return answer_head(sock)


def counts():
    return {m.__name__: m.select().count() for m in MODELS}


def test_every_post_route_refuses_an_oversized_body_before_it_ends(site):
    rt, server, headers = site
    paths = post_paths(rt)
    assert {"/login", "/approve", "/hooks/default", "/api/v1/tasks/{}/approve".format(
        rt.tasks("ready")[0]["key"])} <= set(paths)
    before = [(t["key"], t["status"]) for t in rt.tasks()]
    for path in paths:
        head = post_unfinished(server, path, headers)
        assert head.startswith("HTTP/1.1 413"), (path, head)
    # An MCP Events callback is routed by its header, with a limit of its own.
    head = post_unfinished(server, "/hooks/default",
                           dict(headers, **{"x-mcp-subscription-id": "sub_" + "0" * 32}))
    assert head.startswith("HTTP/1.1 413"), head
    assert [(t["key"], t["status"]) for t in rt.tasks()] == before


def test_a_content_length_over_the_limit_is_refused_before_any_body_is_sent(site):
    rt, server, headers = site
    for path in post_paths(rt):
        with socket.create_connection(address(server), timeout=30) as sock:
            lines = [f"POST {path} HTTP/1.1", "Host: signoff.test", "Content-Length: 300000000",
                     *(f"{k}: {v}" for k, v in headers.items())]
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            head = answer_head(sock)
        assert head.startswith("HTTP/1.1 413"), (path, head)


@pytest.mark.parametrize("path, limit, kind", [
    ("/api/v1/tasks/{key}/reject", bodies.API_LIMIT, "application/json"),
    ("/tasks/{key}/reject", bodies.FORM_LIMIT, "application/x-www-form-urlencoded"),
])
def test_each_route_takes_a_body_up_to_its_limit_and_refuses_one_byte_more(site, path, limit,
                                                                          kind):
    rt, server, headers = site
    key = rt.tasks("ready")[0]["key"]
    url = server.url + path.format(key=key)
    sent = dict(headers, **{"content-type": kind})
    before = counts()
    over = httpx.post(url, content=b" " * (limit + 1), headers=sent, timeout=30)
    assert over.status_code == 413 and "too_large" in over.text
    assert counts() == before
    # At the limit the body is read and judged as any other (here: not what reject takes).
    at = httpx.post(url, content=b" " * limit, headers=sent, timeout=30)
    assert at.status_code not in (413, 500), at.text
