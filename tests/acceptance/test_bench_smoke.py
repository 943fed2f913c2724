"""`signoff bench --json` (and `--http`) runs end to end with small N and reports every figure."""

import json
import os
import subprocess
import sys

import pytest
from helpers import child_env

from bench.instructions import BUDGETS, CHAIN_SHARE
from bench.pipeline import GROWTH_KEYS, KEYS, PER_EVENT_PAIRS

TARGETS = ("ingest_ratio", "pipeline_ratio", "job_ratio", "commits_per_event", "enqueue_per_s",
           "worker_peak_rss_mb", "per_event_ratio_1p", "per_event_ratio_2p",
           "ingest_growth_ratio", "claim_growth_ratio")
NOT_RATES = ("events", "workers", "backend", "processes", "host", "commits_breakdown",
             "by_processes")
# A whole bench run per test: minutes on a busy machine.
pytestmark = pytest.mark.timeout(900)


def bench(tmp_path, *args):
    # Under the backend switch too: the bench's homes are on the backends its flags name.
    with subprocess.Popen([sys.executable, "-m", "bench", "--json", *args],
                          cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:
        try:
            out, err = proc.communicate(timeout=840)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    done.pid = proc.pid  # the bench names its databases signoff_bench_<pid>_…
    return done


def bench_report(tmp_path, *args):
    """``(done, report)`` of a bench run that must succeed: its process and its JSON."""
    done = bench(tmp_path, *args)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return done, json.loads(done.stdout)


# A bench's homes are on the backends its flags name, never on the test switch's:
# the runs without those flags are the same in every stage.
@pytest.mark.slow
@pytest.mark.backend_independent
def test_bench_json_has_every_key(tmp_path):
    _, report = bench_report(tmp_path, "--events", "40", "--processes", "1,2", "--growth",
                             "--growth-rows", "1000")
    for key in KEYS + GROWTH_KEYS:
        assert key in report, key
    assert (report["events"], report["workers"], report["processes"]) == (40, 2, 1)
    assert report["backend"] == "sqlite/sqlite" and report["growth_rows"] == 1000
    for key in KEYS + GROWTH_KEYS:
        if key not in NOT_RATES:
            assert isinstance(report[key], (int, float)) and report[key] > 0, (key, report[key])
    assert set(report["by_processes"]) == {"1", "2"}
    for figures in report["by_processes"].values():
        for key in ("ingest_per_s", "pipeline_per_s", "huey_noop_per_s", "huey_chain_per_s",
                    "huey_job_per_s", "job_ratio", "per_event_ratio", "ingest_scaling"):
            assert figures[key] > 0, (key, figures)
    assert report["by_processes"]["1"]["ingest_scaling"] == 1.0
    # How busy the cores were while the events were ingested, and the second
    # process's ingest per busy share against the first's.
    assert all(0 < figures["ingest_busy"] <= 1 for figures in report["by_processes"].values())
    two = report["by_processes"]["2"]
    assert two["ingest_per_busy_share"] == pytest.approx(
        two["ingest_per_s"] / two["ingest_busy"]
        / (report["by_processes"]["1"]["ingest_per_s"] / report["by_processes"]["1"]["ingest_busy"]),
        abs=0.001)
    for figures in report["by_processes"].values():
        # Batch and one-call-per-event runs in turn: the median pair gives the ratio.
        ratios = figures["per_event_ratios"]
        assert len(ratios) == PER_EVENT_PAIRS and ratios == sorted(ratios)
        assert figures["per_event_ratio"] == ratios[len(ratios) // 2]
        assert figures["per_event_ingest_lag_s"] >= 0
        assert figures["batch_after_ingest_s"] > 0 and figures["per_event_after_ingest_s"] > 0
    breakdown = report["commits_breakdown"]
    assert set(breakdown["by_file"]) >= {"signoff.db", "host.db"}
    # The reference host writes a submit batch's results in one commit.
    assert report["host"] == "batch write" and breakdown["by_file"]["host.db"] < 0.5
    assert set(breakdown["by_step"]) == {"enqueue", "ingest", "approve", "submit"}
    assert sum(breakdown["by_step"].values()) == pytest.approx(report["commits_per_event"], abs=0.01)
    assert set(report["targets"]) == set(TARGETS)
    for key in TARGETS:
        target = report["targets"][key]
        value = (report["by_processes"][key[-2]]["per_event_ratio"]
                 if key.startswith("per_event_ratio") else report[key])
        assert isinstance(target["pass"], bool) and target["value"] == value


@pytest.mark.slow
@pytest.mark.backend_independent
def test_a_one_write_host_commits_each_result_on_its_own(tmp_path):
    _, report = bench_report(tmp_path, "--events", "40", "--one-write-host")
    assert report["host"] == "one write per result"
    assert report["pipeline_per_s"] > 0 and report["targets"]["pipeline_ratio"]["value"] > 0
    # A commit for each result written (and none saved by batching them).
    assert report["commits_breakdown"]["by_file"]["host.db"] >= 1.0


@pytest.mark.parametrize("args", [["--processes", "0"], ["--processes", "1,x"],
                                  ["--processes", "2,2"], ["--queue-url", "mysql://h/db"],
                                  ["--database-url", "redis://127.0.0.1:6379/0"]])
@pytest.mark.backend_independent
def test_bench_refuses_bad_flags_as_usage_errors(tmp_path, args):
    done = bench(tmp_path, *args)
    assert done.returncode == 2, done
    assert b"Traceback" not in done.stderr


DATABASE_URL = os.environ.get("SIGNOFF_TEST_DATABASE_URL")
QUEUE_URL = os.environ.get("SIGNOFF_TEST_QUEUE_URL")


@pytest.mark.skipif(not (DATABASE_URL or QUEUE_URL),
                    reason="SIGNOFF_TEST_DATABASE_URL / SIGNOFF_TEST_QUEUE_URL not set")
def test_bench_on_the_test_backends_leaves_no_database_behind(tmp_path):
    args = ["--events", "30"]
    args += ["--database-url", DATABASE_URL] if DATABASE_URL else []
    args += ["--queue-url", QUEUE_URL] if QUEUE_URL else []
    done, report = bench_report(tmp_path, *args)
    assert report["backend"] != "sqlite/sqlite"
    assert report["commits_per_event"] is None  # only SQLite files are traced
    assert report["by_processes"]["1"]["per_event_flow_per_s"] > 0
    assert left_behind(done) == ([], [])


@pytest.mark.skipif(not (DATABASE_URL or QUEUE_URL),
                    reason="SIGNOFF_TEST_DATABASE_URL / SIGNOFF_TEST_QUEUE_URL not set")
def test_concurrent_bench_on_the_test_backends_leaves_nothing_behind(tmp_path):
    # Its sequential caller's home holds a wake-up back when it closes: sent by a timer
    # after the run deleted its keys, it left one Redis key behind.
    args = ["--concurrent", "--events", "30", "--pairs", "1"]
    args += ["--database-url", DATABASE_URL] if DATABASE_URL else []
    args += ["--queue-url", QUEUE_URL] if QUEUE_URL else []
    done, report = bench_report(tmp_path, *args)
    assert report["backend"] != "sqlite/sqlite"
    assert left_behind(done) == ([], [])


def left_behind(done):
    """The databases and Redis queue keys the bench run ``done`` made that are still there.

    Only this run's (named after its pid): other benchmarks may share the servers.
    """
    databases, keys = [], []
    if DATABASE_URL:
        import psycopg
        with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
            databases = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                                     (f"signoff_bench_{done.pid}_%",)).fetchall()
    if QUEUE_URL and not QUEUE_URL.startswith(("postgres://", "postgresql://")):
        import redis
        with redis.Redis.from_url(QUEUE_URL) as client:
            keys = list(client.scan_iter(match=f"huey.*.bench{done.pid}_*"))
    return databases, keys


@pytest.mark.slow
@pytest.mark.backend_independent
def test_http_bench_reports_every_figure_and_loses_nothing(tmp_path):
    _, report = bench_report(tmp_path, "--http", "--events", "120")
    assert report["backend"] == "sqlite/sqlite"  # the test switch is not the bench's
    assert report["events"] == 120 and report["clients"] == 50
    assert report["signoff"]["statuses"] == {"202": 120}
    assert report["bare"]["statuses"] == {"202": 120}
    # The durable bare endpoint verified and stored every request it answered 202.
    assert report["durable_bare"]["statuses"] == {"202": 120}
    assert report["durable_bare"]["stored"] == 120
    assert report["ratio_to_durable_bare"] > 0
    assert report["bad_signatures"]["statuses"] == {"401": 3} and report["bad_all_401"]
    assert report["accepted"] == 120 + 30 and report["lost"] == 0
    assert report["events_per_commit"] >= 1
    # The servers' CPU per request (a tick is 10 ms: the bare side's 120 may round to 0).
    assert report["signoff"]["server_cpu_ms_per_request"] > 0
    assert report["bare"]["server_cpu_ms_per_request"] >= 0
    for name in ("bare", "durable_bare", "signoff"):  # which side a pass measured
        figures = report[name]
        assert figures["server_busy"] >= 0 and figures["load_busy"] >= 0
        assert figures["load_cpu_ms_per_request"] >= 0
    for name in ("bare", "bare_half_rate", "durable_bare", "signoff", "half_rate"):
        assert report[name]["per_s"] > 0 and report[name]["p99_ms"] >= report[name]["p50_ms"] > 0
    assert set(report["targets"]) == {"ratio", "p99_ms_at_half_rate"}
    assert all(isinstance(t["pass"], bool) for t in report["targets"].values())


@pytest.mark.slow
@pytest.mark.backend_independent
def test_tracing_bench_reports_ingest_with_tracing_off_and_on(tmp_path):
    _, report = bench_report(tmp_path, "--tracing", "--events", "30")
    assert (report["events"], report["rounds"]) == (30, 3)
    for key in ("ingest_off_per_s", "ingest_on_per_s", "on_over_off", "off_hooks_ns_per_event",
                "exported_bytes_per_event"):
        assert report[key] > 0, key
    # enqueue, ingest and draft for every event; the 30 events are one ingest batch,
    # whose records are read in one host.get_many (under its signoff.reads span) and its
    # material once: every span ended
    assert report["spans_per_event"] == round(3 + 3 / 30, 2)
    assert [len(v) for v in report["rounds_per_s"].values()] == [3, 3]


@pytest.mark.skipif(not DATABASE_URL, reason="SIGNOFF_TEST_DATABASE_URL is not set")
def test_http_bench_runs_on_the_test_backends_and_drops_its_database(tmp_path):
    args = ["--database-url", DATABASE_URL] + (["--queue-url", QUEUE_URL] if QUEUE_URL else [])
    done, report = bench_report(tmp_path, "--http", "--events", "40", *args)
    assert report["backend"].startswith("postgresql/") and report["lost"] == 0
    assert report["signoff"]["statuses"] == {"202": 40}
    assert left_behind(done) == ([], [])  # the served home's wake-ups had no worker


@pytest.mark.skipif(not (QUEUE_URL or "").startswith(("postgres://", "postgresql://")),
                    reason="SIGNOFF_TEST_QUEUE_URL is not a PostgreSQL server")
def test_plain_huey_baseline_on_postgresql_is_handed_over_in_one_transaction(backend):
    # A commit per message would make the baseline time the producer, not the consumers.
    import psycopg

    from bench.pipeline import _close_queue, _hand_over, plain_huey
    huey, tasks = plain_huey({"url": backend.queue_url, "name": backend.queue_name})
    try:
        _hand_over(huey, [huey.serialize_task(tasks["noop"].s()) for _ in range(25)])
        assert huey.storage.queue_size() == 25
    finally:
        _close_queue(huey)
    with psycopg.connect(backend.queue_url, autocommit=True) as conn:
        (transactions,) = conn.execute("SELECT count(DISTINCT xmin::text) FROM huey_task "
                                       "WHERE queue = %s", (backend.queue_name,)).fetchone()
    assert transactions == 1


async def _load_against(answer, count=12, clients=3):
    """The bench's load client against a real loopback server that answers each
    connection's first request with ``answer`` (bytes) and then closes it."""
    import asyncio

    from bench.webhooks import _load, events_for

    async def handle(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        return await _load(url, events_for(count, "t"), lambda msg_id, body: {}, clients)


CLOSED = {"EOFError", "ConnectionResetError", "BrokenPipeError"}


@pytest.mark.backend_independent
@pytest.mark.parametrize("answer, failure", [
    (b"", "EOFError"),  # closed without an answer
    (b"HTTP/1.1 202 Accepted\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", "ValueError"),
])
def test_the_load_client_counts_requests_that_got_no_answer_it_reads(answer, failure):
    import asyncio
    figures = asyncio.run(_load_against(answer))
    assert figures["statuses"] == {failure: 12}  # each one counted, none lost from the count
    assert figures["p50_ms"] is None and figures["accepted_ids"] == []


@pytest.mark.backend_independent
def test_the_load_client_reads_answers_and_reconnects_after_the_server_closes():
    import asyncio
    figures = asyncio.run(_load_against(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 2\r\n\r\n{}"))
    statuses = figures["statuses"]
    assert sum(statuses.values()) == 12 and set(statuses) - {401} <= CLOSED
    # Every connection answers once: a client that did not reconnect after the
    # first close would get 3 answers in all (one per client), not half of the 12.
    assert statuses[401] >= 6 and figures["p99_ms"] >= figures["p50_ms"] > 0


@pytest.mark.slow
@pytest.mark.backend_independent
def test_bench_cli_runs_with_the_batch_size_it_is_given(tmp_path):
    _, report = bench_report(tmp_path, "--cli", "--events", "60", "--batch-size", "7")
    assert (report["events"], report["batch_size"]) == (60, 7)
    for key in ("signoff_cli_ingest_per_s", "huey_cli_noop_per_s", "cli_ingest_ratio"):
        assert report[key] > 0, (key, report[key])
    refused = bench(tmp_path, "--batch-size", "7")
    assert refused.returncode == 2 and b"--batch-size goes with --cli" in refused.stderr


INSTRUCTIONS = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "instructions.py")


@pytest.mark.slow
@pytest.mark.backend_independent
def test_instruction_counts_cover_every_step_and_every_event(tmp_path):
    done = subprocess.run([sys.executable, INSTRUCTIONS, "--events", "20", "--json"],
                          cwd=tmp_path, env=child_env(), capture_output=True, text=True,
                          timeout=840)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert (report["events"], report["done"], report["jobs_done"]) == (20, 20, 20)
    counts = report["per_event"]
    assert set(counts) == {"enqueue_call", "enqueue_batch", "ingest", "approve", "submit",
                           "huey_job"}
    # Each step does real work an event (reads, checks, a digest, writes): far more
    # than the few thousand instructions a count missing its step would show.
    assert min(counts.values()) > 50_000, counts
    assert report["pipeline"] == counts["ingest"] + counts["approve"] + counts["submit"]
    assert report["job_ratio"] == round(counts["huey_job"] / report["pipeline"], 3)
    # The budgets judge the pipeline's sum and the one-event call, each by its own figure.
    targets = report["targets"]
    assert (targets["pipeline"]["value"], targets["enqueue_call"]["value"]) == (
        report["pipeline"], counts["enqueue_call"])
    assert all(targets[key]["pass"] == (targets[key]["value"] <= budget)
               for key, budget in BUDGETS.items()), targets
    # The chain's share: the pipeline against the same steps counted again, in the
    # same run, with the chain's work taken out; that run too finishes every task,
    # and does less work in each step.
    bare = report["without_chain"]
    assert bare["done"] == 20 and set(bare["per_event"]) == {"ingest", "approve", "submit"}
    assert bare["pipeline"] == sum(bare["per_event"].values())
    assert all(bare["per_event"][step] < counts[step] for step in bare["per_event"]), bare
    chain = targets["chain"]
    assert (chain["value"], chain["ratio"]) == (
        report["pipeline"], round(report["pipeline"] / bare["pipeline"], 3))
    assert chain["pass"] == (report["pipeline"] <= bare["pipeline"] * CHAIN_SHARE)


@pytest.mark.backend_independent
def test_instruction_counts_name_the_tool_they_lack(tmp_path):
    # A PATH with Python's own folder only: no valgrind there.
    env = child_env(PATH=os.path.dirname(sys.executable))
    done = subprocess.run([sys.executable, INSTRUCTIONS, "--events", "5"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "needs valgrind" in done.stderr, done
    assert "Traceback" not in done.stderr
