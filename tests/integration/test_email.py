"""Email (§19): contacts, the messages a real SMTP server receives, reminders and
escalation (on the fake clock); the links over HTTP are in acceptance/test_email_links.py."""

import contextlib
import sqlite3

import pytest

from helpers import make_event, read_here, refusal
from mailkit import body, inbox, link_of, toml  # noqa: F401 (inbox: a fixture)
from signoff import storage
from signoff.chores import mail, notify, reminders
from signoff.errors import ConfigError
from signoff.models import Approval, Audit, EmailLink, Notification
from signoff.storage import engines
from signoff.rules import signatures

HIDDEN = "please add the demo date\u202e moc.example"


@pytest.fixture
def mailing(rt, inbox):
    """``rt`` mailing through ``inbox``: reviewers alice (every monitor), bob (limited to
    another monitor), carol (read-only) and dave (no address); the record holds a bidi
    override."""
    with open(rt.home / "signoff.toml", "a", encoding="utf-8") as f:
        f.write("\n" + toml(inbox, public_url="https://review.example/"))
    rt.bind("doc-demo", "other")
    rt.add_reviewer("alice", email="alice@example.com")
    rt.add_reviewer("bob", monitors=["other"], email="bob@example.com")
    rt.add_reviewer("carol", read_only=True, email="carol@example.com")
    rt.add_reviewer("dave")
    rt.host().put_record("comment-1", document="doc-demo", text=HIDDEN)
    notify.collect(rt.clock.now(), webhook=False, email=True)  # the cursor starts here
    return rt


def pump(rt):
    """One pass of a worker's notify pump, email only."""
    notify.collect(rt.clock.now(), webhook=False, email=True)
    return notify.send_due(rt, None, None, mail.email_settings(rt.home))


def ready(rt, event_id="evt-1"):
    rt.enqueue_events([make_event(event_id=event_id)])
    rt.run_until_idle()
    [task] = rt.tasks("ready")
    return task


# -- contacts ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["Alice <a@example.com>", "a@example.com, b@example.com",
                                 "a\u200b@example.com", "a@localhost", "not an address", " ",
                                 "a@example.com\n", "x" * 250 + "@example.com"])
def test_a_bad_address_is_refused_and_changes_nothing(rt, bad):
    assert refusal(rt.add_reviewer, "erin", email=bad) == "invalid_email"
    assert rt.reviewers() == []
    rt.add_reviewer("erin", email="erin@example.com")
    assert refusal(rt.set_reviewer, "erin", bad) == "invalid_email"
    assert [r["email"] for r in rt.reviewers()] == ["erin@example.com"]


def test_an_address_is_set_changed_cleared_and_audited(rt):
    assert rt.add_reviewer("Erin", email=" erin@example.com ")["email"] == "erin@example.com"
    assert rt.set_reviewer("erin", "erin@mail.example")["email"] == "erin@mail.example"
    assert rt.set_reviewer("erin", "")["email"] is None
    assert refusal(rt.set_reviewer, "nobody", "n@example.com") == "unknown_reviewer"
    read_here(rt)
    changes = list(Audit.select().where(Audit.code == "reviewer_changed").order_by(Audit.seq))
    assert [(a.subject, a.data) for a in changes] == [("erin", {"email": True}),
                                                      ("erin", {"email": False})]


# -- the message ------------------------------------------------------------------------

def test_a_ready_task_mails_each_reviewer_who_may_decide_it(mailing, inbox):
    task = ready(mailing)
    detail = mailing.task(task["key"])
    assert pump(mailing) == (1, 0)
    assert [len(inbox.to(a)) for a in ("alice@example.com", "bob@example.com",
                                       "carol@example.com")] == [1, 0, 0]
    [message] = inbox.to("alice@example.com")
    assert message["From"] == "signoff@example.com" and message["To"] == "alice@example.com"
    assert message["Subject"] == "[signoff] default: comment-1 waits for your decision"
    assert message["Message-ID"] and message["Date"]
    text = body(message)
    assert "monitor default" in text and "Digest:   " + detail["digest"][:12] in text
    assert detail["digest"] not in text  # the prefix only
    assert "please add the demo date⟨U+202E⟩ moc.example" in text and "\u202e" not in text
    assert detail["result"]["draft"] in text
    url, token = link_of(message)
    assert url == "https://review.example/r/" + token
    read_here(mailing)
    [link] = EmailLink.select()
    assert (link.reviewer, link.task_key, link.digest) == ("alice", task["key"], detail["digest"])
    assert token not in repr(list(EmailLink.select().dicts())) + repr(
        list(Notification.select().dicts()))
    assert pump(mailing) == (0, 0)  # sent once


def test_a_commit_elsewhere_between_two_messages_does_not_stall_the_pass(mailing, inbox,
                                                                       monkeypatch):
    """Another process's commit after the first message: the pass records both at once.

    A pass that still read its due rows from an open cursor kept an old snapshot, and
    each write it tried after that commit was refused as locked until the wait for
    the lock ran out (a SIGTERM waited for it).
    """
    if storage.engine_of(mailing.database).kind != "sqlite":
        pytest.skip("a snapshot held by an open cursor is SQLite's")
    mailing.add_reviewer("erin", email="erin@example.com")
    ready(mailing)
    try_send = mail.try_send

    def send_then_commit_elsewhere(row, *args):
        code = try_send(row, *args)
        with contextlib.closing(sqlite3.connect(mailing.home / "signoff.db")) as other:
            with other:
                other.execute("UPDATE reviewer SET email = 'dave@example.com' WHERE name = 'dave'")
        return code

    monkeypatch.setattr(mail, "try_send", send_then_commit_elsewhere)
    monkeypatch.setattr(engines, "LOCK_WAIT_S", 1.0)  # a stall fails the test at once
    assert pump(mailing) == (2, 0)
    assert sorted(to for to, _ in inbox.messages) == [["alice@example.com"], ["erin@example.com"]]


def test_an_unreachable_server_is_retried_then_dead_lettered(mailing, inbox, clock):
    inbox.close()
    task = ready(mailing)
    for _ in range(10):
        pump(mailing)
        clock.advance(1)
    read_here(mailing)
    [row] = Notification.select().where(Notification.type == "email")
    assert (row.status, row.attempts, row.last_code) == ("dead", 6, "ConnectionRefusedError")
    assert [letter["ref"] for letter in mailing.dead_letters()] == [row.task_key]
    assert EmailLink.select().where(EmailLink.task_key == task["key"]).count() == 6


# -- reminders and escalation -----------------------------------------------------------

def test_reminders_each_round_once_and_escalation_lets_a_limited_reviewer_decide(
        rt, site, inbox, clock):
    with open(rt.home / "signoff.toml", "a", encoding="utf-8") as f:
        f.write("\n" + toml(inbox))
    rt.bind("doc-demo", "other")
    rt.add_reviewer("alice", email="alice@example.com")
    rt.add_reviewer("bob", monitors=["other"], email="bob@example.com")
    rt.bind("doc-demo", "nudged", remind_after_s=10, escalate_after_s=25, escalate_to=["Bob"])
    notify.collect(clock.now(), webhook=False, email=True)
    rt.enqueue_events([make_event()], "nudged")
    rt.run_until_idle()
    [task] = rt.tasks("ready")
    pump(rt)
    assert [m["escalate_to"] for m in rt.monitors() if m["id"] == "nudged"] == [["bob"]]
    assert reminders.run(rt) == {"reminded": 0, "escalated": 0}
    clock.advance(10)
    assert reminders.run(rt) == {"reminded": 1, "escalated": 0}
    assert reminders.run(rt) == {"reminded": 0, "escalated": 0}  # once per round
    clock.advance(16)  # 26 s: the second round and the escalation
    assert reminders.run(rt) == {"reminded": 1, "escalated": 1}
    read_here(rt)
    rows = [(a.code, a.data) for a in Audit.select().where(
        Audit.code.in_(["reminded", "escalated"])).order_by(Audit.seq)]
    assert rows == [("reminded", {"round": 1, "reviewers": ["alice"]}),
                    ("escalated", {"reviewers": ["bob"]}),
                    ("reminded", {"round": 2, "reviewers": ["alice", "bob"]})]
    pump(rt)
    assert len(inbox.to("alice@example.com")) == 3  # ready, two reminders
    escalated, reminded = inbox.to("bob@example.com")
    assert "was escalated to you" in escalated["Subject"]
    assert "still waits" in reminded["Subject"]
    assert site.open_link(link_of(escalated)[1]).problem is None
    assert site.decide_by_link(link_of(reminded)[1], "approve")["status"] == "approved"
    assert (Approval.get().by, Approval.get().channel) == ("bob", "email")
    assert site.open_link(link_of(reminded)[1]).problem == "link_used"
    clock.advance(100)
    assert reminders.run(rt) == {"reminded": 0, "escalated": 0}  # decided: no more rounds


# -- the [notify.email] table -------------------------------------------------------------

GOOD = {"smtp_url": '"smtp://127.0.0.1:2525"', "from": '"signoff@example.com"',
        "public_url": '"https://review.example"'}


@pytest.mark.parametrize("change", [
    {"smtp_url": '"http://mail.example"'}, {"smtp_url": '"smtp://user:pw@mail.example"'},
    {"smtp_url": '"smtps://mail.example"', "starttls": "true"}, {"starttls": '"yes"'},
    {"from": '"Signoff <s@example.com>"'}, {"from": "1"}, {"public_url": '"review.example"'},
    {"public_url": '"https://review.example/?a=1"'}, {"link_ttl_s": "0"},
    {"link_ttl_s": "99999999"}, {"attempts": "0"}, {"sender": '"x@example.com"'},
    {"smtp_url": None}, {"public_url": None}])
def test_a_bad_email_table_is_refused_naming_the_key(rt, change):
    table = {k: v for k, v in dict(GOOD, **change).items() if v is not None}
    with open(rt.home / "signoff.toml", "a", encoding="utf-8") as f:
        f.write("\n[notify.email]\n" + "".join(f"{k} = {v}\n" for k, v in table.items()))
    with pytest.raises(ConfigError) as info:
        mail.email_settings(rt.home)
    assert info.value.code == "bad_config" and "notify.email" in info.value.message


def test_email_and_the_webhook_are_configured_side_by_side(rt):
    assert mail.email_settings(rt.home) is None and notify.notify_settings(rt.home) is None
    with open(rt.home / "signoff.toml", "a", encoding="utf-8") as f:
        f.write('\n[notify]\nurl = "https://hooks.example/signoff"\n'
                f'secret = "{signatures.generate()}"\n'
                "[notify.email]\n" + "".join(f"{k} = {v}\n" for k, v in GOOD.items()))
    settings = mail.email_settings(rt.home)
    assert (settings.server, settings.sender, settings.link_ttl_s, settings.starttls) == (
        ("smtp", "127.0.0.1", 2525), "signoff@example.com", 86400, False)
    assert notify.notify_settings(rt.home).url == "https://hooks.example/signoff"
