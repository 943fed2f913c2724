"""A host's batch calls: a batch of rows read, written and confirmed in one call each.

The hosts that ship offer ``get_many``, ``receipts`` and ``submit_many``; they must
answer as the single calls would (test_host_conformance.py, on both), and the worker
must use them for a batch while keeping every guarantee of the single calls
(docs/concepts.md, Submitting). Here the host is the memory host.
"""

from collections import Counter

import pytest

from helpers import make_event
from signoff.errors import Blocked
from signoff.steps import drafting
from signoff.models import Task

CALLS = ("get", "get_many", "read_material", "submit", "submit_many", "receipt", "receipts")


@pytest.fixture
def counted(rt, host, monkeypatch):
    """``rt`` with five open records, its host's contract calls counted."""
    for n in range(2, 6):
        host.put_record(f"comment-{n}", document="doc-demo", text=f"comment {n}")
    calls = Counter()
    for name in CALLS:
        call = getattr(host, name)

        def counting(*args, _call=call, _name=name):
            calls[_name] += 1
            return _call(*args)
        monkeypatch.setattr(host, name, counting)
    return rt, host, calls


def approved(rt, records):
    """``records`` events ingested as one batch, then approved in one call."""
    rt.enqueue_events([make_event(event_id=f"e{n}", record_id=f"comment-{n}")
                       for n in range(1, records + 1)])
    rt.engine.ingest_batch("w1")
    answers = rt.approve_many([(t.key, t.digest) for t in Task.select()])
    assert all(isinstance(a, dict) for a in answers), answers


def test_a_batch_is_read_written_and_confirmed_in_one_call_each(counted):
    rt, host, calls = counted
    approved(rt, 5)
    rt.engine.submit_batch("w1")
    assert [t.status for t in Task.select()] == ["done"] * 5
    # Ingest and approval each read the five records in one call, and the material
    # once; submit reads the receipts before the write and after it, one call each.
    assert calls == Counter(get_many=2, read_material=1, submit_many=1, receipts=2)
    assert len(host.results()) == 5


def test_a_lost_acknowledgement_of_a_batch_write_leaves_each_task_uncertain_until_its_receipt(
        counted, clock):
    rt, host, calls = counted
    approved(rt, 5)
    host.set_fault("lose-ack")
    rt.engine.submit_batch("w1")
    assert {(t.status, t.write_possible) for t in Task.select()} == {("uncertain", True)}
    calls.clear()
    clock.advance(3600)
    rt.engine.submit_batch("w1")
    # The retry reads the receipts first, finds every write and writes nothing again.
    assert [t.status for t in Task.select()] == ["done"] * 5
    assert calls == Counter(receipts=1)
    assert len(host.results()) == 5


def test_a_refusal_in_a_batch_write_ends_only_its_own_task(counted):
    rt, host, calls = counted
    approved(rt, 3)
    host.put_record("comment-2", text="edited after the approval")
    rt.engine.submit_batch("w1")
    assert {t.record_id: (t.status, t.code) for t in Task.select()} == {
        "comment-1": ("done", None), "comment-2": ("blocked", "source_changed"),
        "comment-3": ("done", None)}
    assert calls["submit_many"] == 1 and calls["submit"] == 0


def test_a_host_without_batch_calls_is_asked_row_by_row(counted, monkeypatch):
    rt, host, calls = counted
    for name in ("get_many", "receipts", "submit_many"):
        monkeypatch.setattr(host, name, None)
    approved(rt, 3)
    rt.engine.submit_batch("w1")
    assert [t.status for t in Task.select()] == ["done"] * 3
    assert calls == Counter(get=6, read_material=1, submit=3, receipt=6)


def test_a_cancel_during_a_batch_write_finds_every_write_of_the_batch_in_flight(
        counted, monkeypatch):
    rt, host, calls = counted
    approved(rt, 3)
    write_many, answers = host.submit_many, []

    def cancel_then_write(items):
        answers.append(rt.cancel("default"))
        return write_many(items)
    monkeypatch.setattr(host, "submit_many", cancel_then_write)
    rt.engine.submit_batch("w1")
    # One call carries the three writes: all were under way, and each ends as its receipt says.
    assert answers[0]["writes_in_flight"] == 3
    assert [(t.status, t.outcome_unknown) for t in Task.select()] == [("done", False)] * 3
    assert len(host.results()) == 3


def test_a_batch_read_refused_whole_leaves_each_record_to_its_own_read(counted, monkeypatch):
    rt, host, calls = counted

    def refuse_all(record_ids):
        raise Blocked("too_many", "the host refuses batches today")
    monkeypatch.setattr(host, "get_many", refuse_all)
    rt.enqueue_events([make_event(event_id=f"e{n}", record_id=f"comment-{n}")
                       for n in range(1, 4)])
    rt.engine.ingest_batch("w1")
    assert [e["outcome"] for e in rt.events()] == ["ready"] * 3
    assert calls["get"] == 3


def test_a_batchs_drafter_calls_are_counted_in_one_write(counted, monkeypatch):
    rt, host, calls = counted
    writes = []
    count_calls = drafting._count_calls
    monkeypatch.setattr(drafting, "_count_calls",
                        lambda outcome, n: (writes.append((outcome, n)), count_calls(outcome, n)))
    rt.enqueue_events([make_event(event_id=f"e{n}", record_id=f"comment-{n}")
                       for n in range(1, 6)])
    rt.engine.ingest_batch("w1")
    # Five drafts, one write of the count (a commit per draft was most of ingest's cost).
    assert writes == [("ok", 5)]
    assert drafting.summary(None, rt.clock.now())["calls"] == {"ok": 5}
