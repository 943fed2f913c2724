"""A scripted OpenAI-compatible Chat Completions server for the drafter's tests.

``serving()`` runs a Starlette app under uvicorn on 127.0.0.1 (a free port) in a
background thread. Each test queues the steps the server takes for the requests
it gets, in order — an answer, an HTTP error, a delay, a reset connection — and
reads back every request it got (headers and JSON body). It speaks the real wire
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
from collections import deque
from dataclasses import dataclass, field

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

MODEL = "scripted-model"


@dataclass
class Step:
    """What the server does with one request.

    ``kind`` is ``answer`` (200 with ``body``), ``error`` (``status`` with
    ``body`` and ``headers``) or ``reset`` (drop the connection with a TCP
    reset, answering nothing). ``delay`` seconds pass first. ``check`` is called
    with the request's JSON body before answering; if it raises, the server
    answers 500 and keeps the failure in ``ModelServer.failures``.
    """

    kind: str
    body: object = None
    status: int = 200
    headers: dict = field(default_factory=dict)
    delay: float = 0.0
    check: object = None


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


_ids = itertools.count(1)


class ModelServer:
    """The scripted server's state: queued steps, requests received, check failures."""

    def __init__(self):
        self.url = None  # the base URL a client is given, ending in /v1
        self.requests = []
        self.failures = []
        self.closing = threading.Event()
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
            if self.closing.is_set() or await request.is_disconnected():
                return False
            await asyncio.sleep(0.02)
        return True

    async def _chat(self, request):
        body = json.loads(await request.body())
        with self._lock:
            self.requests.append({"headers": dict(request.headers), "json": body})
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


def _reset(client):
    [transport] = [t for (peer, _), t in list(_transports.items()) if peer == tuple(client)]
    # A zero linger time makes close() send RST instead of FIN.
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                  struct.pack("ii", 1, 0))
    transport.abort()


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
