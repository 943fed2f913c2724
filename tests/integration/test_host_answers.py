"""What a host answers that signoff cannot keep: refused for that event alone, at once.

A record or material outside the types and ranges signoff stores is
``invalid_record``; one over ``[host] max_record_bytes`` / ``max_material_bytes``
is ``record_too_large``. Both are final for the event on the first attempt, the
rest of its batch goes on, and every other place that reads a record (approval's
re-read, redraft, batches) refuses them too.
"""


import pytest

from helpers import make_event, open_home, set_keys
from signoff.steps import recordbatches, hostreads, ingest
from signoff.app import Signoff
from signoff.errors import ConfigError, Refused
from signoff.models import BatchMember, DeadLetter, Delivery, RecordBatch, Task

import testhosts  # noqa: E402
from testhosts import put_raw_record  # noqa: E402

LIMIT = 262144  # the default of both limits


@pytest.fixture
def odd(home, clock, monkeypatch):
    """Open a home on ``OddHost`` with ``records`` open records and the ``[host]`` values
    given; returns the runtime."""
    monkeypatch.setattr(testhosts, "ODD", {})
    opened = []

    def make(records=1, **limits):
        opened.append(open_home(home, "testhosts:OddHost", clock, records, **limits))
        return opened[-1]

    yield make
    for rt in opened:
        rt.close()


def enqueue(rt, *record_ids):
    lines = rt.enqueue_events([make_event(event_id=f"evt-{r}-{rt.clock.now()}", record_id=r)
                               for r in record_ids])
    assert all(line.accepted for line in lines)
    return [line.delivery for line in lines]


def outcomes():
    """``{record id: (status, outcome, attempts)}`` of every delivery."""
    return {d.record_id: (d.status, d.outcome, d.attempts) for d in Delivery.select()}


def test_an_out_of_range_version_is_an_invalid_record_and_the_batch_goes_on(odd):
    rt = odd(records=14)
    host = rt.host()
    put_raw_record(host, dict(host.get("comment-13"), version=2**70))
    enqueue(rt, *(f"comment-{n}" for n in range(14)))
    assert rt.engine.ingest_batch("w1") == (14, False)
    seen = outcomes()
    assert seen.pop("comment-13") == ("done", "invalid_record", 1)
    assert set(seen.values()) == {("done", "ready", 1)}
    assert Task.select().count() == 13 and not DeadLetter.select().exists()


def nested(depth):
    value = "bottom"
    for _ in range(depth):
        value = {"down": value}
    return value


ODD_RECORDS = {
    "version-past-64-bits": lambda r: dict(r, version=2**63),
    "nested-integer-past-64-bits": lambda r: dict(r, extra={"n": [1, -(2**63) - 1]}),
    "nan": lambda r: dict(r, extra={"score": float("nan")}),
    "infinity": lambda r: dict(r, extra=[float("-inf")]),
    "non-string-key": lambda r: dict(r, extra={1: "one"}),
    "tuple": lambda r: dict(r, extra=(1, 2)),
    "set": lambda r: dict(r, extra={"a"}),
    "bytes": lambda r: dict(r, text=b"add the date"),
    "nested-too-deep": lambda r: dict(r, extra=nested(200)),
    "boolean-version": lambda r: dict(r, version=True),
    "string-version": lambda r: dict(r, version="1"),
    "numeric-status": lambda r: dict(r, status=1),
    "no-document": lambda r: {k: v for k, v in r.items() if k != "document"},
    "not-an-object": lambda r: [r],
}


def test_every_answer_outside_what_signoff_stores_is_an_invalid_record_at_once(odd):
    rt = odd(records=0)
    host = rt.host()
    for name, change in ODD_RECORDS.items():
        host.put_record(name, document="doc-demo", text="add the date")
        testhosts.ODD[name] = change
    host.put_record("healthy", document="doc-demo", text="add the date")
    enqueue(rt, *ODD_RECORDS, "healthy")
    rt.run_until_idle()
    seen = outcomes()
    assert seen.pop("healthy") == ("done", "ready", 1)
    assert seen == {name: ("done", "invalid_record", 1) for name in ODD_RECORDS}


def test_material_outside_what_signoff_stores_is_an_invalid_record_at_once(odd):
    rt = odd(records=3)
    testhosts.ODD["material"] = lambda m: dict(m, counts={"n": 2**64})
    enqueue(rt, "comment-0", "comment-1", "comment-2")
    # One batch: each row refused, not only the first.
    assert rt.engine.ingest_batch("w1") == (3, False)
    assert outcomes() == {f"comment-{n}": ("done", "invalid_record", 1) for n in range(3)}


def test_a_batch_checks_the_material_of_a_document_once(odd, monkeypatch):
    rt = odd(records=5)
    checked = []
    monkeypatch.setattr(hostreads, "check_material",
                        lambda material, max_bytes: checked.append(material) or material)
    enqueue(rt, *(f"comment-{n}" for n in range(5)))
    assert rt.engine.ingest_batch("w1") == (5, False)
    assert set(outcomes().values()) == {("done", "ready", 1)}
    assert len(checked) == 1


def test_a_row_no_check_caught_is_that_row_s_outcome_alone(odd, monkeypatch):
    rt = odd(records=3)
    host = rt.host()
    put_raw_record(host, dict(host.get("comment-1"), version=2**70))
    monkeypatch.setattr(ingest, "check_record", lambda record, max_bytes: record)
    enqueue(rt, "comment-0", "comment-1", "comment-2")
    assert rt.engine.ingest_batch("w1") == (3, False)
    seen = outcomes()
    assert seen.pop("comment-1") == ("retrying", None, 1)  # a failed attempt, retried later
    assert set(seen.values()) == {("done", "ready", 1)}
    assert Delivery.get(Delivery.record_id == "comment-1").last_code


# -- size limits ---------------------------------------------------------------------------

def test_a_record_over_the_default_limit_is_too_large_at_once(odd):
    rt = odd(records=2)
    host = rt.host()
    host.put_record("comment-1", text="x" * LIMIT)
    enqueue(rt, "comment-0", "comment-1")
    rt.run_until_idle()
    assert outcomes() == {"comment-0": ("done", "ready", 1),
                          "comment-1": ("done", "record_too_large", 1)}


def test_material_over_its_limit_is_too_large_at_once(odd):
    rt = odd(max_material_bytes=1000)
    rt.host().put_material("doc-demo", "x" * 1000)
    enqueue(rt, "comment-0")
    rt.run_until_idle()
    assert outcomes() == {"comment-0": ("done", "record_too_large", 1)}


def ready_task(rt):
    enqueue(rt, "comment-0")
    rt.run_until_idle()
    [task] = Task.select()
    assert task.status == "ready"
    return task


def test_approval_refuses_a_record_grown_over_the_limit_and_changes_nothing(odd):
    rt = odd(max_record_bytes=2000)
    task = ready_task(rt)
    rt.host().put_record("comment-0", text="x" * 2000)
    with pytest.raises(Refused) as refused:
        rt.approve(task.key, task.digest)
    assert refused.value.code == "record_too_large"
    assert "record" in refused.value.message and "max_record_bytes" in refused.value.message
    assert Task.get_by_id(task.key).status == "ready"


def test_redraft_refuses_a_record_or_material_over_its_limit_saying_which(odd):
    rt = odd(max_record_bytes=2000, max_material_bytes=2000)
    task = ready_task(rt)
    host = rt.host()
    host.put_material("doc-demo", "x" * 2000)
    with pytest.raises(Refused) as refused:
        rt.redraft(task.key)
    assert refused.value.code == "record_too_large"
    assert "material" in refused.value.message and "max_material_bytes" in refused.value.message
    host.put_record("comment-0", text="x" * 2000)
    with pytest.raises(Refused) as refused:
        rt.redraft(task.key)
    assert (refused.value.code, "max_record_bytes" in refused.value.message) == (
        "record_too_large", True)
    assert Task.get_by_id(task.key).digest == task.digest


def test_a_batch_leaves_out_a_record_grown_over_the_limit_and_ends_on_material_over_it(
        odd, clock):
    rt = odd(records=3, max_record_bytes=2000, max_material_bytes=2000)
    host = rt.host()
    rt.bind("doc-demo", "b", batch_window_s=30)

    def batch_of(*record_ids, meanwhile):
        lines = rt.enqueue_events([make_event(event_id=f"b-{r}", record_id=r,
                                              occurred=int(clock.now())) for r in record_ids], "b")
        rt.run_until_idle()
        assert {Delivery.get_by_id(line.delivery).outcome for line in lines} == {"batched"}
        meanwhile()
        clock.advance(31)
        assert recordbatches.close_due(rt) == 1
        return RecordBatch.select().order_by(RecordBatch.id.desc()).first()

    first = batch_of("comment-0", "comment-2",
                     meanwhile=lambda: host.put_record("comment-2", text="x" * 2000))
    assert [r["id"] for r in Task.get_by_id(first.task_key).record] == ["comment-0"]
    assert {m.record_id: m.kept for m in BatchMember.select().where(
        BatchMember.batch == first.id)} == {"comment-0": True, "comment-2": False}
    second = batch_of("comment-1", meanwhile=lambda: host.put_material("doc-demo", "x" * 2000))
    assert (second.closed_at is not None, second.task_key, second.code) == (
        True, None, "record_too_large")


@pytest.mark.parametrize("value", ["0", "-1", "1.5", '"big"', "true", str(2**40)])
@pytest.mark.parametrize("key", ["max_record_bytes", "max_material_bytes"])
def test_the_size_limits_are_positive_integers_in_range(home, key, value):
    Signoff.init(home).close()
    set_keys(home, **{key: value})
    with pytest.raises(ConfigError) as refused:
        Signoff(home)
    assert (refused.value.code, f"host.{key}" in refused.value.message) == ("bad_config", True)
