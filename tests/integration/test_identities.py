"""One person never satisfies a four-eyes approval (docs/concepts.md, "Who decides").

A quorum counts identities: an authenticated reviewer, the operator's OS account on
the command line (``--by`` is a note), a standing policy (``policy:<id>``) that only
ever approves a draft as drafted. Reviewer names are kept in one form and refused
when they look like another. On a real home (SQLite by default; PostgreSQL/Redis
with the ``SIGNOFF_TEST_*`` variables).
"""

import pytest
from helpers import OPERATOR, ready_task, refusal

from signoff.errors import Refused
from signoff.models import Approval, Audit, PolicyDecision, Reviewer
from signoff.admin import reviewers
from signoff.decisions import policy

WIRE = "Wire USD 50,000 to account 12345"


@pytest.fixture
def quorum(rt):
    rt.bind("doc-demo", "q", approvals=2)
    return rt


# -- a standing policy and a person's edit ------------------------------------------

def test_a_policy_never_completes_a_quorum_on_an_edit(quorum, host):
    rt = quorum
    key, drafted = ready_task(rt, "q")
    added = rt.add_policy("q", include_waiting=True)
    assert [a["by"] for a in rt.task(key)["approvals"]] == [f"policy:{added['policy']}"]
    edited = rt.approve(key, drafted, by="bob", channel="api", edit=WIRE)
    assert edited["status"] == "ready" and edited["approvals_missing"] == 1
    # The policy's passes (the worker runs one every second) find the edited draft.
    for _ in range(3):
        policy.run_pass(rt)
        rt.run_until_idle()
    task = rt.task(key)
    assert task["status"] == "ready" and [a["by"] for a in task["approvals"]] == ["bob"]
    assert PolicyDecision.get(PolicyDecision.task_key == key).decision == "refused:edited"
    assert host.results() == []
    # The editor again, through another face, is still one place.
    assert rt.approve(key, edited["digest"], by="bob", channel="page")["approvals_missing"] == 1
    done = rt.approve(key, edited["digest"], by="carol", channel="page")
    assert done["status"] == "approved" and done["approved_digest"] == edited["digest"]
    rt.run_until_idle()
    [written] = host.results()
    assert written["result"]["draft"] == WIRE


def test_a_policy_added_after_an_edit_does_not_fill_a_place(quorum, host):
    rt = quorum
    key, drafted = ready_task(rt, "q")
    edited = rt.approve(key, drafted, by="bob", channel="api", edit=WIRE)
    rt.add_policy("q", include_waiting=True)
    policy.run_pass(rt)
    task = rt.task(key)
    assert task["status"] == "ready" and task["approvals_missing"] == 1
    assert [a["by"] for a in task["approvals"]] == ["bob"]
    # Even asked directly, with the edited digest, a policy is refused.
    [out] = rt.approve_many([(key, edited["digest"])], by="policy:99", channel="policy")
    assert out.code == "edited"
    assert Approval.select().where(Approval.task_key == key).count() == 1


def test_a_policy_cannot_edit(quorum):
    rt = quorum
    key, drafted = ready_task(rt, "q")
    with pytest.raises(ValueError):
        rt.approve(key, drafted, by="policy:1", channel="policy", edit=WIRE)
    assert rt.task(key)["edits"] == []


def test_a_policy_still_approves_a_draft_as_drafted(rt, host):
    key, _ = ready_task(rt, "default")
    rt.add_policy("default", include_waiting=True)
    assert rt.task(key)["status"] == "approved"


# -- the command line: one account, one identity -------------------------------------

def test_two_command_line_approvals_under_two_labels_count_once(quorum):
    rt = quorum
    key, d = ready_task(rt, "q")
    rt.approve(key, d, by="Alice")
    again = rt.approve(key, d, by="Bob")
    assert again["status"] == "ready" and again["approvals_missing"] == 1
    [given] = rt.task(key)["approvals"]
    assert (given["by"], given["channel"], given["note"]) == (OPERATOR, "cli", "Alice")
    # A reviewer is another identity: the quorum is complete.
    assert rt.approve(key, d, by="alice", channel="api")["status"] == "approved"
    assert rt.task(key)["approved_by"] == "alice"


# -- reviewer names ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["Alice", "\u0430lice", "alice ", "ALICE", "a1ice",
                                  "policy:2", "operator:root", "al ice", "ali\u200bce"])
def test_a_name_equal_to_confusable_with_or_reserved_is_refused(rt, name):
    rt.add_reviewer("alice")
    assert refusal(rt.add_reviewer, name) == "invalid_name"
    assert [r["name"] for r in rt.reviewers()] == ["alice"]
    assert [a.code for a in Audit.select()].count("reviewer_added") == 1


def test_the_very_name_again_is_reviewer_exists(rt):
    rt.add_reviewer("alice")
    assert refusal(rt.add_reviewer, "alice") == "reviewer_exists"


def test_names_are_kept_normalised_and_found_as_typed(rt, site):
    added = rt.add_reviewer(" Bob ")
    assert added["name"] == "bob"
    session, who = site.log_in("BOB", added["token"])
    assert session and who == "bob"
    row = Audit.get(Audit.code == "reviewer_added")
    assert (row.subject, row.actor, row.channel) == ("bob", OPERATOR, "cli")
    removed = rt.remove_reviewer("Bob")
    assert removed["name"] == "bob"
    assert Audit.get(Audit.code == "reviewer_removed").subject == "bob"


def test_two_look_alikes_added_at_once_cannot_both_be_kept(rt):
    # What a concurrent add meets: the skeleton's unique index, not only the check before it.
    rt.add_reviewer("alice")
    Reviewer.update(name="alice-old").where(Reviewer.name == "alice").execute()
    with pytest.raises(Refused) as info:
        reviewers.add(rt, "\u0430lice")
    assert info.value.code == "invalid_name"


def test_revoking_a_policy_never_touches_a_reviewer_s_decision(quorum):
    rt = quorum
    # A reviewer kept from before names were checked, named like a policy's identity.
    rt.add_reviewer("legacy")
    Reviewer.update(name="policy:1", skeleton=None).where(Reviewer.name == "legacy").execute()
    key, d = ready_task(rt, "q")
    rt.approve(key, d, by="policy:1", channel="api")
    added = rt.add_policy("q")
    assert added["policy"] == 1
    rt.revoke_policy(1)
    [given] = rt.task(key)["approvals"]
    assert (given["by"], given["channel"]) == ("policy:1", "api")
    assert not Audit.select().where(Audit.code == "approval_withdrawn").exists()
