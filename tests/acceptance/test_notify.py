"""``task.ready`` notifications from a real worker to a real local receiver."""

import json
import subprocess
import threading

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from hookkit import receiver  # noqa: F401 (a fixture)
from helpers import OPERATOR, child_env, read_here, signoff_cmd, start_worker, stop_worker, wait_for
from servekit import SECRET_TEXT, event, make_home
from signoff.models import Notification
from signoff.rules import signatures


@pytest.fixture
def notified_home(home, receiver):
    secret = signatures.generate()
    rt = make_home(home, extra_toml=(
        f'[notify]\nurl = "{receiver.url}"\nsecret = "{secret}"\n'
        'review_url = "https://review.example/"\nattempts = 2\nbase_delay_s = 0.05\n'
        'max_delay_s = 0.1\ntimeout_s = 5.0\n'))
    read_here(rt)
    worker = start_worker(home, env=child_env())
    yield rt, secret
    out, err = stop_worker(worker)
    assert worker.returncode == 0, err.decode()
    rt.close()


def test_a_ready_task_is_announced_signed_and_without_record_text(notified_home, receiver):
    rt, secret = notified_home
    rt.enqueue_events([event(1)])
    wait_for(lambda: receiver.received, timeout=60, what="a notification")
    headers, body = receiver.received[0]
    payload = Webhook(secret).verify(body, headers)
    [task] = rt.tasks("ready")
    detail = rt.task(task["key"])
    assert payload == {"type": "task.ready", "key": task["key"], "monitor": "default",
                       "record_id": "comment-1", "version": 1, "digest": detail["digest"],
                       "approvals_needed": 1,
                       "review_url": f"https://review.example/tasks/{task['key']}"}
    assert "please add the demo date" not in body and SECRET_TEXT not in body
    with pytest.raises(WebhookVerificationError):
        Webhook(signatures.generate()).verify(body, headers)
    wait_for(lambda: Notification.get(Notification.task_key == task["key"]).status == "sent",
             what="the outbox row marked sent")
    # a second event about the same record version is the same task: no second message
    rt.enqueue_events([event(1, event_id="evt-again")])
    wait_for(lambda: rt.events()[-1]["status"] == "done", what="the second event processed")
    assert len(receiver.received) == 1


def test_a_failing_receiver_ends_in_the_dead_letters_and_replay_sends_again(notified_home, receiver):
    rt, secret = notified_home
    receiver.status = 500
    rt.enqueue_events([event(1)])
    letters = wait_for(lambda: [d for d in rt.dead_letters() if d["kind"] == "notification"],
                       timeout=60, what="a notification dead letter")
    [letter] = letters
    assert (letter["step"], letter["code"], letter["attempts"]) == ("notify", "http_500", 2)
    assert len({h["webhook-id"] for h, _ in receiver.received}) == 1  # retries keep the id
    assert len(receiver.received) == 2
    receiver.status = 200
    out = subprocess.run(signoff_cmd(rt.home, "dlq", "replay", str(letter["id"]), "--json"),
                         env=child_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["replayed"] == 1
    wait_for(lambda: len(receiver.received) == 3, timeout=60, what="the replayed notification")
    Webhook(secret).verify(receiver.received[-1][1], receiver.received[-1][0])
    wait_for(lambda: Notification.get(Notification.task_key == letter["ref"]).status == "sent",
             what="the replayed row sent")


def test_drain_waits_for_a_notification_still_to_be_retried(home, receiver):
    receiver.status = 503  # the first try fails; the retry comes a second later
    secret = signatures.generate()
    rt = make_home(home, extra_toml=(
        f'[notify]\nurl = "{receiver.url}"\nsecret = "{secret}"\n'
        'review_url = "https://review.example/"\nattempts = 3\nbase_delay_s = 1.0\n'
        'max_delay_s = 1.0\ntimeout_s = 5.0\n'))
    read_here(rt)
    rt.enqueue_events([event(1)])

    def answer_after_the_first_try():
        wait_for(lambda: receiver.received, timeout=60, what="the first try")
        receiver.status = 204
    flip = threading.Thread(target=answer_after_the_first_try)
    flip.start()
    done = subprocess.run(signoff_cmd(home, "worker", "--drain"), env=child_env(),
                          capture_output=True, timeout=120)
    flip.join()
    assert done.returncode == 0, done.stderr.decode()
    assert len(receiver.received) == 2  # the failed try and the retry, before the exit
    assert [n.status for n in Notification.select()] == ["sent"]
    rt.close()


def test_notifications_start_when_they_are_configured_never_for_older_ready_tasks(
        home, receiver):
    rt = make_home(home)  # no [notify] yet
    read_here(rt)
    rt.enqueue_events([event(1)])
    rt.run_until_idle()
    [old] = rt.tasks("ready")
    secret = signatures.generate()
    with open(home / "signoff.toml", "a", encoding="utf-8") as f:
        f.write(f'\n[notify]\nurl = "{receiver.url}"\nsecret = "{secret}"\n')
    worker = start_worker(home, env=child_env())
    try:
        rt.host().put_record("comment-2", document="doc-demo", text="a new comment")
        rt.enqueue_events([event(2)])
        new = wait_for(lambda: [t for t in rt.tasks("ready") if t["key"] != old["key"]],
                       what="the new task")[0]
        wait_for(lambda: Notification.select().where(Notification.status == "sent").exists(),
                 what="a notification sent")
        # The pump reads the audit log in order: the older task, were it announced,
        # would have been collected first.
        sent = [json.loads(body)["key"] for _, body in receiver.received]
        assert sent == [new["key"]]
        assert [n.task_key for n in Notification.select()] == [new["key"]]
    finally:
        _, err = stop_worker(worker)
    assert worker.returncode == 0, err.decode()
    rt.close()


def test_a_quorum_announces_each_approval_and_a_reject_with_its_reason(notified_home, receiver):
    rt, secret = notified_home
    rt.bind("doc-demo", "q", window_s=3600, approvals=2)
    rt.enqueue_events([event(1)], monitor_id="q")

    def received(kind):
        return [p for p in (Webhook(secret).verify(b, h) for h, b in receiver.received)
                if p["type"] == kind]
    [ready] = wait_for(lambda: received("task.ready"), timeout=60, what="task.ready")
    assert ready["approvals_needed"] == 2 and ready["monitor"] == "q"
    rt.approve(ready["key"], ready["digest"], by="ana")
    [added] = wait_for(lambda: received("task.approval_added"), timeout=60,
                       what="task.approval_added")
    assert (added["key"], added["by"], added["channel"], added["note"],
            added["approvals_missing"]) == (ready["key"], OPERATOR, "cli", "ana", 1)
    rt.reject(ready["key"], reason="the demo moved", by="carl", channel="page")
    [rejected] = wait_for(lambda: received("task.rejected"), timeout=60, what="task.rejected")
    assert (rejected["by"], rejected["channel"], rejected["reason"]) == ("carl", "page",
                                                                       "the demo moved")
    assert "please add the demo date" not in json.dumps(receiver.received)
