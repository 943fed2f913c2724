"""Event intake validation (events in docs/concepts.md): what an acceptable event looks like.

Only the five identifying fields survive validation; ``text`` and anything else
is dropped here, before anything is stored, queued or logged.
"""

import json
import unicodedata
from dataclasses import dataclass

from ..errors import InvalidEvent, Refused
from .text import hidden_characters

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


# Characters that reorder or split what a terminal shows: the bidi embeddings,
# overrides, isolates and marks, and the line and paragraph separators. A name
# or id holding one could make an operator's listing say something it does not.
VIEW_BREAKING = frozenset("\u061c\u200e\u200f\u2028\u2029" + "".join(
    chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))))
LABEL_RULE = f"1-{MAX_LABEL} characters, no control, bidi-control or line-separator characters"


def check_label(field, value):
    """Raise ``InvalidEvent`` unless ``value`` is an acceptable label string.

    The one rule for event ids and for names from people (see ``check_name``).
    """
    if not isinstance(value, str):
        raise InvalidEvent(f"{field}: must be a string ({LABEL_RULE}), got {_kind(value)}")
    if not 1 <= len(value) <= MAX_LABEL:
        raise InvalidEvent(f"{field}: must be {LABEL_RULE}; got {len(value)} characters")
    if value.isascii() and value.isprintable():
        return value  # no control character, no surrogate: the loop below would pass
    for at, ch in enumerate(value, 1):
        if "\ud800" <= ch <= "\udfff":
            raise InvalidEvent(f"{field}: contains a lone surrogate at character {at}; "
                               "only whole Unicode characters are allowed")
        if unicodedata.category(ch) == "Cc":
            raise InvalidEvent(f"{field}: contains the control character U+{ord(ch):04X} "
                               f"at character {at}; allowed: {LABEL_RULE}")
        if ch in VIEW_BREAKING:
            raise InvalidEvent(f"{field}: contains the bidi-control or line-separator character "
                               f"U+{ord(ch):04X} at character {at}; allowed: {LABEL_RULE}")
    return value


def check_name(field, value):
    """A word from a person (the CLI's ``--by`` note, a policy author): the label rule,
    and no invisible character either (``rules/text``).

    Refuses with ``invalid_name``, so nothing a person types can forge a line
    of what the operator reads.
    """
    try:
        check_label(field, value)
    except InvalidEvent as exc:
        raise Refused("invalid_name", exc.reason) from None
    hidden = hidden_characters(value)
    if hidden:
        raise Refused("invalid_name", f"{field}: contains the invisible character {hidden[0]}; "
                      f"allowed: {LABEL_RULE}, nothing invisible")
    return value


def _kind(value):
    """What a JSON value is, in words (never Python's type names)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "a string" if isinstance(value, str) else "something else"


REQUIRED = "event_id, name, document, record_id (strings) and occurred (integer Unix seconds)"


def validate(value):
    """Return the ``Event`` in ``value`` or raise ``InvalidEvent`` naming the field."""
    if not isinstance(value, dict):
        raise InvalidEvent(f"event: must be one JSON object with {REQUIRED}; got {_kind(value)}")
    for field in LABELS:
        if field not in value:
            raise InvalidEvent(f"{field}: missing; an event needs {REQUIRED}")
        check_label(field, value[field])
    if "occurred" not in value:
        raise InvalidEvent(f"occurred: missing; an event needs {REQUIRED}")
    occurred = value["occurred"]
    if type(occurred) is not int:
        raise InvalidEvent("occurred: must be an integer of Unix seconds (like 1767225600, "
                           f"no quotes, no fraction); got {_kind(occurred)}")
    if not 0 <= occurred <= MAX_OCCURRED:
        raise InvalidEvent(f"occurred: out of range; allowed: 0 to {MAX_OCCURRED} Unix seconds")
    return Event(*(value[f] for f in LABELS), occurred)


class _NotJson(ValueError):
    """A JSON extension Python accepts and JSON does not (NaN, Infinity)."""


class DuplicateKey(ValueError):
    """An object names ``key`` twice: JSON parsers disagree on which value wins."""

    def __init__(self, key):
        super().__init__(key)
        self.key = key


def _reject_constant(name):
    raise _NotJson(f"{name} is not a JSON number")


def _unique_keys(pairs):
    value = dict(pairs)
    if len(value) < len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return value


# One decoder for every text from outside: json.loads with an option builds
# a new one per call. It refuses a key named twice in any object, at any depth.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
# Only for telling what shape an input has (see ``read_events``), never for its value.
_SHAPE_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def decode_json(text, unique_keys=True):
    """The JSON value in ``text``; ``ValueError`` (or ``RecursionError``) when it is not one.

    Refuses what ``json.loads`` accepts and JSON does not (NaN, a leading BOM)
    and, unless ``unique_keys`` is false, an object naming a key twice
    (``DuplicateKey``).
    """
    if text.startswith("\ufeff"):  # refused as json.loads refuses it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return (_DECODER if unique_keys else _SHAPE_DECODER).decode(text)


# Python's decoder messages, in the words the reason uses.
_JSON_PROBLEMS = (
    ("Expecting value", "a value was expected"),
    ("Expecting property name", "an object key must be a string in double quotes"),
    ("Expecting ',' delimiter", "a comma is missing"),
    ("Expecting ':' delimiter", "a colon is missing after an object key"),
    ("Unterminated string", "a string is not closed"),
    ("Invalid control character", "a string holds a raw control character (write it as \\uXXXX)"),
    ("Invalid \\uXXXX escape", "a string holds a broken \\u escape"),
    ("Invalid \\escape", "a string holds an unknown backslash escape"),
    ("Extra data", "more than one JSON value"),
)
SHOWN_KEY = 64  # characters of a key a reason repeats


def broken_json_reason(exc, where="line"):
    """A people's reason for a JSON text that did not parse (never Python's wording).

    ``where`` names what held the text (``line``, ``body``, ``message``).
    """
    if isinstance(exc, RecursionError):
        return f"{where}: broken JSON: nested too deeply"
    if isinstance(exc, DuplicateKey):
        key = exc.key if len(exc.key) <= SHOWN_KEY else exc.key[:SHOWN_KEY] + "\u2026"
        return (f"{where}: an object names the key {json.dumps(key)} twice (JSON parsers "
                "disagree on which value wins); name each key once")
    if isinstance(exc, _NotJson):
        return f"{where}: broken JSON: {exc}"
    if isinstance(exc, json.JSONDecodeError):
        what = next((words for start, words in _JSON_PROBLEMS if exc.msg.startswith(start)),
                    "not valid JSON")
        return f"{where}: broken JSON: {what} (column {exc.colno})"
    return f"{where}: broken JSON"


def too_long(where="line"):
    """The reason for an event whose JSON text is over ``MAX_LINE_BYTES``."""
    if where == "line":
        return (f"line: longer than {MAX_LINE_BYTES} bytes; one event per line, "
                f"at most {MAX_LINE_BYTES} bytes")
    return f"{where}: longer than {MAX_LINE_BYTES} bytes as JSON; at most {MAX_LINE_BYTES} bytes"


def parse_line(raw, where="line"):
    """Decode and validate one line of bytes; raise ``InvalidEvent`` with a reason.

    ``where`` is what the reasons call the text: a ``line``, a webhook's
    ``body``, an agent's ``event``.
    """
    if len(raw) > MAX_LINE_BYTES:
        raise InvalidEvent(too_long(where))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEvent(f"{where}: not valid UTF-8 (byte {exc.start + 1}); "
                           "JSON text must be UTF-8") from None
    try:
        value = decode_json(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidEvent(broken_json_reason(exc, where)) from None
    return validate(value)


def check_value(value, where="line"):
    """``Event`` or ``InvalidEvent`` for one event given as a Python value.

    The answer and reason are those its JSON line would get from ``read_events``
    (a reason about the whole text names ``where`` instead of the line).
    A flat object of ASCII strings, integers, booleans and nulls, short enough
    that its line cannot pass the size limit, is validated as it is; any other
    value goes through the JSON text, which decides what it means.
    """
    if _plain(value):
        try:
            return validate(value)
        except InvalidEvent as exc:
            return exc
    return _checked(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"), where)


_PLAIN_TYPES = (str, int, bool, type(None))


def _plain(value):
    # True when encoding to JSON and decoding again gives back an equal dict
    # with the same types and the line is surely within MAX_LINE_BYTES (each
    # ASCII character is at most 6 bytes of JSON, an escaped control).
    if type(value) is not dict:
        return False
    size = 0
    for key, item in value.items():
        kind = type(item)
        if type(key) is not str or not key.isascii() or kind not in _PLAIN_TYPES:
            return False
        if kind is str:
            if not item.isascii():
                return False
            size += len(item)
        elif kind is int and not -MAX_OCCURRED <= item <= MAX_OCCURRED:
            return False
        size += len(key) + 24
    return 6 * size <= MAX_LINE_BYTES


@dataclass(frozen=True)
class Oversize:
    """A line over the size limit, of which only the first bytes were kept."""

    head: bytes


OVERSIZE_HEAD = 1024  # bytes of an oversize line kept: enough to tell what it was


def iter_lines(stream, limit=MAX_LINE_BYTES):
    """Yield ``(line_number, raw_bytes | Oversize)`` from a binary stream, lazily.

    A line over ``limit`` bytes is yielded as an ``Oversize`` without being held
    whole in memory. Blank lines are skipped but still counted.
    """
    number, buf, oversize = 0, b"", None
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
            if oversize is not None or len(line) > limit:
                yield number, oversize or Oversize(line[:OVERSIZE_HEAD])
                oversize = None
            elif line.strip():
                yield number, line.rstrip(b"\r")
        if len(buf) > limit:
            oversize = oversize or Oversize(buf[:OVERSIZE_HEAD])
            buf = b""
    if oversize is not None or buf.strip():
        number += 1
        yield number, (oversize or buf.rstrip(b"\r"))


def read_events(stream):
    """Yield ``(line_number, Event | InvalidEvent)`` for JSON Lines on ``stream``.

    An input that is one JSON object spread over several lines (a pretty-printed
    file) is read as one event on line 1.
    """
    head = stream.read(MAX_LINE_BYTES + 1)
    if len(head) <= MAX_LINE_BYTES and b"\n" in head.strip():
        try:
            whole = decode_json(head.decode("utf-8"), unique_keys=False)
        except (ValueError, UnicodeDecodeError, RecursionError):
            whole = None
        if isinstance(whole, dict):
            yield 1, _checked(head)
            return
    yield from _read_lines(_Prefixed(head, stream))


def _checked(raw, where="line"):
    try:
        return parse_line(raw.strip(), where)
    except InvalidEvent as exc:
        return exc


def _read_lines(stream):
    for number, raw in iter_lines(stream):
        if isinstance(raw, Oversize):
            yield number, InvalidEvent(too_long())
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
