"""A scripted OpenAI-compatible Chat Completions server for the drafter's tests.

``serving()`` runs a Starlette app under uvicorn on 127.0.0.1 (a free port) in a
background thread. Each test queues the steps the server takes for the requests
it gets, in order — an answer, an HTTP error, a delay, a reset connection, an
answer trickled out a byte at a time, raw (say, gzip) bytes — and reads back
every request it got (headers and JSON body), and whether a request arrived
while another was still being answered (``overlaps``). It speaks the real wire
format, so the official ``openai`` client is the only thing that talks to it.
"""

import asyncio
import contextlib
import itertools
import json
import socket
import struct
import threading
import time
import uuid
import zlib
from collections import deque
from dataclasses import dataclass, field

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

MODEL = "scripted-model"
KEY_ENV = "SIGNOFF_TEST_MODEL_KEY"  # the variable the drafter's key is read from
# Recognisable anywhere it might leak, and different in every run.
KEY = f"sk-test-{uuid.uuid4().hex}"


@dataclass
class Step:
    """What the server does with one request.

    ``kind`` is ``answer`` (200 with ``body``), ``error`` (``status`` with
    ``body`` and ``headers``), ``reset`` (drop the connection with a TCP
    reset, answering nothing), ``trickle`` (``body`` as JSON, one byte every
    ``every`` seconds, for as long as the client listens) or ``raw`` (``body``:
    bytes sent as they are, with ``headers``; in chunks of ``every`` bytes when
    set). ``delay`` seconds pass first. ``check`` is called with the request's
    JSON body before answering; if it raises, the server answers 500 and keeps
    the failure in ``ModelServer.failures``.
    """

    kind: str
    body: object = None
    status: int = 200
    headers: dict = field(default_factory=dict)
    delay: float = 0.0
    check: object = None
    every: float = 0.0


def completion(content, *, finish_reason="stop", model=MODEL, usage=(120, 30), tool_calls=None,
               refusal=None):
    """A Chat Completions response body whose one choice carries ``content``.

    ``content`` that is not a string is sent as its JSON text; ``usage`` is
    ``(prompt_tokens, completion_tokens)`` or ``None`` to leave it out.
    """
    if content is not None and not isinstance(content, str):
        content = json.dumps(content)
    message = {"role": "assistant", "content": content, "refusal": refusal}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body = {"id": f"chatcmpl-{next(_ids)}", "object": "chat.completion",
            "created": int(time.time()), "model": model, "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish_reason}]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                         "total_tokens": usage[0] + usage[1]}
    return body


def error_body(message, *, type_="invalid_request_error", code=None):
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def gzipped(body, padding=0):
    """``body`` as JSON text followed by ``padding`` spaces (still the same JSON), gzipped.

    Made a mebibyte at a time: a body that inflates to hundreds of megabytes
    never exists here whole.
    """
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(json.dumps(body).encode())]
    whole, rest = divmod(padding, 1 << 20)
    block = b" " * (1 << 20)
    parts += [packer.compress(block) for _ in range(whole)]
    parts += [packer.compress(b" " * rest), packer.flush()]
    return b"".join(parts)


_ids = itertools.count(1)


class ModelServer:
    """The scripted server's state: queued steps, requests received, check failures."""

    def __init__(self):
        self.url = None  # the base URL a client is given, ending in /v1
        self.requests = []
        self.failures = []
        self.closing = threading.Event()
        self.overlaps = []  # (request number, numbers still being answered) at each overlap
        self.trickled_whole = 0  # trickled answers sent to their last byte
        self._answering = set()  # numbers of the requests being answered now
        self._steps = deque()
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    def answer(self, content, *, delay=0.0, check=None, **options):
        """Queue a 200 answer whose message content is ``content`` (see ``completion``)."""
        self._push(Step("answer", completion(content, **options), delay=delay, check=check))

    def error(self, status, body=None, *, headers=None, delay=0.0):
        """Queue an HTTP error answer."""
        self._push(Step("error", body if body is not None else error_body(f"status {status}"),
                        status=status, headers=headers or {}, delay=delay))

    def reset(self, *, delay=0.0):
        """Queue a connection reset instead of an answer."""
        self._push(Step("reset", delay=delay))

    def trickle(self, content, *, every=0.5, **options):
        """Queue a 200 answer (as ``answer``) sent one byte every ``every`` seconds."""
        self._push(Step("trickle", completion(content, **options), every=every))

    def raw(self, data, *, status=200, headers=None, chunked=False):
        """Queue an answer of ``data`` (bytes) as they are, with ``headers``; ``chunked``
        sends it in chunks of 4 KiB without a Content-Length."""
        self._push(Step("raw", data, status=status, headers=headers or {},
                        every=4096 if chunked else 0))

    def answering(self):
        """How many requests are being answered now."""
        with self._lock:
            return len(self._answering)

    def connections(self):
        """How many client connections to this server are open now."""
        port = int(self.url.rsplit(":", 1)[1].split("/")[0])
        return sum(local == port for (_, local) in list(_transports))

    def _push(self, step):
        with self._lock:
            self._steps.append(step)

    def _next(self):
        with self._lock:
            return self._steps.popleft() if self._steps else None

    async def _waited(self, request, seconds):
        """Sleep ``seconds``; ``False`` as soon as the client hangs up or the server stops."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.closing.is_set() or not _connected(request) or await request.is_disconnected():
                return False
            await asyncio.sleep(0.02)
        return True

    async def _chat(self, request):
        body = json.loads(await request.body())
        with self._lock:
            self.requests.append({"headers": dict(request.headers), "json": body})
            number = len(self.requests)
            if self._answering:
                self.overlaps.append((number, sorted(self._answering)))
            self._answering.add(number)
        streaming = False
        try:
            answer = await self._answer(request, body, number)
            streaming = isinstance(answer, StreamingResponse)
            return answer
        finally:
            if not streaming:  # a trickle is being answered until its last byte or hang-up
                self._answered(number)

    def _answered(self, number):
        with self._lock:
            self._answering.discard(number)

    async def _trickled(self, request, data, every, number):
        """``data`` a byte at a time while the client listens."""
        try:
            for at in range(len(data)):
                yield data[at:at + 1]
                if not await self._waited(request, every):
                    return
            self.trickled_whole += 1
        finally:
            self._answered(number)

    async def _answer(self, request, body, number):
        step = self._next()
        if step is None:
            return self._failed("a request arrived with no step queued")
        if step.delay and not await self._waited(request, step.delay):
            return JSONResponse({})  # the client is gone or the server is stopping
        if step.kind == "reset":
            _reset(request.scope["client"])
            return JSONResponse({})  # never reaches the client: its connection is gone
        if step.check is not None:
            try:
                step.check(body)
            except AssertionError as exc:
                return self._failed(str(exc) or "a check failed")
        if step.kind == "trickle":
            return StreamingResponse(self._trickled(request, json.dumps(step.body).encode(),
                                                    step.every, number),
                                     media_type="application/json")
        if step.kind == "raw" and step.every:
            chunks = [step.body[at:at + step.every] for at in range(0, len(step.body), step.every)]
            return StreamingResponse(iter(chunks), status_code=step.status, headers=step.headers,
                                     media_type="application/json")
        if step.kind == "raw":
            return Response(step.body, status_code=step.status, headers=step.headers,
                            media_type="application/json")
        return JSONResponse(step.body, status_code=step.status, headers=step.headers)

    def _failed(self, why):
        """Keep ``why`` for the test to fail on, and answer 500."""
        self.failures.append(why)
        return JSONResponse(error_body(why, type_="server_error"), status_code=500)


# Open connections by (client address, server port), so a step can reset the one
# it answers (an ASGI app never sees its socket) and a test can count a server's.
_transports = {}


class _Protocol(H11Protocol):
    def connection_made(self, transport):
        super().connection_made(transport)
        self._peer = (transport.get_extra_info("peername")[:2],
                      transport.get_extra_info("sockname")[1])
        _transports[self._peer] = transport

    def connection_lost(self, exc):
        _transports.pop(self._peer, None)
        super().connection_lost(exc)


def _connected(request):
    """True while the client's connection to this server is open."""
    port = request.scope["server"][1]
    return (tuple(request.scope["client"]), port) in _transports


def _reset(client):
    [transport] = [t for (peer, _), t in list(_transports.items()) if peer == tuple(client)]
    # A zero linger time makes close() send RST instead of FIN.
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                  struct.pack("ii", 1, 0))
    transport.abort()


def configure(home, server, **options):
    """Point ``home``'s drafter at ``server`` (written before init, as a user would);
    ``options`` are more ``[drafter.options]`` (``timeout_s`` is 5 unless given)."""
    from signoff.config import DEFAULT_TOML
    home.mkdir(parents=True, exist_ok=True)
    config = home / "signoff.toml"
    text = config.read_text(encoding="utf-8") if config.exists() else DEFAULT_TOML
    values = {"base_url": server.url, "model": "test-model", "api_key_env": KEY_ENV,
              "timeout_s": 5, **options}
    lines = "\n".join(f"{name} = {json.dumps(value)}" for name, value in values.items())
    text = text.replace('factory = "signoff.drafters.template:template"',
                        'factory = "signoff.drafters.chat:ChatDrafter"')
    config.write_text(text.replace("[drafter.options]\n", f"[drafter.options]\n{lines}\n", 1),
                      encoding="utf-8")


@pytest.fixture
def model(monkeypatch):
    """A scripted model server, with the key's variable set for this process and its
    children (a test module imports the fixture); a request it did not expect fails
    the test."""
    monkeypatch.setenv(KEY_ENV, KEY)
    with serving() as server:
        yield server
    assert server.failures == []


@contextlib.contextmanager
def serving():
    """Run a ``ModelServer`` for the block; yields it with ``url`` set."""
    server = ModelServer()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Idle connections stay open until the client hangs up (uvicorn's default closes
    # them after 5 s), so a test sees what the client does.
    config = uvicorn.Config(server.app, http=_Protocol, lifespan="off", log_level="warning",
                            timeout_keep_alive=3600)
    runner = uvicorn.Server(config)
    thread = threading.Thread(target=runner.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not runner.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise AssertionError("the scripted model server did not start")
        time.sleep(0.01)
    server.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    try:
        yield server
    finally:
        server.closing.set()
        runner.should_exit = True
        thread.join(30)
        sock.close()
