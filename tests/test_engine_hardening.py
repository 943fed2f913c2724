"""Engine hardening found by a careful and a hostile user: monitor ids, ``signoff.toml``,
late events for finished tasks, and a PostgreSQL database that does not exist."""

import json
import subprocess
import tomllib

import pytest

from conftest import child_env, make_event, signoff_cmd
from signoff.config import DEFAULT_TOML, SECTIONS, load_config
from signoff.errors import ConfigError, Refused
from signoff.models import Gap, Monitor
from signoff.notify import notify_settings

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


# -- signoff.toml: every mistake is bad_config naming its place ------------------------------

NOTIFY = f'[notify]\nurl = "https://x.example/"\nsecret = "whsec_{"A" * 32}"\n'
CONFIG_MISTAKES = {
    "[wroker]\nbatch_size = 5\n": "unknown section [wroker]",
    "batch_size = 5\n": "unknown key batch_size",
    "[worker]\nbatch_size = 100000000000000000000\n": "worker.batch_size",
    "[worker]\nbatch_size = 0\n": "worker.batch_size",
    "[worker]\nbatchsize = 5\n": "unknown key worker.batchsize",
    "[worker]\nlease_ttl_s = inf\n": "worker.lease_ttl_s",
    "[worker]\nlease_ttl_s = 0.0\n": "worker.lease_ttl_s",
    "[retry]\nmax_delay_s = nan\n": "retry.max_delay_s",
    "[retry]\nsubmit_attempts = 1000000000\n": "retry.submit_attempts",
    "[retention]\nfinished_days = 1e300\n": "retention.finished_days",
    "[host]\ntimeout = 3\n": "unknown key host.timeout",
    "[drafter]\nfactroy = \"x:y\"\n": "unknown key drafter.factroy",
    "[database]\npool = 3\n": "unknown key database.pool",
    "[queue]\nnmae = \"x\"\n": "unknown key queue.nmae",
    NOTIFY + "attempts = 100000000000000000000\n": "notify.attempts",
    NOTIFY + "timeout_s = \"soon\"\n": "notify.timeout_s",
    "[host.options]\nnested = " + "[" * 100_000 + "]" * 100_000 + "\n": "line 2",
}


@pytest.mark.backend_independent
@pytest.mark.parametrize("text", CONFIG_MISTAKES, ids=range(len(CONFIG_MISTAKES)))
def test_config_mistakes_are_bad_config_naming_the_place(tmp_path, text):
    home = tmp_path / "home"
    home.mkdir()
    (home / "signoff.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_config(home)
        notify_settings(home)
    assert refused.value.code == "bad_config"
    assert CONFIG_MISTAKES[text] in refused.value.message, refused.value.message
    assert len(refused.value.message.splitlines()) == 1 and len(refused.value.message) < 400


@pytest.mark.backend_independent
def test_the_default_config_names_only_known_sections_and_keys(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "signoff.toml").write_text(DEFAULT_TOML, encoding="utf-8")
    config = load_config(home)
    assert (config.batch_size, config.lease_ttl_s, config.max_record_bytes) == (50, 30.0, 262144)
    assert set(tomllib.loads(DEFAULT_TOML)) <= set(SECTIONS)
