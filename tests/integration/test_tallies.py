"""The counts of finished rows are kept as rows finish, and always say what the rows say.

``stats``, ``/metrics`` and the listings read the tallies of settled rows (a done
delivery; a done, rejected or expired task; an attempt) instead of counting the
whole history. Each test drives real work through a home and compares what the
views say with a count of the rows themselves: before the deltas are folded,
after, and across an upgrade that counts them afresh.
"""

import threading

from peewee import fn

from helpers import make_event
from signoff import storage, views
from signoff.app import Signoff
from signoff.models import Attempt, Delivery, Task, TallyDelta
from signoff.state import tallies


def _rows_say(rt):
    """What the rows themselves say, counted the slow way."""
    with storage.bind(rt.database):
        deliveries = dict(Delivery.select(Delivery.status, fn.COUNT(Delivery.id))
                          .group_by(Delivery.status).tuples())
        outcomes = dict(Delivery.select(Delivery.outcome, fn.COUNT(Delivery.id))
                        .where(Delivery.outcome.is_null(False)).group_by(Delivery.outcome).tuples())
        tasks = dict(Task.select(Task.status, fn.COUNT(Task.key)).group_by(Task.status).tuples())
        attempts = sorted(Attempt.select(Attempt.step, Attempt.code, fn.COUNT(Attempt.id))
                          .group_by(Attempt.step, Attempt.code).tuples())
        parked = Task.select().where(Task.parked == True).count()  # noqa: E712
    return {"deliveries": deliveries, "outcomes": outcomes, "tasks": tasks,
            "attempts": attempts, "parked": parked,
            "lease_expiries": sum(n for _, code, n in attempts if code == "lease_expired")}


def _views_say(rt):
    stats = rt.stats()
    with storage.bind(rt.database):
        attempts = [tuple(a) for a in views.metric_counts(rt.clock.now())["attempts"]]
        total = views.task_total()
        by_status = {s: views.task_total(s) for s in stats["tasks"]}
        events = views.delivery_total()
    assert total == sum(stats["tasks"].values()) and by_status == stats["tasks"]
    assert events == sum(stats["deliveries"].values())
    # gaps counts stale events from the tallies itself; stats from its outcomes.
    assert rt.gaps()["stale_events"]["total"] == stats["outcomes"].get("stale_event", 0)
    return {"deliveries": stats["deliveries"], "outcomes": stats["outcomes"],
            "tasks": stats["tasks"], "attempts": sorted(attempts), "parked": stats["parked"],
            "lease_expiries": stats["lease_expiries"]}


def _records(rt, count):
    host = rt.host()
    for i in range(count):
        host.put_record(f"r-{i}", document="doc-demo", text="please add the demo date")


def _work(rt, first, n):
    """Events for records ``first``..``first + n``: most approved and done, one rejected,
    one left ready, one for another document, one a day late (stale), then one more for a done task's record
    (a duplicate)."""
    at = int(rt.clock.now())
    events = [make_event(event_id=f"e{i}", record_id=f"r-{i}", occurred=at)
              for i in range(first, first + n)]
    events.append(make_event(event_id=f"elsewhere-{first}", document="doc-other", occurred=at))
    events.append(make_event(event_id=f"late-{first}", record_id=f"r-{first}", occurred=at - 86400))
    rt.enqueue_events(events)
    rt.run_until_idle()
    ready = [t for t in rt.tasks(status="ready") if t["monitor"] == "default"]
    for task in ready[:-2]:
        rt.approve(task["key"], task["digest"])
    rt.reject(ready[-2]["key"], reason="not this one", digest=ready[-2]["digest"])
    rt.run_until_idle()
    # An event for a record whose task is done already: a duplicate of it.
    rt.enqueue_events([make_event(event_id=f"e{first}-again", record_id=ready[0]["record_id"],
                                  occurred=at)])
    rt.run_until_idle()


def test_the_views_count_what_the_rows_hold_before_and_after_folding(rt, clock):
    _records(rt, 12)
    rt.bind("doc-demo", "expiring", approval_ttl_s=60)
    _work(rt, 0, 5)
    [late] = rt.enqueue_events([make_event(event_id="late", record_id="r-11")],
                               monitor_id="expiring")
    rt.run_until_idle()
    clock.sleep(120)
    rt.run_until_idle()  # its reaper pass expires the task nobody decided in time
    said = _rows_say(rt)
    assert said["tasks"].get("done") and said["tasks"].get("rejected") and said["tasks"].get("expired")
    assert said["outcomes"].get("duplicate") and said["outcomes"].get("nonmatch")
    assert said["outcomes"].get("stale_event")
    with storage.bind(rt.database):
        assert TallyDelta.select().count(), "nothing was tallied as the rows finished"
    assert _views_say(rt) == said

    with storage.bind(rt.database):
        assert tallies.fold() > 0
        assert TallyDelta.select().count() == 0
    assert _views_say(rt) == said

    _work(rt, 5, 5)  # new deltas beside the folded tallies
    assert _views_say(rt) == _rows_say(rt)


def test_two_folds_at_once_count_each_delta_once(rt):
    _records(rt, 30)
    for first in range(0, 30, 6):
        _work(rt, first, 5)
    said = _rows_say(rt)
    done = []

    def fold():
        with rt.database.connection_context(), storage.bind(rt.database):
            while True:
                folded = tallies.fold(limit=3)
                done.append(folded)
                if not folded:
                    return

    threads = [threading.Thread(target=fold) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sum(done) > 0
    assert _views_say(rt) == said


def test_an_upgrade_counts_the_tallies_from_the_rows(rt, home, clock):
    _records(rt, 6)
    _work(rt, 0, 5)
    said = _rows_say(rt)
    database = rt.database
    database.execute_sql('DROP TABLE "tally"')
    database.execute_sql('DROP TABLE "tally_delta"')
    database.execute_sql(f"UPDATE {storage.SCHEMA_TABLE} SET version = 6")
    rt.close()
    with Signoff.init(home, clock=clock) as again:
        assert _views_say(again) == said


def test_an_outcome_of_any_text_is_tallied_as_it_reads(rt):
    strange = "refused\x00by host \U000f0000 " + "x" * 400
    with storage.bind(rt.database):
        tallies.record({("delivery", "default", "done", strange): 2})
        assert tallies.by_detail("delivery") == {("done", strange): 2}
        tallies.fold()
        tallies.record({("delivery", "default", "done", strange): 1})
        assert tallies.by_detail("delivery") == {("done", strange): 3}
        tallies.fold()
        assert tallies.by_detail("delivery") == {("done", strange): 3}
