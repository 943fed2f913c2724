"""Chaos: two worker processes, a flaky host, SIGKILLs at random, then a drain.

Run with ``pytest -m slow tests/acceptance/test_chaos.py``. The figures (events, kills,
lost acknowledgements, redundant submits, time to drain, how long a killed
worker's rows wait before another worker takes them) are printed in the run's summary.
Set ``CHAOS_SEED`` to replay a run's kill schedule and host faults.
"""

import json
import os
import random
import signal
import statistics
import subprocess
import time

import pytest

from helpers import child_env, read_here, seed_records, signoff_cmd, wait_for
from signoff.app import Signoff
from signoff.errors import Refused
from signoff.state.statuses import DELIVERY_PENDING, TASK_ACTIVE
from signoff.models import Attempt, Delivery, Inbox, Task

SEED = int(os.environ.get("CHAOS_SEED", "20261101"))
RECORDS = 300
WAVE = 30  # events per wave, plus a few redeliveries
CHAOS_S = 40.0
LEASE_S = 2.0
READ_TIMEOUT_P = 0.15
LOSE_ACK_P = 0.15

CONFIG = f"""
[host]
factory = "testhosts:ChaosHost"
[host.options]
seed = {SEED}
read_timeout_p = {READ_TIMEOUT_P}
lose_ack_p = {LOSE_ACK_P}
latency_s = 0.02
[retry]
base_delay_s = 0.1
max_delay_s = 1.0
[worker]
lease_ttl_s = {LEASE_S}
batch_size = 20
"""


class Workers:
    """Two worker slots; each slot's process can be killed and restarted."""

    def __init__(self, home, logs):
        self.home, self.logs = home, logs
        self.procs = [None, None]
        self.started = 0

    def start(self, slot, *args):
        log = self.logs / f"worker-{self.started}.log"
        self.started += 1
        with open(log, "wb") as out:
            self.procs[slot] = subprocess.Popen(
                signoff_cmd(self.home, "worker", "--workers", "2", *args),
                env=child_env(), stdout=subprocess.DEVNULL, stderr=out)
        return self.procs[slot]

    def kill(self, slot):
        proc = self.procs[slot]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        return proc.pid

    def stop_all(self):
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            if proc is not None:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=60)

    def stderr(self):
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))


def leased_by(pid):
    """Rows whose lease a process holds: ``{(kind, id): token}``."""
    mark = f":{pid}:"
    rows = {("delivery", d.id): d.lease_token for d in Delivery.select(Delivery.id, Delivery.lease_token)
            .where(Delivery.lease_owner.contains(mark), Delivery.lease_token.is_null(False))}
    rows.update({("task", t.key): t.lease_token for t in Task.select(Task.key, Task.lease_token)
                 .where(Task.lease_owner.contains(mark), Task.lease_token.is_null(False))})
    return rows


def busy_slot(workers, default, patience_s=1.5):
    """A worker that holds a lease now, else ``default``.

    Batches are short: a kill at a random instant mostly finds both workers
    idle, and then no lease is orphaned and no takeover is exercised.
    """
    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline:
        for slot, proc in enumerate(workers.procs):
            if proc is not None and proc.poll() is None and leased_by(proc.pid):
                return slot
        time.sleep(0.02)
    return default


def taken_over(kind, ref, old_token):
    """True once a row the killed worker held is claimed by another worker or has ended."""
    if kind == "delivery":
        row = Delivery.get_by_id(ref)
        pending = DELIVERY_PENDING
    else:
        row = Task.get_by_id(ref)
        pending = TASK_ACTIVE
    if row.lease_token == old_token:
        return False
    return row.lease_token is not None or row.status not in pending


def approve_ready(rt):
    """Approve every ready task, as a human in bulk would; returns how many."""
    ready = [(t.key, t.digest) for t in Task.select().where(Task.status == "ready")]
    if not ready:
        return 0
    answers = rt.approve_many(ready, by="bulk")
    refused = [a for a in answers if isinstance(a, Refused)]
    # A host read that kept timing out is transient: those are tried in the next round.
    assert all(a.code == "host_unavailable" for a in refused), refused
    return len(answers) - len(refused)


def assert_each_task_ended(tasks, results):
    """One task per first consumption; every task was approved and reached an end."""
    assert Inbox.select().where(Inbox.outcome == "ready").count() == len(tasks)
    for task in tasks.values():
        assert task.approved_digest == task.digest, task.key
        if task.status == "done":
            assert results.get(task.key) == task.result, task.key
        else:
            assert task.status == "dead", (task.key, task.status, task.code)
            assert task.key not in results or task.outcome_unknown, task.key


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_chaos_kill_restart_and_drain(tmp_path, record_property):
    home = tmp_path / "home"
    home.mkdir()
    (home / "signoff.toml").write_text(CONFIG, encoding="utf-8")
    rt = read_here(Signoff.init(home))
    host = rt.host()
    seed_records(host, RECORDS)
    rt.bind("doc-demo", window_s=3600)

    rng = random.Random(SEED)
    workers = Workers(home, tmp_path)
    workers.start(0)
    workers.start(1)

    def event(n, event_id=None):
        return {"event_id": event_id or f"evt-{n}", "name": "comment.created",
                "document": "doc-demo", "record_id": f"comment-{n}",
                "occurred": int(time.time())}

    sent = kills = approved = 0
    waits, pending = [], {}  # rows a killed worker held -> (old token, kill time)
    next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
    next_wave = time.monotonic()
    start = time.monotonic()
    try:
        while time.monotonic() - start < CHAOS_S:
            now = time.monotonic()
            if now >= next_wave and sent < RECORDS:
                wave = [event(n) for n in range(sent, min(sent + WAVE, RECORDS))]
                wave += [event(rng.randrange(0, sent + 1)) for _ in range(3)]  # redeliveries
                rt.enqueue_events(wave)
                sent += len(wave) - 3
                next_wave = now + 2.0
            if now >= next_kill:
                slot = busy_slot(workers, rng.randrange(2))
                pid = workers.kill(slot)
                killed_at = time.monotonic()
                kills += 1
                for ref, token in leased_by(pid).items():
                    pending[ref] = (token, killed_at)
                workers.start(slot)
                next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
            approved += approve_ready(rt)
            for (kind, ref), (token, killed_at) in list(pending.items()):
                if taken_over(kind, ref, token):
                    waits.append(time.monotonic() - killed_at)
                    del pending[(kind, ref)]
            time.sleep(0.1)  # pacing of this loop only; no assertion depends on it
        workers.stop_all()
        chaos_end = time.monotonic()
        # Drain: finish everything, approving what became ready meanwhile.
        rounds = 0
        while True:
            rounds += 1
            assert rounds < 10, "the drain did not settle"
            a = workers.start(0, "--drain")
            b = workers.start(1, "--drain")
            assert a.wait(timeout=120) == 0 and b.wait(timeout=120) == 0, workers.stderr()
            for (kind, ref), (token, killed_at) in list(pending.items()):
                if taken_over(kind, ref, token):
                    del pending[(kind, ref)]  # taken during the drain: not a fair wait figure
            if not Task.select().where(Task.status == "ready").exists():
                break
            approved += wait_for(lambda: approve_ready(rt) or None, timeout=30,
                                 what="approvals to go through")
        drained = time.monotonic() - chaos_end
    finally:
        workers.stop_all()

    stderr = workers.stderr()
    deliveries = list(Delivery.select())
    tasks = {t.key: t for t in Task.select()}
    results = {r["key"]: r["result"] for r in host.results()}
    writes = host.write_counts()
    calls = host.submit_log()
    outcomes = [c["outcome"] for c in calls]

    figures = {
        "seed": SEED, "events": sent, "deliveries": len(deliveries), "kills": kills,
        "worker_processes_started": workers.started,
        "tasks": len(tasks), "approved": approved, "results": len(results),
        "tasks_done": sum(t.status == "done" for t in tasks.values()),
        "tasks_dead": sum(t.status == "dead" for t in tasks.values()),
        "deliveries_dead": sum(d.status == "dead" for d in deliveries),
        "read_timeouts": host.conn.execute(
            "SELECT count(*) FROM read_calls WHERE outcome = 'timeout'").fetchone()[0],
        "lost_acks": outcomes.count("ack_dropped"),
        "submit_calls": len(calls), "submits_that_wrote": outcomes.count("wrote"),
        "redundant_submits": outcomes.count("idempotent"),
        "uncertain_recovered": rt.stats()["uncertain"]["recovered"],
        "lease_expiries": rt.stats()["lease_expiries"],
        "drain_s": round(drained, 2), "drain_rounds": rounds,
        "takeover_waits": len(waits),
        "takeover_wait_median_s": round(statistics.median(waits), 2) if waits else None,
        "takeover_wait_max_s": round(max(waits), 2) if waits else None,
    }
    record_property("chaos figures", json.dumps(figures))

    assert "database is locked" not in stderr
    assert "Traceback" not in stderr, stderr[-5000:]
    assert kills >= 10 and sent == RECORDS
    # Every accepted delivery has an outcome.
    assert {d.status for d in deliveries} <= {"done", "dead"}
    assert len(deliveries) == RECORDS + 3 * -(-RECORDS // WAVE)
    assert_each_task_ended(tasks, results)
    # Exactly once: no key written twice, no result without its task, no conflicts.
    assert set(results) <= set(tasks)
    assert all(n == 1 for n in writes.values()), writes
    assert set(writes) == set(results)
    # The call log is written after the host's commit, so a SIGKILL in between can
    # drop a line; the trigger count above is written with the result itself.
    assert outcomes.count("wrote") <= len(results)
    assert not [o for o in outcomes if o.startswith(("blocked", "error"))], outcomes
    # The receipt is read before any write, so a redundant submit can only come from
    # two workers both holding the task: the first one's lease must have expired.
    for call in calls:
        if call["outcome"] == "idempotent":
            codes = {a.code for a in Attempt.select().where(Attempt.kind == "task",
                                                             Attempt.ref == call["key"])}
            assert "lease_expired" in codes, call
    assert figures["lost_acks"] > 0 and figures["read_timeouts"] > 0
    assert figures["takeover_waits"] > 0
    rt.close()
