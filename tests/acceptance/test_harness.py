"""The suite's own housekeeping: what a killed run left behind, the next run clears."""

import os
import subprocess
import sys

import pytest

import conftest
from conftest import BACKENDS
from helpers import parent_of, wait_for
from signoff import storage
from signoff.app import Signoff


@pytest.mark.backend_independent
def test_a_run_stops_the_test_workers_a_killed_run_left_behind(tmp_path):
    # An orphan with a test worker's command line (its home under pytest's
    # temporary folder): the process that started it has exited, as a killed
    # run's xdist worker would have.
    spawn = ("import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', "
             "'import time; time.sleep(120)', 'signoff', '--home', sys.argv[1], 'worker'], "
             "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)")
    started = subprocess.run([sys.executable, "-c", spawn, str(tmp_path / "home")],
                             capture_output=True, text=True, check=True)
    orphan = int(started.stdout)
    try:
        parent = wait_for(lambda: parent_of(orphan), 10, what="the orphan to be re-parented")
        if parent != 1:
            pytest.skip(f"orphans are re-parented to a subreaper ({parent}) here, not to init")
        conftest._stop_orphaned_test_children()
        wait_for(lambda: parent_of(orphan) is None, 10, what="the orphan to be stopped")
    finally:
        if parent_of(orphan) is not None:
            os.kill(orphan, 9)


def test_the_sweep_takes_the_databases_of_dead_test_processes_and_no_other():
    if storage.urls.kind_of(BACKENDS.database_url or BACKENDS.queue_url) != "postgresql":
        pytest.skip("PostgreSQL databases: the stages with SIGNOFF_TEST_DATABASE_URL set")
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout)
    admin = BACKENDS.admin()
    dead, alive = f"signoff_test_{gone}_0_sweep", f"signoff_test_{os.getpid()}_0_sweep"
    for name in (dead, alive):
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        # What the sweep drops, not the drop itself: each DROP DATABASE waits for a
        # checkpoint of everything the run has written, minutes on a loaded machine.
        leftovers = BACKENDS.leftover_databases()
        assert dead in leftovers and alive not in leftovers
    finally:
        for name in (dead, alive):
            BACKENDS.drop(name)


def test_a_database_a_test_used_is_emptied_and_reused_not_dropped(tmp_path):
    # A drop waits for an immediate checkpoint of everything the run wrote; each
    # test's database is emptied for the next instead. `signoff init` stamps the
    # schema-version row again, which once made every database look used.
    if not BACKENDS.database_url:
        pytest.skip("PostgreSQL databases: the stages with SIGNOFF_TEST_DATABASE_URL set")
    with conftest.example_backends() as settings:
        Signoff.init(tmp_path / "home").close()
    again = BACKENDS.allocate("reuse")
    try:
        assert again.database_name == settings.database_name
    finally:
        BACKENDS.release(again)
