"""The worker loop's hooks for issue-9 features, with real worker processes.

A real ``worker --drain`` on a real home: a standing policy approves what ingest
made ready and the task is written; the loop's hourly purge runs at start and
purges what finished longer ago than the configured retention.
"""

from crashhome import Home
from signoff.models import PurgedTask, Task


def test_a_policy_approves_and_the_worker_submits_without_a_click(tmp_path):
    h = Home(tmp_path / "home", records=2)
    try:
        added = h.rt.add_policy("default", by="owner")
        h.enqueue([h.event(0), h.event(1)])
        h.drain()
        tasks = list(Task.select())
        assert len(tasks) == 2
        assert {(t.status, t.approved_by) for t in tasks} == {("done", f"policy:{added['policy']}")}
        assert sorted(r["key"] for r in h.host.results()) == sorted(t.key for t in tasks)
        assert "Traceback" not in h.stderr(), h.stderr()
    finally:
        h.close()


def test_the_worker_purges_finished_tasks_past_retention(tmp_path):
    h = Home(tmp_path / "home", records=1)
    try:
        with open(h.path / "signoff.toml", "a", encoding="utf-8") as f:
            f.write("[retention]\nfinished_days = 0.0000001\n")  # 8.6 ms
        h.enqueue([h.event(0)])
        h.rt.run_until_idle()  # here, so that no worker has run the hourly purge yet
        [task] = Task.select()
        h.rt.reject(task.key)
        h.drain()  # the loop's first pass finds the hourly purge due
        assert PurgedTask.select().count() == 1
        assert h.rt.task(task.key)["purged"] is True
    finally:
        h.close()
