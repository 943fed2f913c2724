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
from signoff.models import Audit, Notification, Task
from signoff.rules import signatures

REMIND_S, ESCALATE_S = 2, 3


@pytest.fixture
def nudging(home, inbox, receiver):
    """A home with webhook and email notifications, alice (every monitor), bob (another
    monitor only), a monitor that reminds every 2 s and escalates to bob after 3 s, and
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

    # The outbox sends each once: a message per reviewer named, a webhook per row. Rounds
    # keep coming meanwhile: wait for a moment when everything written has been sent.
    def sent_as_written():
        reminded = rows("reminded")
        hooks = [Webhook(secret).verify(body, headers) for headers, body in receiver.received]
        done = (len(inbox.to("alice@example.com")) == 1 + len(reminded)
                and len(inbox.to("bob@example.com"))
                == 1 + sum("bob" in d["reviewers"] for _, d in reminded)
                and len(hooks) == 2 + len(reminded))
        return done and (reminded, hooks)
    reminded, hooks = wait_for(sent_as_written, timeout=60, what="every row sent, once")
    kinds = [h["type"] for h in hooks]
    assert kinds.count("task.escalated") == 1 and kinds.count("task.ready") == 1
    assert sorted(h["round"] for h in hooks if h["type"] == "task.reminder") == [
        d["round"] for _, d in reminded]
    assert len({headers["webhook-id"] for headers, _ in receiver.received}) == len(hooks)

    # bob decides through his escalation link; the rounds stop.
    escalation = next(m for m in inbox.to("bob@example.com") if "escalated" in m["Subject"])
    assert rt.decide_by_link(link_of(escalation)[1], "approve")["status"] == "approved"
    wait_for(lambda: rt.task(task["key"])["status"] == "done", timeout=60, what="the submit")
    count = len(rows("reminded"))
    time.sleep(3 * REMIND_S)  # three more intervals: no round may come
    assert len(rows("reminded")) == count
