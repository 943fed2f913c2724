"""Who decides: reviewer names, and the identities a quorum counts.

A quorum of two must take two people. Names are therefore kept in one form
(Unicode NFKC, case-folded, trimmed), so ``Alice`` and ``alice`` are one
reviewer, and a new name that looks like an existing one (UTS #39 skeletons,
from ICU: Cyrillic ``а`` against Latin ``a``, ``rn`` against ``m``) is refused.
Names that could pass for another kind of identity (``policy:2``,
``operator:root``) are refused too: those prefixes are signoff's.

An identity is what a decision is counted under: an authenticated reviewer's
name (pages, JSON API), ``operator:<OS account>`` for the command line (the
account that ran the command; ``--by`` is only a note), ``policy:<id>`` for a
standing policy. The channel says which face the decision came through.
"""

import functools
import os
import unicodedata
from dataclasses import dataclass

from ..errors import Refused
from .events import check_name
from .text import is_hidden

MAX_NAME = 128
RESERVED = ("policy:", "operator:", "delegate:")
OPERATOR = "operator:"
NAME_RULE = (f"1-{MAX_NAME} characters after normalising, no spaces, no control, bidi or "
             "invisible characters, not starting with " + ", ".join(RESERVED))
CHANNELS = ("cli", "page", "api", "policy", "email", "slack")  # the faces a decision comes through


def normal_name(name):
    """``name`` in its one stored form, or ``invalid_name`` saying what is wrong with it."""
    if not isinstance(name, str):
        raise Refused("invalid_name", f"a name must be text ({NAME_RULE})")
    if any("\ud800" <= ch <= "\udfff" for ch in name):
        raise Refused("invalid_name", "the name holds a lone surrogate")
    form = unicodedata.normalize("NFKC", name).casefold().strip()
    if not 1 <= len(form) <= MAX_NAME:
        raise Refused("invalid_name", f"the name must be {NAME_RULE}; got {len(form)} characters")
    bad = next((ch for ch in form if ch.isspace() or is_hidden(ch)), None)
    if bad is not None:
        raise Refused("invalid_name", f"the name holds U+{ord(bad):04X} (a space, control, "
                      f"bidi or invisible character); allowed: {NAME_RULE}")
    if form.startswith(RESERVED):
        raise Refused("invalid_name", f"{form!r} starts with a prefix signoff keeps for its own "
                      f"identities ({', '.join(RESERVED)})")
    return form


@functools.cache
def _checker():
    import icu  # loaded by the commands that judge names only
    return icu.SpoofChecker()


def skeleton(name):
    """The UTS #39 skeleton of ``name``, case-folded: two names with one skeleton look alike.

    Folded because names are: ``b0b``'s skeleton is ``bOb``, which a reader
    told that case does not matter takes for ``bob``.
    """
    return _checker().getSkeleton(0, name).casefold()


def clash(name, existing):
    """The name of ``existing`` that ``name`` is or looks like, or ``None``."""
    mark = skeleton(name)
    return next((other for other in existing if skeleton(other) == mark), None)


@functools.cache
def os_account():
    """The operating-system account running this process (never an environment variable)."""
    try:
        import pwd
        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):  # no pwd (Windows) or an account without an entry
        import getpass
        return getpass.getuser()


@dataclass(frozen=True)
class Actor:
    """Who made a decision: the ``identity`` counted, the ``channel``, a ``note``, the
    ``monitors`` a limited reviewer may decide for (``None``: every monitor), and
    ``for_reviewer``, the reviewer a delegate decides for (``decisions/delegation.py``).

    The limits travel with the actor into every decision, which finds its task
    among those monitors' alone: another monitor's task is unknown to it. A
    delegate is counted under their own identity whoever they decide for.
    """

    identity: str
    channel: str
    note: str | None = None
    monitors: frozenset | None = None
    for_reviewer: str | None = None

    @classmethod
    def of(cls, by, channel, monitors=None, signed=False):
        """The actor of a call through ``channel``: on the CLI (the Python API's default
        channel too) the OS account, with ``by`` kept as a note; elsewhere ``by``
        itself, the identity the face authenticated (a reviewer, ``policy:<id>``).
        A ``signed`` decision is ``by``'s on every channel: the reviewer's key proves
        it (the decision is refused unless it does).

        A channel signoff does not have is a programming error (``ValueError``);
        a ``by`` that is not a clean label is refused ``invalid_name``.
        """
        if channel not in CHANNELS:
            raise ValueError(f"unknown channel {channel!r}")
        limits = None if monitors is None else frozenset(monitors)
        if channel == "cli" and not signed:
            return cls(OPERATOR + os_account(), "cli",
                       None if by is None else check_name("by", by), limits)
        return cls(check_name("by", by), channel, None, limits)

    @property
    def audit(self):
        """The audit row's fields for this actor (a delegate's names whom they decided for)."""
        fields = {"actor": self.identity, "channel": self.channel, "note": self.note}
        if self.for_reviewer is not None:
            fields["data"] = {"for": self.for_reviewer}
        return fields

    def audit_with(self, data):
        """The audit row's fields for this actor with ``data`` (or none), a
        delegate's ``for`` kept beside it."""
        fields = self.audit
        merged = {**fields.get("data", {}), **(data or {})}
        return {**fields, "data": merged or None}
