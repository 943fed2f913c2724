"""`signoff bench --events 50 --json` runs end to end and reports every figure."""

import json
import subprocess
import sys

import pytest
from conftest import child_env

from signoff.bench import KEYS
from signoff.config import BACKEND_ENV

TARGETS = ("ingest_ratio", "pipeline_ratio", "commits_per_event", "enqueue_per_s",
           "worker_peak_rss_mb")


def test_bench_json_has_every_key(tmp_path):
    # The bench makes homes of its own on its default backends, whatever the test switch says.
    env = {k: v for k, v in child_env().items() if k not in BACKEND_ENV.values()}
    done = subprocess.run([sys.executable, "-m", "signoff", "bench", "--events", "50", "--json"],
                          cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = json.loads(done.stdout)
    for key in KEYS:
        assert key in report, key
    assert report["events"] == 50 and report["workers"] == 2
    for key in KEYS:
        if key not in ("events", "workers", "commits_breakdown"):
            assert isinstance(report[key], (int, float)) and report[key] > 0, (key, report[key])
    breakdown = report["commits_breakdown"]
    assert set(breakdown["by_file"]) >= {"signoff.db", "host.db"}
    assert set(breakdown["by_step"]) == {"enqueue", "ingest", "approve", "submit"}
    assert sum(breakdown["by_step"].values()) == pytest.approx(report["commits_per_event"], abs=0.01)
    for key in TARGETS:
        target = report["targets"][key]
        assert isinstance(target["pass"], bool) and target["value"] == report[key]
    assert "ingest_growth_per_s" not in report

