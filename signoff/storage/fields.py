"""Columns whose values read back exactly as they were written, on every engine."""

import functools
import re

from peewee import JSONField, Node, TextField

from ..rules import jsontext
from .database import resolve

# PostgreSQL's text and jsonb refuse NUL and lone surrogates, which hosts,
# drafters and people may send (and SQLite's driver refuses lone surrogates in
# text). Such characters are escaped reversibly behind ESCAPE (a private-use
# character, itself escaped when it occurs), so every string reads back
# exactly as it was written.
ESCAPE = "\U000F0000"
_UNSAFE = re.compile("[\x00\ud800-\udfff\U000F0000]")
_ESCAPED = re.compile("\U000F0000(?:(E)|(0)|s([0-9a-f]{4}))")


def escape_text(value):
    """``value`` with NUL, lone surrogates and ``ESCAPE`` escaped (reversibly)."""
    if value.isascii() or not _UNSAFE.search(value):
        return value.replace("\x00", ESCAPE + "0") if "\x00" in value else value
    return _UNSAFE.sub(_escape_one, value)


def _escape_one(match):
    ch = match.group()
    if ch == ESCAPE:
        return ESCAPE + "E"
    if ch == "\x00":
        return ESCAPE + "0"
    return f"{ESCAPE}s{ord(ch):04x}"


def unescape_text(value):
    """The inverse of ``escape_text``."""
    if ESCAPE not in value:
        return value
    return _ESCAPED.sub(lambda m: ESCAPE if m.group(1) else "\x00" if m.group(2)
                        else chr(int(m.group(3), 16)), value)


def lossless_dumps(value, dumps=jsontext.dumps):
    """``value`` as JSON text that every engine stores exactly (strings escaped as
    ``escape_text`` does).

    JSON text shows NUL as ``\\u0000`` and, with ``json.dumps``'s default ASCII
    output, every surrogate and ``ESCAPE`` (an astral character, written as a
    surrogate pair) as ``\\ud…``: most values are dumped once and never walked.
    """
    text = dumps(value)
    if ("\\u0000" in text or "\\ud" in text
            or not text.isascii() and _UNSAFE.search(text)):
        return dumps(_walk(value, escape_text))
    return text


def _walk(value, convert):
    if isinstance(value, str):
        return convert(value)
    if isinstance(value, dict):
        return {convert(k) if isinstance(k, str) else k: _walk(v, convert)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(v, convert) for v in value]
    return value


class Text(TextField):
    """Free-form text of any length, lossless on every engine (SQLite's driver
    refuses lone surrogates too, so it is escaped everywhere)."""

    def db_value(self, value):
        value = super().db_value(value)
        return escape_text(value) if isinstance(value, str) else value

    def python_value(self, value):
        return unescape_text(value) if isinstance(value, str) else value


class JSON(JSONField):
    """JSON (jsonb on PostgreSQL) whose strings are stored losslessly.

    Peewee adapts a JSONField to the engine last given to the proxy; this one
    adapts each value to the engine of the database in use, so homes on two
    engines can be open in one process.
    """

    _codecs = {}  # engine class -> (wrap, read)

    def __init__(self, dumps=None, loads=None, **kwargs):
        # json.dumps and json.loads, with their encoder and scanner made once.
        super().__init__(dumps=dumps or jsontext.dumps, loads=loads or jsontext.loads, **kwargs)

    def _codec(self):
        database = resolve(self.model._meta.database)
        engine = type(database)
        if engine not in self._codecs:
            helper = database.json_methods(database)
            dumps = functools.partial(lossless_dumps, dumps=self._dumps)
            self._codecs[engine] = (helper.make_value_wrapper(dumps),
                                    helper.make_value_reader(self._loads))
        return self._codecs[engine]

    def db_value(self, value):
        if value is None or isinstance(value, Node):
            return value
        return self._codec()[0](value)

    def python_value(self, value):
        if value is None:
            return None
        if value == "{}" or value == "[]":
            # Most of a task's JSON columns (failures, edits, earlier drafts) are
            # empty: a new one each, without the decoder (5 % of the instructions
            # of a bulk approval).
            return {} if value == "{}" else []
        if isinstance(value, str) and "\\u" not in value and ESCAPE not in value:
            return self._codec()[1](value)  # JSON text with no escape in it: nothing to undo
        return _walk(self._codec()[1](value), unescape_text)
