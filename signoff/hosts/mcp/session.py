"""One long-lived MCP client session for synchronous callers.

The SDK's ``Client`` must be entered and left in the same asyncio task, so a
``McpSession`` runs a private event loop in a thread whose one owner task
connects (lazily, on the first call), serves calls from a queue, and connects
again after the server died or a call timed out. Every call, connecting
included, is bounded by ``timeout_s`` (a caller may give one call another
bound); what goes wrong on the way is raised as ``TimeoutError`` or
``ConnectionError`` (transient for signoff) or ``McpCallError`` (an ordinary
failed attempt, with the JSON-RPC error's code when the server answered one).

A stdio server is started in its own session (``start_new_session``): it
outlives a ``killpg`` of its parent, so the session kills it itself when a call
broke the connection and when it is closed.

A call whose session breaks under it fails then, with ``ConnectionError``: over
HTTP, a request the SDK could not send (the server died) ends the transport's
tasks and so the session, and nothing else would answer the caller before its
bound ran out.
"""

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import StdioServerParameters
from mcp.client.client import Client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT, Request
from pydantic import TypeAdapter

from ...errors import McpCallError

log = logging.getLogger("signoff.mcp")

GRACE_S = 1.0  # the owner answers within the deadline itself; this is a backstop
CLOSE_WAIT_S = 5.0
_CLOSE = object()
BROKEN = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


class _Custom(Request[dict[str, Any] | None, str]):
    """A request whose method the SDK does not know (``events/subscribe``, ...)."""


_ANY_RESULT = TypeAdapter(dict[str, Any])


@dataclass
class _Call:
    what: str  # the tool, ``tools/list`` or the method, for messages
    run: Callable[[Client, float], Awaitable[Any]]  # (client, seconds left) -> result
    timeout_s: float
    deadline: float  # loop time (``time.monotonic``)
    future: concurrent.futures.Future

    def fail(self, exc):
        if not self.future.done():
            self.future.set_exception(exc)

    def answer(self, result):
        if not self.future.done():
            self.future.set_result(result)


class McpSession:
    """A stdio (``params``) or streamable HTTP (``url``) MCP session for sync code."""

    def __init__(self, params=None, url=None, timeout_s=10.0):
        if (params is None) == (url is None):
            raise ValueError("give exactly one of params (stdio) and url (HTTP)")
        self.params, self.url, self.timeout_s = params, url, float(timeout_s)
        # What a failure to connect names: the URL, or the server's command.
        self.where = url if url is not None else params.command
        self.starts = 0  # sessions connected so far (a restart adds one)
        self.calls = 0  # requests made, answered or not
        self.process = None  # the stdio server of the current session
        self._serving = None  # the last call served (owner task)
        self._closed = False
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="signoff-mcp", daemon=True)
        self._thread.start()
        self._ready.wait()

    # -- the synchronous side ------------------------------------------------

    def call(self, name, arguments):
        """Call tool ``name``; the SDK's ``CallToolResult``. Bounded by ``timeout_s``."""
        arguments = dict(arguments)
        return self._submit(name, lambda client, left: client.call_tool(
            name, arguments, read_timeout_seconds=left))

    def tools(self):
        """The server's tools (the SDK's ``Tool`` objects). Bounded by ``timeout_s``."""
        async def list_tools(client, left):
            with anyio.fail_after(left):
                return (await client.list_tools()).tools
        return self._submit("tools/list", list_tools)

    def request(self, method, params, timeout_s=None):
        """Send JSON-RPC request ``method`` with ``params``; its result, a dict.

        For methods the SDK has no call of its own (MCP Events' ``events/*``),
        on this same session. Bounded by ``timeout_s`` (the session's when
        ``None``). An error answer raises ``McpCallError`` with its code.
        """
        request = _Custom(method=method, params=params)
        return self._submit(method, lambda client, left: client.session.send_request(
            request, _ANY_RESULT, request_read_timeout_seconds=left), timeout_s)

    def _submit(self, what, run, timeout_s=None):
        self.calls += 1
        timeout_s = self.timeout_s if timeout_s is None else float(timeout_s)
        future = concurrent.futures.Future()
        item = _Call(what, run, timeout_s, time.monotonic() + timeout_s, future)
        try:
            if self._closed:
                raise RuntimeError("closed")
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:
            raise ConnectionError("mcp: the session is closed") from None
        done, _ = concurrent.futures.wait([future], timeout=timeout_s + GRACE_S)
        if not done:
            future.cancel()
            raise TimeoutError(f"mcp: {what} did not answer within {timeout_s:g}s")
        return future.result()

    def close(self):
        """End the session and stop its server (killed if it does not exit by itself)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(RuntimeError):  # the loop already ended
            self._loop.call_soon_threadsafe(self._queue.put_nowait, _CLOSE)
        if threading.current_thread() is not self._thread:
            self._thread.join(self.timeout_s + CLOSE_WAIT_S)
        self.kill()

    def kill(self):
        """SIGKILL the stdio server's process group, if it is still running."""
        _kill(self.process)

    # -- the owner task, on the private loop ---------------------------------

    def _run(self):
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._own())
        finally:
            self._loop.close()

    async def _own(self):
        self._queue = asyncio.Queue()
        self._ready.set()
        item = await self._queue.get()
        while item is not _CLOSE:
            # A session ends with the item it could not serve (the server had
            # died), the next item, or the close request.
            try:
                item = await self._session(item)
            except Exception as exc:  # the owner must outlive any one session
                log.exception("mcp session failed")
                item.fail(ConnectionError(f"mcp: the session failed: {_describe(exc)}"))
                item = None
            if item is None:
                item = await self._queue.get()

    async def _session(self, first):
        """Connect, serve ``first`` and what follows until the session breaks."""
        loop = asyncio.get_running_loop()
        connected, pending = False, None
        transport = self._transport()
        with anyio.CancelScope() as scope:
            timer = loop.call_at(first.deadline, self._expire, scope, transport)
            try:
                async with Client(transport) as client:
                    connected = True
                    timer.cancel()
                    self.starts += 1
                    self.process = _stdio_process(transport)
                    pending = await self._serve_all(client, first)
            except Exception as exc:
                if not connected and scope.cancel_called:
                    first.fail(self._slow_connect(first))
                elif not connected:
                    first.fail(ConnectionError(
                        f"mcp: cannot connect to {self.where}: {_describe(exc)}"))
                else:
                    log.debug("mcp session ended: %s", _describe(exc))
                    self._fail_serving(exc)
            finally:
                timer.cancel()
                self.kill()  # a server that did not exit on its stdin closing
        if not connected:
            first.fail(self._slow_connect(first))
        return pending

    def _slow_connect(self, first):
        return TimeoutError(f"mcp: connecting to {self.where} took longer than "
                            f"{first.timeout_s:g}s")

    def _expire(self, scope, transport):
        """Connecting ran out of time: kill a started server, then stop waiting for it."""
        _kill(_stdio_process(transport))
        scope.cancel()

    async def _serve_all(self, client, item):
        while item is not _CLOSE:
            if item.future.cancelled():
                item = await self._queue.get()
                continue
            if self.process is not None and self.process.returncode is not None:
                return item  # the server died between calls: serve it on a new session
            if not await self._serve(client, item):
                self.kill()
                return None
            item = await self._queue.get()
        return _CLOSE

    def _fail_serving(self, exc):
        """The session broke: the call it was serving, unless answered, fails now."""
        item, self._serving = self._serving, None
        if item is not None:
            item.fail(ConnectionError(f"mcp: {item.what}: the session broke: {_describe(exc)}"))

    async def _serve(self, client, item):
        """Serve one call; False when the session is broken."""
        what = item.what
        remaining = item.deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            item.fail(TimeoutError(f"mcp: {what} waited past its deadline"))
            return True
        self._serving = item
        try:
            result = await item.run(client, remaining)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                item.fail(TimeoutError(f"mcp: {what} timed out after {item.timeout_s:g}s"))
                return False
            if exc.code == CONNECTION_CLOSED:
                item.fail(ConnectionError(f"mcp: the connection closed during {what}"))
                return False
            item.fail(McpCallError(f"mcp: {what}: error {exc.code}: {exc.message}",
                                   exc.code, exc.message, exc.data))
            return True
        except TimeoutError:  # before BROKEN: TimeoutError is an OSError too
            item.fail(TimeoutError(f"mcp: {what} timed out after {item.timeout_s:g}s"))
            return False
        except BROKEN as exc:
            item.fail(ConnectionError(f"mcp: {what}: {_describe(exc)}"))
            return False
        except Exception as exc:  # e.g. a result that fails the tool's output schema
            item.fail(McpCallError(f"mcp: {what}: {_describe(exc)}"))
            return True
        item.answer(result)
        return True

    def _transport(self):
        if self.url is not None:
            return streamable_http_client(self.url)
        return stdio_client(self.params, errlog=_errlog())


def stdio_params(command, args=(), env=None):
    """``StdioServerParameters``: the server gets the SDK's safe variables plus ``env``."""
    return StdioServerParameters(command=command, args=list(args), env=dict(env or {}))


def _stdio_process(transport):
    """The stdio server process of an entered transport, or ``None`` (HTTP).

    The SDK does not expose it; it is a local of the ``stdio_client`` generator,
    which stays suspended at its ``yield`` for the session's life.
    """
    frame = getattr(getattr(transport, "gen", None), "ag_frame", None)
    return frame.f_locals.get("process") if frame is not None else None


def _kill(process):
    # The server leads its own process group (start_new_session): kill the group.
    if process is not None and process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


def _errlog():
    """Where a stdio server's stderr goes: ours when it is a real file."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__


def _describe(exc):
    """One line for an exception, unwrapping the SDK's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
