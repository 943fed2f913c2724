"""`signoff bench --http --events 120 --json` runs end to end and reports every figure."""

import json
import subprocess
import sys

from conftest import child_env


def test_http_bench_reports_every_figure_and_loses_nothing(tmp_path):
    done = subprocess.run([sys.executable, "-m", "signoff", "bench", "--http", "--events", "120",
                           "--json"], cwd=tmp_path, env=child_env(), capture_output=True,
                          timeout=280)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = json.loads(done.stdout)
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
