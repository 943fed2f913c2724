"""Event intake validation (SPEC section 3): what an acceptable event looks like.

Only the five identifying fields survive validation; ``text`` and anything else
is dropped here, before anything is stored, queued or logged.
"""

import json
import unicodedata
from dataclasses import dataclass

from .errors import InvalidEvent

LABELS = ("event_id", "name", "document", "record_id")
MAX_LABEL = 128
MAX_LINE_BYTES = 64 * 1024
MAX_OCCURRED = 2**62  # fits a signed 64-bit column on every backend
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Event:
    """The identifying fields of one event; everything signoff keeps of it."""

    event_id: str
    name: str
    document: str
    record_id: str
    occurred: int

    def as_dict(self):
        """The five fields as a dict (the delivery row's columns)."""
        return {"event_id": self.event_id, "name": self.name, "document": self.document,
                "record_id": self.record_id, "occurred": self.occurred}


def check_label(field, value):
    """Raise ``InvalidEvent`` unless ``value`` is an acceptable label string."""
    if not isinstance(value, str):
        raise InvalidEvent(f"{field}: must be a string")
    if not 1 <= len(value) <= MAX_LABEL:
        raise InvalidEvent(f"{field}: must be 1-{MAX_LABEL} characters")
    if value.isascii() and value.isprintable():
        return value  # no control character, no surrogate: the loop below would pass
    for ch in value:
        if "\ud800" <= ch <= "\udfff":
            raise InvalidEvent(f"{field}: contains a lone surrogate")
        if unicodedata.category(ch) == "Cc":
            raise InvalidEvent(f"{field}: contains a control character")
    return value


def validate(value):
    """Return the ``Event`` in ``value`` or raise ``InvalidEvent`` naming the field."""
    if not isinstance(value, dict):
        raise InvalidEvent("event: must be a JSON object")
    for field in LABELS:
        if field not in value:
            raise InvalidEvent(f"{field}: missing")
        check_label(field, value[field])
    if "occurred" not in value:
        raise InvalidEvent("occurred: missing")
    occurred = value["occurred"]
    if type(occurred) is not int:
        raise InvalidEvent("occurred: must be an integer of Unix seconds")
    if not 0 <= occurred <= MAX_OCCURRED:
        raise InvalidEvent("occurred: out of range")
    return Event(*(value[f] for f in LABELS), occurred)


def _reject_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def parse_line(raw):
    """Decode and validate one line of bytes; raise ``InvalidEvent`` with a reason."""
    if len(raw) > MAX_LINE_BYTES:
        raise InvalidEvent(f"line: longer than {MAX_LINE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidEvent("line: not valid UTF-8") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or type(exc).__name__
        raise InvalidEvent(f"line: broken JSON ({reason})") from None
    return validate(value)


def iter_lines(stream):
    """Yield ``(line_number, raw_bytes_or_None)`` from a binary stream, lazily.

    A line over the size limit is yielded as ``None`` without being held whole in
    memory. Blank lines are skipped but still counted.
    """
    number, buf, oversize = 0, b"", False
    while True:
        chunk = stream.read(_READ_CHUNK)
        if not chunk:
            break
        buf += chunk
        while True:
            cut = buf.find(b"\n")
            if cut < 0:
                break
            line, buf = buf[:cut], buf[cut + 1:]
            number += 1
            if oversize:
                oversize = False
                yield number, None
            elif line.strip():
                yield number, line.rstrip(b"\r")
        if len(buf) > MAX_LINE_BYTES:
            oversize, buf = True, b""
    if oversize or buf.strip():
        number += 1
        yield number, (None if oversize else buf.rstrip(b"\r"))


def read_events(stream):
    """Yield ``(line_number, Event | InvalidEvent)`` for JSON Lines on ``stream``.

    An input that is one JSON object spread over several lines (a pretty-printed
    file) is read as one event on line 1.
    """
    head = stream.read(MAX_LINE_BYTES + 1)
    if len(head) <= MAX_LINE_BYTES and b"\n" in head.strip():
        try:
            whole = json.loads(head.decode("utf-8"), parse_constant=_reject_constant)
        except (ValueError, UnicodeDecodeError, RecursionError):
            whole = None
        if isinstance(whole, dict):
            yield 1, _checked(head)
            return
    yield from _read_lines(_Prefixed(head, stream))


def _checked(raw):
    try:
        return parse_line(raw.strip())
    except InvalidEvent as exc:
        return exc


def _read_lines(stream):
    for number, raw in iter_lines(stream):
        if raw is None:
            yield number, InvalidEvent(f"line: longer than {MAX_LINE_BYTES} bytes")
        else:
            yield number, _checked(raw)


class _Prefixed:
    """A binary stream that first returns bytes already read from another."""

    def __init__(self, head, rest):
        self.head, self.rest = head, rest

    def read(self, size):
        if self.head:
            out, self.head = self.head, b""
            return out
        return self.rest.read(size)
