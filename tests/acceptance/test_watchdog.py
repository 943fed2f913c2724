"""A worker whose own loop stops coming round exits 1, for its supervisor to restart it.

The hang is a wait nothing bounds, standing in for whatever a driver or a plug-in
might one day wait on: the worker process's heartbeat is made to block for good
on its third beat (the loop's first two passes went round).
"""

import subprocess
import sys

import pytest

from helpers import child_env
from signoff.app import Signoff

HANG_ON_THE_THIRD_BEAT = """
import sys, threading
from signoff import worker
from signoff.state import heartbeats

beats = []
beat = heartbeats.Heartbeat.beat

def hanging_beat(self):
    beats.append(1)
    if len(beats) == 3:
        threading.Event().wait()
    return beat(self)

heartbeats.Heartbeat.beat = hanging_beat
worker.run(sys.argv[1], workers=1)
"""


@pytest.mark.slow  # chaos: a worker hung for good, then its watchdog's exit; CI runs the slow tests
def test_a_worker_whose_loop_hangs_exits_1_with_its_stacks(home):
    Signoff.init(home).close()
    config = home / "signoff.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        "lease_ttl_s = 30.0", "lease_ttl_s = 1.0\nwatchdog_s = 2"), encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", HANG_ON_THE_THIRD_BEAT, str(home)],
                          env=child_env(), capture_output=True, timeout=120)
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 1, err[-4000:]
    assert "worker loop silent for" in err and "exiting with status 1" in err
    assert "hanging_beat" in err  # the stacks say where the loop was stuck
