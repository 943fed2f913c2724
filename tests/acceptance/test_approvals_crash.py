"""A quorum's last approval, then ``kill -9`` of the worker writing it: one write.

Real worker processes on a real home (the harness is tests/helpers/crashhome.py).
"""

import signal

import pytest

from conftest import wait_for
from signoff.models import Task
from crashhome import DRAIN_TIMEOUT, Home, assert_exactly_one_result
from testhosts import arm_crash, crash_armed

pytestmark = pytest.mark.slow

EDITED = "Suggested demo date for doc-demo: 2026-11-02, edited before approval"


def test_kill_between_the_last_approval_and_the_confirmed_write_gives_one_write(tmp_path):
    h = Home(tmp_path / "home")
    try:
        h.rt.bind("doc-demo", "q", window_s=600, approvals=2)
        [line] = h.rt.enqueue_events([h.event()], monitor_id="q")
        assert line.accepted, line.reason
        h.drain()
        [task] = Task.select().where(Task.status == "ready")
        edited = h.rt.approve(task.key, task.digest, by="bob", channel="api", edit=EDITED)
        assert edited["status"] == "ready" and edited["approvals_missing"] == 1
        assert h.rt.approve(task.key, edited["digest"], by="ana",
                            channel="api")["status"] == "approved"
        arm_crash(h.path, "after-submit-write")
        victim = h.worker()
        assert victim.wait(timeout=DRAIN_TIMEOUT) == -signal.SIGKILL
        assert crash_armed(h.path) is None
        wait_for(lambda: h.rt.engine.reap()["tasks_released"], timeout=60,
                 what="the lease to expire")
        h.drain()
        assert_exactly_one_result(h, task.key)
        assert h.host.results()[0]["result"]["draft"] == EDITED
        assert Task.get_by_id(task.key).approved_by == "ana"
    finally:
        h.close()
