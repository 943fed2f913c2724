"""Text a person reads before deciding: characters that render differently from what
they are, made visible, and the rule for a short reason a person gives.

A bidi override (U+202E) turns "…0$ refsnarT" into what looks like a different
sentence; a zero-width space or a BOM is not seen at all. What an approver
approves must be what they saw, so these characters are found, shown as
``⟨U+202E⟩``, and approving a draft that holds them takes an explicit
acknowledgement (``approval.py``).
"""

import unicodedata

from ..errors import Refused

# Controls, format characters (bidi controls, zero-width characters, the BOM),
# line and paragraph separators, and lone surrogates.
HIDDEN_CATEGORIES = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))
# Letters that render as blank space (Hangul fillers, the braille blank).
BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
KEPT = frozenset("\n\t")  # the line breaks and tabs a text is laid out with
MAX_REASON = 200


def is_hidden(ch):
    """True for a character that renders differently from what it is."""
    return ch not in KEPT and (unicodedata.category(ch) in HIDDEN_CATEGORIES
                               or ch in BLANK_LETTERS)


def hidden_characters(text):
    """The distinct hidden characters of ``text`` as ``U+XXXX`` strings, in order found."""
    if not isinstance(text, str) or (text.isascii() and text.isprintable()):
        return []
    found = dict.fromkeys(f"U+{ord(ch):04X}" for ch in text if is_hidden(ch))
    return list(found)


def visible(text):
    """Multi-line ``text`` with each hidden character shown as ``⟨U+XXXX⟩``.

    Line breaks and tabs stay. Meant for text a person reads before deciding
    (a record, a draft): a bidi override or a zero-width character must be
    seen, not obeyed.
    """
    if text.isascii() and text.isprintable():
        return text
    return "".join(f"⟨U+{ord(ch):04X}⟩" if is_hidden(ch) else ch for ch in text)


def check_reason(reason):
    """A reason a person gives (reject): 1–200 printable characters, else ``invalid_reason``.

    ``None`` (no reason given) passes; surrounding spaces are dropped.
    """
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise Refused("invalid_reason", "the reason must be text")
    reason = reason.strip()
    if not 1 <= len(reason) <= MAX_REASON:
        raise Refused("invalid_reason", f"the reason must be 1 to {MAX_REASON} characters, "
                      f"got {len(reason)}")
    bad = [ch for ch in reason if is_hidden(ch) or ch in KEPT]
    if bad:
        raise Refused("invalid_reason", f"the reason holds the character U+{ord(bad[0]):04X}; "
                      "only printable characters are allowed (no control or bidi characters)")
    return reason
