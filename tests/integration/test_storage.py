"""The storage seam on every backend: claims, lossless strings, schema, ownership, faults.

These run on SQLite always and, under the backend switch (see conftest), on
PostgreSQL/Redis and PostgreSQL/PostgreSQL. A few are about one engine only
and say so.
"""

import gc
import io
import itertools
import json
import logging
import sqlite3
import shutil
import subprocess
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from peewee import SQL, OperationalError, ValueLiterals

from helpers import (T0, child_env, examples, make_event, signoff_cmd, start_worker, stop_worker,
                     wait_for)
from signoff import storage
from signoff.app import Signoff
from signoff.errors import Blocked, StorageError
from signoff.state.leases import claim_deliveries, claim_tasks, claimable_counts
from signoff.storage import Fetched
from signoff.storage.claims import claimable
from signoff.state.statuses import DeliveryStatus, TaskStatus
from signoff.state.tasks import move_task
from signoff.models import Delivery, Task, insert_rows
from signoff.storage.queue import close_queue, one_line_queue_faults


def on_postgres(rt):
    return storage.engine_of(rt.database).kind != "sqlite"


def events_for_new_records(rt, host, numbers):
    """Open records ``comment-N`` for ``numbers``, and an event enqueued for each."""
    for n in numbers:
        host.put_record(f"comment-{n}", document="doc-demo", text=f"note {n}")
    rt.enqueue_events([make_event(event_id=f"evt-{n}", record_id=f"comment-{n}")
                       for n in numbers])


def waiting_rows(n, **changes):
    return [dict({"monitor": "default", "event_id": f"e{i}", "name": "comment.created",
                  "document": "doc-demo", "record_id": "comment-1", "occurred": T0,
                  "status": "queued", "next_at": T0, "accepted_at": T0, "updated_at": T0,
                  "failures": {}}, **changes) for i in range(n)]


# -- claims ------------------------------------------------------------------------

def test_a_claim_on_a_fresh_table_takes_no_more_than_its_limit(rt, clock):
    # A freshly filled table has no planner statistics: the claim must still stop at 50.
    insert_rows(Delivery, waiting_rows(1000))
    token, rows = claim_deliveries(clock.now(), "w", 30, 50)
    assert len(rows) == 50
    assert Delivery.select().where(Delivery.lease_token == token).count() == 50
    assert [r.id for r in rows] == sorted(r.id for r in rows)
    assert all(r.status == DeliveryStatus.PROCESSING for r in rows)
    assert Delivery.select().where(Delivery.status == "queued").count() == 950


def every_kind_of_row(model, now):
    """One row of ``model`` for each combination the claimable condition looks at."""
    statuses = (["queued", "processing", "retrying", "done", "dead"] if model is Delivery else
                ["ready", "approved", "uncertain", "done", "blocked", "cancelled", "dead"])
    rows = []
    for n, (status, due, suspect, parked, leased) in enumerate(itertools.product(
            statuses, (True, False), (True, False), (True, False), (True, False))):
        if model is Delivery and (parked or leased):
            continue  # deliveries have no parking, and their lease goes with `processing`
        row = {"status": status, "next_at": now - 1 if due else now + 100, "suspect": suspect,
               "updated_at": now}
        if model is Delivery:
            rows.append(dict(waiting_rows(1)[0], event_id=f"k{n}", **row))
        else:
            rows.append(dict(row, key=f"{n:064x}", monitor="default", record_id="r",
                             version=1, record={}, result={}, digest="0" * 64, created_at=now,
                             parked=parked, lease_token="held" if leased else None))
    return rows


@pytest.mark.parametrize("model", [Delivery, Task], ids=["delivery", "task"])
def test_the_claims_take_exactly_the_rows_the_counts_count(rt, clock, model):
    # One condition, two readers: the claim statements (both engines' SQL) and
    # the counts that size the wake-ups must agree on every kind of row.
    now = clock.now()
    insert_rows(model, every_kind_of_row(model, now))
    pk = model._meta.primary_key
    counted = {k for (k,) in model.select(pk).where(claimable(model, now)).tuples()}
    taken = set()
    while True:  # suspects one at a time, then everything else at once
        token, rows = (claim_deliveries if model is Delivery else claim_tasks)(now, "w", 30, 500)
        if not rows:
            break
        taken |= {getattr(r, pk.name) for r in rows}
        model.update(lease_token=None, status=model.status).where(
            model.lease_token == token).execute()  # out of the way, not claimable again
        model.update(next_at=now + 10_000).where(pk.in_([getattr(r, pk.name) for r in rows])
                                                 ).execute()
    assert counted and taken == counted
    deliveries, tasks = claimable_counts(now)
    assert (deliveries if model is Delivery else tasks) == 0  # all taken now


def test_a_suspect_is_claimed_alone_even_among_many(rt, clock):
    insert_rows(Delivery, waiting_rows(20, status="retrying", last_code="lease_expired",
                                       suspect=True))
    insert_rows(Delivery, waiting_rows(30, status="queued"))
    token, rows = claim_deliveries(clock.now(), "w", 30, 50)
    assert len(rows) == 1 and rows[0].suspect
    assert Delivery.select().where(Delivery.lease_token == token).count() == 1


def test_claims_take_the_earliest_due_first_on_every_backend(rt, clock):
    rows = waiting_rows(6)
    for i, row in enumerate(rows):
        row["next_at"] = T0 - i  # written latest-due first
    insert_rows(Delivery, rows)
    _, first = claim_deliveries(clock.now(), "w", 30, 3)
    assert sorted(r.event_id for r in first) == ["e3", "e4", "e5"]


def test_a_claim_merges_the_waiting_statuses_in_due_order(rt, clock):
    # Each status is picked on its own: the claim must still take the earliest due
    # of them all, and no retry before its time.
    rows = waiting_rows(7)
    for i, row in enumerate(rows):
        row.update(next_at=T0 - i, status="retrying" if i % 2 else "queued")
    rows[6].update(status="retrying", next_at=T0 + 60)
    insert_rows(Delivery, rows)
    _, first = claim_deliveries(clock.now(), "w", 30, 3)
    assert sorted(r.event_id for r in first) == ["e3", "e4", "e5"]
    _, rest = claim_deliveries(clock.now(), "w", 30, 50)
    assert sorted(r.event_id for r in rest) == ["e0", "e1", "e2"]

    base = {"monitor": "default", "record_id": "r", "version": 1, "record": {}, "result": {},
            "digest": "d" * 64, "created_at": T0, "updated_at": T0}
    insert_rows(Task, [dict(base, key=f"{i:064x}", next_at=T0 - i,
                            status="uncertain" if i % 2 else "approved") for i in range(6)])
    _, tasks = claim_tasks(clock.now(), "w", 30, 3)
    assert sorted(int(t.key, 16) for t in tasks) == [3, 4, 5]
    assert {t.status for t in tasks} == {TaskStatus.APPROVED, TaskStatus.UNCERTAIN}


def test_rows_due_at_the_same_moment_are_claimed_in_one_order_on_every_backend(rt, clock):
    # Written in the reverse of claim order, so neither insertion order (SQLite's
    # rowid) nor heap order (PostgreSQL's index ties) can pass for it.
    rows = waiting_rows(8)
    for i, row in enumerate(rows):
        row["id"] = 8 - i
    insert_rows(Delivery, rows)
    _, first = claim_deliveries(clock.now(), "w", 30, 3)
    assert [r.id for r in first] == [1, 2, 3]

    base = {"monitor": "default", "record_id": "r", "version": 1, "status": "approved",
            "record": {}, "result": {}, "digest": "d" * 64, "next_at": T0, "updated_at": T0}
    # Earliest created first; a tie in created_at goes to the lower key.
    created = [T0 + 5, T0 + 4, T0 + 3, T0 + 1, T0 + 1, T0]
    insert_rows(Task, [dict(base, key=f"{9 - i:064x}", created_at=at)
                       for i, at in enumerate(created)])
    _, tasks = claim_tasks(clock.now(), "w", 30, 2)
    assert sorted(int(t.key, 16) for t in tasks) == [4, 5]


def test_a_task_claim_is_bounded_and_keeps_the_status(rt, clock):
    base = {"monitor": "default", "record_id": "r", "version": 1, "status": "approved",
            "record": {}, "result": {}, "digest": "d" * 64, "next_at": T0,
            "created_at": T0, "updated_at": T0}
    insert_rows(Task, [dict(base, key=f"{i:064x}") for i in range(200)])
    token, rows = claim_tasks(clock.now(), "w", 30, 50)
    assert len(rows) == 50
    assert {r.status for r in rows} == {TaskStatus.APPROVED}
    assert Task.select().where(Task.lease_token == token).count() == 50


# -- what runs under the write lock ------------------------------------------------
# SQLite has one write lock for the whole file: a caller enqueueing one event at a
# time waits for every worker transaction. So a worker builds its rows outside
# its transactions and holds the lock for the SQL alone.

def test_a_claim_makes_its_rows_into_instances_after_its_transaction(rt, clock, monkeypatch):
    insert_rows(Delivery, waiting_rows(30))
    made_inside = []
    instances = Fetched.instances

    def recording(self):
        made_inside.append(rt.database.in_transaction())
        return instances(self)

    monkeypatch.setattr(Fetched, "instances", recording)
    token, rows = claim_deliveries(clock.now(), "w", 30, 50)
    assert len(rows) == 30 and {r.lease_token for r in rows} == {token}
    assert rows[0].failures == {} and rows[0].status == DeliveryStatus.PROCESSING
    assert made_inside == [False]  # the rows became instances once, after the claim


def test_an_outcome_write_converts_its_rows_before_its_transaction(rt, host, monkeypatch):
    if on_postgres(rt):
        # Row locks there, no file lock; psycopg dumps JSON as it sends the statement.
        pytest.skip("SQLite's write lock")
    events_for_new_records(rt, host, range(2, 12))
    dumped_inside = []
    dumps = storage.lossless_dumps

    def recording_dumps(value, *args):
        # An audit entry's proofs (a digest and a quorum, some 100 bytes) are written
        # with its link, which needs the chain's head as the transaction reads it.
        if not (isinstance(value, dict) and set(value) == {"digest", "quorum"}):
            dumped_inside.append(rt.database.in_transaction())
        return dumps(value, *args)

    monkeypatch.setattr(storage.bulk, "lossless_dumps", recording_dumps)
    claimed, _ = rt.engine.ingest_batch("w")
    assert claimed == 10
    assert Task.select().where(Task.status == TaskStatus.READY).count() == 10
    # Each task's record and result are JSON: all of it dumped before BEGIN.
    assert dumped_inside and not any(dumped_inside)


def test_a_prepared_insert_writes_the_rows_it_is_told_to_and_returns_theirs(rt):
    rows = waiting_rows(5)
    prepared = storage.PreparedInsert(Delivery, rows, returning=("event_id",))
    rows[1]["event_id"] = "changed after preparing"  # converted already: no effect
    assert prepared.run([1, 3]) == [("e1",), ("e3",)]
    assert sorted(d.event_id for d in Delivery.select()) == ["e1", "e3"]
    assert storage.PreparedInsert(Delivery, []).run() == []
    assert prepared.run([]) == []


# -- strings from hosts, drafters and people -----------------------------------------

HOSTILE = "nul\x00 lone\ud800 high\udfff escape\U000F0000E \U000F0000 done"


def test_nul_and_lone_surrogates_in_host_text_are_kept_exactly(rt, host, monkeypatch):
    host.put_record("comment-2", document="doc-demo", text="plain")
    read = host.get

    def hostile(record_id):  # the host's text, as a careless host may send it
        record = read(record_id)
        return dict(record, text=HOSTILE) if record_id == "comment-1" else record

    monkeypatch.setattr(host, "get", hostile)
    monkeypatch.setattr(host, "get_many", None)  # each record through the patched get
    rt.enqueue_events([make_event(event_id="e-hostile"),
                       make_event(event_id="e-plain", record_id="comment-2")])
    rt.run_until_idle()
    assert {e["outcome"] for e in rt.events()} == {"ready"}  # neither line aborted the batch
    [task] = [t for t in rt.tasks() if t["record_id"] == "comment-1"]
    assert rt.task(task["key"])["record"]["text"] == HOSTILE


# Text of any code point: NUL, lone surrogates (hypothesis leaves them out
# unless asked) and the escape character itself among them.
ANY_TEXT = st.text(st.characters(exclude_categories=())) | st.text(st.characters(categories=["Cs"]))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | ANY_TEXT
    | st.sampled_from([HOSTILE, storage.fields.ESCAPE, "\\u0000", "\\ud800"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(ANY_TEXT | st.just(HOSTILE), inner, max_size=4),
    max_leaves=12)


@given(JSON_VALUES)
@settings(max_examples=examples(300), deadline=None)
@pytest.mark.backend_independent
def test_json_is_dumped_once_and_still_as_escaped_as_a_full_walk(value):
    walked = json.dumps(storage.fields._walk(value, storage.escape_text))
    assert storage.lossless_dumps(value) == walked
    assert storage.fields._walk(json.loads(walked), storage.unescape_text) == value  # lossless


def test_free_form_strings_of_any_length_are_stored(rt, host, clock):
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    [task] = rt.tasks()
    by, code = "b" * 300 + HOSTILE, "c" * 1000
    move_task(task["key"], ["ready"], "blocked", clock.now(), code=code, approved_by=by)
    shown = rt.task(task["key"])
    assert shown["approved_by"] == by and shown["code"] == code


def test_a_long_approver_name_is_stored_whole(rt, host):
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    [task] = rt.tasks()
    digest = rt.task(task["key"])["digest"]
    name = "n" * 100 + "-" + "m" * 27  # 128 characters: past any varchar(64) or (100)
    rt.approve(task["key"], digest, by=name, channel="api")
    assert rt.task(task["key"])["approved_by"] == name


# -- the Signoff object owns its database ------------------------------------------------

# Tests marked backend_independent make SQLite homes of their own (or name a server
# themselves): the PostgreSQL stages would only run them again.

@pytest.mark.backend_independent
def test_two_homes_in_one_process_each_use_their_own_database(tmp_path, clock):
    first, second = (Signoff.init(tmp_path / name, clock=clock) for name in ("a", "b"))
    with first, second:
        for rt in (first, second):
            rt.host().put_record("comment-1", document="doc-demo", text="t")
            rt.host().put_material("doc-demo", "2026-11-01")
        first.bind("doc-demo")  # the second home was opened last: still not its monitor
        assert [m["id"] for m in first.monitors()] == ["default"]
        assert second.monitors() == []
        first.enqueue_events([make_event()])
        first.run_until_idle()
        assert len(first.tasks()) == 1 and second.tasks() == []


def test_close_and_a_with_block_release_the_connection(rt):
    with rt:
        assert rt.tasks() == []
    assert rt.database.is_closed()
    assert rt.tasks() == []  # used again, it reconnects


# -- schema version and broken homes -----------------------------------------------------

def run_cli(home, *args, timeout=60):
    done = subprocess.run(signoff_cmd(home, *args), env=child_env(), capture_output=True,
                          text=True, timeout=timeout)
    return done.returncode, done.stdout, done.stderr


def test_init_records_the_schema_version_and_a_worker_refuses_another(rt, home):
    [(version,)] = rt.database.execute_sql(f"SELECT version FROM {storage.SCHEMA_TABLE}").fetchall()
    assert version == storage.SCHEMA_VERSION
    rt.database.execute_sql(f"UPDATE {storage.SCHEMA_TABLE} SET version = 999")
    rt.close()
    code, out, err = run_cli(home, "worker", "--drain")
    assert code == 1 and out == ""
    assert err.startswith("error: schema_mismatch: ") and len(err.strip().splitlines()) == 1
    assert "999" in err
    code, _, err = run_cli(home, "tasks", "list")
    assert code == 1 and "schema_mismatch" in err


V3_INDEXES = {"webhook_answer": "webhook_answer_at", "webhook_refusal": "webhook_refusal_minute"}
V4_INDEXES = {"delivery": "delivery_suspects", "task": "task_suspects"}
OLD_SUSPECT = {"delivery": "last_code", "task": "code"}


# What version 5 added: whole tables, and columns of older ones.
V5_TABLES = ("worker_beat", "reviewer_monitor", "subscription", "event_delivery_count",
             "approval", "drafter_usage", "drafter_call_count")
V5_COLUMNS = {"monitor": ("approvals", "paused_at", "last_pause_from", "last_pause_until"),
              "delivery": ("traceparent", "tracestate"),
              "task": ("edits", "rejected_by", "reject_reason", "traceparent", "tracestate",
                       "needs_answers", "draft_meta"),
              "audit": ("actor", "channel"), "gap": ("kind",),
              "notification": ("type", "task", "audit_seq")}


# What version 6 added: columns of older tables.
V6_COLUMNS = {"approval": ("note",), "audit": ("note", "subject"), "reviewer": ("skeleton",),
              "delivery": ("last_reason",), "dead_letter": ("reason",)}


# What version 7 added: columns of older tables (tables it adds are dropped by name).
V7_COLUMNS = {"audit": ("data", "chain", "prev", "hash", "checkpoint"),
              "monitor": ("signed_approvals",),
              "approval": ("statement", "signature", "for_reviewer"),
              "task": ("reject_proof", "rejected_for"), "reviewer": ("email", "slack_user"),
              "notification": ("reviewer",)}
V7_TABLES = ("tally", "tally_delta", "checkpoint", "reviewer_key", "statement_nonce",
             "email_link", "monitor_reminders", "task_nudge", "delegation", "slack_message",
             "monitor_slack", "decision_time")


def _drop_columns(database, added):
    for table, columns in added.items():
        for index in database.get_indexes(table):
            if set(index.columns) & set(columns):
                database.execute_sql(f'DROP INDEX "{index.name}"')
        for column in columns:
            database.execute_sql(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')


# What version 8 added: an index.
V8_INDEXES = {"audit": "audit_unchained_task"}


def put_back_to_7(database):
    """Drop what version 8 added."""
    for index in V8_INDEXES.values():
        database.execute_sql(f'DROP INDEX "{index}"')


def put_back_to_6(database):
    """Drop what versions 7 and 8 added."""
    put_back_to_7(database)
    for table in V7_TABLES:
        database.execute_sql(f'DROP TABLE "{table}"')
    _drop_columns(database, V7_COLUMNS)


def put_back_to_5(database):
    """Drop what versions 6 to 8 added."""
    put_back_to_6(database)
    _drop_columns(database, V6_COLUMNS)


def put_back_to_4(database):
    """Drop what versions 5 to 8 added (and the indexes that name their columns)."""
    put_back_to_5(database)
    for table in V5_TABLES:
        database.execute_sql(f'DROP TABLE "{table}"')
    _drop_columns(database, V5_COLUMNS)


def put_back_version(database, version):
    """Make a current schema look as a home of ``version`` has it."""
    if version == 7:
        put_back_to_7(database)
        database.execute_sql(f"UPDATE {storage.SCHEMA_TABLE} SET version = 7")
        return
    if version == 6:
        put_back_to_6(database)
        database.execute_sql(f"UPDATE {storage.SCHEMA_TABLE} SET version = 6")
        return
    if version == 5:
        put_back_to_5(database)
        database.execute_sql(f"UPDATE {storage.SCHEMA_TABLE} SET version = 5")
        return
    put_back_to_4(database)
    if version == 4:
        database.execute_sql(f"UPDATE {storage.SCHEMA_TABLE} SET version = 4")
        return
    # Before version 4 a suspect was marked in the message column, with its own
    # partial index on that, there was no suspect column, no webhook body digests and
    # no reviewer beside the login audit rows.
    database.execute_sql('DROP TABLE "webhook_digest"')
    database.execute_sql('DROP TABLE "audit_reviewer"')
    for table, index in V4_INDEXES.items():
        database.execute_sql(f'DROP INDEX "{index}"')
        database.execute_sql(f'ALTER TABLE "{table}" DROP COLUMN suspect')
        database.execute_sql(f'CREATE INDEX "{table}_suspect" ON "{table}" (next_at) '
                             f"WHERE {OLD_SUSPECT[table]} = 'lease_expired'")
    # Before version 3 retention's times were not indexed.
    if version < 3:
        for index in V3_INDEXES.values():
            database.execute_sql(f'DROP INDEX "{index}"')
    # Version 1's claim indexes had no tie-break.
    if version == 1:
        for table, columns in (("delivery", "status, next_at"), ("task", "status, next_at")):
            for index in database.get_indexes(table):
                if index.name.startswith(f"{table}_status_next_at"):
                    database.execute_sql(f'DROP INDEX "{index.name}"')
            database.execute_sql(f'CREATE INDEX "{table}_status_next_at" ON "{table}" ({columns})')
    database.execute_sql(f"UPDATE {storage.SCHEMA_TABLE} SET version = {version}")


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6, 7])
def test_init_brings_an_older_schema_up_to_date(rt, home, clock, version):
    database = rt.database
    put_back_version(database, version)
    # A delivery whose lease expired under the old code: a suspect, by its code.
    # A version-4 home marks a suspect in its own column; older ones by the code.
    suspect = (("suspect, ", f"{storage.engine_of(database).true}, ") if version >= 4
               else ("", ""))
    database.execute_sql(
        "INSERT INTO delivery (monitor, event_id, name, document, record_id, occurred, status, "
        f"attempts, failures, last_code, {suspect[0]}next_at, accepted_at, updated_at) VALUES "
        f"('default', 'e-old', 'comment.created', 'doc-demo', 'comment-1', 1, 'retrying', 1, "
        f"'{{}}', 'lease_expired', {suspect[1]}0, 0, 0)")
    rt.close()
    code, _, err = run_cli(home, "worker", "--drain")
    assert code == 1 and "schema_mismatch" in err and "signoff init" in err

    with Signoff.init(home, clock=clock) as again:
        [(found,)] = again.database.execute_sql(
            f"SELECT version FROM {storage.SCHEMA_TABLE}").fetchall()
        names = {i.name for table in ("delivery", "task", *V3_INDEXES, *V8_INDEXES)
                 for i in again.database.get_indexes(table)}
        with storage.bind(again.database):
            marked = [(d.event_id, d.suspect) for d in Delivery.select().order_by(Delivery.id)]
        tables = set(again.database.get_tables())
        columns = {t: {c.name for c in again.database.get_columns(t)}
                   for t in (*V5_COLUMNS, *V6_COLUMNS, *V7_COLUMNS)}
    assert {"webhook_digest", "audit_reviewer", *V5_TABLES, *V7_TABLES} <= tables
    assert found == storage.SCHEMA_VERSION == 8
    assert all(set(added) <= columns[t] for t, added in
               (*V5_COLUMNS.items(), *V6_COLUMNS.items(), *V7_COLUMNS.items()))
    assert {"delivery_status_next_at_id", "task_status_next_at_created_at_key",
            *V3_INDEXES.values(), *V4_INDEXES.values(), *V8_INDEXES.values()} <= names
    assert not names & set(storage.schema.RETIRED_INDEXES)
    assert marked == [("e-old", True)]
    code, _, err = run_cli(home, "worker", "--drain")
    assert code == 0, err


@pytest.mark.backend_independent
def test_an_empty_state_file_makes_the_worker_refuse_at_once(tmp_path):
    home = tmp_path / "home"
    Signoff.init(home).close()
    (home / "signoff.db").write_bytes(b"")
    for name in ("signoff.db-wal", "signoff.db-shm"):
        (home / name).unlink(missing_ok=True)
    code, out, err = run_cli(home, "worker", "--drain", timeout=30)
    assert code == 1, err
    assert err.startswith("error: no_home: ") and "signoff.db" in err and "signoff init" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.backend_independent
@pytest.mark.parametrize("name", ["signoff.db", "queue.db", "host.db"])
def test_a_garbage_file_in_the_home_is_named(tmp_path, name):
    home = tmp_path / "home"
    Signoff.init(home).close()
    for suffix in ("", "-wal", "-shm"):
        (home / (name + suffix)).unlink(missing_ok=True)
    (home / name).write_bytes(b"this is not a database at all, just some text" * 100)
    args = ["worker", "--drain"] if name != "host.db" else ["monitor", "bind", "--document", "d"]
    code, out, err = run_cli(home, *args, timeout=30)
    assert code == 1, err
    assert err.startswith("error: database_error: ") and name in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.backend_independent
def test_read_commands_never_create_a_missing_state_file(tmp_path):
    home = tmp_path / "home"
    Signoff.init(home).close()
    for suffix in ("", "-wal", "-shm"):
        (home / ("signoff.db" + suffix)).unlink(missing_ok=True)
    for args in (["tasks", "list"], ["events"], ["stats"], ["worker", "--drain"]):
        code, _, err = run_cli(home, *args)
        assert code == 1 and err.startswith("error: no_home: ") and "signoff.db" in err, err
    assert not (home / "signoff.db").exists()


def test_concurrent_inits_on_one_empty_database_all_succeed(tmp_path, empty_database, monkeypatch):
    home = tmp_path / "home"
    env = child_env(**empty_database)
    procs = [subprocess.Popen(signoff_cmd(home, "init"), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(4)]
    results = [(p.wait(timeout=60), p.stderr.read().decode()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert all(code == 0 for code, _ in results), results
    for name, value in empty_database.items():
        monkeypatch.setenv(name, value)
    with Signoff(home) as rt:
        rows = rt.database.execute_sql(f"SELECT version FROM {storage.SCHEMA_TABLE}").fetchall()
        assert rows == [(storage.SCHEMA_VERSION,)]
        assert rt.tasks() == []


# -- engine faults -------------------------------------------------------------------------

@pytest.mark.backend_independent
def test_drain_on_an_unreachable_database_gives_up_with_database_unavailable(
        tmp_path, monkeypatch):
    from signoff import worker
    home = tmp_path / "home"
    Signoff.init(home).close()
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", "postgresql://postgres@127.0.0.1:1/none")
    monkeypatch.setattr(worker, "UNREACHABLE_S", 0.5)
    with pytest.raises(StorageError) as refused:
        worker.run(home, drain=True)
    assert refused.value.code == "database_unavailable"
    assert "127.0.0.1:1" in refused.value.message


def test_a_killed_connection_is_replaced_and_the_work_goes_on(rt, host):
    if not on_postgres(rt):
        pytest.skip("a PostgreSQL connection fault")
    rt.enqueue_events([make_event()])
    (pid,) = rt.database.execute_sql("SELECT pg_backend_pid()").fetchone()
    rt.database.execute_sql("SELECT 1")
    with Signoff(rt.home) as other:
        other.database.execute_sql("SELECT pg_terminate_backend(%s)", (pid,))
    rt.run_until_idle()  # the first query finds the connection dead; the batch goes on
    assert [e["outcome"] for e in rt.events()] == ["ready"]


def test_a_blocked_host_code_of_any_text_is_kept(rt, host, monkeypatch):
    strange = "refused\x00by host " + "x" * 400

    def refuse(record_id):
        raise Blocked(strange)

    monkeypatch.setattr(host, "get", refuse)
    monkeypatch.setattr(host, "get_many", None)  # each record through the patched get
    rt.enqueue_events([make_event()])
    rt.run_until_idle()
    [event] = rt.events()
    assert event["outcome"] == strange


# -- a read-only home (root is made to respect file modes by dropping its capabilities) --

NO_OVERRIDE = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner",
               "--inh-caps", "-dac_override,-dac_read_search,-fowner"]


def read_only_cli(home, *args, stdin=None):
    done = subprocess.run([*NO_OVERRIDE, *signoff_cmd(home, *args, "--json")], input=stdin,
                          env=child_env(), capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.backend_independent
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_a_read_only_home_is_read_and_writes_are_refused_as_read_only_home(
        tmp_path):
    home = tmp_path / "home"
    with Signoff.init(home) as rt:
        rt.host().put_record("comment-1", document="doc-demo", text="t")
        rt.host().put_material("doc-demo", "2026-11-01")
        rt.bind("doc-demo")
        rt.enqueue_events([make_event(occurred=int(time.time()))])
        rt.run_until_idle()
        [task] = rt.tasks()
        digest = rt.task(task["key"])["digest"]
    paths = sorted(home.iterdir())
    try:
        for path in paths:
            path.chmod(0o444)
        home.chmod(0o555)
        for args in (["tasks", "list"], ["events"], ["stats"]):
            code, out, err = read_only_cli(home, *args)
            assert code == 0, (args, out, err)
        assert [t["key"] for t in json.loads(read_only_cli(home, "tasks", "list")[1])] == [
            task["key"]]
        for args in (["approve", task["key"], "--digest", digest], ["enqueue"]):
            code, out, err = read_only_cli(home, *args, stdin=json.dumps(make_event()) + "\n")
            assert code == 1, (args, out, err)
            assert json.loads(out)["error"] == "read_only_home", (args, out)
            assert "Traceback" not in err
    finally:
        home.chmod(0o755)
        for path in paths:
            path.chmod(0o644)
    with Signoff(home) as rt:
        assert rt.tasks()[0]["status"] == "ready"  # nothing changed


def test_a_worker_process_rides_out_every_connection_being_terminated(home, backend):
    if backend is None or not backend.database_url:
        pytest.skip("a PostgreSQL connection fault")
    config = home / "signoff.toml"
    config.write_text(config.read_text(encoding="utf-8").replace("lease_ttl_s = 30.0",
                                                                 "lease_ttl_s = 2.0"))
    rt = Signoff.init(home)
    host = rt.host()
    for n in range(90):
        host.put_record(f"comment-{n}", document="doc-demo", text="t")
    host.put_material("doc-demo", "2026-11-01")
    rt.bind("doc-demo", window_s=600)
    events = [make_event(event_id=f"e{n}", record_id=f"comment-{n}", occurred=int(time.time()))
              for n in range(90)]
    worker = start_worker(home, "--workers", "2")

    def finished():
        return sum(e["status"] == "done" for e in rt.events())

    def others(action):
        return rt.database.execute_sql(
            f"SELECT count({action}) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]

    try:
        for wave in range(3):
            if wave:  # every connection the worker holds dies; it must go on without them
                wait_for(lambda: others("pid"), 30, what="the worker's connections")
                rt.queue.storage.close()  # this process's own queue connection is not the target
                assert others("pg_terminate_backend(pid)") >= 1
            rt.enqueue_events(events[30 * wave:30 * (wave + 1)])
            wait_for(lambda: finished() == 30 * (wave + 1), 60, what=f"wave {wave} done")
            assert worker.poll() is None
        outcomes, tasks = {e["outcome"] for e in rt.events()}, len(rt.tasks())
    finally:
        out, err = stop_worker(worker)
        rt.close()
    assert worker.returncode == 0, err.decode()[-2000:]
    assert "retrying on a new connection" in err.decode()  # the fault was met, and survived
    # Huey's threads meet their queue connection's death (a PostgreSQL queue) too, each
    # told in one line; no traceback at all.
    log = err.decode()
    assert "Traceback" not in log, log[-4000:]
    assert outcomes == {"ready"} and tasks == 90


def test_huey_tells_a_queue_outage_in_one_line_and_keeps_the_traceback_of_a_bug():
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    loggers = [logging.getLogger(n) for n in ("huey.consumer.Worker", "huey.consumer.Scheduler",
                                              "huey")]
    loggers[-1].addHandler(handler)  # the consumer's records reach it too

    def report(logger, exc, message):
        try:
            raise exc
        except Exception:
            logger.exception(message)
    worker, scheduler, tasks = loggers
    try:
        with one_line_queue_faults():
            report(worker, sqlite3.OperationalError("database is locked\nsecond line"),
                   "Error reading from queue")
            report(scheduler, OSError("connection refused"), "Error reading schedule.")
            # After a task ran, clearing its revoke flag on a connection that just died.
            report(worker, sqlite3.OperationalError("disk I/O error"),
                   "Unhandled error during execution of task t0.")
            report(worker, ValueError("a bug"), "Error reading from queue")
            report(tasks, OSError("a task's own"), "Unhandled exception in task t1.")
        report(worker, sqlite3.OperationalError("after"), "Error reading from queue")
    finally:
        loggers[-1].removeHandler(handler)
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[:3] == [
        "WARNING huey.consumer.Worker Error reading from queue: queue unreachable "
        "(database is locked); Huey reconnects",
        "WARNING huey.consumer.Scheduler Error reading schedule.: queue unreachable "
        "(connection refused); Huey reconnects",
        "WARNING huey.consumer.Worker Unhandled error during execution of task t0.: queue "
        "unreachable (disk I/O error); Huey reconnects"]
    assert lines[3] == "ERROR huey.consumer.Worker Error reading from queue"
    assert "ValueError: a bug" in lines and "OSError: a task's own" in lines
    # The bug's, the task's, and Huey's own report outside the block keep their tracebacks.
    assert text.count("Traceback") == 3


def test_closing_a_postgresql_queue_closes_the_listen_connections_of_ended_threads(rt):
    # Huey leaves a consumer thread's LISTEN connection to the collector, which warns
    # about it (an error in this suite); closing the queue must close it instead.
    if storage.urls.kind_of(rt.config.queue_url) != "postgresql":
        pytest.skip("a PostgreSQL queue's connections")

    def queue_connections():
        return rt.database.execute_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'signoff-queue'").fetchone()[0]

    close_queue(rt.queue)
    consumers = [threading.Thread(target=rt.queue.storage.dequeue) for _ in range(2)]
    for thread in consumers:  # nothing is waiting: each listens, then gives up
        thread.start()
    for thread in consumers:
        thread.join(timeout=30)
    assert queue_connections() >= 2
    close_queue(rt.queue)
    wait_for(lambda: queue_connections() == 0, what="the queue's connections to close")
    gc.collect()  # a connection left open would warn here, failing the test


def test_closing_a_redis_queue_leaves_a_consumer_blocked_in_its_read_unharmed(rt):
    # A worker stopping on a busy machine may close its queue while a consumer thread
    # is still blocked in BRPOP: the socket under it must not be closed.
    pool = getattr(rt.queue.storage, "pool", None)
    if pool is None:
        pytest.skip("a Redis queue's connection pool")
    failures = []

    def consume():
        try:
            rt.queue.storage.dequeue()
        except Exception as exc:  # noqa: BLE001 - what the thread met is the finding
            failures.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()
    wait_for(lambda: pool._in_use_connections, what="the consumer to block in its read")
    close_queue(rt.queue)
    consumer.join(timeout=30)
    assert not consumer.is_alive()
    assert failures == []
    close_queue(rt.queue)  # now idle: closed
    assert not pool._in_use_connections and not pool._available_connections[0]._sock


def test_homes_on_two_engines_in_one_process_keep_apart(tmp_path, clock, backend, monkeypatch):
    if backend is None or not backend.database_url:
        pytest.skip("needs a PostgreSQL server beside SQLite")
    on_server = Signoff.init(tmp_path / "server", clock=clock)
    for name in ("SIGNOFF_DATABASE_URL", "SIGNOFF_QUEUE_URL", "SIGNOFF_QUEUE_NAME"):
        monkeypatch.delenv(name)
    on_file = Signoff.init(tmp_path / "file", clock=clock)
    with on_server, on_file:
        assert storage.engine_of(on_file.database).kind == "sqlite"
        assert storage.engine_of(on_server.database).kind == "postgresql"
        for rt in (on_server, on_file, on_server):
            rt.host().put_record("comment-1", document="doc-demo", text="t")
            rt.host().put_material("doc-demo", "2026-11-01")
            if not rt.monitors():
                rt.bind("doc-demo")
            rt.enqueue_events([make_event(event_id=f"e{len(rt.events())}")])
            rt.run_until_idle()
        assert len(on_server.events()) == 2 and len(on_file.events()) == 1
        for rt in (on_server, on_file):
            [task] = rt.tasks()
            assert rt.task(task["key"])["result"]["sources"]  # JSON read back on each engine


@pytest.mark.backend_independent
def test_a_foreign_database_is_named_and_left_alone(tmp_path):
    import sqlite3
    home = tmp_path / "home"
    Signoff.init(home).close()
    for suffix in ("", "-wal", "-shm"):
        (home / ("signoff.db" + suffix)).unlink(missing_ok=True)
    with sqlite3.connect(home / "signoff.db") as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    conn.close()
    code, out, err = run_cli(home, "worker", "--drain", timeout=30)
    assert code == 1 and err.startswith("error: database_error: ") and "signoff.db" in err, err
    assert "other tables" in err and len(err.strip().splitlines()) == 1
    with sqlite3.connect(home / "signoff.db") as conn:
        assert [n for (n,) in conn.execute("SELECT name FROM sqlite_master")] == ["invoices"]
    conn.close()


@pytest.mark.backend_independent
def test_the_environment_overrides_the_backend_keys_and_empty_counts_as_unset(
        tmp_path, monkeypatch):
    from signoff.config import load_config
    home = tmp_path / "home"
    home.mkdir()
    (home / "signoff.toml").write_text(
        '[database]\nurl = "postgresql://a@db/x"\n[queue]\nurl = "redis://q/0"\nname = "blue"\n',
        encoding="utf-8")
    config = load_config(home)
    assert (config.database_url, config.queue_url, config.queue_name) == (
        "postgresql://a@db/x", "redis://q/0", "blue")
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", "postgresql://b@db/y")
    monkeypatch.setenv("SIGNOFF_QUEUE_URL", "")
    monkeypatch.setenv("SIGNOFF_QUEUE_NAME", "green")
    config = load_config(home)
    assert (config.database_url, config.queue_url, config.queue_name) == (
        "postgresql://b@db/y", "redis://q/0", "green")
    (home / "signoff.toml").write_text("", encoding="utf-8")
    monkeypatch.delenv("SIGNOFF_QUEUE_NAME")
    assert load_config(home).queue_name == "signoff"


# -- SQLite's write lock -----------------------------------------------------------------

def hold_write_lock(home):
    """Another connection to the home's file, holding its write lock until rolled back."""
    import sqlite3
    holder = sqlite3.connect(home / "signoff.db", isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    return holder


@pytest.mark.parametrize("how", ["one statement", "a transaction"])
def test_a_sqlite_writer_waits_for_the_lock_itself_and_writes_once_it_is_free(rt, home, how):
    if on_postgres(rt):
        pytest.skip("SQLite's write lock")
    # SQLite's own busy handler is off: what waits below is storage's loop.
    assert rt.database.execute_sql("PRAGMA busy_timeout").fetchone() == (0,)
    holder = hold_write_lock(home)
    events = [make_event()] if how == "one statement" else [make_event(), {"bad": "line"}]
    answers, failed = [], []

    def write():
        try:
            answers.extend(rt.enqueue_events(events))
        except Exception as exc:  # reported below, not lost in the thread
            failed.append(exc)
    writer = threading.Thread(target=write)
    writer.start()
    writer.join(0.3)
    assert writer.is_alive() and not failed  # waiting while the lock is held, not failing
    holder.rollback()
    writer.join(30)
    assert not writer.is_alive() and not failed, failed
    assert [a.accepted for a in answers] == [True] + [False] * (len(events) - 1)
    assert [e["event_id"] for e in rt.events()] == ["evt-1"]


def test_a_sqlite_writer_gives_up_after_the_lock_wait_and_changes_nothing(rt, home, monkeypatch):
    if on_postgres(rt):
        pytest.skip("SQLite's write lock")
    monkeypatch.setattr(storage.engines, "LOCK_WAIT_S", 0.2)
    holder = hold_write_lock(home)
    try:
        with pytest.raises(OperationalError, match="database is locked"):
            rt.enqueue_events([make_event()])
    finally:
        holder.rollback()
    assert rt.events() == []


def test_a_batch_looks_its_rows_up_by_key_whatever_their_status(rt, host):
    if on_postgres(rt):
        pytest.skip("PostgreSQL plans from its statistics; SQLite has none to plan from")
    # Twelve: with ten keys or more in a list SQLite reckons the status index the
    # cheaper way (fewer and the test could not tell the two plans apart).
    events_for_new_records(rt, host, range(2, 14))
    statements = []
    conn = rt.database.connection()
    conn.set_trace_callback(statements.append)
    try:
        rt.engine.ingest_batch("w1")
        assert rt.approve_many([(t.key, t.digest) for t in Task.select()])
        rt.engine.submit_batch("w1")
    finally:
        conn.set_trace_callback(None)
    assert {t.status for t in Task.select()} == {"done"}
    # Each statement that picks rows by a list of keys and also checks their
    # status must look the keys up: through the status index it reads every row
    # of that status, a whole backlog for each batch.
    picked = [sql for sql in statements if '"key" IN (' in sql or '"id" IN (' in sql]
    checked = [sql for sql in picked if "status" in sql.split("WHERE", 1)[-1]]
    assert len(checked) >= 3, picked  # the delivery moves, the lease check, the task moves
    for sql in checked:
        # A key list given as one JSON parameter (storage.KeyedSelect) is read by
        # json_each: a scan of the list, not of a table.
        plan = " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)
                        if not row[3].startswith("SCAN json_each"))
        assert "status" not in plan and "SCAN" not in plan, (sql[:200], plan)


def test_a_tasks_timeline_is_read_through_indexes_however_long_the_audit(rt, host):
    if on_postgres(rt):
        pytest.skip("PostgreSQL plans from its statistics; SQLite has none to plan from")
    events_for_new_records(rt, host, range(2, 6))
    rt.run_until_idle()
    key = Task.select(Task.key).order_by(Task.key).first().key
    statements = []
    conn = rt.database.connection()
    conn.set_trace_callback(statements.append)
    try:
        detail = rt.task(key)
    finally:
        conn.set_trace_callback(None)
    assert [entry["code"] for entry in detail["audit"]] == ["ready"]
    # The task page, `tasks show` and the API's task read this for every view: a
    # whole scan of the audit grows with every task ever done.
    reads = [sql for sql in statements if 'FROM "audit"' in sql]
    assert reads, statements
    for sql in reads:
        plan = " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql))
        assert "SCAN" not in plan, (sql[:200], plan)


def test_a_key_list_reads_its_rows_and_writes_out_as_peewee_would(rt, clock):
    keys = [f"{i:064x}" for i in range(300)]
    base = {"monitor": "default", "record_id": "r", "version": 1, "status": "ready",
            "record": {}, "result": {}, "digest": "d" * 64, "created_at": T0, "updated_at": T0}
    insert_rows(Task, [dict(base, key=k) for k in keys])
    wanted = keys[::3] + ["not-a-key", "it's"]
    query = Task.select(Task.key).where(storage.key_in(Task.key, wanted), Task.version == 1)
    assert sorted(k for (k,) in query.tuples()) == keys[::3]
    assert list(Task.select(Task.key).where(storage.key_in(Task.key, [])).tuples()) == []
    # The statement and its parameters, and the text with the values in place (an
    # index's WHERE on SQLite), are what Peewee's own SQL node gives.
    node = storage.key_in(Task.key, ["a", "it's"])
    for wrap in (lambda n: n, ValueLiterals):
        ours = rt.database.get_sql_context().sql(wrap(node)).query()
        peewees = rt.database.get_sql_context().sql(wrap(SQL(node.sql, node.params))).query()
        assert ours == peewees
