"""Checking an audit export offline (``signoff audit verify``), as pure functions.

An export is JSON Lines (``admin/auditlog.py`` writes it): ``entry`` lines and
the ``checkpoint`` lines that sealed them, then one ``task`` line per task the
database holds as approved, uncertain or done, then the ``close`` line signed at
export time. Each line is checked in file order: its link first, then its
signatures, then quorum and digests; the first failure is named with one of
``CODES``. ``TaskLedger`` replays one task's chain.
"""

import hashlib
import json
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..errors import Refused
from .auditchain import (APPROVING, ENTRY_FIELDS, STATE_FIELDS, STATEMENT_VERSION, TASK_CHAIN,
                         b64url, canonical_bytes, entry_hash, from_b64url, order_hash,
                         statement_bytes, statement_hash, tasks_hash)

CODES = ("chain_broken", "bad_signature", "unknown_key", "quorum_short", "digest_differs",
         "head_mismatch")
COMPLETING = ("approved", "auto_approved")  # the approval that completed the quorum
STARTING = ("ready", "redrafted")  # a draft's first entry: its digest and quorum
ENDING = ("rejected", "superseded", "policy_revoked")  # approval no longer stands
PAST_APPROVAL = ("approved", "uncertain", "done")  # task states that need a quorum
ENTRY_KEYS = {"kind", *ENTRY_FIELDS}  # what an entry line may hold


class Failed(Exception):
    """The first failure found: ``code`` (one of ``CODES``), the task, what is wrong."""

    def __init__(self, code, message, task=None, line=None):
        super().__init__(message)
        self.code, self.message, self.task, self.line = code, message, task, line


@dataclass
class TaskLedger:
    """One task's chain replayed: the draft's digest and quorum, who approved which
    digest, the digest the quorum approved (``approved``)."""

    key: str
    partial: bool = False  # its chain began before the file (an export ``--since``)
    quorum: int | None = None
    digest: str | None = None
    approvers: dict = field(default_factory=dict)
    approved: str | None = None

    def apply(self, code, actor, data, subject=None):
        """Take one entry of the task's chain; ``Failed`` on a quorum or digest fault."""
        data = data if isinstance(data, dict) else {}
        if code in STARTING and "quorum" in data:
            self.quorum, self.digest = data.get("quorum"), data.get("digest")
            self.approvers, self.approved = {}, None
        elif code == "edited":
            self.digest, self.approvers, self.approved = data.get("digest"), {}, None
        elif code in APPROVING:
            self._approval(code, actor, data.get("digest"))
        elif code == "approval_withdrawn":
            for who in self.approvers.values():
                who.discard(subject)
        elif code in ENDING:
            self.approved = None
        elif code == "done":
            self.check_written(data)

    def _approval(self, code, actor, digest):
        self.approvers.setdefault(digest, set()).add(actor)
        if code not in COMPLETING:
            return
        if not self.partial:
            self.check_quorum(digest)
        self.approved = digest

    def check_quorum(self, digest):
        """``Failed`` (``quorum_short``) unless ``digest`` has its quorum in the chain."""
        if not isinstance(self.quorum, int) or self.quorum < 1:
            raise Failed("quorum_short", "approved, but its chain holds no draft with its "
                         "quorum", self.key)
        if digest != self.digest:
            raise Failed("quorum_short", "approved a digest that is not its draft's in its "
                         "chain", self.key)
        count = len(self.approvers.get(digest, ()))
        if digest is None or count < self.quorum:
            raise Failed("quorum_short", f"approved with {count} of the {self.quorum} distinct "
                         f"approvals its digest needs in its chain", self.key)

    def check_written(self, data):
        """``Failed`` unless a written result's digest is the approved one, with a
        receipt that matches it."""
        if self.partial:
            return
        if self.approved is None:
            raise Failed("quorum_short", "written without an approval in its chain", self.key)
        if data.get("digest") != self.approved:
            raise Failed("digest_differs", "the written result's digest is not the approved "
                         "one", self.key)
        if data.get("receipt") != data.get("digest"):
            raise Failed("digest_differs", "written without a host receipt of the approved "
                         "result", self.key)


def read_public_key(text):
    """The Ed25519 public key in ``text``: a PEM public key (``audit key``'s output, its
    fingerprint line beside it) or an OpenSSH ``ssh-ed25519`` line; ``invalid_key``."""
    begin, end = "-----BEGIN PUBLIC KEY-----", "-----END PUBLIC KEY-----"
    try:
        if begin in text and end in text:
            pem = text[text.index(begin):text.index(end) + len(end)]
            key = serialization.load_pem_public_key(pem.encode("ascii"))
        else:
            key = serialization.load_ssh_public_key(text.strip().encode("ascii"))
    except (ValueError, UnicodeEncodeError, UnsupportedAlgorithm):
        raise Refused("invalid_key", "not a PEM public key or an ssh-ed25519 line") from None
    if not isinstance(key, Ed25519PublicKey):
        raise Refused("invalid_key", "not an Ed25519 key: a home key is Ed25519")
    return key


def verify_lines(lines, home_key, home, head=None):
    """Check an export's ``lines`` (text) against the home's public key (Ed25519) and
    id (``home``, as ``storage.homekey.home_id`` makes it).

    ``head``: a checkpoint hash published earlier, which must be in the file.
    Returns ``{ok, entries, checkpoints, head, failure}``; ``failure`` is
    ``{line, code, task, message}`` or ``None``.
    """
    check = Verifier(home_key, home)
    number = 0
    try:
        for number, text in enumerate(lines, 1):
            value = _parse(text)
            try:
                check.line(value, number)
            except (TypeError, AttributeError, KeyError) as exc:  # a field of the wrong kind
                raise Failed("chain_broken", f"a malformed line ({type(exc).__name__})") from None
        check.end(head)
        failure = None
    except Failed as exc:
        line = exc.line or (number if exc.code != "head_mismatch" else None)
        failure = {"line": line, "code": exc.code,
                   "task": exc.task, "message": str(exc)}
    return {"ok": failure is None, "entries": check.entries, "checkpoints": check.checkpoints,
            "head": check.head, "since": check.base, "failure": failure}


def _parse(text):
    try:
        value = json.loads(text)
    except ValueError:
        raise Failed("chain_broken", "not a JSON line") from None
    if not isinstance(value, dict):
        raise Failed("chain_broken", "not a JSON object")
    return value


class Verifier:
    """The state of a check in progress: each chain's head, the section since the last
    checkpoint, the reviewers' keys, each task's ledger.

    A section's entries are linked as they are read; their signatures, quorums
    and digests are judged once the checkpoint after them has vouched for the
    section, so an entry changed in place is named as a broken chain.
    """

    def __init__(self, home_key, home):
        self.home_key, self.home = home_key, home
        self.heads, self.advanced, self.lone = {}, {}, []
        self.section = []  # (line, entry, its hash) since the last checkpoint
        self.keys, self.ledgers, self.states = {}, {}, []
        self.head = self.base = None
        self.seen_heads = set()
        self.entries = self.checkpoints = 0
        self.closed = False

    def line(self, value, number):
        """Check one line of the file (its ``number``, from 1)."""
        if self.closed:
            raise Failed("chain_broken", "a line after the export's close")
        kind = value.get("kind")
        if self.states and kind in ("entry", "checkpoint"):
            raise Failed("chain_broken", f"an {kind} after the task states")
        if kind == "checkpoint" and not (self.entries or self.checkpoints or self.base):
            self.start(value)
        elif kind == "entry":
            self.entry(value, number)
        elif kind == "checkpoint":
            self.checkpoint(value)
        elif kind == "task":
            if set(value) - {"kind", *STATE_FIELDS}:
                raise Failed("chain_broken", "a task state with fields no state has")
            self.states.append(value)
            self.task_state(value)
        elif kind == "close":
            self.close(value)
        else:
            raise Failed("chain_broken", f"a line of unknown kind {kind!r}")

    def entry(self, entry, number):
        """An audit entry: its link (its signatures, quorum and digests at the checkpoint)."""
        task, chain = entry.get("task_key"), entry.get("chain")
        unknown = set(entry) - ENTRY_KEYS
        if unknown:
            raise Failed("chain_broken", f"an entry with fields no entry has: "
                         f"{', '.join(sorted(unknown))}")
        if not _well_typed(entry):
            raise Failed("chain_broken", "an entry with a field of the wrong kind")
        own = entry_hash(entry)
        partial = self.base is not None and chain not in self.heads and entry.get("prev")
        if chain is None:
            self.lone.append(own)
        else:
            if entry.get("prev") != self.heads.get(chain) and not partial:
                raise Failed("chain_broken", f"its link does not follow the last entry of "
                             f"{chain} (an entry missing, reordered or changed)", task)
            self.heads[chain] = self.advanced[chain] = own
            if partial:
                self.ledgers.setdefault(task, TaskLedger(task, partial=True))
        self.entries += 1
        self.section.append((number, entry, own))

    def judge(self, entry):
        """An entry a checkpoint vouched for: its signatures, then its task's quorum and
        digests."""
        self.signatures(entry)
        chain, task = entry.get("chain"), entry.get("task_key")
        if chain is not None and chain.startswith(TASK_CHAIN):
            ledger = self.ledgers.setdefault(task, TaskLedger(task))
            ledger.apply(entry.get("code"), entry.get("actor"), entry.get("data"),
                         entry.get("subject"))

    def signatures(self, entry):
        """Keys added and removed; a signed decision checked against its key."""
        data = entry.get("data") if isinstance(entry.get("data"), dict) else {}
        code = entry.get("code")
        if code == "reviewer_key_added":
            self.keys[data.get("key_id")] = (entry.get("subject"), data.get("kind"),
                                             data.get("public_key"))
        elif code == "reviewer_key_removed":
            self.keys.pop(data.get("key_id"), None)
        elif "statement" in data:
            check_signed(entry, data, self.keys, self.home)

    def start(self, value):
        """The first line of an export ``--since``: the checkpoint it starts after.

        Its chains go on from heads the file does not hold: their first entries
        here are taken as they link, and their tasks' quorums are not judged.
        """
        self.signed(value)
        self.head = self.base = statement_hash(value)
        self.seen_heads.add(self.head)

    def checkpoint(self, value):
        """A checkpoint: signed by the home key, after the last one, naming exactly the
        heads and lone entries of its section."""
        self.signed(value)
        if value.get("prev") != self.head:
            raise Failed("chain_broken", "this checkpoint does not follow the one before it")
        if value.get("heads") != self.advanced:
            chain = _first_difference(value.get("heads"), self.advanced)
            raise Failed("chain_broken", f"the checkpoint's head of {chain} differs from its "
                         "entries (an entry missing, added or changed)", _task_of(chain),
                         self._last_line(lambda e: e.get("chain") == chain))
        if value.get("lone") != self.lone:
            stated = value.get("lone") if isinstance(value.get("lone"), list) else []
            raise Failed("chain_broken", "the checkpoint's lone entries differ from the file's "
                         "(one missing, added or changed)", None,
                         self._last_line(lambda e: e.get("chain") is None, stated))
        if value.get("order") != order_hash([own for _, _, own in self.section]):
            raise Failed("chain_broken", "the entries before this checkpoint are not in the "
                         "order it sealed them")
        for number, entry, _ in self.section:
            try:
                self.judge(entry)
            except Failed as exc:
                exc.line = number
                raise
        self.section = []
        self.head = statement_hash(value)
        self.seen_heads.add(self.head)
        self.advanced, self.lone = {}, []
        self.checkpoints += 1

    def _last_line(self, which, stated=None):
        """The line of the section's last entry ``which`` picks (only one whose hash is
        not in ``stated``, when given): where a checkpoint's difference shows."""
        lines = [n for n, e, own in self.section
                 if which(e) and (stated is None or own not in stated)]
        return lines[-1] if lines else None

    def task_state(self, value):
        """A task the database holds past approval: its quorum must be in its chain."""
        key = value.get("key")
        if value.get("status") not in PAST_APPROVAL:
            return
        ledger = self.ledgers.get(key) or TaskLedger(key, partial=self.base is not None)
        if ledger.partial:
            return
        if ledger.approved is None or ledger.approved != value.get("approved_digest"):
            raise Failed("quorum_short", f"the database holds it {value.get('status')}, but "
                         "its chain holds no quorum for its approved digest", key)

    def close(self, value):
        """The export's close: signed, on the last checkpoint, over the task states."""
        self.signed(value)
        if self.advanced or self.lone:
            raise Failed("chain_broken", "entries after the last checkpoint")
        if value.get("head") != self.head:
            raise Failed("chain_broken", "the close does not name the last checkpoint")
        if value.get("tasks") != tasks_hash(self.states):
            raise Failed("chain_broken", "the task states differ from those the close signed")
        self.closed = True

    def signed(self, value):
        """``Failed`` unless ``value`` is a statement of this home signed by its key."""
        if value.get("home") != self.home or value.get("v") != STATEMENT_VERSION:
            raise Failed("unknown_key", "signed for another home or in another version")
        try:
            self.home_key.verify(from_b64url(value.get("signature")), statement_bytes(value))
        except (InvalidSignature, ValueError):
            raise Failed("bad_signature", "the home key's signature does not verify") from None

    def end(self, head):
        """After the last line: the file must be closed, and hold ``head`` if given."""
        if not self.closed:
            raise Failed("chain_broken", "the file ends before its close line (truncated)")
        if head is not None and head not in self.seen_heads:
            raise Failed("head_mismatch", f"no checkpoint of this file has the head {head}")


def check_signed(entry, data, keys, home):
    """A signed decision: its statement names this entry, and its signature verifies
    under a key of the deciding reviewer (Ed25519, or a WebAuthn assertion)."""
    task = entry.get("task_key")
    text = data.get("statement")
    try:
        statement = json.loads(text)
        canonical = canonical_bytes(statement).decode("utf-8") == text
    except (TypeError, ValueError):
        statement, canonical = None, False
    if not canonical or not isinstance(statement, dict):
        raise Failed("bad_signature", "its statement is not canonical JSON", task)
    if (statement.get("task") != task or statement.get("digest") != data.get("digest")
            or statement.get("home") != home
            or entry.get("actor") not in (None, statement.get("reviewer"))):
        raise Failed("bad_signature", "its statement is about another decision", task)
    if "webauthn" in data:
        _check_webauthn(task, text, data["webauthn"], keys, statement.get("reviewer"))
    else:
        _check_ed25519(task, text, data, keys, statement.get("reviewer"))


def _key_of(task, key_id, keys, reviewer, kind):
    found = keys.get(key_id)
    if found is None or found[0] != reviewer or found[1] != kind:
        raise Failed("unknown_key", f"key {key_id!r} is not a {kind} key of {reviewer!r} in "
                     "the chain", task)
    return found[2]


def _check_ed25519(task, text, data, keys, reviewer):
    public = _key_of(task, data.get("key_id"), keys, reviewer, "ed25519")
    try:
        key = Ed25519PublicKey.from_public_bytes(from_b64url(public))
        key.verify(from_b64url(data.get("signature")), text.encode("utf-8"))
    except (InvalidSignature, ValueError, TypeError):
        raise Failed("bad_signature", "the reviewer's signature does not verify", task) from None


def _check_webauthn(task, text, assertion, keys, reviewer):
    from webauthn.helpers import (decode_credential_public_key,
                                  decoded_public_key_to_cryptography, verify_signature)
    if not isinstance(assertion, dict):
        raise Failed("bad_signature", "its WebAuthn assertion is not an object", task)
    public = _key_of(task, assertion.get("credential_id"), keys, reviewer, "webauthn")
    try:
        client_data = from_b64url(assertion.get("client_data_json"))
        challenge = json.loads(client_data).get("challenge")
        if challenge != b64url(hashlib.sha256(text.encode("utf-8")).digest()):
            raise InvalidSignature()
        decoded = decode_credential_public_key(from_b64url(public))
        signed = (from_b64url(assertion.get("authenticator_data"))
                  + hashlib.sha256(client_data).digest())
        verify_signature(public_key=decoded_public_key_to_cryptography(decoded),
                         signature_alg=decoded.alg,
                         signature=from_b64url(assertion.get("signature")), data=signed)
    except Exception:  # a key, client data or signature that cannot be read does not verify
        raise Failed("bad_signature", "the reviewer's WebAuthn assertion does not verify",
                     task) from None


def _well_typed(entry):
    """Text or null in every field but ``at`` (a number) and ``data`` (an object or null)."""
    at, data = entry.get("at"), entry.get("data")
    return (isinstance(at, (int, float)) and not isinstance(at, bool)
            and (data is None or isinstance(data, dict))
            and all(entry.get(f) is None or isinstance(entry.get(f), str)
                    for f in ENTRY_FIELDS if f not in ("at", "data")))


def _first_difference(stated, found):
    stated = stated if isinstance(stated, dict) else {}
    for chain in sorted(set(stated) | set(found), key=str):
        if stated.get(chain) != found.get(chain):
            return chain
    return None


def _task_of(chain):
    return chain[len(TASK_CHAIN):] if chain and chain.startswith(TASK_CHAIN) else None
