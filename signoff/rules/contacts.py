"""Where a reviewer is reached: the email address rule.

An address is kept as the plain ``local@domain`` part of RFC 5322, as
Python's ``email.headerregistry`` parses it: no display name, no comments,
no second address. Characters that render differently from what they are
(``rules/text.py``) are refused, so an address a person reads on ``reviewer
list`` is the address mail goes to.
"""

from email.errors import HeaderParseError
from email.headerregistry import Address

from ..errors import Refused
from .text import is_hidden

MAX_EMAIL = 254  # RFC 5321's longest path


def check_email(address):
    """``address`` as it is kept (surrounding spaces dropped), or ``invalid_email``."""
    if not isinstance(address, str):
        raise Refused("invalid_email", "an email address must be text")
    address = address.strip(" ")
    if not 3 <= len(address) <= MAX_EMAIL:
        raise Refused("invalid_email", f"an email address is 3 to {MAX_EMAIL} characters")
    bad = next((ch for ch in address if ch.isspace() or is_hidden(ch)), None)
    if bad is not None:
        raise Refused("invalid_email", f"the address holds U+{ord(bad):04X} (a space, "
                      "control, bidi or invisible character)")
    try:
        parsed = Address(addr_spec=address)
    except (HeaderParseError, ValueError, IndexError) as exc:
        raise Refused("invalid_email", f"{address!r} is not an email address ({exc})") from None
    if not parsed.username or "." not in parsed.domain.strip(".") or parsed.addr_spec != address:
        raise Refused("invalid_email", f"{address!r} is not an address of the form "
                      "name@domain.example")
    return address
