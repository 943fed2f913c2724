"""Concurrent Python API enqueue calls share commits; each answer follows its commit."""

import threading

import pytest

from signoff import storage
from signoff.app import Signoff
from signoff.errors import Refused
from signoff.models import Delivery

from conftest import make_event, wait_for

CALLERS = 8

# A trigger that refuses one event's row: the database's own refusal, for one job.
REFUSE_BAD = {
    "sqlite": ["CREATE TRIGGER refuse_bad BEFORE INSERT ON delivery "
               "WHEN NEW.event_id = 'evt-bad' BEGIN "
               "SELECT RAISE(ABORT, 'refused by the test'); END"],
    "postgresql": ["CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$ "
                   "BEGIN IF NEW.event_id = 'evt-bad' THEN "
                   "RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$",
                   "CREATE TRIGGER refuse_bad BEFORE INSERT ON delivery "
                   "FOR EACH ROW EXECUTE FUNCTION refuse_bad()"],
}


@pytest.fixture
def other(rt):
    """The same home opened again: its connections see only what was committed."""
    with Signoff(rt.home) as again:
        yield again


def _durable(other, delivery):
    with storage.session(other.database):
        try:
            return Delivery.select().where(Delivery.id == delivery).count()
        finally:
            storage.drop_connection(other.database)  # this caller thread's own


class Gate:
    """Holds every write until opened, so the calls that arrive meanwhile pile up."""

    def __init__(self, commits):
        self.open = threading.Event()
        self.entered = []
        self._write = commits.write
        commits.write = self

    def __call__(self, jobs):
        self.entered.append(len(jobs))
        assert self.open.wait(60), "the gate was never opened"
        return self._write(jobs)


def _callers(rt, other, events):
    """Start one thread per event, each calling ``enqueue_events`` with it alone;
    the first is inside its write before the others start."""
    answers, durable = {}, {}

    def call(event):
        try:
            [result] = rt.enqueue_events([event])
        except Exception as exc:  # noqa: BLE001 - the caller's own answer is the point
            answers[event["event_id"]] = exc
            return
        finally:
            storage.drop_connection(rt.database)  # this caller thread's own
        answers[event["event_id"]] = result
        durable[event["event_id"]] = _durable(other, result.delivery)

    threads = [threading.Thread(target=call, args=(e,)) for e in events]
    threads[0].start()
    return threads, answers, durable


def _line_up(rt, gate, threads):
    # The first call writes in its own thread; the writer thread takes the
    # second and waits for that write to end; the others queue behind it, to
    # be written together.
    taken = []  # the size of each batch the writer thread took, as it takes it
    commit = rt.commits._commit
    rt.commits._commit = lambda batch: (taken.append(len(batch)), commit(batch))[1]
    wait_for(lambda: len(gate.entered) == 1, what="the first caller writing")
    threads[1].start()
    wait_for(lambda: taken == [1], what="the writer thread taking the second")
    for thread in threads[2:]:
        thread.start()
    wait_for(lambda: rt.commits._queue.qsize() == len(threads) - 2, what="the callers queued")
    assert len(gate.entered) == 1  # the writer thread waits for the lone caller's write


def test_concurrent_calls_share_commits_and_each_answer_follows_its_commit(rt, other):
    gate = Gate(rt.commits)
    events = [make_event(event_id=f"evt-{i}") for i in range(CALLERS)]
    threads, answers, durable = _callers(rt, other, events)
    _line_up(rt, gate, threads)
    assert answers == {}  # nobody is answered before a commit
    gate.open.set()
    for thread in threads:
        thread.join(60)
    assert sorted(gate.entered) == [1, 1, CALLERS - 2]
    assert all(answers[e["event_id"]].accepted for e in events)
    assert durable == {e["event_id"]: 1 for e in events}
    assert len({answers[e["event_id"]].delivery for e in events}) == CALLERS
    assert Delivery.select().count() == CALLERS


def test_a_failing_call_gets_its_own_error_and_the_others_of_its_batch_commit(rt, other):
    for sql in REFUSE_BAD[storage.engine_of(rt.database).kind]:
        rt.database.execute_sql(sql)
    gate = Gate(rt.commits)
    events = [make_event(event_id=f"evt-{i}") for i in range(CALLERS - 1)]
    events.insert(3, make_event(event_id="evt-bad"))
    threads, answers, durable = _callers(rt, other, events)
    _line_up(rt, gate, threads)
    gate.open.set()
    for thread in threads:
        thread.join(60)
    bad = answers.pop("evt-bad")
    assert isinstance(bad, Exception) and "refused by the test" in str(bad)
    assert all(a.accepted for a in answers.values()) and len(answers) == CALLERS - 1
    assert durable == {e: 1 for e in answers}
    assert sorted(Delivery.select(Delivery.event_id).tuples()) == sorted(
        (e,) for e in answers)


def test_a_sequential_caller_writes_in_its_own_thread(rt, other):
    for i in range(3):
        [result] = rt.enqueue_events([make_event(event_id=f"evt-{i}")])
        assert result.accepted and _durable(other, result.delivery) == 1
    assert rt.commits.batches == 0  # no hand-over to the writer thread


def test_an_unknown_monitor_is_refused_before_anything_is_queued(rt):
    with pytest.raises(Refused) as refused:
        rt.enqueue_events([make_event()], monitor_id="nope")
    assert refused.value.code == "unknown_monitor"
    assert Delivery.select().count() == 0


def test_a_call_inside_the_callers_transaction_is_written_in_it(rt, other):
    # Another thread's write is in progress, so the call would be handed to the
    # writer thread; its row must instead commit or vanish with the transaction.
    gate = Gate(rt.commits)
    [first], answers, _ = _callers(rt, other, [make_event(event_id="evt-0")])
    wait_for(lambda: len(gate.entered) == 1, what="the first caller writing")
    opener = threading.Timer(20, gate.open.set)  # only a call handed over waits for it
    opener.start()
    try:
        with storage.session(rt.database), rt.database.atomic() as transaction:
            [result] = rt.enqueue_events([make_event(event_id="evt-inside")])
            assert result.accepted and not gate.open.is_set()
            assert _durable(other, result.delivery) == 0  # not committed yet
            transaction.rollback()
    finally:
        opener.cancel()
        gate.open.set()
        first.join(60)
    assert answers["evt-0"].accepted
    with storage.session(other.database):  # (evt-0 may have taken the rolled-back id)
        assert [d.event_id for d in Delivery.select()] == ["evt-0"]
