"""The model drafter's HTTP: one deadline per call, and a cap on the answer's size.

**The deadline.** The ``openai`` client's ``timeout`` bounds each wait (connecting,
each read, each write), not the call: a server that sends one byte every few
seconds keeps a call going for ever. A call must end within ``timeout_s``, which
is below the delivery's lease (renewed for ``timeout_s`` before the call): then
no lease can lapse while its call runs, so no other worker drafts the same
delivery meanwhile, and at most one call per delivery is ever in flight.

The call runs in the thread that holds the lease, not in a helper thread: a
thread cannot be killed, and an abandoned one would go on reading while a retry
started the next call. Instead each call has a ``Watch``: a timer that, at the
deadline, shuts the call's socket down (``shutdown``, which wakes a blocked
``recv`` or ``send`` at once, where ``close`` would not), so the call itself
fails within moments, in its own thread, and nothing of it is left running.

The watch must know the call's socket before any byte arrives (a server may
trickle its headers too). A new connection announces it through httpcore's
``trace`` extension; a pooled one does not, so each thread has its own client
holding at most one connection (``BoundedTransport``, one per thread): the
socket it last announced is the one a reused connection runs on. Name
resolution is the one wait a shutdown cannot end; the system resolver bounds
it (by default two tries of five seconds).

**The cap.** The answer is counted after decompression and refused as soon as
it passes ``max_answer_bytes``, while it is read: signoff decodes ``gzip`` and
``deflate`` itself, a bounded slice at a time (``zlib``'s ``max_length``), so a
small compressed body that inflates to gigabytes is never held whole, nor even
one of its chunks. It asks for no other encoding, and refuses one it gets.
"""

import socket
import threading
import zlib
from contextlib import contextmanager

import httpx2

ACCEPTED = "gzip, deflate"
# zlib's window bits per Content-Encoding; deflate may also come raw (-15), as httpx reads it.
WINDOW_BITS = {"gzip": 31, "deflate": 15}


class AnswerRefused(Exception):
    """The answer's body cannot be read within the cap (its message says why)."""


class Watch:
    """One call's deadline: at ``seconds`` from now the call's sockets are shut down.

    ``attach`` names a socket of the call (at once shut down when the deadline
    has passed); ``finish`` ends the watch once the call is over, so a socket
    that goes back to the pool is never touched.
    """

    def __init__(self, seconds):
        self.expired = False
        self._lock = threading.Lock()
        self._sockets = []
        self._done = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def attach(self, sock):
        """Shut ``sock`` down with the call's other sockets at the deadline."""
        with self._lock:
            if self._done or sock is None:
                return
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def finish(self):
        """The call is over: leave its sockets alone from now on."""
        with self._lock:
            self._done = True
        self._timer.cancel()

    def _expire(self):
        with self._lock:
            if self._done:
                return
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock):
    # The base class's shutdown: on a TLS socket it wakes the reader without
    # tearing down the TLS object under it, which another thread is using.
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # closed already, or never connected: nothing to wake


class BoundedTransport(httpx2.BaseTransport):
    """One thread's transport to the model server: a deadline and a cap on every call.

    It wraps an ``httpx2.HTTPTransport`` that holds at most one connection, so
    the socket it last announced is the one its next request runs on.
    """

    def __init__(self, timeout_s, max_answer_bytes, proxy=None):
        self.timeout_s, self.max_answer_bytes = timeout_s, max_answer_bytes
        self._inner = httpx2.HTTPTransport(proxy=proxy, limits=httpx2.Limits(
            max_connections=1, max_keepalive_connections=1))
        self._socket = None  # the socket of the pooled connection, as last announced

    def handle_request(self, request):
        """Send ``request`` under a new ``Watch``; the body comes decoded and capped."""
        watch = Watch(self.timeout_s)
        request.headers["accept-encoding"] = ACCEPTED
        request.extensions["trace"] = lambda name, info: self._traced(watch, name, info)
        watch.attach(self._socket)
        try:
            with _deadline(watch, request):
                response = self._inner.handle_request(request)
        except BaseException:
            watch.finish()
            raise
        stream = response.extensions.get("network_stream")
        watch.attach(stream.get_extra_info("socket") if stream is not None else None)
        body = CappedBody(response, watch, self.max_answer_bytes, request)
        headers = [(name, value) for name, value in response.headers.raw
                   if name.lower() not in (b"content-encoding", b"content-length")]
        return httpx2.Response(response.status_code, headers=headers, stream=body,
                               extensions=response.extensions)

    def _traced(self, watch, name, info):
        # connection.connect_tcp, connection.start_tls, and proxy.start_tls for a tunnel.
        if name.endswith((".connect_tcp.complete", ".start_tls.complete")):
            self._socket = info["return_value"].get_extra_info("socket")
            watch.attach(self._socket)

    def close(self):
        """Close the pooled connection."""
        self._inner.close()


@contextmanager
def _deadline(watch, request):
    """A transport error caused by the watch's shutdown is reported as the timeout it is."""
    try:
        yield
    except httpx2.TransportError:
        if watch.expired:
            raise httpx2.ReadTimeout("the call passed its deadline", request=request) from None
        raise


class CappedBody(httpx2.SyncByteStream):
    """A response body decoded here and cut off past ``limit`` bytes (``AnswerRefused``)."""

    def __init__(self, response, watch, limit, request):
        self._response, self._watch, self._request = response, watch, request
        self._limit = limit

    def __iter__(self):
        headers = self._response.headers
        inflater = Inflater(headers.get("content-encoding", "identity").strip().lower(),
                            self._limit)
        declared = headers.get("content-length", "")
        if inflater.encoding == "identity" and declared.isascii() and declared.isdigit() \
                and (len(declared) > 18 or int(declared) > self._limit):
            raise AnswerRefused(inflater.too_large())  # said up front: nothing is read
        with _deadline(self._watch, self._request):
            for chunk in self._response.stream:
                yield from inflater.feed(chunk)

    def close(self):
        """End the call's watch and give the connection back (or close it)."""
        self._watch.finish()
        self._response.close()


class Inflater:
    """Decodes a body of ``encoding`` (identity, gzip or deflate) and counts what it gives.

    ``feed`` yields the decoded bytes a bounded slice at a time, and raises
    ``AnswerRefused`` once they pass ``limit``, before holding more than one
    byte beyond it.
    """

    def __init__(self, encoding, limit):
        if encoding not in ("identity", *WINDOW_BITS):
            raise AnswerRefused(f"the answer is encoded as {encoding[:40]!r}; signoff reads "
                                "gzip, deflate or none")
        self.encoding, self.limit, self.count = encoding, limit, 0
        self._decoder = zlib.decompressobj(WINDOW_BITS[encoding]) if encoding != "identity" \
            else None
        self._started = False

    def too_large(self):
        """The refusal's words."""
        return (f"the answer is larger than max_answer_bytes ({self.limit:,} bytes"
                f"{', counted decompressed' if self._decoder is not None else ''})")

    def feed(self, data):
        """The decoded bytes of ``data``, the next piece of the body."""
        if self._decoder is None:
            yield self._counted(data)
            return
        while data and not self._decoder.eof:
            piece = self._inflate(data)
            data = self._decoder.unconsumed_tail
            if piece:
                yield self._counted(piece)

    def _inflate(self, data):
        room = self.limit - self.count + 1  # one byte past the cap proves it is passed
        try:
            piece = self._decoder.decompress(data, room)
        except zlib.error:
            if self.encoding != "deflate" or self._started:
                raise AnswerRefused(f"the answer's {self.encoding} encoding is broken") from None
            # "deflate" sent without its zlib header, as some servers do.
            self._decoder = zlib.decompressobj(-15)
            return self._inflate(data)
        self._started = True
        return piece

    def _counted(self, piece):
        self.count += len(piece)
        if self.count > self.limit:
            raise AnswerRefused(self.too_large())
        return piece
