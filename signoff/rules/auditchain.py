"""The audit's hash chain, as pure functions: what an entry's hash covers, which chain
an entry joins, and the checkpoint statements the home key signs.

An entry's hash is SHA-256 of the canonical JSON (RFC 8785) of its body: the
array of its columns in the order of ``ENTRY_FIELDS`` (null where unset), ``prev`` (the hash of its chain's
entry before it) among them; never its ``seq``, which the database assigns
after the hash is made. Entries of one task form the chain ``task:<key>``;
an entry written without its task's row held (a duplicate delivery's), and one
with no task, stands alone (``chain`` null) and is committed to by the next
checkpoint directly. Checkpoints chain too (``prev``), each naming the heads of
the chains its section advanced and the hashes of its lone entries.
"""

import base64
import hashlib
import operator

import orjson
import rfc8785

ENTRY_FIELDS = ("chain", "prev", "at", "monitor", "event_id", "task_key", "code", "actor",
                "channel", "note", "subject", "data")
TASK_CHAIN = "task:"
STATE_FIELDS = ("key", "status", "approved_digest")  # an export's task-state line
APPROVING = ("approved", "approval_added", "auto_approved")  # a counted approval
STATEMENT_VERSION = 1
_AT, _DATA = ENTRY_FIELDS.index("at"), ENTRY_FIELDS.index("data")  # the columns not text
# An entry's body in one C call, its text columns in another, and SHA-256 without a
# Python call around it: this runs for every entry written, three an event.
_BODY = operator.itemgetter(*ENTRY_FIELDS)
_TEXTS = operator.itemgetter(*(i for i in range(len(ENTRY_FIELDS)) if i not in (_AT, _DATA)))
_SHA256 = hashlib.sha256

_SAFE_INT = 2**53 - 1
# orjson writes what RFC 8785 writes for the values ``_plain`` lets through (a
# property test holds the two together) for a sixth of the stdlib encoder's
# instructions. Keys sorted: only ASCII keys reach it, whose byte order is RFC
# 8785's UTF-16 order. Integers past 2**53, where RFC 8785 writes a double's
# digits, are refused, and go to rfc8785.
_ENCODE = orjson.dumps
_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_TEXT_TYPES = frozenset((str, type(None)))
_FLAT_TYPES = frozenset((str, int, bool, type(None)))


def canonical_bytes(value):
    """The RFC 8785 canonical JSON of ``value``, as UTF-8 bytes.

    ``rfc8785`` defines it. Values of the kinds audit entries hold (ASCII keys,
    strings, safe integers, floats written the same way by both) are encoded by
    orjson, whose output for them is byte for byte the same (a property test
    holds the two together); anything else goes to ``rfc8785``. A pure Python
    walk of every entry would cost more than the 10 % of the pipeline's work the
    chain may take.
    """
    if _plain(value):
        try:
            return _ENCODE(value, option=_OPTIONS)
        except orjson.JSONEncodeError:
            pass  # a lone surrogate: rfc8785 says what is wrong with it
    return rfc8785.dumps(value)


def _plain(value):
    """True when orjson writes ``value`` exactly as RFC 8785 does.

    By exact type, a subclass (an enum, say) going to ``rfc8785``.
    """
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return True
    if kind is float:
        # Both write the shortest digits that round-trip; outside 1e-4..1e16 and on
        # whole numbers (``5.0``, ``-0.0``) ECMAScript writes them otherwise.
        return 1e-4 <= abs(value) < 1e16 and not value.is_integer()
    if kind is int:
        return -_SAFE_INT <= value <= _SAFE_INT
    if kind is dict:
        return all(type(k) is str and k.isascii() and (type(v) is str or _plain(v))
                   for k, v in value.items())
    if kind is list or kind is tuple:
        return all(map(_plain, value))
    return False


def _plain_data(data):
    """``_plain`` for an entry's data, flat ones (strings, integers, booleans, nulls
    under ASCII keys: a digest and a quorum's size) checked without a Python loop."""
    if data is None:
        return True
    if type(data) is dict and _FLAT_TYPES.issuperset(map(type, data.values())):
        try:
            return "".join(data).isascii()  # integers past 2**53: refused by orjson
        except TypeError:  # a key that is not a string
            return False
    return _plain(data)


def sha256_hex(data):
    """SHA-256 of ``data`` (bytes), in hex."""
    return hashlib.sha256(data).hexdigest()


def entry_hash(entry):
    """The hash of an audit entry (a dict of its columns; one left out is null):
    SHA-256 of the canonical JSON of the array of its ``ENTRY_FIELDS`` values."""
    try:
        body = _BODY(entry)  # a writer's row holds every column (state/history.py)
    except KeyError:
        body = tuple(map(entry.get, ENTRY_FIELDS))
    if (_TEXT_TYPES.issuperset(map(type, _TEXTS(body))) and _plain(body[_AT])
            and _plain_data(body[_DATA])):
        try:
            return _SHA256(_ENCODE(body, option=_OPTIONS)).hexdigest()
        except orjson.JSONEncodeError:
            pass
    return sha256_hex(rfc8785.dumps(list(body)))


def task_chain(key):
    """The chain of task ``key``'s entries."""
    return TASK_CHAIN + key


def statement_bytes(statement):
    """What the home key signs of a checkpoint or an export's close: its canonical
    JSON without its ``signature``; its hash is the SHA-256 of the same bytes."""
    return rfc8785.dumps({k: v for k, v in statement.items() if k != "signature"})


def statement_hash(statement):
    """The hash of a checkpoint (what a later checkpoint's ``prev`` and a head name)."""
    return sha256_hex(statement_bytes(statement))


def checkpoint_statement(home, number, prev, at, heads, lone, order):
    """A checkpoint, unsigned: its number, the checkpoint before it, the chains' heads
    its section advanced (``{chain: hash}``), its lone entries' hashes, and
    ``order_hash`` of all its entries' hashes in the order it sealed them."""
    return {"kind": "checkpoint", "v": STATEMENT_VERSION, "home": home, "n": number,
            "prev": prev, "at": at, "heads": heads, "lone": lone, "order": order}


def order_hash(hashes):
    """The hash of a section's entry hashes, in order: entries of different chains keep
    their places too."""
    return sha256_hex("".join(hashes).encode("ascii"))


def close_statement(home, at, head, tasks):
    """An export's last line, unsigned: the head it ends on and the hash of the task
    states the export lists after it (``tasks_hash``)."""
    return {"kind": "close", "v": STATEMENT_VERSION, "home": home, "at": at, "head": head,
            "tasks": tasks}


def tasks_hash(lines):
    """The hash of an export's task-state lines, in file order."""
    return sha256_hex(canonical_bytes([{k: line.get(k) for k in STATE_FIELDS}
                                       for line in lines]))


def b64url(data):
    """base64url without padding, as signatures are written."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def from_b64url(text):
    """The bytes of base64url ``text`` (padding optional); ``ValueError`` if it is not."""
    if not isinstance(text, str):
        raise ValueError("not a base64url string")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
