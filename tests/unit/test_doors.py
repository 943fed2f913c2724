"""Each audience has its own door: ``Signoff`` is the public Python API (docs/api.md),
``Site`` adds what ``signoff serve`` alone calls, and a home's ``Engine`` holds what the
worker alone calls. A method added to ``Signoff`` is a change of the public API: add
it here, to docs/api.md's audience, on purpose."""

import inspect

import pytest

from signoff.app import Signoff
from signoff.engine import Engine
from signoff.serve.site import Site

pytestmark = pytest.mark.backend_independent

SIGNOFF = {
    # the home and its plug-ins
    "init", "close", "host", "drafter", "drafter_timeout_s", "run_until_idle",
    # monitors and intake
    "bind", "cancel", "pause", "unpause", "resume", "gaps", "monitors", "subscriptions",
    "enqueue", "enqueue_stream", "enqueue_events", "enqueue_checked",
    # the human channel, policies, reviewers, secrets, retention
    "approve", "approve_many", "reject", "cancel_task", "retry", "retry_delivery", "redraft",
    "add_policy", "policies", "revoke_policy", "add_reviewer", "set_reviewer", "reviewers",
    "remove_reviewer", "delegate", "undelegate",
    "replay", "purge", "add_secret", "monitor_secrets", "remove_secret",
    # signed approvals: monitors that ask for them, reviewer keys, statements to sign
    "set_signed_approvals", "add_reviewer_key", "reviewer_keys", "remove_reviewer_key",
    "statement", "sign_and_decide",
    # views
    "listing", "events", "tasks", "monitor_tasks", "delivery", "task", "dead_letters", "audit",
    "stats",
    # the audit's chain, checked offline
    "audit_key", "audit_export",
}
SITE = {"webhook_secrets", "subscription_callbacks", "first_webhook_answer", "write_webhooks",
        "reviewer_for_token", "viewer_for", "log_in", "log_out", "task_page", "review_list",
        "unobserved", "metrics", "passkey_options", "register_passkey",
        "viewer_for_task", "open_link", "decide_by_link", "viewer_for_slack_user",
        "oldest_waiting"}
ENGINE = {"claim_limit", "ingest_batch", "submit_batch", "reap", "tend_subscriptions"}


def public(cls):
    """The names of ``cls``'s public methods, inherited ones included."""
    return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}


def test_signoff_has_the_public_api_and_nothing_more():
    assert public(Signoff) - SIGNOFF == set(), "new on Signoff: list it in SIGNOFF on purpose"
    assert SIGNOFF - public(Signoff) == set(), "gone from Signoff: a change of the public API"


@pytest.mark.parametrize("audience, names", [("serve", SITE), ("the worker", ENGINE)])
def test_no_method_of_another_audience_is_back_on_signoff(audience, names):
    assert names & public(Signoff) == set(), f"{audience}'s methods belong on its own door"


def test_site_is_signoff_with_the_serve_methods_alone():
    assert issubclass(Site, Signoff)
    assert public(Site) == SIGNOFF | SITE
    overridden = {name for name, value in vars(Site).items()
                  if callable(value) and name in vars(Signoff)}
    assert overridden == set(), "Site adds methods; it changes none of Signoff's"


def test_the_engine_has_the_worker_methods_alone():
    assert public(Engine) == ENGINE
    assert not issubclass(Engine, Signoff)  # a home's part, reached as ``rt.engine``


@pytest.mark.parametrize("cls", [Signoff, Site, Engine])
def test_every_public_method_says_what_it_does(cls):
    bare = {name for name in public(cls) if not inspect.getdoc(getattr(cls, name))}
    assert bare == set()
