"""Resume after a cancel or an expiry, and the observation gaps (docs/policies-and-batches.md)."""

import json

import pytest
from click.testing import CliRunner
from helpers import T0, make_event, read_here

from signoff.admin import gaps
from signoff.app import Signoff
from signoff.rules.canonical import digest
from signoff.cli import main
from signoff.errors import Refused
from signoff.models import Delivery, Gap, Monitor, Task
from signoff.commands.render import render_gaps, render_stats

HOUR = 3600


@pytest.fixture
def watched(rt, host, clock):
    """The reference host stamps record changes with the fake clock."""
    host.now = clock.now
    return rt


def deliver(rt, monitor_id, n, event_id=None):
    rt.enqueue_events([make_event(event_id=event_id or f"evt-{n}", record_id=f"comment-{n}",
                                  occurred=int(rt.clock.now()))], monitor_id=monitor_id)
    rt.run_until_idle()


def refusal(call, *args, **kwargs):
    with pytest.raises(Refused) as info:
        call(*args, **kwargs)
    return info.value.code


def test_resume_new_only_records_the_gap_and_leaves_old_tasks_as_they_ended(watched, clock, host):
    rt = watched
    deliver(rt, "default", 1)
    [old_task] = rt.tasks()
    clock.advance(100)
    rt.cancel("default")
    clock.advance(HOUR)
    host.put_record("comment-2", document="doc-demo")  # changed while nobody watched
    answer = rt.resume("default", "default-2", "new_only")
    assert answer["replayed"] == []
    gap = answer["gap"]
    assert (gap["from"], gap["to"], gap["seconds"]) == (T0 + 100, T0 + 100 + HOUR, HOUR)
    assert (gap["monitor"], gap["previous"], gap["mode"]) == ("default-2", "default", "new_only")
    assert gap["observed"].startswith("not observed")
    new = answer["monitor"]
    old = Monitor.get_by_id("default")
    assert (new["document"], new["event_names"], new["window_s"], new["active"]) == (
        old.document, old.event_names, old.window_s, True)
    assert new["grant_digest"] == digest(host.context())
    assert rt.task(old_task["key"])["status"] == "cancelled"
    assert Delivery.select().count() == 1  # nothing was queued from the gap
    assert rt.gaps()["resume_gaps"] == [gap]
    assert rt.stats()["observation_gaps"] == {"resume_gaps": 1, "lapse_gaps": 0,
                                              "not_observed_s": HOUR, "stale_events": 0}
    deliver(rt, "default-2", 2)  # new events flow to the new monitor
    assert {t["monitor"] for t in rt.tasks(status="ready")} == {"default-2"}


def test_replay_queues_the_records_changed_in_the_gap_as_fresh_events(watched, clock, host):
    rt = watched
    host.put_record("comment-0", document="doc-demo")  # changed before the gap: not replayed
    clock.advance(10)
    rt.cancel("default")
    clock.advance(HOUR)
    host.put_record("comment-2", document="doc-demo")
    clock.advance(1)
    host.put_record("comment-1", version=2)
    host.put_record("elsewhere", document="doc-other")
    answer = rt.resume("default", "again", "replay")
    gap = Gap.get()
    assert gap.replayed == 2 and answer["gap"]["replayed"] == 2
    expected = [gaps.replay_event_id(gap.id, rid) for rid in ("comment-2", "comment-1")]
    assert [r["event_id"] for r in answer["replayed"]] == expected
    rows = list(Delivery.select().order_by(Delivery.id))
    assert [(d.monitor, d.record_id, d.occurred) for d in rows] == [
        ("again", "comment-2", int(clock.now())), ("again", "comment-1", int(clock.now()))]
    rt.run_until_idle()
    ready = {(t["record_id"], t["version"]) for t in rt.tasks(status="ready")}
    assert ready == {("comment-2", 1), ("comment-1", 2)}
    assert gaps.replay_event_id(gap.id, "comment-2") == expected[0]  # deterministic
    assert answer["gap"]["observed"].startswith("not observed")


def test_resume_after_expiry_starts_the_gap_at_the_expiry(watched, clock):
    rt = watched
    expires = Monitor.get_by_id("default").expires_at
    clock.advance(expires - clock.now() + 600)
    gap = rt.resume("default", "next", "new_only")["gap"]
    assert (gap["from"], gap["seconds"]) == (expires, 600)


def test_a_host_without_changes_refuses_replay_and_changes_nothing(tmp_path, clock):
    home = tmp_path / "old-host"
    home.mkdir()
    (home / "signoff.toml").write_text('[host]\nfactory = "testhosts:NoChangesHost"\n',
                                       encoding="utf-8")
    rt = Signoff.init(home, clock=clock)
    read_here(rt)
    try:
        rt.bind("doc-demo")
        rt.cancel("default")
        assert refusal(rt.resume, "default", "again", "replay") == "replay_unsupported"
        assert Monitor.select().count() == 1 and Gap.select().count() == 0
        assert rt.resume("default", "again", "new_only")["gap"]["mode"] == "new_only"
    finally:
        rt.close()


def test_resume_refusals(watched):
    rt = watched
    assert refusal(rt.resume, "nope", "x", "new_only") == "unknown_monitor"
    assert refusal(rt.resume, "default", "x", "new_only") == "monitor_active"
    rt.cancel("default")
    assert refusal(rt.resume, "default", "default", "new_only") == "cancelled"
    assert refusal(rt.resume, "default", "x", "sideways") == "invalid_mode"
    rt.resume("default", "x", "new_only")
    assert refusal(rt.resume, "default", "y", "new_only") == "already_resumed"
    assert Gap.select().count() == 1


def test_stale_events_are_gaps_too(watched, clock):
    rt = watched
    rt.enqueue_events([make_event(occurred=T0 - HOUR)])
    rt.run_until_idle()
    listed = rt.gaps()
    assert listed["stale_events"]["total"] == 1
    [stale] = listed["stale_events"]["latest"]
    assert (stale["event_id"], stale["record_id"], stale["occurred"]) == ("evt-1", "comment-1",
                                                                       T0 - HOUR)
    assert rt.stats()["observation_gaps"]["stale_events"] == 1


def test_quiet_is_never_shown_as_no_changes(watched, clock):
    rt = watched
    rt.cancel("default")
    clock.advance(HOUR)
    rt.resume("default", "again", "replay")  # nothing changed that the host knows of
    text = render_gaps(rt.gaps()) + render_stats(rt.stats())
    assert "not observed" in text and "no change" not in text.lower()
    assert "1 resume gap(s), 3600s not observed" in render_stats(rt.stats())


# -- the command line ------------------------------------------------------------

def cli(home, *args):
    result = CliRunner().invoke(main, ["--home", str(home), *args])
    assert "Traceback" not in result.output
    return result


def test_gaps_prints_times_as_dates_and_its_json_keeps_the_numbers(watched, clock, home):
    rt = watched
    rt.enqueue_events([make_event(occurred=T0 - HOUR)])  # T0 is 1970-01-12 13:46:40 UTC
    rt.run_until_idle()
    rt.cancel("default")
    clock.advance(HOUR)
    rt.resume("default", "again", "new_only")
    human = cli(home, "gaps").stdout
    assert "1970-01-12 13:46:40 → 1970-01-12 14:46:40  default → again" in human
    assert "  1970-01-12 12:46:40  default  evt-1  comment-1: not observed in time" in human
    assert str(T0) not in human and str(T0 - HOUR) not in human
    listed = json.loads(cli(home, "gaps", "--json").stdout)
    [gap] = listed["resume_gaps"]
    assert (gap["from"], gap["to"]) == (T0, T0 + HOUR)
    assert listed["stale_events"]["latest"][0]["occurred"] == T0 - HOUR


def test_resume_and_gaps_cli(tmp_path):
    home = tmp_path / "cli-home"
    rt = Signoff.init(home)
    read_here(rt)
    rt.bind("doc-demo")
    rt.close()
    assert cli(home, "monitor", "cancel", "default", "--json").exit_code == 0
    assert cli(home, "monitor", "resume", "default", "--as", "b", "--json").exit_code == 2
    assert cli(home, "monitor", "resume", "default", "--as", "b", "--new-only", "--replay",
               "--json").exit_code == 2
    result = cli(home, "monitor", "resume", "default", "--as", "b", "--replay", "--json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert set(answer) == {"monitor", "gap", "replayed"}
    assert answer["monitor"]["id"] == "b" and answer["gap"]["mode"] == "replay"
    again = cli(home, "monitor", "resume", "default", "--as", "c", "--new-only", "--json")
    assert again.exit_code == 1 and json.loads(again.stdout)["error"] == "already_resumed"
    listed = json.loads(cli(home, "gaps", "--json").stdout)
    assert set(listed) == {"resume_gaps", "lapse_gaps", "stale_events", "not_observed_s"}
    assert [g["gap"] for g in listed["resume_gaps"]] == [answer["gap"]["gap"]]
    human = cli(home, "gaps").output
    assert "not observed" in human and "no change" not in human.lower()
    stats = json.loads(cli(home, "stats", "--json").stdout)
    assert stats["observation_gaps"]["resume_gaps"] == 1
    assert Task.select().count() == 0
