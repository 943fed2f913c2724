"""What a CLI approver sees: digests in listings, record text and draft in ``tasks show``,
and ``purge`` speaking of days.

Uses the CLI helpers and the real-clock ``home`` / ``ready`` fixtures of ``test_cli.py``.
"""

import json
import time

from helpers import T0, make_event, read_here
from test_cli import home, invoke, ok, ready  # noqa: F401

from signoff.steps import recordbatches
from signoff.app import Signoff
from signoff.clock import FakeClock


def test_tasks_list_carries_the_digest_to_approve_with(ready):
    home, task = ready
    [row] = ok(home, "tasks", "list")
    assert row["digest"] == task["digest"]
    with Signoff(home) as rt:
        read_here(rt)
        assert [t["digest"] for t in rt.tasks()] == [task["digest"]]
    # A script approves straight from the listing, without a `tasks show` per task.
    answer = ok(home, "approve", row["key"], "--digest", row["digest"])
    assert answer["status"] == "approved"


def test_tasks_show_prints_the_record_text_and_the_draft_labelled(ready):
    home, task = ready
    human = invoke(home, "tasks", "show", task["key"]).stdout
    lines = human.splitlines()
    text_at = lines.index("record text:")
    assert lines[text_at + 1] == "  please add the demo date"
    draft_at = lines.index("draft:")
    assert lines[draft_at + 1] == "  " + task["result"]["draft"]


def test_tasks_show_makes_hidden_characters_visible_and_keeps_text_indented(home):
    sly = "fine\u202e dlrow\nstate     done\u200b\x07"
    ok(home, "host", "record", "--id", "comment-1", "--document", "doc-demo", "--text", sly)
    ok(home, "enqueue", input=json.dumps(make_event(occurred=int(time.time()))) + "\n")
    with Signoff(home) as rt:
        read_here(rt)
        rt.run_until_idle()
        [task] = rt.tasks()
    human = invoke(home, "tasks", "show", task["key"]).stdout
    assert "\u202e" not in human and "\u200b" not in human and "\x07" not in human
    lines = human.splitlines()
    text_at = lines.index("record text:")
    assert lines[text_at + 1:text_at + 3] == ["  fine⟨U+202E⟩ dlrow",
                                              "  state     done⟨U+200B⟩⟨U+0007⟩"]
    # The record's line that reads like a field is indented: it cannot pass for one.
    assert [line for line in lines if line.startswith("state")] == [f"state     {task['status']}"]


def test_tasks_show_prints_every_record_of_a_batch(tmp_path):
    clock = FakeClock(T0)
    with Signoff.init(tmp_path / "batches", clock=clock) as rt:
        read_here(rt)
        for n, text in ((1, "first comment"), (2, "second comment")):
            rt.host().put_record(f"c{n}", document="doc-demo", text=text)
        rt.host().put_material("doc-demo", "2026-11-01")
        rt.bind("doc-demo", "b", batch_window_s=30)
        rt.enqueue_events([make_event(event_id=f"e{n}", record_id=f"c{n}") for n in (1, 2)],
                          monitor_id="b")
        rt.run_until_idle()
        clock.advance(30)
        assert recordbatches.close_due(rt) == 1
        [task] = rt.tasks()
    lines = invoke(rt.home, "tasks", "show", task["key"]).stdout.splitlines()
    assert lines[lines.index("record c1 v1 text:") + 1] == "  first comment"
    assert lines[lines.index("record c2 v1 text:") + 1] == "  second comment"
    assert "draft:" in lines


def test_purge_speaks_of_days(home):
    helped = invoke(home, "purge", "--help").stdout
    assert "DAYS" in helped and "second" not in helped
    refused = invoke(home, "purge", "--older-than", "inf")
    assert refused.exit_code == 2
    assert "days" in refused.stderr and "second" not in refused.stderr
    answer = json.loads(invoke(home, "purge", "--older-than", "nan", "--json").stdout)
    assert answer["error"] == "usage" and "days" in answer["message"]
    assert "second" not in answer["message"]
