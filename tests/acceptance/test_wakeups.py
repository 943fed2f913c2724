"""The wake-up policy: coalesced wake-ups, and a queue that cannot be reached after a commit."""

import json
import socket
import logging
import subprocess
import sys
import time

import pytest

from helpers import child_env, read_here, signoff_cmd, stop_worker, wait_for
from signoff.app import Signoff
from signoff.models import Delivery, Task
from signoff import tasks
from signoff.tasks import CAP, needed

CLOSED_PORT_QUEUE = "redis://127.0.0.1:1/0"


def event(n, event_id=None):
    return {"event_id": event_id or f"evt-{n}", "name": "comment.created",
            "document": "doc-demo", "record_id": f"comment-{n}", "occurred": int(time.time())}


@pytest.fixture
def live(home):
    """A home on the real clock with records ``comment-0`` … ``comment-199``, bound."""
    rt = Signoff.init(home)
    read_here(rt)
    host = rt.host()
    for n in range(200):
        host.put_record(f"comment-{n}", document="doc-demo", text="add the date")
    host.put_material("doc-demo", "2026-11-01")
    rt.bind("doc-demo", window_s=600)
    yield home, rt
    rt.close()


@pytest.mark.backend_independent
def test_needed_is_one_wake_up_per_batch_up_to_the_cap():
    assert [needed(n, 50) for n in (0, 1, 50, 51, 150, 10_000)] == [0, 1, 1, 2, 3, CAP]


def test_events_enqueued_one_call_at_a_time_leave_one_wake_up_and_all_complete(live):
    home, rt = live
    for n in range(200):
        [line] = rt.enqueue_events([event(n)])
        assert line.accepted
    # One waiting wake-up claims every row committed before it runs.
    assert rt.wakers.pending_by_kind(100) == {"ingest": 1, "submit": 0}
    assert rt.wakers.pending() == 1
    done = subprocess.run(signoff_cmd(home, "worker", "--drain"), env=child_env(),
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    rows = list(Delivery.select())
    assert len(rows) == 200 and {(d.status, d.outcome) for d in rows} == {("done", "ready")}


def test_approvals_one_at_a_time_leave_one_submit_wake_up(live):
    home, rt = live
    rt.enqueue_events([event(n) for n in range(20)])
    rt.run_until_idle()
    rt.queue.flush()
    for task in list(Task.select()):
        assert rt.approve(task.key, task.digest)["status"] == "approved"
    assert rt.wakers.pending_by_kind(100) == {"ingest": 0, "submit": 1}


def test_a_batch_gets_one_wake_up_per_batch_up_to_the_cap_and_the_reaper_only_tops_up(live):
    home, rt = live
    size = rt.config.batch_size
    rt.enqueue_events([event(n) for n in range(2 * size + size // 2)])  # three batches
    assert rt.wakers.pending_by_kind(100)["ingest"] == 3
    assert rt.engine.reap()["woken"] == 0  # enough are waiting for what is claimable
    rt.queue.flush()  # wake-ups lost (a Redis restart, a crash before sending)
    assert rt.engine.reap()["woken"] == 3
    assert rt.wakers.pending_by_kind(100)["ingest"] == 3


def test_slow_rows_shrink_the_claims_and_the_reaper_wakes_a_thread_for_each(live):
    home, rt = live
    rt.enqueue_events([event(n) for n in range(3)])
    assert rt.wakers.pending_by_kind(100)["ingest"] == 1  # one claim takes all three
    rt.engine.claim_sizes.timed("ingest", 1, 2.0)  # as after a row that took two seconds
    assert rt.engine.claim_limit("ingest") == 1
    assert rt.engine.reap()["woken"] == 2  # one waiting wake-up for each row: threads share them
    assert rt.engine.ingest_batch("w") == (1, True)
    assert rt.engine.claim_limit("submit") == rt.config.batch_size  # each step is sized apart


# -- bursts from one process, on every queue ------------------------------------------

BURST = 200

# The real CLI, with its periodic loop (reaper included) put off for the length of
# the test: only the wake-ups others send can reach this worker.
WORKER_WITHOUT_REAPER = ("import signoff.worker as w; w.REAP_INTERVAL_S = 3600.0; "
                         "from signoff.cli import main; main()")
# The real CLI, storing each line as a commit of its own and holding every
# announcement after the first for longer than the test: what it still has to
# send when it exits is all the worker will hear.
ENQUEUE_HOLDING_BACK = ("import signoff.intake.enqueue as i, signoff.tasks as w; i.CHUNK = 1; "
                        "w.WINDOW_S = 3600.0; from signoff.cli import main; main()")


def python_cli(code, home, *args):
    return [sys.executable, "-c", code, "--home", str(home), *args]


def all_done(count):
    def check():
        return Delivery.select().where(Delivery.status == "done").count() == count
    return check


def serving(home, rt, command):
    """Start ``command`` (a worker) and return it once it has ingested a first event."""
    worker = subprocess.Popen(command, env=child_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    rt.enqueue_events([event(0, "evt-warm-up")])
    try:
        wait_for(all_done(1), timeout=60, what="the worker's first delivery")
    except AssertionError:
        worker.kill()
        raise
    return worker


def stop(worker):
    _, err = stop_worker(worker)
    assert b"Traceback" not in err, err.decode()[-2000:]


def test_a_burst_of_one_call_enqueues_sends_few_wake_ups_and_every_event_completes(
        live, monkeypatch):
    home, rt = live
    worker = serving(home, rt, signoff_cmd(home, "worker", "--workers", "2"))
    # One window and one burst gap longer than the test, however slow the machine:
    # the first call tops up, every later one is held, and closing sends the rest.
    # How windows divide a burst in time is tests/unit/test_wake_pacing.py's.
    monkeypatch.setattr(tasks, "WINDOW_S", 3600.0)
    monkeypatch.setattr(tasks, "BURST_GAP_S", 3600.0)
    sent, send = [], rt.wakers.send
    rt.wakers.send = lambda kind, count: (sent.append(count), send(kind, count))
    try:
        for n in range(BURST):
            [line] = rt.enqueue_events([event(n)])
            assert line.accepted
        rt.close()  # sends what is held back
        wait_for(all_done(BURST + 1), timeout=120, what="every delivery done")
    finally:
        del rt.wakers.send
        stop(worker)
    # A worker blocked on a Redis or PostgreSQL queue takes each wake-up at once,
    # so only the process's own pacing keeps this from being one per event.
    assert 1 <= sum(sent) <= 2, sent


def test_a_cli_enqueue_that_exits_with_wake_ups_held_back_still_wakes_an_idle_worker(live):
    home, rt = live
    worker = serving(home, rt, python_cli(WORKER_WITHOUT_REAPER, home, "worker"))
    try:
        events_file = home.parent / "events.jsonl"
        events_file.write_text("".join(json.dumps(event(n)) + "\n" for n in range(BURST)))
        done = subprocess.run(python_cli(ENQUEUE_HOLDING_BACK, home, "enqueue", str(events_file)),
                              env=child_env(), capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        assert done.stdout.decode().strip() == f"accepted {BURST}, rejected 0"
        wait_for(all_done(BURST + 1), timeout=60, what="every delivery done")
    finally:
        stop(worker)


# -- a queue that cannot be reached after the commit -----------------------------------

@pytest.fixture
def set_queue(monkeypatch, backend):
    """``set_queue(url)`` points every home of the test at queue ``url``; ``None``
    points them back at the test's own queue (the home's SQLite file, or the server
    the backend switch chose). The environment overrides signoff.toml, and it reaches
    both this process and the CLI's child processes."""
    def point_at(url):
        url = url or (backend.queue_url if backend is not None else None)
        if url:
            monkeypatch.setenv("SIGNOFF_QUEUE_URL", url)
        else:
            monkeypatch.delenv("SIGNOFF_QUEUE_URL", raising=False)
    return point_at


def run_cli(home, *args):
    done = subprocess.run(signoff_cmd(home, *args), env=child_env(), capture_output=True,
                          timeout=60)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def assert_warned_once(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: queue_unreachable: "), err
    assert "ConnectionError" in lines[0]


def test_a_queue_that_cannot_be_reached_after_the_commit_is_a_warning(live, set_queue):
    home, rt = live
    config = home / "signoff.toml"
    config.write_text(config.read_text().replace("read_attempts = 5", "read_attempts = 1"))
    rt.host().set_fault("read-timeout", times=1)
    rt = Signoff(home)  # the new read budget: the next delivery goes to the dead letters
    read_here(rt)
    rt.enqueue_events([event(1)])
    rt.run_until_idle()
    [letter] = rt.dead_letters()
    rt.enqueue_events([event(2)])
    rt.run_until_idle()
    [task] = Task.select()
    set_queue(CLOSED_PORT_QUEUE)

    events_file = home.parent / "events.jsonl"
    events_file.write_text(f'{{"event_id": "evt-3", "name": "comment.created", "document": '
                           f'"doc-demo", "record_id": "comment-3", "occurred": {int(time.time())}}}\n')
    code, out, err = run_cli(home, "enqueue", str(events_file))
    assert (code, out.strip()) == (0, "accepted 1, rejected 0")
    assert_warned_once(err)
    code, out, err = run_cli(home, "approve", task.key, "--digest", task.digest)
    assert (code, out.strip()) == (0, f"{task.key}: approved")
    assert_warned_once(err)
    code, out, err = run_cli(home, "tasks", "retry", task.key, "--json")
    assert code == 0 and '"status": "approved"' in out
    assert_warned_once(err)
    code, out, err = run_cli(home, "dlq", "replay", str(letter["id"]))
    assert (code, out.strip()) == (0, f"dead letter {letter['id']} (delivery {letter['ref']}) "
                                      "queued again")
    assert_warned_once(err)

    # Everything committed stands: a worker on a reachable queue finishes it all.
    set_queue(None)
    code, out, err = run_cli(home, "worker", "--drain")
    assert code == 0, err
    outcomes = {d.event_id: (d.status, d.outcome) for d in Delivery.select()}
    assert outcomes == {f"evt-{n}": ("done", "ready") for n in (1, 2, 3)}
    assert Task.get_by_id(task.key).status == "done"
    assert [r["key"] for r in rt.host().results()] == [task.key]
    rt.close()


def test_the_api_answers_as_usual_and_logs_the_warning(live, caplog, monkeypatch, set_queue):
    home, _ = live
    # The CLI, when it ran in this process, prints these itself instead.
    monkeypatch.setattr(logging.getLogger("signoff.wakeups"), "propagate", True)
    set_queue(CLOSED_PORT_QUEUE)
    rt = Signoff(home)
    read_here(rt)

    def warnings_of_this_outage():
        # caplog hears every thread of this pytest process, and a runtime an earlier
        # test left behind can still log its own queue's failure from its timer
        # thread. The lines about this runtime's outage quote its failure.
        return [r for r in caplog.records if r.name == "signoff.wakeups"
                and rt.wakers.unreachable in r.getMessage()]
    [line] = rt.enqueue_events([event(0)])
    assert line.accepted and Delivery.get_by_id(line.delivery).status == "queued"
    assert rt.wakers.unreachable.startswith("ConnectionError")
    [record] = warnings_of_this_outage()
    assert record.getMessage().startswith("queue_unreachable: ")
    [again] = rt.enqueue_events([event(1)])  # the same outage is not logged again
    assert again.accepted
    # What the second call held back is tried now, not by its timer after the count.
    rt.wakers.flush()
    assert len(warnings_of_this_outage()) == 1
    rt.close()


# -- an idle worker woken at once, and polling when a wake-up is lost --------------------

# The real CLI looking for work of its own accord once a minute at most: its
# queue's idle wait and its reaper put off, only a wake-up can reach it sooner.
WORKER_POLLING_SLOWLY = ("import signoff.worker as w, signoff.storage.pokes as p; "
                         "w.REAP_INTERVAL_S = w.IDLE_POLL_S = p.WAKE_POLL_S = 60.0; "
                         "from signoff.cli import main; main()")


def sqlite_queue(rt):
    return rt.config.queue_url is None or rt.config.queue_url.startswith("sqlite")


def test_an_idle_worker_that_polls_once_a_minute_takes_an_event_well_before(live):
    home, rt = live
    worker = serving(home, rt, python_cli(WORKER_POLLING_SLOWLY, home, "worker"))
    try:
        for n in range(1, 4):  # each alone, the worker idle again between them
            [line] = rt.enqueue_events([event(n)])
            assert line.accepted
            # A third of the poll interval: only the enqueue's wake-up can make it.
            wait_for(all_done(n + 1), timeout=20, what=f"event {n} done")
    finally:
        stop(worker)


def test_a_wake_up_lost_on_the_way_is_made_up_by_polling(live):
    home, rt = live
    worker = serving(home, rt, signoff_cmd(home, "worker", "--workers", "2"))
    send = rt.wakers.send
    rt.wakers.send = lambda kind, count: None  # the message never reaches the queue
    try:
        [line] = rt.enqueue_events([event(1)])
        assert line.accepted
        wait_for(all_done(2), timeout=60, what="the event found by the reaper")
    finally:
        rt.wakers.send = send
        stop(worker)


def test_a_poke_lost_or_sent_to_a_dead_socket_is_made_up_by_the_queue_poll(live):
    home, rt = live
    if not sqlite_queue(rt):
        pytest.skip("pokes wake the consumers of a SQLite queue")
    from signoff.storage.pokes import folder_for
    worker = serving(home, rt, python_cli(WORKER_WITHOUT_REAPER, home, "worker"))
    folder = folder_for(rt.config.queue_path)
    try:
        [live_socket] = folder.iterdir()
        live_socket.unlink()  # the worker's socket gone: every poke to it is lost
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        dead.bind(str(folder / "1"))
        dead.close()  # a socket file no process holds, as a killed worker leaves
        [line] = rt.enqueue_events([event(1)])
        assert line.accepted
        assert not (folder / "1").exists()  # refused, and removed by the enqueue
        wait_for(all_done(2), timeout=60, what="the event found by the queue poll")
    finally:
        stop(worker)
