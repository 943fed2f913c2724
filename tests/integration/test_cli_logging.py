"""Logging is set per CLI invocation: several invocations in one process (CliRunner here,
any program embedding the CLI) each log at their own ``--log-level``, never stack
handlers, and leave the process's logging as they found it."""

import json
import logging

import pytest
from click.testing import CliRunner

from signoff.cli import WARNING_LOGGERS, main

CLOSED_PORT_QUEUE = "redis://127.0.0.1:1/0"  # refused at once: every wake-up fails


def invoke(home, *args):
    result = CliRunner().invoke(main, ["--home", str(home), *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def logging_state():
    """What an invocation may change: root's handlers and level, the warning loggers'."""
    root = logging.getLogger()
    loggers = [logging.getLogger(name) for name in WARNING_LOGGERS]
    return (list(root.handlers), root.level,
            [(list(logger.handlers), logger.propagate) for logger in loggers])


def test_each_invocation_prints_warning_lines_at_its_own_level_once(rt, home, tmp_path,
                                                                    monkeypatch):
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("SIGNOFF_QUEUE_URL", CLOSED_PORT_QUEUE)
    before = logging_state()
    heard = []
    for n, level in enumerate(["error", "info", "warning", "error"]):
        events.write_text(json.dumps({"event_id": f"evt-{n}", "name": "comment.created",
                                      "document": "doc-demo", "record_id": "comment-1",
                                      "occurred": 1_000_000}) + "\n")
        result = invoke(home, "--log-level", level, "enqueue", str(events))
        assert result.stdout.strip() == "accepted 1, rejected 0"
        heard.append(result.stderr.splitlines())
        assert logging_state() == before
    assert heard[0] == [] and heard[3] == []
    for warned in heard[1:3]:  # one line each: no handler left over from before
        assert len(warned) == 1 and warned[0].startswith("warning: queue_unreachable: "), warned


def test_the_worker_log_lines_follow_each_invocations_level(home, backend):
    if backend is not None:  # a worker run in this process leaves its threads' server connections
        pytest.skip("the in-process worker is for SQLite; its logging is the same on every backend")
    invoke(home, "init")
    before = logging_state()
    quiet = invoke(home, "--log-level", "warning", "worker", "--drain")
    assert logging_state() == before
    told = invoke(home, "worker", "--drain")
    assert logging_state() == before
    again = invoke(home, "--log-level", "WARNING", "worker", "--drain")
    assert logging_state() == before
    started = [line for line in told.stderr.splitlines() if "signoff.worker INFO worker started" in line]
    assert len(started) == 1, told.stderr  # one handler, not one per earlier invocation
    assert ", batch 200, " in started[0]  # the batch size in force: SQLite's default
    assert " INFO " not in quiet.stderr and " INFO " not in again.stderr
