"""The gate answers the same for a context read once and gated against for many rows."""

from types import SimpleNamespace

import pytest

from signoff.rules import gate as gates
from signoff.rules.canonical import digest
from signoff.rules.gate import SUBMIT_ACTIONS, GrantRead, gate

CONTEXT = {"tenant": "t", "actions": ["read", "draft", "submit_review"]}
NOW = 1000.0


def monitor(**changes):
    return SimpleNamespace(**dict({"active": True, "expires_at": NOW + 60,
                                   "grant_digest": digest(CONTEXT)}, **changes))


@pytest.mark.parametrize("who, context, needs, code", [
    (None, CONTEXT, SUBMIT_ACTIONS, "cancelled"),
    (monitor(active=False), CONTEXT, SUBMIT_ACTIONS, "cancelled"),
    (monitor(expires_at=NOW), CONTEXT, SUBMIT_ACTIONS, "expired"),
    (monitor(grant_digest="0" * 64), CONTEXT, SUBMIT_ACTIONS, "scope_changed"),
    (monitor(grant_digest=digest(["read"])), ["read"], SUBMIT_ACTIONS, "action"),
    (monitor(grant_digest=digest({"actions": ["read"]})), {"actions": ["read"]},
     SUBMIT_ACTIONS, "action"),
    (monitor(), CONTEXT, SUBMIT_ACTIONS, None),
])
def test_a_grant_read_once_gets_the_answers_of_the_context_itself(who, context, needs, code):
    assert gate(who, context, NOW, needs) == code
    assert gate(who, GrantRead(context), NOW, needs) == code


def test_a_grant_read_once_is_digested_once_however_many_rows_it_gates(monkeypatch):
    made = []
    monkeypatch.setattr(gates, "digest", lambda value: made.append(1) or digest(value))
    read, monitors = GrantRead(CONTEXT), [monitor() for _ in range(50)]
    assert [gate(m, read, NOW) for m in monitors] == [None] * 50
    assert len(made) == 1
    assert [gate(m, CONTEXT, NOW) for m in monitors] == [None] * 50  # each its own digest
    assert len(made) == 51


def test_a_context_is_digested_only_when_a_gate_gets_that_far():
    # A set is no JSON: digesting it fails. An ended monitor is refused before that.
    unreadable = GrantRead({"actions": {"read"}})
    assert gate(monitor(active=False), unreadable, NOW) == "cancelled"
    assert gate(monitor(expires_at=NOW), unreadable, NOW) == "expired"
    with pytest.raises(TypeError):
        gate(monitor(), unreadable, NOW)
