"""Reminders and escalation with two real worker processes: each round and the escalation
written and sent once, by email (a real SMTP server) and as signed webhooks, until the
task is decided."""

import json
import time

import pytest
from standardwebhooks.webhooks import Webhook

from helpers import child_env, signoff_cmd, start_worker, stop_worker, wait_for
from hookkit import receiver  # noqa: F401 (a fixture)
from mailkit import inbox, link_of, toml  # noqa: F401 (inbox: a fixture)
from servekit import event, make_home
from signoff.chores import notify
from signoff.models import Audit, Notification, Task
from signoff.rules import signatures
from signoff.serve.site import Site

# As short as the fleet's one-second pass allows: a round or two may fall in one pass,
# and one round at least comes after the escalation.
REMIND_S, ESCALATE_S = 1, 1.5


@pytest.fixture
def nudging(home, inbox, receiver):
    """A home with webhook and email notifications, alice (every monitor), bob (another
    monitor only), a monitor that reminds every second and escalates to bob after 1.5 s, and
    two worker processes."""
    secret = signatures.generate()
    rt = make_home(home, extra_toml=(
        f'[notify]\nurl = "{receiver.url}"\nsecret = "{secret}"\n' + toml(inbox)))
    rt.bind("doc-demo", "other")
    rt.add_reviewer("alice", email="alice@example.com")
    rt.add_reviewer("bob", monitors=["other"], email="bob@example.com")
    bound = _cli(home, "monitor", "bind", "--document", "doc-demo", "--id", "nudged",
                 "--window", "3600", "--remind-after", str(REMIND_S),
                 "--escalate-after", str(ESCALATE_S), "--escalate-to", "Bob")
    assert (bound["remind_after_s"], bound["escalate_to"]) == (REMIND_S, ["bob"])
    workers = [start_worker(home, env=child_env()) for _ in range(2)]
    yield rt, secret
    for worker in workers:
        _, err = stop_worker(worker)
        assert worker.returncode == 0, err.decode()
    rt.close()


def _cli(home, *args):
    import subprocess
    out = subprocess.run(signoff_cmd(home, *args, "--json"), env=child_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def rows(code):
    return [(a.at, a.data) for a in Audit.select().where(Audit.code == code).order_by(Audit.seq)]


def test_each_round_is_reminded_once_by_two_workers_until_decided(nudging, inbox, receiver):
    rt, secret = nudging
    time.sleep(0.5)  # the workers' first notify pass starts the cursor
    rt.enqueue_events([event(1)], "nudged")
    wait_for(lambda: len(rows("reminded")) >= 3, timeout=90, what="three reminder rounds")
    [task] = rt.tasks("ready")
    reminded = rows("reminded")
    rounds = [data["round"] for _, data in reminded]
    assert rounds == sorted(set(rounds)), rounds  # never a round twice
    created = Task.get_by_id(task["key"]).created_at
    assert all(at >= created + data["round"] * REMIND_S for at, data in reminded)
    [(escalated_at, escalated)] = rows("escalated")
    assert escalated == {"reviewers": ["bob"]} and escalated_at >= created + ESCALATE_S
    after = [data["reviewers"] for at, data in reminded if at > escalated_at]
    assert after and all(names == ["alice", "bob"] for names in after)

    # bob decides through his escalation link; the rounds stop.
    escalation = wait_for(lambda: next((m for m in inbox.to("bob@example.com")
                                        if "escalated" in m["Subject"]), None),
                          timeout=60, what="bob's escalation message")
    with Site(rt.home) as site:  # as the link's page decides, in signoff serve
        assert site.decide_by_link(link_of(escalation)[1], "approve")["status"] == "approved"
    wait_for(lambda: rt.task(task["key"])["status"] == "done", timeout=60, what="the submit")
    count = len(rows("reminded"))
    time.sleep(3 * REMIND_S)  # three more intervals: no round may come
    assert len(rows("reminded")) == count

    # The outbox sent each row once: a webhook per audit row; an email per reviewer
    # named, while the task waited (one collected after the decision is not sent).
    wait_for(lambda: not notify.outbox_busy(), timeout=60, what="the outbox done")
    reminded = rows("reminded")
    # At least once: a try whose outcome could not be recorded (SQLite busy on a loaded
    # machine) is sent again, under the same webhook-id (the same message to the same
    # reviewer): one body per id, and an id (a message) per row.
    by_id = {}
    for headers, body in receiver.received:
        by_id.setdefault(headers["webhook-id"], []).append(Webhook(secret).verify(body, headers))
    assert all(tries == tries[:1] * len(tries) for tries in by_id.values())
    assert len(by_id) == 2 + len(reminded)
    hooks = [tries[0] for tries in by_id.values()]
    kinds = [h["type"] for h in hooks]
    assert kinds.count("task.escalated") == 1 and kinds.count("task.ready") == 1
    assert sorted(h["round"] for h in hooks if h["type"] == "task.reminder") == [
        d["round"] for _, d in reminded]
    mailed = [(tuple(to), m["Subject"].strip()) for to, m in inbox.messages]
    emails = Notification.select().where(Notification.type == "email")
    # A message per row sent; one sent whose outcome could not be recorded may find the
    # task decided at its next try, and end not_needed.
    assert emails.where(Notification.last_code == "sent").count() <= len(set(mailed)) <= (
        emails.where(Notification.status == "sent").count())
    for name in ("alice", "bob"):
        rounds = [int(s.rsplit(" ", 1)[1].rstrip(")")) for to, s in mailed
                  if to == (f"{name}@example.com",) and "(reminder" in s]
        assert set(rounds) <= {d["round"] for _, d in reminded if name in d["reviewers"]}
    assert sum("(reminder" in s for to, s in mailed if to == ("alice@example.com",)) >= 1

