"""`signoff bench --http --events 120 --json` runs end to end and reports every figure."""

import json
import os
import subprocess
import sys

import pytest
from conftest import child_env

DATABASE_URL = os.environ.get("SIGNOFF_TEST_DATABASE_URL") or None
QUEUE_URL = os.environ.get("SIGNOFF_TEST_QUEUE_URL") or None


def test_http_bench_reports_every_figure_and_loses_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "signoff", "bench", "--http", "--events", "120",
                           "--json"], cwd=tmp_path, env=child_env(), capture_output=True,
                          timeout=280)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = json.loads(done.stdout)
    assert report["backend"] == "sqlite/sqlite"  # the test switch is not the bench's
    assert report["events"] == 120 and report["clients"] == 50
    assert report["signoff"]["statuses"] == {"202": 120}
    assert report["bare"]["statuses"] == {"202": 120}
    assert report["bad_signatures"]["statuses"] == {"401": 3} and report["bad_all_401"]
    assert report["accepted"] == 120 + 30 and report["lost"] == 0
    assert report["events_per_commit"] >= 1
    for name in ("bare", "bare_half_rate", "signoff", "half_rate"):
        assert report[name]["per_s"] > 0 and report[name]["p99_ms"] >= report[name]["p50_ms"] > 0
    assert set(report["targets"]) == {"ratio", "p99_ms_at_half_rate"}
    assert all(isinstance(t["pass"], bool) for t in report["targets"].values())


@pytest.mark.skipif(not DATABASE_URL, reason="SIGNOFF_TEST_DATABASE_URL is not set")
def test_http_bench_runs_on_the_test_backends_and_drops_its_database(tmp_path):
    args = ["--database-url", DATABASE_URL] + (["--queue-url", QUEUE_URL] if QUEUE_URL else [])
    done = subprocess.Popen([sys.executable, "-m", "signoff", "bench", "--http", "--events", "40",
                             "--json", *args], cwd=tmp_path, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = done.communicate(timeout=280)
    assert done.returncode == 0, err.decode()[-2000:]
    report = json.loads(out)
    assert report["backend"].startswith("postgresql/") and report["lost"] == 0
    assert report["signoff"]["statuses"] == {"202": 40}
    import psycopg
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s",
                            (f"signoff_bench_{done.pid}_%",)).fetchall()
    assert left == []
