"""End to end over MCP: a home whose host is ``McpHost`` on ``signoff host mcp``.

Events → a real worker process → approval → done, with the host reached only
through MCP stdio servers (the worker starts its own). Writes are counted by
SQLite triggers in ``host.db``.
"""

import json
import re
import subprocess
import sys
import time

import pytest

from helpers import ROOT, child_env, signoff_cmd, write_mcp_host
from signoff.app import Signoff

from testhosts import RecordingHost  # noqa: E402

DRAIN_TIMEOUT = 120


def configure_mcp_home(home):
    """Point ``home``'s host at ``signoff host mcp``, with quick retries; other tables are kept."""
    write_mcp_host(home, sys.executable, ["-m", "signoff", "--home", str(home), "host", "mcp"],
                   str(ROOT), "[retry]\nbase_delay_s = 0.05\nmax_delay_s = 0.2\n")


@pytest.fixture
def mcp_rt(home):
    configure_mcp_home(home)
    rt = Signoff.init(home)
    ref = RecordingHost(home)
    ref.put_record("comment-1", document="doc-demo", text="please add the date")
    ref.put_material("doc-demo", "2026-11-01")
    rt.bind("doc-demo", window_s=600)  # the grant is read over MCP
    yield rt, ref
    rt.close()  # with its host, the MCP session
    ref.close()


def test_a_worker_with_a_mistyped_server_command_does_not_start(home):
    Signoff.init(home).close()
    configure_mcp_home(home)
    config = home / "signoff.toml"
    config.write_text(re.sub(r"(?m)^command = .*$", 'command = "/nonexistent/python"',
                             config.read_text(encoding="utf-8")), encoding="utf-8")
    done = subprocess.run(signoff_cmd(home, "worker", "--drain"), env=child_env(),
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: bad_config: host.options.command")


def drain(home):
    done = subprocess.run(signoff_cmd(home, "worker", "--drain", "--workers", "1"),
                          env=child_env(), capture_output=True, timeout=DRAIN_TIMEOUT,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def ready_task(rt, home):
    event = {"event_id": "evt-1", "name": "comment.created", "document": "doc-demo",
             "record_id": "comment-1", "occurred": int(time.time()), "text": "wake only"}
    assert rt.enqueue_events([event])[0].accepted
    drain(home)
    [task] = rt.tasks()
    assert task["status"] == "ready", rt.events()
    return rt.task(task["key"])


def test_events_worker_approve_done_over_mcp(mcp_rt, home):
    rt, ref = mcp_rt
    task = ready_task(rt, home)
    assert task["record"] == ref.get("comment-1")
    assert rt.approve(task["key"], task["digest"], by="alice")["status"] == "approved"
    drain(home)
    done = rt.task(task["key"])
    assert done["status"] == "done"
    assert [h["code"] for h in done["history"]][-1] == "done"
    assert ref.write_counts() == {task["key"]: 1}
    assert ref.results() == [{"key": task["key"], "result": task["result"]}]


@pytest.mark.slow
def test_server_dies_right_after_the_write(mcp_rt, home):
    rt, ref = mcp_rt
    task = ready_task(rt, home)
    rt.approve(task["key"], task["digest"])
    ref.set_fault("crash-after-write")
    drain(home)
    done = rt.task(task["key"])
    assert done["status"] == "done"
    codes = [h["code"] for h in done["history"]]
    assert "ConnectionError" in codes and codes[-1] == "done"
    assert "uncertain" in [a["code"] for a in done["audit"]]
    assert ref.write_counts() == {task["key"]: 1}
    assert ref.faults() == {}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_over_mcp(tmp_path):
    keep = tmp_path / "demo"
    proc = subprocess.run(signoff_cmd(tmp_path, "demo", "--mcp", "--keep", str(keep), "--json"),
                          cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=360)
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["passed"] is True and all(s["ok"] for s in report["steps"])
    counts = report["counts"]
    assert counts["worker_kills"] == 1 and counts["mcp_server_kills"] == 1
    assert counts["results_on_host"] == 2 and counts["tasks"] == {"done": 2}
    assert counts["uncertain_recovered"] == 2
    config = (keep / "signoff.toml").read_text(encoding="utf-8")
    assert 'factory = "signoff.hosts.mcp:McpHost"' in config


@pytest.mark.slow
def test_bench_over_mcp_counts_the_calls_per_event(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench", "--mcp", "--events", "5", "--json"],
                          cwd=tmp_path, env=child_env(), capture_output=True, timeout=180,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = json.loads(done.stdout)
    # One batch of 5 per phase, each call once for the batch: context, records,
    # material; context, records at approval; context, receipts, submits, receipts.
    assert report["mcp"]["calls_per_event"] == {"ingest": 0.6, "approve": 0.4, "submit": 0.8,
                                                "total": 1.8}
    assert report["targets"]["calls_per_event"] == {
        "target": "<= 3 MCP calls per event", "value": 1.8, "pass": True}
    for side in ("reference", "mcp"):
        assert all(report[side][f"{p}_per_s"] > 0 for p in ("ingest", "approve", "submit",
                                                           "pipeline"))
    assert report["mcp"]["connect_s"] > 0
