"""The audit chain's pure parts (rules/auditchain.py, rules/auditverify.py): canonical
JSON as RFC 8785 writes it, and the offline check of exports built here, signed with
a key made for the test; any single-line change to an export is found."""

import base64
import hashlib
import json

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import example, given, settings
from hypothesis import strategies as st
from webauthn.helpers import encode_cbor

from signoff.rules.auditchain import (ENTRY_FIELDS, b64url, canonical_bytes, checkpoint_statement,
                                      close_statement, entry_hash, order_hash, statement_bytes,
                                      statement_hash, task_chain, tasks_hash)
from signoff.rules.auditverify import CODES, read_public_key, verify_lines

pytestmark = pytest.mark.backend_independent

HOME_KEY = Ed25519PrivateKey.generate()
HOME = "h" * 32
TASK = "a" * 64
D1, D2 = "1" * 64, "2" * 64

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53 + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                  max_size=4),
    max_leaves=12)


@given(json_values)
@settings(max_examples=400, deadline=None)
def test_canonical_bytes_are_rfc8785s(value):
    try:
        expected = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        with pytest.raises(rfc8785.CanonicalizationError):
            canonical_bytes(value)
        return
    assert canonical_bytes(value) == expected


# Integers of any size, and numbers where text belongs: each must come out as
# rfc8785 writes it, or be refused as it refuses it.
any_number = st.integers() | st.floats(allow_nan=False, allow_infinity=False)
flat_data = st.dictionaries(st.text(max_size=8), st.none() | st.booleans() | st.text()
                            | st.integers(), max_size=4)
entry_columns = st.fixed_dictionaries(
    {}, optional={name: st.none() | st.text() | any_number for name in ENTRY_FIELDS}).flatmap(
    lambda columns: st.fixed_dictionaries({
        **{name: st.just(value) for name, value in columns.items()},
        "at": st.floats(allow_nan=False, allow_infinity=False) | st.integers(0, 2**53 - 1),
        "data": st.none() | flat_data
        | st.dictionaries(st.text(max_size=8), json_values, max_size=4)}))


@given(entry_columns)
@example({"at": 1.5, "data": {"n": 2**53}})  # past a double's integers: rfc8785 refuses it
@example({"at": 1.5, "event_id": 1e20, "data": None})  # a number where text belongs
@settings(max_examples=150, deadline=None)
def test_an_entrys_hash_is_sha256_of_rfc8785s_array_of_its_columns(entry):
    try:
        expected = rfc8785.dumps([entry.get(name) for name in ENTRY_FIELDS])
    except rfc8785.CanonicalizationError:
        with pytest.raises(rfc8785.CanonicalizationError):
            entry_hash(entry)
        return
    assert entry_hash(entry) == hashlib.sha256(expected).hexdigest()
    partial = {k: v for k, v in entry.items() if v is not None}  # a column left out is null
    assert entry_hash(partial) == entry_hash(entry)


def build(entries, states=(), key=HOME_KEY, sections=None):
    """An export of ``entries`` (dicts; a task's joins its chain), one checkpoint per
    ``sections`` entries (all in one by default), then ``states`` and the close."""
    heads, lines, prev_checkpoint = {}, [], None
    sections = sections or len(entries)
    for start in range(0, len(entries), sections):
        advanced, lone, hashes = {}, [], []
        for given_entry in entries[start:start + sections]:
            entry = {"at": 1000.5, **given_entry}
            if entry.get("task_key") and not entry.pop("lone", False):
                entry["chain"] = task_chain(entry["task_key"])
                entry["prev"] = heads.get(entry["chain"])
                heads[entry["chain"]] = advanced[entry["chain"]] = entry_hash(entry)
            else:
                lone.append(entry_hash(entry))
            hashes.append(entry_hash(entry))
            lines.append(json.dumps({"kind": "entry", **entry}))
        statement = checkpoint_statement(HOME, len(lines), prev_checkpoint, 1001.5, advanced,
                                         lone, order_hash(hashes))
        lines.append(json.dumps(signed(statement, key)))
        prev_checkpoint = statement_hash(statement)
    states = [{"kind": "task", **s} for s in states]
    lines += [json.dumps(s) for s in states]
    lines.append(json.dumps(signed(close_statement(HOME, 1002.5, prev_checkpoint,
                                                   tasks_hash(states)), key)))
    return lines


def signed(statement, key=HOME_KEY):
    return {**statement, "signature": b64url(key.sign(statement_bytes(statement)))}


def check(lines, head=None):
    return verify_lines(lines, HOME_KEY.public_key(), HOME, head)


def approved_task(quorum=1, approvers=("ana",), digest=D1, written=D1, receipt=D1):
    entries = [{"code": "ready", "task_key": TASK, "data": {"digest": D1, "quorum": quorum}}]
    for n, who in enumerate(approvers, 1):
        code = "approved" if n == len(approvers) else "approval_added"
        entries.append({"code": code, "task_key": TASK, "actor": who, "channel": "api",
                        "data": {"digest": digest}})
    if written is not None:
        entries.append({"code": "done", "task_key": TASK,
                        "data": {"digest": written, "receipt": receipt}})
    return entries


def test_an_honest_export_verifies_and_names_its_head():
    lines = build([{"code": "bound", "monitor": "m", "subject": "m"}, *approved_task(2, ("ana", "bob"))],
                  states=[{"key": TASK, "status": "done", "approved_digest": D1}], sections=2)
    report = check(lines)
    assert report["ok"], report["failure"]
    assert (report["entries"], report["checkpoints"]) == (5, 3)
    heads = [statement_hash(json.loads(line)) for line in lines
             if json.loads(line)["kind"] == "checkpoint"]
    assert report["head"] == heads[-1]
    assert check(lines, head=heads[0])["ok"]  # an earlier published head is still in it


@pytest.mark.parametrize("entries, states, code", [
    (approved_task(2, ("ana",)), (), "quorum_short"),
    (approved_task(2, ("ana", "ana")), (), "quorum_short"),  # one identity counts once
    (approved_task(written=D2, receipt=D2), (), "digest_differs"),
    (approved_task(receipt=None), (), "digest_differs"),
    (approved_task(digest=D2, written=D2, receipt=D2), (), "quorum_short"),  # not the draft's
    (approved_task()[:1], [{"key": TASK, "status": "approved", "approved_digest": D1}],
     "quorum_short"),
    (approved_task()[:1] + [{"code": "done", "task_key": TASK,
                             "data": {"digest": D1, "receipt": D1}}], (), "quorum_short"),
])
def test_quorums_and_digests_are_judged_from_what_the_chain_records(entries, states, code):
    report = check(build(entries, states))
    assert not report["ok"]
    assert (report["failure"]["code"], report["failure"]["task"]) == (code, TASK)


def test_an_edit_restarts_the_count_and_a_withdrawn_place_no_longer_counts():
    edited = [*approved_task(2, ("ana",), written=None)[:2],
              {"code": "edited", "task_key": TASK, "actor": "bob", "data": {"from": D1, "digest": D2}},
              {"code": "approved", "task_key": TASK, "actor": "bob", "data": {"digest": D2}}]
    assert check(build(edited))["failure"]["code"] == "quorum_short"
    withdrawn = [*approved_task(2, ("policy:1",), written=None)[:2],
                 {"code": "approval_withdrawn", "task_key": TASK, "subject": "policy:1"},
                 {"code": "approved", "task_key": TASK, "actor": "ana", "data": {"digest": D1}}]
    assert check(build(withdrawn))["failure"]["code"] == "quorum_short"


def statement_for(reviewer, digest=D1, home=HOME, task=TASK):
    return rfc8785.dumps({"v": 1, "home": home, "monitor": "m", "task": task, "digest": digest,
                          "reviewer": reviewer, "decision": "approve", "at": 1000,
                          "nonce": "n1"}).decode("utf-8")


def key_added(reviewer, key_id, kind, public):
    return {"code": "reviewer_key_added", "subject": reviewer,
            "data": {"key_id": key_id, "kind": kind, "public_key": public,
                     "fingerprint": "SHA256:x"}}


def signed_approval(reviewer_key, key_id="k1", reviewer="ana", statement=None):
    statement = statement or statement_for(reviewer)
    return [{"code": "ready", "task_key": TASK, "data": {"digest": D1, "quorum": 1}},
            {"code": "approved", "task_key": TASK, "actor": reviewer, "channel": "api",
             "data": {"digest": D1, "statement": statement, "key_id": key_id,
                      "signature": b64url(reviewer_key.sign(statement.encode("utf-8")))}}]


def ed25519_public(key):
    from signoff.storage.homekey import public_raw
    return b64url(public_raw(key))


def test_signed_decisions_verify_under_the_reviewers_key_in_the_chain():
    ana = Ed25519PrivateKey.generate()
    added = key_added("ana", "k1", "ed25519", ed25519_public(ana))
    assert check(build([added, *signed_approval(ana)]))["ok"]
    assert check(build([*signed_approval(ana)]))["failure"]["code"] == "unknown_key"
    other = Ed25519PrivateKey.generate()
    assert check(build([added, *signed_approval(other)]))["failure"]["code"] == "bad_signature"
    bob = key_added("bob", "k1", "ed25519", ed25519_public(ana))  # ana's key is not bob's
    assert check(build([bob, *signed_approval(ana)]))["failure"]["code"] == "unknown_key"
    removed = {"code": "reviewer_key_removed", "subject": "ana", "data": {"key_id": "k1"}}
    assert check(build([added, removed, *signed_approval(ana)]))["failure"]["code"] == (
        "unknown_key")
    elsewhere = statement_for("ana", home="e" * 32)
    failure = check(build([added, *signed_approval(ana, statement=elsewhere)]))["failure"]
    assert (failure["code"], failure["task"]) == ("bad_signature", TASK)


def test_a_webauthn_assertion_verifies_under_its_cose_key():
    device = ec.generate_private_key(ec.SECP256R1())
    numbers = device.public_key().public_numbers()
    cose = encode_cbor({1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"),
                        -3: numbers.y.to_bytes(32, "big")})
    statement = statement_for("ana")

    def assertion(challenge_of=statement, signer=device):
        client = json.dumps({"type": "webauthn.get", "origin": "https://review.example",
                             "challenge": b64url(hashlib.sha256(
                                 challenge_of.encode()).digest())}).encode()
        authenticator = hashlib.sha256(b"review.example").digest() + b"\x05" + b"\0\0\0\1"
        signature = signer.sign(authenticator + hashlib.sha256(client).digest(),
                                ec.ECDSA(__import__("cryptography").hazmat.primitives.hashes.SHA256()))
        return [{"code": "ready", "task_key": TASK, "data": {"digest": D1, "quorum": 1}},
                {"code": "approved", "task_key": TASK, "actor": "ana", "channel": "page",
                 "data": {"digest": D1, "statement": statement, "webauthn": {
                     "credential_id": "cred-1", "authenticator_data": b64url(authenticator),
                     "client_data_json": b64url(client), "signature": b64url(signature)}}}]

    added = key_added("ana", "cred-1", "webauthn", b64url(cose))
    assert check(build([added, *assertion()]))["ok"]
    assert check(build([added, *assertion(challenge_of="another")]))["failure"]["code"] == (
        "bad_signature")
    stranger = ec.generate_private_key(ec.SECP256R1())
    assert check(build([added, *assertion(signer=stranger)]))["failure"]["code"] == (
        "bad_signature")


def test_an_export_signed_by_another_key_and_a_bad_key_file_are_refused():
    lines = build(approved_task())
    other = Ed25519PrivateKey.generate()
    assert verify_lines(lines, other.public_key(), HOME)["failure"]["code"] == "bad_signature"
    assert verify_lines(lines, HOME_KEY.public_key(), "x" * 32)["failure"]["code"] == (
        "unknown_key")
    from signoff.errors import Refused
    with pytest.raises(Refused) as info:
        read_public_key("not a key")
    assert info.value.code == "invalid_key"


# -- any single-line change is found ---------------------------------------------------

HONEST = build([{"code": "bound", "monitor": "m", "subject": "m"},
                {"code": "invalid_event", "monitor": "m"},
                *approved_task(2, ("ana", "bob")),
                {"code": "duplicate", "task_key": TASK, "event_id": "e2", "lone": True}],
               states=[{"key": TASK, "status": "done", "approved_digest": D1}], sections=3)


def _changed(value, draw):
    """``value`` with one leaf changed (another value of another kind, or a new key)."""
    if isinstance(value, dict) and value:
        key = draw(st.sampled_from(sorted(value)))
        if draw(st.booleans()):
            return {**value, key: _changed(value[key], draw)}
        return {k: v for k, v in value.items() if k != key}
    if isinstance(value, list) and value:
        at = draw(st.integers(0, len(value) - 1))
        return value[:at] + [_changed(value[at], draw)] + value[at + 1:]
    replacement = draw(st.one_of(st.text(max_size=4), st.integers(-5, 5),
                                 st.sampled_from([True, None, "x" * 64, 1000.25])))
    return replacement if replacement != value else str(replacement) + "!"


@st.composite
def mutated(draw):
    lines = list(HONEST)
    at = draw(st.integers(0, len(lines) - 1))
    how = draw(st.sampled_from(["delete", "duplicate", "swap", "edit", "truncate"]))
    if how == "delete":
        del lines[at]
    elif how == "duplicate":
        lines.insert(at, lines[at])
    elif how == "swap":
        other = draw(st.integers(0, len(lines) - 1).filter(lambda i: lines[i] != lines[at]))
        lines[at], lines[other] = lines[other], lines[at]
    elif how == "truncate":
        lines = lines[:at]
    else:
        lines[at] = json.dumps(_changed(json.loads(lines[at]), draw))
    return lines


def test_the_honest_export_of_the_property_verifies():
    assert check(HONEST)["ok"]


def _meaning(lines):
    # An entry's field left out is null: writing it null, or leaving a null out, is no change.
    values = [json.loads(line) for line in lines]
    return [{k: v for k, v in value.items() if v is not None}
            if isinstance(value, dict) and value.get("kind") == "entry" else value
            for value in values]


@given(mutated())
@settings(max_examples=300, deadline=None)
def test_any_single_line_change_is_found(lines):
    if _meaning(lines) == _meaning(HONEST):
        return
    report = check(lines)
    assert not report["ok"]
    assert report["failure"]["code"] in CODES
