"""`python -m bench --concurrent` and `--cli` run end to end with small N and report every figure."""

import json
import subprocess
import sys

import pytest
from conftest import child_env

pytestmark = pytest.mark.timeout(900)  # a whole bench run per test


def bench(tmp_path, *args):
    done = subprocess.run([sys.executable, "-m", "bench", "--json", *args], cwd=tmp_path,
                          env=child_env(), capture_output=True, timeout=840)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.backend_independent
def test_concurrent_bench_compares_eight_callers_with_the_batch_run(tmp_path):
    report = bench(tmp_path, "--concurrent", "--events", "40", "--pairs", "5")
    assert (report["events"], report["callers"], report["processes"]) == (40, 8, 2)
    assert report["backend"] == "sqlite/sqlite"
    for key in ("batch_flow_per_s", "concurrent_flow_per_s", "concurrent_enqueue_per_s",
                "sequential_calls_per_s", "sequential_commit_floor_per_s"):
        assert report[key] > 0, key
    ratios = report["concurrent_ratios"]
    assert len(ratios) == 5 and ratios == sorted(ratios) and report["concurrent_ratio"] == ratios[2]
    flows = list(zip(report["concurrent_flows_per_s"], report["batch_flows_per_s"]))
    assert [c / b for c, b in flows] == pytest.approx(ratios, rel=0.01)
    medians = sorted(c for c, _ in flows)[2] / sorted(b for _, b in flows)[2]
    assert report["ratio_of_medians"] == pytest.approx(medians, rel=0.01)
    assert len(report["sequential_ratios"]) == 5
    # The callers alone: the round of median CPU a call, and every round's.
    alone = report["alone"]
    assert alone["calls_per_s"] > 0 and alone["cpu_us_per_call"] > 0
    assert alone["switches_per_call"] >= 0
    rounds = report["alone_cpu_us_per_call"]
    assert len(rounds) == 5 and rounds == sorted(rounds) and alone["cpu_us_per_call"] == rounds[2]
    assert report["concurrent_writer_batches"] >= 0  # the API's group commit
    # Each call durable before it answers: its time is at least a commit's, never nothing.
    assert 0 < report["concurrent_call_p50_ms"] <= report["concurrent_call_p99_ms"]
    cpu = report["cpu"]  # the median pair's CPU bill
    assert cpu["call_us"] > 0 and all(us > 0 for us in cpu["workers_us_per_event"])
    # Every call commits: alone, or in a group commit of several.
    assert 1 <= cpu["commits"] <= 40 and cpu["commit_lock_s"] > 0
    assert 0 < cpu["estimate"] <= 1 and 0 < cpu["batch_busy"]
    assert set(report["targets"]) == {"concurrent_ratio", "sequential_ratio"}
    assert all(isinstance(t["pass"], bool) for t in report["targets"].values())


@pytest.mark.slow
@pytest.mark.backend_independent
def test_cli_bench_times_processes_and_the_start_up(tmp_path):
    report = bench(tmp_path, "--cli", "--events", "40")
    assert report["events"] == 40
    assert report["signoff_cli_ingest_per_s"] > 0 and report["huey_cli_noop_per_s"] > 0
    assert report["huey_cli_noop_fsync_per_s"] > 0
    # Rounded rates: the ratio of the unrounded ones agrees to within a rounding step.
    assert report["cli_ingest_ratio_fsync"] == pytest.approx(
        report["signoff_cli_ingest_per_s"] / report["huey_cli_noop_fsync_per_s"], rel=0.01)
    assert [len(v) for v in report["rounds_per_s"].values()] == [3, 3, 3]
    startup = report["startup"]
    assert startup["signoff_cli_import_ms"] > 0 and startup["signoff_help_s"] > 0
