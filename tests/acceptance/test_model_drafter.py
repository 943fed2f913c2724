"""The model drafter through real processes: a worker against a model server that
misbehaves, and why its attempts failed, as the worker's log and the pages say it."""

import json
import subprocess
import time

from helpers import OPERATOR, child_env, make_event, read_here, signoff_cmd, wait_for
from modelserver import configure, error_body, model  # noqa: F401 (model: a fixture)
from servekit import logged_in
from signoff.app import Signoff
from signoff.models import Attempt, Delivery


def drafting_home(home, server, **options):
    """A real-clock home drafting with ``server``, one record and its material, bound."""
    configure(home, server, **options)
    rt = read_here(Signoff.init(home))
    rt.host().put_record("comment-1", document="doc-demo", text="please add the date")
    rt.host().put_material("doc-demo", "2026-11-01")
    rt.bind("doc-demo", window_s=86_400)
    return rt


def signoff(home, *args):
    """Run ``signoff --home HOME ARGS --json`` to its end: its parsed answer."""
    done = subprocess.run(signoff_cmd(home, *args, "--json"), env=child_env(),
                          capture_output=True, timeout=60, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_a_trickling_server_gets_one_call_at_a_time_and_the_drain_ends(home, model):
    # Each answer would take over a minute, a byte every 0.15 s: every read is quick,
    # so only the call's own deadline ends it, well within the 4 s lease.
    rt = drafting_home(home, model, timeout_s=1.5)
    try:
        for _ in range(3):  # draft_attempts
            model.trickle({"draft": "Demo date: 2026-11-01.", "open_questions": [],
                           "evidence": ["reference://materials/doc-demo"]}, every=0.15)
        rt.enqueue_events([make_event(occurred=int(time.time()))])
        _, log = signoff(home, "worker", "--drain", "--workers", "2", "--lease-ttl", "4")
        [row] = Delivery.select()
        assert (row.status, row.last_code, row.attempts) == ("dead", "drafter_timeout", 3)
        codes = [a.code for a in Attempt.select().order_by(Attempt.id)]
        assert codes == ["drafter_timeout"] * 3  # no lease ever lapsed mid-call
        assert model.overlaps == [] and len(model.requests) == 3
        assert model.trickled_whole == 0
        wait_for(lambda: model.answering() == 0, 10, what="the last hang-up")
        failed = [line for line in log.splitlines() if " WARNING " in line]
        assert len(failed) == 3 and all(
            "draft attempt failed (drafter_timeout): the model server did not answer within "
            "1.5 s" in line for line in failed)
        assert failed[-1].endswith("a dead letter now")
    finally:
        rt.close()


def test_the_pages_show_why_a_delivery_failed(home, model):
    rt = drafting_home(home, model)
    try:
        model.error(401, error_body("Incorrect <b>API key</b> provided", code="invalid_api_key"))
        rt.enqueue_events([make_event(occurred=int(time.time()))])
        rt.run_until_idle()
        [letter] = rt.dead_letters()
        with logged_in(home, "alice", rt.add_reviewer("alice")["token"]) as c:
            listing = c.get("/dead-letters").text
            page = c.get(f"/deliveries/{letter['ref']}").text
        said = "(HTTP 401, invalid_api_key; it said: Incorrect &lt;b&gt;API key&lt;/b&gt; provided)"
        assert said in listing and said in page and 'id="last-reason"' in page
        assert "<b>" not in listing + page
    finally:
        rt.close()


def test_a_drain_leaves_a_retry_due_tomorrow_and_events_retry_hurries_it(home, model):
    rt = drafting_home(home, model)
    try:
        model.error(429, error_body("slow down"), headers={"Retry-After": "1"})
        model.error(429, error_body("slow down"), headers={"Retry-After": "999999999"})
        rt.enqueue_events([make_event(occurred=int(time.time()))])
        summary, log = signoff(home, "worker", "--drain")
        [row] = Delivery.select()
        assert (row.status, row.last_code, row.attempts) == ("retrying", "drafter_rate_limited", 2)
        assert len(model.requests) == 2  # the retry due in a second was waited for
        assert summary["left_waiting"] == {"deliveries": 1, "tasks": 0,
                                           "next_due_at": row.next_at}
        assert "drained, leaving 1 delivery and 0 task retries waiting, due more than 60s " \
               "from now" in log
        # The operator hurries it: due now, the next drain tries it at once.
        assert signoff(home, "events", "retry", str(row.id))[0]["next_at"] < row.next_at
        model.answer({"draft": "Demo date: 2026-11-01.", "open_questions": [],
                      "evidence": ["reference://materials/doc-demo"]})
        summary, _ = signoff(home, "worker", "--drain")
        row = Delivery.get_by_id(row.id)
        assert (row.status, row.outcome, row.attempts) == ("done", "ready", 3)
        assert summary["left_waiting"]["deliveries"] == 0
        assert [a["actor"] for a in rt.audit() if a["code"] == "retry"] == [OPERATOR]
    finally:
        rt.close()
