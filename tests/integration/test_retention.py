"""Retention (docs/configuration.md): finished tasks lose snapshot and result, nothing else.

Tasks are aged with the fake clock; the CLI tests run ``signoff purge`` on a real
home whose config sets the retention period.
"""

import json
import threading

import pytest
from click.testing import CliRunner
from peewee import fn
from helpers import T0, make_event, wait_for, read_here

from signoff import storage
from signoff.chores import retention, run_shared
from signoff.app import Signoff
from signoff.rules.canonical import digest
from signoff.cli import main
from signoff.errors import Refused
from signoff.state.history import bury
from signoff.state.tasks import move_task
from signoff.models import Chore as ChoreRow
from signoff.models import Inbox, PurgedTask, Task, WebhookAnswer, WebhookDigest, WebhookRefusal

DAY = 24 * 60 * 60
MONITOR = "year"  # bound for longer than the ages these tests give their tasks


@pytest.fixture(autouse=True)
def year_monitor(request):
    if "rt" in request.fixturenames:
        request.getfixturevalue("rt").bind("doc-demo", MONITOR, ttl_s=400 * DAY)


def ready(rt, n=1, event_id=None):
    rt.host().put_record(f"comment-{n}", document="doc-demo")
    [line] = rt.enqueue_events([make_event(event_id=event_id or f"evt-{n}",
                                           record_id=f"comment-{n}",
                                           occurred=int(rt.clock.now()))],
                                monitor_id=MONITOR)
    rt.run_until_idle()
    return Task.get(Task.record_id == f"comment-{n}").key


def done(rt, n=1):
    key = ready(rt, n)
    rt.approve(key, rt.task(key)["digest"], by="alice")
    rt.run_until_idle()
    assert rt.task(key)["status"] == "done"
    return key


def kill(rt, key):
    """Move an approved task to the dead letters, as a spent submit budget does."""
    now = rt.clock.now()
    move_task(key, ["approved"], "dead", now, code="TimeoutError")
    bury("task", key, "submit", "TimeoutError", 8, now)


def test_a_done_task_past_retention_keeps_everything_but_snapshot_and_result(rt, clock, host):
    key = done(rt)
    before = rt.task(key)
    clock.advance(31 * DAY)
    summary = retention.purge(rt)
    assert (summary["purged"], summary["by_status"], summary["dry_run"]) == (1, {"done": 1}, False)
    after = rt.task(key)
    assert after["purged"] is True and after["purged_at"] == clock.now()
    assert after["record"] is None and after["result"] is None
    assert after["state"] == "purged (done)"
    kept = ("key", "status", "digest", "approved_digest", "approved_by", "approved_at",
            "updated_at", "attempts", "history", "audit", "record_id", "version")
    assert {k: after[k] for k in kept} == {k: before[k] for k in kept}
    row = Task.get_by_id(key)
    assert row.record == {} and row.result == {}
    assert host.results()[0]["key"] == key  # what was written stays written


def test_the_inbox_keeps_deduping_purged_events(rt, clock):
    key = done(rt)
    clock.advance(31 * DAY)
    retention.purge(rt)
    rt.enqueue_events([make_event(occurred=int(clock.now()))], monitor_id=MONITOR)  # evt-1 again
    rt.run_until_idle()
    [*_, again] = rt.events()
    assert (again["outcome"], again["task_key"]) == ("duplicate", key)
    assert Task.select().count() == 1 and Inbox.select().count() == 1
    assert rt.task(key)["purged"] is True


def test_only_tasks_finished_longer_ago_than_the_period_go(rt, clock):
    old = done(rt, 1)
    clock.advance(20 * DAY)
    young = done(rt, 2)
    clock.advance(11 * DAY)  # old finished 31 days ago, young 11
    assert retention.purge(rt)["purged"] == 1
    assert rt.task(old)["purged"] and not rt.task(young)["purged"]
    assert retention.purge(rt, older_than_days=10)["purged"] == 1
    assert rt.task(young)["purged"]
    assert retention.purge(rt, older_than_days=0)["purged"] == 0  # nothing is purged twice


def test_open_tasks_and_dead_tasks_never_replayed_are_kept(rt, clock, host):
    waiting, approved, dead = ready(rt, 1), ready(rt, 2), ready(rt, 3)
    rt.approve(approved, rt.task(approved)["digest"])  # no worker runs: it stays approved
    rt.approve(dead, rt.task(dead)["digest"])
    kill(rt, dead)
    clock.advance(365 * DAY)
    assert retention.purge(rt, dry_run=True)["purged"] == 0
    assert retention.purge(rt)["purged"] == 0
    assert {rt.task(k)["status"] for k in (waiting, approved, dead)} == {"ready", "approved", "dead"}
    assert all(rt.task(k)["result"] for k in (waiting, approved, dead))


def test_a_dead_task_is_finished_once_replayed_and_dead_again(rt, clock):
    key = ready(rt)
    rt.approve(key, rt.task(key)["digest"])
    kill(rt, key)
    [letter] = rt.dead_letters()
    rt.replay(letter["id"])
    kill(rt, key)
    clock.advance(31 * DAY)
    assert retention.purge(rt)["by_status"] == {"dead": 1}
    newest = rt.dead_letters()[-1]
    with pytest.raises(Refused) as info:
        rt.replay(newest["id"])
    assert info.value.code == "purged"
    assert Task.get_by_id(key).status == "dead"


def test_every_finished_status_is_purged(rt, clock):
    keys = {"done": done(rt, 1)}
    keys["rejected"] = ready(rt, 2)
    rt.reject(keys["rejected"])
    keys["blocked"] = ready(rt, 3)
    rt.host().put_record("comment-3", version=2)
    with pytest.raises(Refused):
        rt.approve(keys["blocked"], rt.task(keys["blocked"])["digest"])
    keys["cancelled"] = ready(rt, 4)
    rt.cancel(MONITOR)
    assert {s: rt.task(k)["status"] for s, k in keys.items()} == {s: s for s in keys}
    clock.advance(31 * DAY)
    dry = retention.purge(rt, dry_run=True)
    assert dry["by_status"] == {s: 1 for s in keys} and PurgedTask.select().count() == 0
    assert retention.purge(rt)["by_status"] == dry["by_status"]


def test_purge_works_in_chunks_and_reports_progress(rt, clock, monkeypatch):
    monkeypatch.setattr(retention, "CHUNK", 2)
    keys = [ready(rt, n) for n in range(1, 6)]
    for key in keys:
        rt.reject(key)
    clock.advance(31 * DAY)
    seen = []
    assert retention.purge(rt, progress=seen.append)["purged"] == 5
    assert seen == [2, 4, 5]
    assert PurgedTask.select().count() == 5


# Few keys a search (purgeable ones scattered over several), and several chunks in one.
@pytest.mark.parametrize("scan", [3, 100])
def test_a_search_reads_a_bounded_span_of_keys_and_finds_every_purgeable_one(
        rt, clock, monkeypatch, scan):
    monkeypatch.setattr(retention, "SCAN", scan)
    monkeypatch.setattr(retention, "CHUNK", 2)
    old = [ready(rt, n) for n in range(1, 8)]
    for key in old:
        rt.reject(key)
    clock.advance(31 * DAY)
    recent = [ready(rt, n) for n in range(8, 15)]  # rejected inside the period: kept
    for key in recent[:4]:
        rt.reject(key)
    seen = []
    assert retention.purge(rt, progress=seen.append)["purged"] == len(old)
    assert {k for (k,) in PurgedTask.select(PurgedTask.key).tuples()} == set(old)
    assert seen == sorted(seen) and seen[-1] == len(old)
    assert Task.get_by_id(recent[0]).result != {}


def test_the_search_for_purgeable_tasks_waits_for_no_writer(rt, clock):
    # The search runs in a read snapshot: a writer holding its transaction open
    # meanwhile (SQLite's one write lock) neither waits for it nor holds it up.
    keys = [ready(rt, n) for n in range(1, 4)]
    for key in keys:
        rt.reject(key)
    clock.advance(31 * DAY)
    writing, release, failures = threading.Event(), threading.Event(), []

    def hold_a_write_open():
        try:
            with storage.bind(rt.database), rt.database.atomic():
                Task.update(updated_at=Task.updated_at).where(Task.key == keys[0]).execute()
                writing.set()
                release.wait(60)
        except Exception as exc:  # noqa: BLE001 - what the writer met is the finding
            failures.append(exc)
            writing.set()
        finally:
            rt.database.close()  # this thread's connection

    writer = threading.Thread(target=hold_a_write_open)
    writer.start()
    try:
        assert writing.wait(30) and not failures
        found = []
        searcher = threading.Thread(target=lambda: found.append(
            _in(rt, lambda: retention._next_purgeable(rt.clock.now() - 30 * DAY, ""))))
        searcher.start()
        searcher.join(timeout=20)
        assert not searcher.is_alive(), "the search waited for the writer"
        assert found and sorted(found[0][0]) == sorted(keys) and found[0][1] is None
    finally:
        release.set()
        writer.join(timeout=30)
    assert not failures


def _in(rt, call):
    """``call()`` with ``rt``'s database bound, on a connection closed after it."""
    try:
        with storage.bind(rt.database):
            return call()
    finally:
        rt.database.close()


def test_the_hourly_purge_is_claimed_by_one_worker_and_keeps_its_summary(rt, home, clock):
    key = done(rt)
    other = Signoff(home, clock=clock)  # a second worker process on the same home
    read_here(other)
    clock.advance(31 * DAY)
    assert run_shared(rt, retention.RETENTION)["purged"] == 1
    assert run_shared(other, retention.RETENTION) is None  # ran less than an hour ago
    assert rt.task(key)["purged"]
    clock.advance(59 * 60)
    assert run_shared(other, retention.RETENTION) is None
    clock.advance(61)
    assert run_shared(other, retention.RETENTION)["purged"] == 0  # due again: this time ``other`` claims it
    assert run_shared(rt, retention.RETENTION) is None
    assert ChoreRow.get(ChoreRow.name == "purge").last_summary["purged"] == 0


def answer(n, at):
    WebhookAnswer.create(monitor=MONITOR, webhook_id=f"msg-{n}", delivery=n,
                         event_id=f"evt-{n}", at=at)
    WebhookDigest.create(monitor=MONITOR, webhook_id=f"msg-{n}", digest=f"{n:064x}")


def test_webhook_answers_past_the_period_are_dropped_in_chunks(rt, clock, monkeypatch):
    monkeypatch.setattr(retention, "CHUNK", 2)
    for n in range(5):
        answer(n, clock.now())
    clock.advance(20 * DAY)
    answer(5, clock.now())
    clock.advance(11 * DAY)  # five answers 31 days old, one 11
    assert retention.purge(rt, dry_run=True)["webhook_answers"] == 5
    assert WebhookAnswer.select().count() == 6  # a dry run only counts
    assert retention.purge(rt)["webhook_answers"] == 5
    assert [a.webhook_id for a in WebhookAnswer.select()] == ["msg-5"]
    assert [d.webhook_id for d in WebhookDigest.select()] == ["msg-5"]  # they go together
    assert retention.purge(rt)["webhook_answers"] == 0


def refusal_totals():
    return dict(WebhookRefusal.select(WebhookRefusal.code, fn.SUM(WebhookRefusal.count))
                .group_by(WebhookRefusal.code).tuples())


def test_old_refusal_counts_fold_into_one_row_and_the_totals_stay(rt, clock, monkeypatch):
    monkeypatch.setattr(retention, "CHUNK", 2)
    clock.advance(60 * DAY)  # so that the oldest minute below is still after the epoch
    minute = int(clock.now() // 60)
    for back, monitor, code, count in ((0, MONITOR, "bad_signature", 1),
                                       (31 * 24 * 60, MONITOR, "bad_signature", 4),
                                       (32 * 24 * 60, MONITOR, "bad_signature", 2),
                                       (33 * 24 * 60, MONITOR, "too_large", 3),
                                       (34 * 24 * 60, "", "unknown_monitor", 5)):
        WebhookRefusal.add(monitor, minute - back, code, count)
    totals = refusal_totals()
    assert retention.purge(rt, dry_run=True)["refusal_minutes"] == 4
    assert retention.purge(rt)["refusal_minutes"] == 4
    assert refusal_totals() == totals == {"bad_signature": 7, "too_large": 3, "unknown_monitor": 5}
    rows = {(r.monitor, r.minute, r.code): r.count for r in WebhookRefusal.select()}
    assert rows == {(MONITOR, minute, "bad_signature"): 1, (MONITOR, 0, "bad_signature"): 6,
                    (MONITOR, 0, "too_large"): 3, ("", 0, "unknown_monitor"): 5}
    WebhookRefusal.add(MONITOR, minute - 40 * 24 * 60, "too_large", 2)
    assert retention.purge(rt)["refusal_minutes"] == 1  # folded onto the row already there
    assert WebhookRefusal.get(monitor=MONITOR, minute=0, code="too_large").count == 5
    assert retention.purge(rt)["refusal_minutes"] == 0


# -- the command line ------------------------------------------------------------

def invoke(home, *args):
    result = CliRunner().invoke(main, ["--home", str(home), *args])
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def cli_home(tmp_path):
    home = tmp_path / "cli-home"
    rt = Signoff.init(home)
    read_here(rt)
    rt.host().put_record("comment-1", document="doc-demo")
    rt.host().put_material("doc-demo", "2026-11-01")
    rt.bind("doc-demo")
    [line] = rt.enqueue_events([make_event(occurred=int(rt.clock.now()))])
    rt.run_until_idle()
    key = Task.get().key
    rt.reject(key)
    rt.close()
    return home


def test_purge_cli_json_shapes_dry_run_and_usage_errors(cli_home):
    result = invoke(cli_home, "purge", "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    dry = json.loads(result.stdout)
    assert set(dry) == {"older_than_days", "cutoff", "dry_run", "purged", "by_status",
                        "webhook_answers", "refusal_minutes", "seconds"}
    assert (dry["dry_run"], dry["purged"], dry["older_than_days"]) == (True, 0, 30.0)
    dry = json.loads(invoke(cli_home, "purge", "--older-than", "0", "--dry-run", "--json").stdout)
    assert dry["by_status"] == {"rejected": 1}
    done_ = json.loads(invoke(cli_home, "purge", "--older-than", "0", "--json").stdout)
    assert done_["purged"] == 1 and done_["dry_run"] is False
    [task] = json.loads(invoke(cli_home, "tasks", "list", "--json").stdout)
    shown = json.loads(invoke(cli_home, "tasks", "show", task["key"], "--json").stdout)
    assert shown["purged"] is True and shown["result"] is None
    human = invoke(cli_home, "tasks", "show", task["key"])
    assert "purged" in human.output
    assert invoke(cli_home, "purge", "--older-than", "-1", "--json").exit_code == 2
    assert invoke(cli_home, "purge", "--older-than", "nan").exit_code == 2
    assert "would purge 0" in invoke(cli_home, "purge", "--dry-run").output


def set_retention(home, value):
    config = home / "signoff.toml"
    text = config.read_text(encoding="utf-8")
    assert "finished_days = 30\n" in text
    config.write_text(text.replace("finished_days = 30\n", f"finished_days = {value}\n"),
                      encoding="utf-8")


def test_the_retention_period_comes_from_the_config(cli_home):
    set_retention(cli_home, "0.000001")  # 86 ms
    summary = wait_for(lambda: [s for s in [json.loads(invoke(cli_home, "purge", "--json").stdout)]
                                if s["purged"]], what="the rejected task to age past retention")
    assert summary[0]["older_than_days"] == 0.000001 and summary[0]["purged"] == 1


@pytest.mark.parametrize("value", ["0", "-3", '"soon"'])
def test_a_bad_retention_period_is_bad_config(cli_home, value):
    set_retention(cli_home, value)
    result = invoke(cli_home, "purge", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"] == "bad_config"


def test_purged_digest_still_names_the_approved_result(rt, clock, host):
    key = done(rt)
    clock.advance(31 * DAY)
    retention.purge(rt)
    task = rt.task(key)
    # The digest still identifies what was written, though the text is gone.
    assert task["digest"] == task["approved_digest"] == digest(host.results()[0]["result"])
    assert task["updated_at"] == T0  # finishing time, untouched by the purge
