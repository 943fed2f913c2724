"""Delegation (docs/slack-and-delegation.md): while active, OTHER decides for NAME what NAME
may decide, recorded ``OTHER for NAME`` and counted once as OTHER; and the decision times.

On a real home and the fake clock (SQLite by default; PostgreSQL/Redis with the
``SIGNOFF_TEST_*`` variables).
"""

import json

import pytest
from click.testing import CliRunner
from helpers import T0, ready_task, refusal

from signoff.cli import main
from signoff.commands.render import render_stats, render_task
from signoff.models import Approval, Audit
from signoff.serve.site import Site


@pytest.fixture
def people(rt):
    """Monitors ``default`` and ``q`` (a quorum of two); ana may decide ``default`` only,
    bo every monitor, cy ``q`` only, ro nothing (read-only)."""
    rt.bind("doc-demo", "q", approvals=2)
    rt.add_reviewer("ana", monitors=["default"])
    rt.add_reviewer("bo")
    rt.add_reviewer("cy", monitors=["q"])
    rt.add_reviewer("ro", read_only=True)
    rt.host().put_record("comment-0", document="doc-demo", text="a second comment")
    return rt


def test_a_delegate_decides_for_the_delegator_and_every_face_shows_it(people, clock):
    rt = people
    rt.delegate("ana", "bo", until=str(T0 + 3600))
    key, digest = ready_task(rt)
    other, other_digest = ready_task(rt, record_id="comment-0", event_id="evt-0")
    clock.advance(90)
    answer = rt.approve(key, digest, by="bo", channel="page")
    assert answer["status"] == "approved"
    task = rt.task(key)
    assert [(a["by"], a["for"], a["channel"]) for a in task["approvals"]] == [
        ("bo", "ana", "page")]
    assert task["approved_by"] == "bo"  # the identity counted is the delegate's
    row = Audit.get(Audit.task_key == key, Audit.code == "approved")
    assert (row.actor, row.data) == ("bo", {"digest": digest, "quorum": 1, "for": "ana"})
    shown = render_task(task)
    assert "bo for ana (page)" in shown
    assert [r["who"] for r in task["timeline"] if r["code"] == "approved"] == ["bo for ana (page)"]
    rt.reject(other, "not now", by="bo", channel="api", digest=other_digest)
    rejected = rt.task(other)
    assert (rejected["rejected_by"], rejected["rejected_for"]) == ("bo", "ana")
    assert "rejected  by bo for ana: not now" in render_task(rejected)


def test_a_delegate_fills_one_place_whoever_they_decide_for(people):
    rt = people
    rt.add_reviewer("zed")
    rt.delegate("bo", "cy")
    rt.delegate("zed", "cy")
    key, digest = ready_task(rt, "q")
    first = rt.approve(key, digest, by="cy", channel="api", monitors={"q"}, for_reviewer="bo")
    assert first["approvals_missing"] == 1
    for stand_in in ("zed", None):  # for another delegator, and as themselves: still one place
        again = rt.approve(key, digest, by="cy", channel="api", monitors={"q"},
                           for_reviewer=stand_in)
        assert again["status"] == "ready" and again["approvals_missing"] == 1
    assert [(a.by, a.for_reviewer) for a in Approval.select()] == [("cy", "bo")]
    done = rt.approve(key, digest, by="bo", channel="page")  # bo, back, is another person
    assert done["status"] == "approved"
    assert sorted((a["by"], a["for"]) for a in rt.task(key)["approvals"]) == [
        ("bo", None), ("cy", "bo")]


def test_a_delegation_ends_at_until_and_at_undelegate(people, clock):
    rt = people
    rt.delegate("bo", "cy", until=str(T0 + 60))
    key, digest = ready_task(rt, "q")
    other, other_digest = ready_task(rt, record_id="comment-0", event_id="evt-0")
    clock.advance(61)
    assert refusal(rt.approve, key, digest, by="cy", channel="api", monitors={"q"},
                   for_reviewer="bo") == "not_delegated"
    assert not rt.task(key)["approvals"]
    answer = rt.approve(key, digest, by="cy", channel="api", monitors={"q"})
    assert answer["approvals_missing"] == 1
    assert [(a["by"], a["for"]) for a in rt.task(key)["approvals"]] == [("cy", None)]
    rt.delegate("ana", "bo", until="2030-01-01T00:00:00+00:00")
    rt.undelegate("ana")
    assert refusal(rt.approve, other, other_digest, by="bo", channel="api",
                   for_reviewer="ana") == "not_delegated"
    rt.approve(other, other_digest, by="bo", channel="api")
    assert rt.task(other)["approvals"][0]["for"] is None
    codes = [(r.code, r.subject) for r in Audit.select().where(
        Audit.code.in_(["delegated", "undelegated"])).order_by(Audit.seq)]
    assert codes == [("delegated", "bo"), ("delegated", "ana"), ("undelegated", "ana")]


def test_never_more_than_the_delegator_may_nor_the_delegate(people):
    rt = people
    rt.delegate("ana", "bo")
    key, digest = ready_task(rt, "q")  # q is not ana's
    assert refusal(rt.approve, key, digest, by="bo", channel="api",
                   for_reviewer="ana") == "not_delegated"
    assert refusal(rt.reject, key, "no", by="bo", channel="api", digest=digest,
                   for_reviewer="ana") == "not_delegated"
    assert rt.task(key)["status"] == "ready" and not rt.task(key)["approvals"]
    # bo's own decision on q is bo's alone: ana's delegation does not reach it
    rt.approve(key, digest, by="bo", channel="api")
    assert rt.task(key)["approvals"][0]["for"] is None
    # a decision within cy's own monitors, as the caller gives them, reaches no further
    rt.delegate("ana", "cy")
    own, own_digest = ready_task(rt, record_id="comment-0", event_id="evt-0")
    assert refusal(rt.approve, own, own_digest, by="cy", channel="api", monitors={"q"},
                   for_reviewer="ana") == "unknown_task"
    # a read-only reviewer lends nothing
    rt.delegate("ro", "bo")
    assert refusal(rt.approve, own, own_digest, by="bo", channel="api",
                   for_reviewer="ro") == "not_delegated"
    # the operator on the command line is no reviewer: it decides for no one
    assert refusal(rt.approve, own, own_digest, by=None, channel="cli",
                   for_reviewer="ana") == "not_delegated"
    assert not rt.task(own)["approvals"]


@pytest.mark.parametrize("until,code", [("tomorrow", "invalid_until"),
                                        ("2030-01-01T00:00:00", "invalid_until"),
                                        (str(T0 - 1), "invalid_until")])
def test_a_bad_until_is_refused_and_changes_nothing(people, until, code):
    rt = people
    assert refusal(rt.delegate, "ana", "bo", until=until) == code
    assert refusal(rt.delegate, "ana", "ana") == "invalid_delegation"
    assert refusal(rt.delegate, "ana", "nobody") == "unknown_reviewer"
    assert refusal(rt.undelegate, "ana") == "not_delegated"
    assert all(r["delegate"] is None for r in rt.reviewers())


def test_removing_a_reviewer_ends_their_delegations(people):
    rt = people
    rt.delegate("ana", "bo")
    rt.delegate("cy", "ana")
    rt.remove_reviewer("ana")
    assert all(r["delegate"] is None for r in rt.reviewers())


def test_decision_times_are_kept_by_monitor_and_channel(people, clock):
    rt = people
    key, digest = ready_task(rt, "q")
    other, other_digest = ready_task(rt, record_id="comment-0", event_id="evt-0")
    clock.advance(120)
    rt.approve(key, digest, by="bo", channel="api")
    clock.advance(3600)
    edited = rt.approve(key, digest, by="cy", channel="page", monitors={"q"}, edit="new words")
    rt.reject(other, None, by=None, channel="cli", digest=other_digest)
    with Site(rt.home, clock=clock) as site:  # /metrics is serve's
        rows = {(r["monitor"], r["channel"]): r for r in site.metrics()["decision_seconds"]}
    assert set(rows) == {("q", "api"), ("q", "page"), ("default", "cli")}
    assert rows[("q", "api")]["count"] == 1 and rows[("q", "api")]["sum"] == 120
    # the edit and the editor's approval, both 3720 s after the task became ready
    assert rows[("q", "page")]["count"] == 2 and rows[("q", "page")]["sum"] == 2 * 3720
    assert dict(rows[("q", "page")]["buckets"])[3600] == 0
    assert dict(rows[("q", "page")]["buckets"])[4 * 3600] == 2
    assert rows[("default", "cli")]["count"] == 1
    assert edited["status"] == "ready"
    waiting = rt.stats()["oldest_waiting"]
    assert set(waiting) == {"q"} and waiting["q"] == {"since": T0, "age_s": 3720}
    assert "waiting     oldest per monitor: q 3720s" in render_stats(rt.stats())


def test_the_commands_map_slack_users_delegate_and_bind_a_channel(rt, home):
    rt.close()

    def run(*args):
        result = CliRunner().invoke(main, ["--home", str(home), *args, "--json"])
        assert "Traceback" not in result.output
        return result.exit_code, json.loads(result.output) if result.output.strip() else None

    assert run("reviewer", "add", "ana", "--slack-user", "U0ANA")[1]["slack_user"] == "U0ANA"
    code, out = run("reviewer", "add", "bo", "--slack-user", "U0ANA")
    assert code == 1 and out["error"] == "invalid_slack_user"  # one person, one reviewer
    assert run("reviewer", "add", "bo")[0] == 0
    code, out = run("reviewer", "set", "bo", "--slack-user", "bo@example.com")
    assert code == 1 and out["error"] == "invalid_slack_user"
    assert run("reviewer", "set", "bo", "--slack-user", "W0BO")[1]["slack_user"] == "W0BO"
    code, out = run("reviewer", "delegate", "ana", "--to", "bo", "--until",
                    "2030-01-01T00:00:00Z")
    assert code == 0 and out == {"reviewer": "ana", "delegate": "bo", "until": 1893456000.0}
    listed = {r["name"]: r for r in run("reviewer", "list")[1]}
    assert (listed["ana"]["slack_user"], listed["ana"]["delegate"]) == ("U0ANA", "bo")
    assert run("reviewer", "undelegate", "ana")[1] == {"reviewer": "ana", "delegated": False}
    code, out = run("monitor", "bind", "--id", "s", "--document", "doc-demo",
                    "--slack-channel", "#reviews")
    assert code == 1 and out["error"] == "invalid_monitor"
    assert run("monitor", "bind", "--id", "s", "--document", "doc-demo",
               "--slack-channel", "C0REVIEWS")[1]["slack_channel"] == "C0REVIEWS"
    changed = [(r["code"], r["subject"]) for r in run("audit", "--all")[1]
               if r["code"] in ("reviewer_changed", "delegated", "undelegated")]
    assert sorted(changed) == [("delegated", "ana"), ("reviewer_changed", "bo"),
                               ("undelegated", "ana")]


def test_a_delegate_limited_elsewhere_sees_and_decides_the_delegators_tasks(people, clock):
    """cy (limited to q) covers for ana (limited to default): while the delegation is
    active the faces widen cy's monitors by ana's, and no further; then back to q."""
    rt = people
    cy = rt.add_reviewer("cy2", monitors=["q"])["token"]
    key, digest = ready_task(rt)  # a task of default: ana's, not cy2's
    with Site(rt.home, clock=clock) as site:
        assert site.reviewer_for_token(cy).monitors == {"q"}
        rt.delegate("ana", "cy2", until=str(T0 + 60))
        widened = site.reviewer_for_token(cy)
        assert widened.monitors == {"q", "default"}
        answer = rt.approve(key, digest, by="cy2", channel="api", monitors=widened.monitors)
        assert answer["status"] == "approved"
        assert [(a["by"], a["for"]) for a in rt.task(key)["approvals"]] == [("cy2", "ana")]
        clock.advance(61)
        assert site.reviewer_for_token(cy).monitors == {"q"}
        rt.delegate("ro", "cy2")  # a read-only reviewer lends nothing
        assert site.reviewer_for_token(cy).monitors == {"q"}
        rt.delegate("bo", "cy2")  # bo may decide every monitor: so may cy2, for bo
        assert site.reviewer_for_token(cy).monitors is None
    assert [r["monitors"] for r in rt.reviewers() if r["name"] == "ana"] == [["default"]]
