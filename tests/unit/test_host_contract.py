"""The host contract in code: the one capability check, the check at load, the submit rule."""

import pytest

from signoff.app import Signoff
from signoff.errors import ConfigError
from signoff.hosts.contract import (CALLS, REQUIRED, Capability, Changes, Closing, GetMany, Host,
                                    Receipts, SubmitMany, check_host, missing_calls, supports,
                                    verdict)
from signoff.hosts.reference import ReferenceHost
from signoff.steps.hostreads import BatchReads
from signoff.testing import MemoryHost, forget, write_config


class Partial:
    """A would-be host with two of the required calls, one of them not callable."""

    receipt = "not a call"

    def context(self):
        return {}

    def get(self, record_id):
        return {}


def only(*names):
    """An object with exactly ``names`` as calls."""
    return type("Only", (), {name: (lambda self, *a: None) for name in names})()


@pytest.mark.backend_independent
def test_check_host_names_every_required_call_a_host_lacks():
    assert missing_calls(Partial()) == ["read_material", "submit", "receipt"]
    with pytest.raises(ConfigError) as info:
        check_host(Partial(), "mine:Partial")
    assert info.value.code == "bad_config"
    assert "mine:Partial" in info.value.message
    assert "read_material, submit, receipt" in info.value.message


@pytest.mark.backend_independent
def test_a_host_with_the_required_calls_passes_and_is_returned_as_it_is():
    host = only(*REQUIRED)
    assert check_host(host, "mine:Only") is host
    assert isinstance(host, Host)
    assert not isinstance(Partial(), Host)


@pytest.mark.backend_independent
@pytest.mark.parametrize("capability", list(Capability))
def test_a_capability_is_supported_only_when_all_its_calls_are_there(capability):
    bare = only(*REQUIRED)
    assert not supports(bare, capability)
    full = only(*REQUIRED, *capability.value)
    full.events_settings = object()
    assert supports(full, capability)


@pytest.mark.backend_independent
def test_events_also_need_the_settings_that_say_monitors_subscribe():
    host = only(*REQUIRED, "events_client")
    host.events_settings = None
    assert not supports(host, Capability.EVENTS)
    host.events_settings = {"name": "comment.created"}
    assert supports(host, Capability.EVENTS)


@pytest.mark.backend_independent
def test_a_call_set_to_something_not_callable_is_no_capability():
    host = only(*REQUIRED)
    host.submit_many = None
    assert not supports(host, Capability.SUBMIT_MANY)


def test_the_hosts_that_ship_answer_the_protocols_they_claim(tmp_path):
    reference = ReferenceHost(tmp_path)
    memory = MemoryHost(tmp_path)
    try:
        for host in (reference, memory):
            assert missing_calls(host) == []
            for protocol in (Host, GetMany, Receipts, SubmitMany, Changes):
                assert isinstance(host, protocol), (host, protocol)
            for capability in (Capability.GET_MANY, Capability.RECEIPTS,
                               Capability.SUBMIT_MANY, Capability.CHANGES):
                assert supports(host, capability)
        assert isinstance(reference, Closing) and supports(reference, Capability.CLOSE)
        assert not supports(memory, Capability.CLOSE)
        assert not supports(reference, Capability.EVENTS)
    finally:
        reference.close()
        forget(tmp_path)


@pytest.mark.backend_independent
def test_a_memory_host_without_batches_or_changes_has_none_of_those_capabilities(tmp_path):
    host = MemoryHost(tmp_path, batch=False, changes=False)
    assert not any(supports(host, c) for c in (Capability.GET_MANY, Capability.RECEIPTS,
                                                Capability.SUBMIT_MANY, Capability.CHANGES))
    assert not isinstance(host, SubmitMany)
    forget(tmp_path)


@pytest.mark.backend_independent
def test_a_wrapper_that_hands_on_its_hosts_calls_answers_as_its_host(tmp_path):
    with_batches = BatchReads(MemoryHost(tmp_path), ["a", "b"])
    without = BatchReads(MemoryHost(tmp_path, batch=False), ["a", "b"])
    assert supports(with_batches, Capability.SUBMIT_MANY)
    assert not supports(without, Capability.SUBMIT_MANY)
    forget(tmp_path)


@pytest.mark.backend_independent
def test_every_required_call_is_one_the_tracing_wraps():
    assert set(REQUIRED) <= set(CALLS)
    assert {name for c in Capability for name in c.value} - set(CALLS) == {"events_client",
                                                                          "close"}


RECORD = {"id": "r1", "version": 1, "status": "open"}


@pytest.mark.backend_independent
@pytest.mark.parametrize("held, expected, result, current, answer", [
    (None, RECORD, {"d": 1}, {"r1": RECORD}, "write"),
    ({"d": 1}, RECORD, {"d": 1}, {"r1": RECORD}, "held"),
    ({"d": 1}, RECORD, {"d": 2}, {"r1": RECORD}, "idempotency_conflict"),
    (None, RECORD, {"d": 1}, {"r1": dict(RECORD, version=2)}, "source_changed"),
    (None, RECORD, {"d": 1}, {"r1": dict(RECORD, status="closed")}, "source_changed"),
    (None, dict(RECORD, status="closed"), {"d": 1}, {"r1": dict(RECORD, status="closed")},
     "source_changed"),
    (None, RECORD, {"d": 1}, {}, "source_changed"),
    (None, [RECORD, dict(RECORD, id="r2")], {"d": 1}, {"r1": RECORD}, "source_changed"),
    (None, [RECORD, dict(RECORD, id="r2")], {"d": 1},
     {"r1": RECORD, "r2": dict(RECORD, id="r2")}, "write"),
    # Held already: a retry after a lost acknowledgement, whatever the record is now.
    ({"d": 1}, RECORD, {"d": 1}, {"r1": dict(RECORD, version=3)}, "held"),
])
def test_the_submit_rule(held, expected, result, current, answer):
    assert verdict(held, expected, result, current) == answer


def test_a_home_whose_factory_makes_no_host_is_refused_naming_the_call(home, monkeypatch):
    monkeypatch.syspath_prepend(str(home.parent))
    (home.parent / "brokenhost.py").write_text(
        "from signoff.testing import MemoryHost\n"
        "class NoReceipt(MemoryHost):\n    receipt = None\n", encoding="utf-8")
    write_config(home)
    config = home / "signoff.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        "signoff.testing:MemoryHost", "brokenhost:NoReceipt"), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        Signoff.init(home)
    assert info.value.code == "bad_config"
    assert "brokenhost:NoReceipt" in info.value.message and "receipt" in info.value.message
    forget(home)
