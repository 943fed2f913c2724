"""Text a person reads before deciding: characters that render differently from what
they are, made visible, and the rule for a short reason a person gives.

A bidi override (U+202E) turns "…0$ refsnarT" into what looks like a different
sentence; a zero-width space, a variation selector or a tag character is not
seen at all, yet a host receives it. What an approver approves must be what
they saw, so these characters are found, shown as ``⟨U+202E⟩``, and approving
a draft that holds them takes an explicit acknowledgement (``approval.py``).

Which characters those are is Unicode's to say, through ICU (the library every
browser and operating system uses for it), not a table of ours: every code point
with the property Default_Ignorable_Code_Point, every character of the general
categories Cc (but tab and newline), Cf, Co, Cn, Cs, Zl and Zp, and the bidi
controls. The braille blank (U+2800) is added: a symbol that draws nothing.
"""

import functools
import re

from ..errors import Refused

# The UnicodeSet pattern of the characters above, in ICU's syntax.
HIDDEN_SET = (r"[[:Default_Ignorable_Code_Point:][:Cc:][:Cf:][:Co:][:Cn:][:Cs:][:Zl:][:Zp:]"
              r"[:Bidi_Control:][\u2800]-[\t\n]]")
MAX_REASON = 200


@functools.cache
def _hidden():
    """A compiled pattern matching one hidden character (built once, on first use).

    ICU answers the set; Python's ``re`` scans with it, so a long draft is
    checked in C without a call into ICU per character. Lone surrogates (Cs)
    are matched too: Python strings can hold them, UTF-16 cannot.
    """
    import icu  # imported here: commands that read no text never load ICU

    ranges = [(ord(a), ord(b)) for a, b in icu.UnicodeSet(HIDDEN_SET).ranges()]
    return re.compile("[" + "".join(
        f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges) + "]")


def _plain(text):
    # Printable ASCII holds nothing hidden: the common case needs no scan.
    return text.isascii() and text.isprintable()


def is_hidden(ch):
    """True for a character that renders differently from what it is."""
    return _hidden().fullmatch(ch) is not None


def hidden_characters(text):
    """The distinct hidden characters of ``text`` as ``U+XXXX`` strings, in order found."""
    if not isinstance(text, str) or _plain(text):
        return []
    return list(dict.fromkeys(f"U+{ord(ch):04X}" for ch in _hidden().findall(text)))


def visible(text):
    """Multi-line ``text`` with each hidden character shown as ``⟨U+XXXX⟩``.

    Line breaks and tabs stay. Meant for text a person reads before deciding
    (a record, a draft, a name): a bidi override or an invisible character must
    be seen, not obeyed.
    """
    if _plain(text):
        return text
    return _hidden().sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", text)


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
    bad = next((ch for ch in reason if ch in "\n\t" or is_hidden(ch)), None)
    if bad is not None:
        raise Refused("invalid_reason", f"the reason holds the character U+{ord(bad):04X}; "
                      "only printable characters are allowed (no control, bidi or invisible "
                      "characters)")
    return reason
