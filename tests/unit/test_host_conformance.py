"""Both hosts that ship answer the host contract alike: the reference host (its SQLite
file) and the memory host (``signoff.testing``). Every test runs on each, so the
pipeline's tests over the memory host stand for the reference host too."""

import threading

import pytest

from signoff.errors import Blocked, Refused
from signoff.hosts.reference import ReferenceHost
from signoff.testing import MemoryHost, forget

pytestmark = pytest.mark.backend_independent  # the hosts' own stores; no state database


@pytest.fixture(params=["reference", "memory"])
def host(request, tmp_path):
    made = ReferenceHost(tmp_path) if request.param == "reference" else MemoryHost(tmp_path)
    made.put_record("r1", document="doc-demo", text="add the date")
    made.put_material("doc-demo", "2026-11-01")
    yield made
    if request.param == "reference":
        made.close()
    forget(tmp_path)


def refusal(call, *args):
    with pytest.raises(Blocked) as info:
        call(*args)
    return info.value.code


def test_a_new_record_is_version_1_open_a_review_of_the_grants_tenant(host):
    record = host.get("r1")
    assert {k: record[k] for k in ("id", "document", "version", "status", "kind", "tenant")} == {
        "id": "r1", "document": "doc-demo", "version": 1, "status": "open", "kind": "review",
        "tenant": "demo-tenant"}
    assert record["source"]
    assert host.has_record("r1") and not host.has_record("r2")


def test_a_new_record_needs_a_document(host):
    with pytest.raises(Refused) as info:
        host.put_record("r2")
    assert info.value.code == "missing_option"


def test_an_unknown_record_is_missing_and_one_outside_the_grant_is_access(host):
    assert refusal(host.get, "nope") == "missing"
    host.put_record("other", document="doc-demo", tenant="another-tenant")
    assert refusal(host.get, "other") == "access"
    host.put_record("elsewhere", document="doc-elsewhere")
    assert refusal(host.get, "elsewhere") == "access"
    assert host.get_many(["r1", "other", "elsewhere", "nope"]) == {"r1": host.get("r1")}


def test_material_outside_the_grant_is_access_and_unknown_material_missing(host):
    assert host.read_material("doc-demo")["demo_date"] == "2026-11-01"
    assert refusal(host.read_material, "doc-elsewhere") == "access"
    host.put_grant(docs=["doc-demo", "doc-empty"])
    assert refusal(host.read_material, "doc-empty") == "missing"


def test_a_grant_without_read_reads_nothing(host):
    host.put_grant(actions=["draft", "submit_review"])
    assert refusal(host.get, "r1") == "access"
    assert refusal(host.changes, "doc-demo", 0) == "access"


def test_submit_writes_once_and_the_same_result_again_writes_nothing(host):
    record = host.get("r1")
    host.submit("k1", record, {"draft": "a"})
    host.submit("k1", record, {"draft": "a"})
    assert host.receipt("k1") == {"draft": "a"}
    assert host.receipts(["k1", "k2"]) == {"k1": {"draft": "a"}}
    assert host.results() == [{"key": "k1", "result": {"draft": "a"}}]


def test_another_result_under_a_key_is_an_idempotency_conflict(host):
    record = host.get("r1")
    host.submit("k1", record, {"draft": "a"})
    assert refusal(host.submit, "k1", record, {"draft": "b"}) == "idempotency_conflict"
    assert host.receipt("k1") == {"draft": "a"}


@pytest.mark.parametrize("change", [{"version": 2}, {"status": "closed"}, {"text": "edited"}])
def test_a_record_changed_since_it_was_read_is_source_changed(host, change):
    record = host.get("r1")
    host.put_record("r1", **change)
    assert refusal(host.submit, "k1", record, {"draft": "a"}) == "source_changed"
    assert host.receipt("k1") is None


def test_submit_needs_submit_review_in_the_grant(host):
    record = host.get("r1")
    host.put_grant(actions=["read", "draft"])
    assert refusal(host.submit, "k1", record, {"draft": "a"}) == "action"
    assert host.results() == []


def test_submit_many_answers_as_submit_would_item_by_item(host):
    host.put_record("r2", document="doc-demo")
    r1, r2 = host.get("r1"), host.get("r2")
    host.submit("held", r1, {"draft": "h"})
    host.put_record("r2", version=2)
    refused = host.submit_many([("new", r1, {"draft": "n"}), ("held", r1, {"draft": "h"}),
                                ("clash", r1, {"draft": "c"}), ("held", r1, {"draft": "x"}),
                                ("stale", r2, {"draft": "s"}), ("batch", [r1, r2], {"d": 1})])
    assert refused == {"held": "idempotency_conflict", "stale": "source_changed",
                       "batch": "source_changed"}
    assert sorted(r["key"] for r in host.results()) == ["clash", "held", "new"]


def test_a_host_answers_a_batch_as_its_single_calls_would(host):
    host.put_record("comment-2", document="doc-demo", text="two")
    host.put_record("elsewhere", document="doc-other", text="outside the grant")
    assert host.get_many(["r1", "comment-2", "nope", "elsewhere"]) == {
        "r1": host.get("r1"), "comment-2": host.get("comment-2")}
    one, two = host.get("r1"), host.get("comment-2")
    result = {"record_id": "r1", "version": 1, "draft": "d", "sources": ["s"]}
    assert host.submit_many([("k1", one, result)]) == {}
    changed = dict(two, text="not what is stored")
    assert host.submit_many([
        ("k1", one, result),  # the same result again: held, not refused
        ("k1b", one, result),
        ("k1", one, dict(result, draft="another")),
        ("k2", changed, result),
    ]) == {"k1": "idempotency_conflict", "k2": "source_changed"}
    assert host.receipts(["k1", "k1b", "k2"]) == {"k1": result, "k1b": result}
    assert [r["key"] for r in host.results()] == ["k1", "k1b"]


def test_a_batch_checks_each_item_against_what_the_items_before_it_wrote(host):
    host.put_record("comment-2", document="doc-demo", text="two")
    one, two = host.get("r1"), host.get("comment-2")
    result = {"record_id": "r1", "version": 1, "draft": "d", "sources": ["s"]}
    closed = dict(host.put_record("comment-2", status="closed"))
    assert host.submit_many([
        ("new", one, result),
        ("new", one, result),  # written just before, in this very batch: held
        ("new", one, dict(result, draft="other")),  # not the result it holds now
        ("both", [one, two], result),  # comment-2 changed since it was read
        ("closed", closed, result),  # as stored, but no longer open
        ("after", one, result),
    ]) == {"new": "idempotency_conflict", "both": "source_changed",
           "closed": "source_changed"}
    assert host.results() == [{"key": "after", "result": result},
                              {"key": "new", "result": result}]


def test_a_batch_result_is_written_when_every_record_it_covers_is_unchanged(host):
    host.put_record("r2", document="doc-demo")
    records = [host.get("r1"), host.get("r2")]
    host.submit("k", records, {"draft": "both"})
    assert host.receipt("k") == {"draft": "both"}


def test_changes_names_the_records_changed_since_oldest_first(host):
    times = iter([4e9, 5e9, 6e9])  # after r1's real time
    host.now = lambda: next(times)
    host.put_record("a", document="doc-demo")
    host.put_record("b", document="doc-demo")
    host.put_record("c", document="doc-demo", tenant="another-tenant")
    assert host.changes("doc-demo", 4.5e9) == ["b"]
    assert host.changes("doc-demo", 4e9) == ["a", "b"]
    assert host.changes("doc-demo", 0) == ["r1", "a", "b"]
    assert refusal(host.changes, "doc-elsewhere", 0) == "access"


def test_a_read_timeout_fires_the_times_it_was_armed_then_reads_again(host):
    host.set_fault("read-timeout", times=2)
    for _ in range(2):
        with pytest.raises(TimeoutError):
            host.get("r1")
    assert host.get("r1")["id"] == "r1"
    assert host.faults() == {}


def test_a_lost_ack_writes_then_raises_and_the_receipt_shows_the_write(host):
    record = host.get("r1")
    host.set_fault("lose-ack", times=1)
    with pytest.raises(TimeoutError):
        host.submit("k1", record, {"draft": "a"})
    assert host.receipt("k1") == {"draft": "a"}
    host.submit("k1", record, {"draft": "a"})  # the retry finds it held: no second write
    assert host.results() == [{"key": "k1", "result": {"draft": "a"}}]


def test_a_bad_receipt_alters_every_receipt_until_cleared(host):
    record = host.get("r1")
    host.submit("k1", record, {"draft": "a"})
    host.set_fault("bad-receipt")
    assert host.receipt("k1") != {"draft": "a"}
    assert host.faults() == {"bad-receipt": -1}
    host.clear_faults()
    assert host.receipt("k1") == {"draft": "a"}


def test_an_unknown_fault_is_refused(host):
    with pytest.raises(Refused) as info:
        host.set_fault("meteor")
    assert info.value.code == "unknown_fault"


def test_concurrent_submits_of_one_key_write_it_once(host, tmp_path):
    record = host.get("r1")
    errors, start = [], threading.Barrier(8)

    def submit():
        mine = type(host)(tmp_path)  # a host object per thread, as signoff makes them
        start.wait()
        try:
            mine.submit("k1", record, {"draft": "a"})
        except Exception as exc:  # any failure is the test's to show
            errors.append(exc)
        finally:
            if isinstance(mine, ReferenceHost):
                mine.close()
    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert host.results() == [{"key": "k1", "result": {"draft": "a"}}]
