"""Worker heartbeats and `signoff healthcheck`: what an orchestrator's probe sees."""

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import child_env, signoff_cmd, wait_for
from signoff import storage
from signoff.app import Signoff
from signoff.models import WorkerBeat
from signoff.serve.metrics import registry_for, render
from signoff.state import heartbeats


def healthcheck(home, *args, env=None, timeout=60):
    """``signoff healthcheck --json`` in a child process: ``(exit code, report, stderr)``."""
    done = subprocess.run(signoff_cmd(home, "healthcheck", "--json", *args),
                          env=env or child_env(), capture_output=True, timeout=timeout)
    return done.returncode, json.loads(done.stdout), done.stderr.decode()


def worker(home, tmp_path, *args, env=None):
    """A real ``signoff worker`` child, its log in a file (a pipe could fill and block it)."""
    log = open(tmp_path / f"worker-{time.monotonic_ns()}.log", "wb")
    proc = subprocess.Popen(signoff_cmd(home, "worker", *args), env=env or child_env(),
                            stdout=subprocess.DEVNULL, stderr=log)
    proc.log = log
    return proc


def log_of(proc):
    """What the worker wrote to its log so far."""
    return Path(proc.log.name).read_text(encoding="utf-8", errors="replace")


def stop(proc, signum=signal.SIGTERM):
    """Signal the worker; its exit code. One that does not exit in 60 s fails with its
    threads' stacks (SIGUSR2) and the end of its log."""
    proc.send_signal(signum)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR2)
        try:
            wait_for(lambda: "Thread 0x" in log_of(proc), timeout=10, what="the stacks")
        finally:
            pytest.fail("the worker did not stop within 60 s:\n" + log_of(proc)[-6000:])
    finally:
        proc.kill()
        proc.log.close()


@pytest.fixture
def live(tmp_path, home):
    """An initialised home (real clock) for worker processes."""
    rt = Signoff.init(home)
    yield rt
    rt.close()


def beats(rt):
    with storage.session(rt.database):
        return list(WorkerBeat.select().dicts())


def test_healthcheck_is_ok_with_a_live_worker_and_fails_once_it_is_killed(live, home,
                                                                          tmp_path):
    code, report, _ = healthcheck(home)
    assert code == 1 and report["ok"] is False
    assert report["checks"]["workers"]["code"] == "no_live_worker"
    proc = worker(home, tmp_path, "--workers", "2")
    try:
        # Each `healthcheck` is a child process as costly as the worker's own start:
        # polled meanwhile, they slowed that start. The first beat is read here.
        wait_for(lambda: beats(live), what="the first beat")
        wait_for(lambda: healthcheck(home)[0] == 0, what="a live worker")
        code, report, _ = healthcheck(home)
        assert report["ok"] is True
        assert all(report["checks"][c]["ok"] for c in ("database", "schema", "queue", "workers"))
        [w] = report["checks"]["workers"]["workers"]
        assert (w["pid"], w["threads"], w["live"]) == (proc.pid, 2, True)
        assert w["host"] == socket.gethostname()
        # The loop beats about every second: the beat moves on while the worker runs.
        first = beats(live)[0]["beat_at"]
        wait_for(lambda: beats(live)[0]["beat_at"] > first, what="a second beat")
    finally:
        proc.kill()  # SIGKILL: no clean stop, the row stays behind
        proc.wait(timeout=60)
        proc.log.close()
    [row] = beats(live)
    # Past --max-age 1 a second after the last beat; waited for here, not by children.
    wait_for(lambda: time.time() > row["beat_at"] + 1.1, timeout=30, what="the beat's age")
    code, report, err = wait_for(lambda: (lambda r: r if r[0] == 1 else None)(
        healthcheck(home, "--max-age", "1")), what="the beat to age past --max-age")
    workers = report["checks"]["workers"]
    assert workers["ok"] is False and workers["code"] == "no_live_worker"
    assert workers["live"] == 0 and workers["freshest_age_s"] > 1
    assert str(proc.pid) in workers["message"]
    # Without --json: exit 1 naming the failed check on stderr.
    done = subprocess.run(signoff_cmd(home, "healthcheck", "--max-age", "1"), env=child_env(),
                          capture_output=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.decode().startswith("error: no_live_worker: workers:")


def test_a_clean_stop_removes_the_heartbeat(live, home, tmp_path):
    proc = worker(home, tmp_path, "--workers", "1")
    try:
        wait_for(lambda: beats(live), what="the first beat")
    finally:
        assert stop(proc) == 0
    assert beats(live) == []


def test_sigusr2_writes_every_threads_stack_to_the_log_and_the_worker_goes_on(
        live, home, tmp_path):
    proc = worker(home, tmp_path, "--workers", "1")
    try:
        wait_for(lambda: beats(live), what="the first beat")
        wait_for(lambda: "worker started" in log_of(proc), what="the signal handlers")
        proc.send_signal(signal.SIGUSR2)
        wait_for(lambda: "in _loop" in log_of(proc), what="the stacks in the log")
        assert log_of(proc).count("Thread 0x") >= 2  # the loop and the consumer's thread
        assert proc.poll() is None
    finally:
        assert stop(proc) == 0
    assert beats(live) == []


def test_sigusr2_answers_a_worker_that_is_still_waiting_for_its_database(live, home,
                                                                         tmp_path):
    # Nothing listens on port 1: the worker waits at start, retrying, as it does
    # for a database that restarts. That is the worker an operator asks for stacks.
    env = child_env(SIGNOFF_DATABASE_URL="postgresql://postgres@127.0.0.1:1/signoff")
    proc = worker(home, tmp_path, "--workers", "1", env=env)
    try:
        wait_for(lambda: "retrying on a new connection" in log_of(proc),
                 what="the worker waiting for its database")
        proc.send_signal(signal.SIGUSR2)
        wait_for(lambda: "in wait_until_reachable" in log_of(proc), what="the stacks")
        assert proc.poll() is None
        assert "worker started" not in log_of(proc)
    finally:
        proc.kill()
        proc.wait(timeout=60)
        proc.log.close()


def test_the_worker_threads_come_from_the_environment(live, home, tmp_path):
    proc = worker(home, tmp_path, env=child_env(SIGNOFF_WORKER_WORKERS="3"))
    try:
        [row] = wait_for(lambda: beats(live), what="the first beat")
        assert row["threads"] == 3
    finally:
        assert stop(proc) == 0
    assert b"worker started: 3 threads" in (tmp_path.glob("worker-*.log").__next__()).read_bytes()
    bad = subprocess.run(signoff_cmd(home, "worker", "--drain"), capture_output=True,
                         env=child_env(SIGNOFF_WORKER_WORKERS="three"), timeout=60)
    assert bad.returncode == 2
    assert b"SIGNOFF_WORKER_WORKERS" in bad.stderr and b"'three'" in bad.stderr


def test_healthcheck_fails_on_a_database_that_is_down(live, home, backend, empty_database):
    if backend is not None and backend.database_url:
        # A PostgreSQL database that does not exist.
        url = backend.database_url.rsplit("/", 1)[0] + "/signoff_no_such_database"
        env = child_env(SIGNOFF_DATABASE_URL=url)
    else:
        live.close()
        for leftover in home.glob("signoff.db*"):
            leftover.unlink()
        (home / "signoff.db").write_bytes(b"this is no database" * 100)
        env = child_env()
    code, report, _ = healthcheck(home, env=env)
    assert code == 1 and report["ok"] is False
    database = report["checks"]["database"]
    # A PostgreSQL server that answers but lacks the database says so by name; a
    # file that is no SQLite database is a database error.
    expected = "database_missing" if backend is not None and backend.database_url \
        else "database_error"
    assert database["ok"] is False and database["code"] == expected
    for later in ("schema", "workers"):
        assert report["checks"][later] == {"ok": False, "code": "not_checked",
                                           "message": report["checks"][later]["message"]}
    assert report["checks"]["queue"]["ok"] is True


def test_healthcheck_fails_on_a_schema_from_an_older_version(live, home):
    live.database.execute_sql(f"UPDATE {storage.SCHEMA_TABLE} SET version = version - 1")
    code, report, _ = healthcheck(home)
    assert code == 1
    schema = report["checks"]["schema"]
    assert schema["ok"] is False and schema["code"] == "schema_mismatch"
    assert "signoff init" in schema["message"]
    assert report["checks"]["database"]["ok"] is True


def test_healthcheck_answers_in_time_when_the_servers_never_reply(live, home):
    # A port that takes connections (the kernel's backlog) and never answers a byte.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1]
    env = child_env(SIGNOFF_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/x",
                    SIGNOFF_QUEUE_URL=f"redis://127.0.0.1:{port}/0")
    try:
        started = time.monotonic()
        code, report, _ = healthcheck(home, env=env, timeout=120)
        took = time.monotonic() - started
    finally:
        silent.close()
    assert code == 1
    assert report["checks"]["database"]["code"] == "database_unavailable"
    assert report["checks"]["queue"]["code"] == "queue_unreachable"
    assert took < 30  # the checks' own deadline is 8 s; the rest is a child's start-up


# -- in one process, on the fake clock ----------------------------------------------------

def test_heartbeats_live_silent_and_pruned(rt, clock):
    beat = heartbeats.Heartbeat(clock, threads=4)
    with storage.session(rt.database):
        beat.beat()
        started = clock.now()
        clock.advance(2)
        beat.beat()
        [row] = WorkerBeat.select().dicts()
        assert (row["started_at"], row["beat_at"], row["threads"]) == (started, started + 2, 4)
        assert row["pid"] == os.getpid()
        clock.advance(heartbeats.LIVE_S + 1)
        found = heartbeats.summary(clock.now())
        assert found["live"] == 0 and found["freshest_age_s"] == heartbeats.LIVE_S + 1
        assert heartbeats.prune(clock.now()) == 0  # silent, not yet past the prune limit
        clock.advance(heartbeats.PRUNE_AFTER_S)
        assert heartbeats.prune(clock.now()) == 1
        beat.beat()  # a worker whose row was pruned during a long pause writes it again
        assert heartbeats.summary(clock.now())["live"] == 1
        beat.stop()
        assert heartbeats.summary(clock.now()) == {
            "live": 0, "max_age_s": heartbeats.LIVE_S, "freshest_age_s": None, "workers": []}


def scrape(site):
    text = render(registry_for(site)).decode()
    return {s.name: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if not s.labels}


def test_stats_and_metrics_show_the_workers(rt, site, clock):
    assert rt.stats()["workers"]["workers"] == []
    samples = scrape(site)
    assert samples["signoff_workers"] == 0
    assert "signoff_worker_heartbeat_age_seconds" not in samples  # absent with no worker
    beat = heartbeats.Heartbeat(clock, threads=2)
    with storage.session(rt.database):
        beat.beat()
    clock.advance(3)
    workers = rt.stats()["workers"]
    assert (workers["live"], workers["freshest_age_s"]) == (1, 3)
    samples = scrape(site)
    assert samples["signoff_workers"] == 1
    assert samples["signoff_worker_heartbeat_age_seconds"] == 3
    clock.advance(heartbeats.LIVE_S)
    samples = scrape(site)
    assert samples["signoff_workers"] == 0
    assert samples["signoff_worker_heartbeat_age_seconds"] == 3 + heartbeats.LIVE_S
