"""Engine hardening found by a careful and a hostile user: monitor ids, ``signoff.toml``,
late events for finished tasks, and a PostgreSQL database that does not exist."""

import json
import subprocess

import pytest

from conftest import child_env, make_event, signoff_cmd
from signoff.errors import Refused
from signoff.models import Gap, Monitor

# -- monitor ids are safe in a URL path segment -------------------------------------------

UNSAFE_IDS = ["a/b", "a b", "a?b", "a#b", "a%2Fb", "tab\there", "café", ".", "..", "",
              "x" * 129]


@pytest.mark.parametrize("monitor_id", UNSAFE_IDS)
def test_bind_refuses_a_monitor_id_unsafe_in_a_url(rt, monitor_id):
    with pytest.raises(Refused) as refused:
        rt.bind("doc-demo", monitor_id)
    assert refused.value.code == "invalid_name"
    assert "letters, digits" in refused.value.message
    assert not Monitor.select().where(Monitor.id == monitor_id).exists()


def test_every_allowed_character_binds(rt):
    assert rt.bind("doc-demo", "Team.reviews_2:eu@prod-1")["id"] == "Team.reviews_2:eu@prod-1"


def test_resume_refuses_an_unsafe_new_id_and_records_no_gap(rt):
    rt.cancel("default")
    with pytest.raises(Refused) as refused:
        rt.resume("default", "next/one", "new_only")
    assert refused.value.code == "invalid_name"
    assert not Gap.select().exists() and Monitor.select().count() == 1


def test_a_monitor_bound_before_the_rule_keeps_working(rt):
    Monitor.update(id="old/one").where(Monitor.id == "default").execute()
    [line] = rt.enqueue_events([make_event()], "old/one")
    assert line.accepted
    rt.run_until_idle()
    assert [t["status"] for t in rt.tasks()] == ["ready"]
    assert rt.cancel("old/one")["tasks_cancelled"] == 1


def test_the_cli_refuses_an_unsafe_monitor_id(rt, home):
    done = subprocess.run(signoff_cmd(home, "monitor", "bind", "--id", "a/b", "--document",
                                      "doc-demo", "--json"), env=child_env(),
                          capture_output=True, timeout=60)
    assert done.returncode == 1 and json.loads(done.stdout)["error"] == "invalid_name"
