"""The batched writes keep the per-row rules: fencing, dedupe races, defaults, order.

Ingest, submit and approval write a whole batch in a few statements; each test
here makes one row of a batch behave differently from the others and checks
that only that row is treated differently.
"""

import itertools

from helpers import make_event
from signoff.steps import ingest, submit
from signoff.steps.hostreads import BatchReads
from signoff.errors import Refused
from signoff.state.leases import claim_deliveries, claim_tasks
from signoff.state.deliveries import prepare_move_deliveries
from signoff.state.moves import run_moves
from signoff.state.statuses import DeliveryStatus
from peewee import IntegerField, TextField, fn

from signoff.models import (Approval, Attempt, Audit, BaseModel, Delivery, Inbox, Task, db,
                            insert_rows)
from signoff.storage import KeyedSelect, key_in, select_instances, select_tuples

TTL = 30.0


def enqueue_many(rt, n):
    host = rt.host()
    for i in range(1, n + 1):
        host.put_record(f"comment-{i}", document="doc-demo")
    lines = rt.enqueue_events([make_event(event_id=f"evt-{i}", record_id=f"comment-{i}")
                               for i in range(1, n + 1)])
    assert all(line.accepted for line in lines)
    return [line.delivery for line in lines]


def examined(rt, rows, clock):
    from signoff.models import Monitor
    host = BatchReads(rt.host(), [row.record_id for row in rows], rows)
    monitor = Monitor.get_by_id("default")
    return [ingest.examine(rt, host, row, monitor, host.context(), {}, clock.now())
            for row in rows]


def test_insert_rows_writes_what_insert_many_writes(rt, clock):
    base = {"monitor": "default", "status": "ready", "record_id": "r", "version": 1,
            "record": {"id": "r", "n": [1, 2]}, "result": {"draft": "d", "sources": []},
            "digest": "d" * 64, "approval_deadline": None, "created_at": 1.0, "updated_at": 2.0}
    Task.insert_many([dict(base, key="by-peewee")]).execute()
    insert_rows(Task, [dict(base, key="by-insert-rows")])
    a, b = (Task.get_by_id(k) for k in ("by-peewee", "by-insert-rows"))
    fields = [f.name for f in Task._meta.sorted_fields if f.name != "key"]
    assert {f: getattr(a, f) for f in fields} == {f: getattr(b, f) for f in fields}
    assert (b.status, b.parked, b.failures, b.approved_digest) == ("ready", False, {}, None)
    # ON CONFLICT DO NOTHING: the second insert of a key is skipped, not an error.
    assert insert_rows(Task, [dict(base, key="by-peewee")], ignore_conflicts=True,
                       returning=("key",)) == []


def test_a_default_made_by_a_call_is_made_for_each_row(rt):
    # An insert shape converts its constant defaults once; one made by a call (a
    # counter here, a uuid4 in a user's model) is made for every row, as Peewee's
    # insert_many makes it, and never frozen into the shape.
    made = itertools.count(1)

    class Stamped(BaseModel):
        stamp = IntegerField(default=lambda: next(made))
        note = TextField()

    Stamped.create_table()
    try:
        insert_rows(Stamped, [{"note": "first"}, {"note": "second"}])
        insert_rows(Stamped, [{"note": "third"}])
        stamps = dict(Stamped.select(Stamped.note, Stamped.stamp).tuples())
    finally:
        Stamped.drop_table()
    assert len(set(stamps.values())) == 3, stamps


# Values a driver must quote for them to arrive as given: in a row of VALUES, and
# as elements of the arrays a bulk insert sends on PostgreSQL (where a bare NULL,
# a brace, a comma, a quote or a backslash means something).
AWKWARD = ["", "NULL", "null", '"', "\\", "{a,b}", "x, y", " padded ", "tab\tnew\nline",
           "nul\x00byte", "lone \ud800 surrogate", "ünïcode 漢字", "'; DROP TABLE task; --"]


def test_insert_rows_answers_in_row_order_and_keeps_every_value(rt, clock):
    base = {"monitor": "default", "status": "ready", "version": 2**62, "digest": "d" * 64,
            "approval_deadline": None, "created_at": 1.5, "updated_at": 2.0}
    rows = [dict(base, key=f"k{i:02}", record_id=s, result={"draft": s, "sources": [s, None]},
                 record={s: [s, 1, 2.5, True, None]}, approved_by=s or None, parked=i % 2 == 1)
            for i, s in enumerate(AWKWARD)]
    insert_rows(Task, [rows[3]])  # already there: skipped, and not answered for
    got = insert_rows(Task, rows, ignore_conflicts=True, returning=("key",))
    assert got == [(r["key"],) for i, r in enumerate(rows) if i != 3]
    stored = {t.key: t for t in Task.select()}
    for row in rows:
        t = stored[row["key"]]
        assert (t.record_id, t.result, t.record, t.approved_by, t.parked, t.version,
                t.approval_deadline, t.created_at) == (
            row["record_id"], row["result"], row["record"], row["approved_by"], row["parked"],
            2**62, None, 1.5)
    # Ids come back in the order the rows were given, whatever their number.
    ids = [r[0] for r in insert_rows(Delivery, [
        {"monitor": "default", "event_id": f"e-{i}", "name": "n", "document": "doc",
         "record_id": "r", "occurred": i, "status": "queued", "next_at": 0.0, "accepted_at": 1.0,
         "updated_at": 1.0} for i in range(1500)], returning=("id",))]
    assert ids == sorted(ids) and len(set(ids)) == 1500
    events = dict(Delivery.select(Delivery.id, Delivery.event_id).tuples())
    assert [events[i] for i in ids] == [f"e-{i}" for i in range(1500)]


def test_a_move_of_many_rows_stores_each_rows_own_value_as_its_column_does(rt, clock):
    ids = [r[0] for r in insert_rows(Delivery, [
        {"monitor": "default", "event_id": f"e-{i}", "name": "n", "document": "doc",
         "record_id": "r", "occurred": i, "status": "processing", "next_at": 0.0,
         "accepted_at": 1.0, "updated_at": 1.0, "lease_token": "t"}
        for i in range(len(AWKWARD))], returning=("id",))]
    # Every row its own text, some needing escapes: NUL, a lone surrogate, and the
    # escape character itself (in place of the empty text, which is no code).
    codes = dict(zip(ids, ["esc \U000F0000 0", *AWKWARD[1:]]))
    move = prepare_move_deliveries(ids, [DeliveryStatus.PROCESSING], DeliveryStatus.DONE,
                                   clock.now(), "t", per_row={"last_code": codes})
    with db.atomic():
        assert run_moves([move]) == set(ids)
    assert dict(Delivery.select(Delivery.id, Delivery.last_code).tuples()) == codes


def test_rows_read_in_bulk_are_the_instances_a_query_gives(rt, clock):
    base = {"monitor": "default", "status": "ready", "version": -(2**63), "digest": "d" * 64,
            "approval_deadline": None, "created_at": 1.5, "updated_at": 2.0}
    insert_rows(Task, [dict(base, key=f"k{i:02}", record_id=s, result={"draft": s, s: [s]},
                            record={s: [s, 1, 2.5, True, None]}, approved_by=s or None,
                            parked=i % 2 == 1, approved_at=i or None)
                       for i, s in enumerate(AWKWARD)])
    for query in (Task.select(), Task.select(Task.key, Task.parked, Task.result).where(
            Task.key > "k03")):
        built, read = select_instances(query.order_by(Task.key)), list(query.order_by(Task.key))
        assert len(built) == len(read) > 0
        for a, b in zip(built, read):
            assert type(a) is Task and a.__data__ == b.__data__ and not a._dirty
            assert [type(v) for v in a.__data__.values()] == [type(v) for v in b.__data__.values()]
    # Empty JSON reads back as a new value each time: changing one changes no other.
    first, second = select_instances(Task.select().limit(2))
    assert first.failures == second.failures == {} and first.edits == second.edits == []
    assert first.failures is not second.failures and first.edits is not second.edits
    # A column that is not one of the model's fields is read as Peewee reads it.
    counted = select_instances(Task.select(Task.status, fn.COUNT(Task.key).alias("n"))
                               .group_by(Task.status))
    assert [(t.status, t.n) for t in counted] == [("ready", len(AWKWARD))]
    # A built instance saves what is changed on it, and only that.
    task = select_instances(Task.select().where(Task.key == "k05"))[0]
    task.approved_by = "someone"
    task.save(only=task.dirty_fields)
    assert Task.get_by_id("k05").approved_by == "someone"
    assert Task.get_by_id("k05").record == {AWKWARD[5]: [AWKWARD[5], 1, 2.5, True, None]}


def test_rows_read_in_bulk_are_the_tuples_a_query_gives(rt, clock):
    base = {"monitor": "default", "status": "ready", "digest": "d" * 64,
            "approval_deadline": None, "created_at": 1.5, "updated_at": 2.0}
    insert_rows(Task, [dict(base, key=f"k{i:02}", record_id=s, result={"draft": s},
                            record={s: [s, 1]}, version=-(2**63) + i, approved_by=s or None,
                            parked=i % 2 == 1, approved_at=i or None)
                       for i, s in enumerate(AWKWARD)])
    insert_rows(Approval, [{"task_key": "k01", "digest": "d" * 64, "by": b, "channel": "cli",
                            "at": 1.0} for b in ("ann", "bob")])
    for query in (
            Task.select(Task.key, Task.record_id, Task.version, Task.approved_by,
                        Task.approved_at, Task.parked, Task.result),  # text escaped, JSON
            Task.select(Task.key, Task.digest, Task.created_at),  # plain columns only
            Task.select(Task.status, fn.COUNT(Task.key)).group_by(Task.status),
            Approval.select(Approval.task_key, fn.COUNT(Approval.id)).join(
                Task, on=(Task.key == Approval.task_key)).group_by(Approval.task_key),
            Task.select(Task.key).where(Task.key == "none")):
        read = list(query.tuples())
        got = select_tuples(query)
        assert got == read and len(got) == len(list(query))
        assert [[type(v) for v in row] for row in got] == [[type(v) for v in row] for row in read]


def test_a_keyed_select_built_once_finds_what_a_fresh_query_finds_for_any_keys(rt, clock):
    base = {"monitor": "default", "status": "ready", "digest": "d" * 64,
            "approval_deadline": None, "created_at": 1.5, "updated_at": 2.0}
    insert_rows(Task, [dict(base, key=f"k{i:02}", record_id=s, version=i, record={}, result={})
                       for i, s in enumerate(AWKWARD)])
    keyed = KeyedSelect(lambda keys: Task.select(Task.key, Task.version).where(keys),
                        Task.record_id)
    for keys in (AWKWARD[:1], AWKWARD, AWKWARD[3:7] + ["absent"], ["absent"], AWKWARD[::-2]):
        fresh = Task.select(Task.key, Task.version).where(key_in(Task.record_id, keys))
        assert sorted(keyed.rows(keys)) == sorted(fresh.tuples())
    # One statement for every length of key list: its text does not grow with them.
    assert len(keyed.plans) == 1


def test_a_fenced_row_in_an_ingest_batch_leaves_the_others_written(rt, clock):
    ids = enqueue_many(rt, 3)
    token, rows = claim_deliveries(clock.now(), "w1", TTL, 10)
    assert [r.id for r in rows] == ids
    outcomes = examined(rt, rows, clock)
    # Another worker took the middle delivery over meanwhile.
    Delivery.update(lease_token="other").where(Delivery.id == ids[1]).execute()
    ingest.write_outcomes(rt, token, "w1", rows, outcomes)
    got = {d.id: (d.status, d.outcome, d.lease_token) for d in Delivery.select()}
    assert got == {ids[0]: ("done", "ready", None), ids[1]: ("processing", None, "other"),
                   ids[2]: ("done", "ready", None)}
    assert sorted(t.record_id for t in Task.select()) == ["comment-1", "comment-3"]
    assert sorted(i.event_id for i in Inbox.select()) == ["evt-1", "evt-3"]
    assert sorted(a.ref for a in Attempt.select()) == [str(ids[0]), str(ids[2])]
    assert [d.task_key for d in Delivery.select().order_by(Delivery.id)] == [
        outcomes[0].task_key, None, outcomes[2].task_key]


def test_an_event_consumed_by_another_worker_meanwhile_becomes_a_duplicate(rt, clock):
    ids = enqueue_many(rt, 2)
    token, rows = claim_deliveries(clock.now(), "w1", TTL, 10)
    outcomes = examined(rt, rows, clock)
    Inbox.insert(monitor="default", event_id="evt-1", outcome="ready", task_key="k-other",
                 at=clock.now()).execute()
    ingest.write_outcomes(rt, token, "w1", rows, outcomes)
    first, second = (Delivery.get_by_id(i) for i in ids)
    assert (first.status, first.outcome, first.task_key) == ("done", "duplicate", "k-other")
    assert (second.status, second.outcome) == ("done", "ready")
    assert [t.record_id for t in Task.select()] == ["comment-2"]
    codes = [(a.event_id, a.code) for a in Audit.select().where(Audit.event_id.is_null(False))]
    assert sorted(codes) == [("evt-1", "duplicate"), ("evt-2", "ready")]


def test_a_claim_takes_the_oldest_waiting_deliveries_first(rt, clock):
    ids = enqueue_many(rt, 5)
    clock.advance(1)
    [late] = rt.enqueue_events([make_event(event_id="evt-late", record_id="comment-1")])
    _, rows = claim_deliveries(clock.now(), "w1", TTL, 3)
    assert [r.id for r in rows] == ids[:3]
    _, rows = claim_deliveries(clock.now(), "w1", TTL, 10)
    assert [r.id for r in rows] == ids[3:] + [late.delivery]


def test_approve_many_approves_a_key_given_twice_once(rt, clock):
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    task = Task.get()
    first, again = rt.approve_many([(task.key, task.digest), (task.key, task.digest)])
    assert first["status"] == "approved"
    assert isinstance(again, Refused) and again.code == "not_ready"
    assert [a.code for a in Audit.select().where(Audit.task_key == task.key)
            if a.code == "approved"] == ["approved"]


def test_a_late_done_from_the_old_owner_of_a_task_is_fenced(rt, clock):
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    task = Task.get()
    rt.approve(task.key, task.digest)
    old, rows = claim_tasks(clock.now(), "w1", TTL, 10)
    clock.advance(TTL + 1)
    rt.engine.reap()
    clock.advance(rt.config.retry.base_delay_s)
    new, _ = claim_tasks(clock.now(), "w2", TTL, 10)
    submit.write_outcomes(rt, old, "w1", rows, {task.key: submit.Outcome("done", "done", "confirm")})
    row = Task.get_by_id(task.key)
    assert (row.status, row.lease_owner, row.lease_token) == ("approved", "w2", new)
    submit.write_outcomes(rt, new, "w2", rows, {task.key: submit.Outcome("done", "done", "confirm")})
    assert Task.get_by_id(task.key).status == "done"
