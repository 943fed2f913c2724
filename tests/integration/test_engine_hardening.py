"""Engine hardening found by a careful and a hostile user: monitor ids, ``signoff.toml``,
late events for finished tasks, and a PostgreSQL database that does not exist."""

import json
import subprocess
import tomllib
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from helpers import child_env, make_event, signoff_cmd
from signoff.steps import recordbatches
from signoff.config import DEFAULT_TOML, SECTIONS, load_config
from signoff.errors import ConfigError, Refused
from signoff.models import Audit, Delivery, Gap, Inbox, Monitor, Task
from signoff.chores.notify import notify_settings
from signoff.storage.urls import kind_of

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
    assert (config.batch_size, config.lease_ttl_s, config.max_record_bytes) == (200, 30.0, 262144)
    assert set(tomllib.loads(DEFAULT_TOML)) <= set(SECTIONS)


@pytest.mark.backend_independent
def test_the_batch_size_defaults_by_the_state_database_and_a_set_one_wins(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    config_file = home / "signoff.toml"
    config_file.write_text(DEFAULT_TOML, encoding="utf-8")
    monkeypatch.delenv("SIGNOFF_DATABASE_URL", raising=False)
    assert load_config(home).batch_size == 200  # SQLite: one writer, fewer turns of its lock
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/absent")
    assert load_config(home).batch_size == 50
    config_file.write_text(DEFAULT_TOML.replace("# batch_size = 200", "batch_size = 120"),
                           encoding="utf-8")
    assert load_config(home).batch_size == 120
    monkeypatch.delenv("SIGNOFF_DATABASE_URL")
    assert load_config(home).batch_size == 120


# -- a new event for a task past ready is a duplicate of it ------------------------------------

def event_outcome(rt, event_id, monitor_id="default", **changes):
    """Enqueue one event, process it; its delivery's ``(outcome, task_key)``."""
    [line] = rt.enqueue_events([make_event(event_id=event_id, **changes)], monitor_id)
    rt.run_until_idle()
    delivery = Delivery.get_by_id(line.delivery)
    return delivery.outcome, delivery.task_key


def audit_codes(rt, key):
    """The codes of task ``key``'s timeline as its detail shows it: every audit row about
    it, its chain's and those written outside the chain, in order."""
    shown = [entry["code"] for entry in rt.task(key)["audit"]]
    assert shown == [a.code for a in Audit.select().where(Audit.task_key == key)
                     .order_by(Audit.seq)]
    return shown


def test_an_event_for_a_done_task_is_a_duplicate_of_it_and_its_timeline_stays_in_order(rt):
    outcome, key = event_outcome(rt, "evt-1")
    assert outcome == "ready"
    task = rt.task(key)
    rt.approve(key, task["digest"])
    rt.run_until_idle()
    assert rt.task(key)["status"] == "done"
    assert event_outcome(rt, "evt-2") == ("duplicate", key)
    assert audit_codes(rt, key) == ["ready", "approved", "done", "duplicate"]
    # Written without the task's row held: outside its chain, and still in its timeline.
    assert Audit.get(Audit.task_key == key, Audit.code == "duplicate").chain is None
    inbox = Inbox.get(Inbox.monitor == "default", Inbox.event_id == "evt-2")
    assert (inbox.outcome, inbox.task_key) == ("duplicate", key)
    assert event_outcome(rt, "evt-2") == ("duplicate", key)  # its redelivery too


def test_an_event_for_an_approved_task_is_a_duplicate_and_one_for_a_ready_task_is_ready(rt):
    _, key = event_outcome(rt, "evt-1")
    assert event_outcome(rt, "evt-2") == ("ready", key)  # two events, one task
    Task.update(parked=True).where(Task.key == key).execute()  # approved, not submitted yet
    rt.approve(key, rt.task(key)["digest"])
    assert event_outcome(rt, "evt-3") == ("duplicate", key)
    assert audit_codes(rt, key) == ["ready", "ready", "approved", "duplicate"]


def test_two_events_of_one_batch_for_a_done_task_are_both_duplicates(rt):
    _, key = event_outcome(rt, "evt-1")
    rt.approve(key, rt.task(key)["digest"])
    rt.run_until_idle()
    lines = rt.enqueue_events([make_event(event_id="evt-2"), make_event(event_id="evt-3")])
    rt.run_until_idle()
    assert [(d.outcome, d.task_key) for d in (Delivery.get_by_id(line.delivery)
                                              for line in lines)] == [("duplicate", key)] * 2
    assert "ready" not in audit_codes(rt, key)[1:]


def test_an_event_for_a_record_of_a_closed_batch_is_a_duplicate_of_its_task(rt, host, clock):
    rt.bind("doc-demo", "b", batch_window_s=30)
    assert event_outcome(rt, "b-1", "b")[0] == "batched"
    clock.advance(31)
    assert recordbatches.close_due(rt) == 1
    [task] = Task.select()
    rt.approve(task.key, task.digest)
    rt.run_until_idle()
    assert Task.get_by_id(task.key).status == "done"
    assert event_outcome(rt, "b-2", "b", occurred=int(clock.now())) == ("duplicate", task.key)
    assert audit_codes(rt, task.key) == ["ready", "approved", "done", "duplicate"]


# -- a PostgreSQL database that does not exist -----------------------------------------------

def missing_database(backend):
    """A URL on the test's PostgreSQL server naming a database that does not exist."""
    server = next((url for url in (backend.database_url, backend.queue_url)
                   if kind_of(url) == "postgresql"), None) if backend else None
    if server is None:
        pytest.skip("needs a PostgreSQL server (the backend stages)")
    return urlunsplit(urlsplit(server)._replace(path=f"/signoff_missing_{uuid.uuid4().hex[:12]}"))


# A PostgreSQL queue is connected to at once by init alone (it creates the queue's tables).
@pytest.mark.parametrize("where, command", [("database", ["init"]), ("database", ["stats"]),
                                            ("database", ["worker", "--drain"]),
                                            ("queue", ["init"])])
def test_a_database_that_does_not_exist_is_database_missing_with_how_to_create_it(
        tmp_path, backend, where, command):
    url = missing_database(backend)
    home = tmp_path / "home"
    if command != ["init"]:
        home.mkdir()
        (home / "signoff.toml").write_text(DEFAULT_TOML, encoding="utf-8")
    env = child_env(**{f"SIGNOFF_{where.upper()}_URL": url})
    if where == "queue":
        env["SIGNOFF_DATABASE_URL"] = ""  # the state in the home's SQLite file
    done = subprocess.run(signoff_cmd(home, *command, "--json"), env=env, capture_output=True,
                          timeout=120)
    assert done.returncode == 1, done
    answer = json.loads(done.stdout)
    name = urlsplit(url).path.lstrip("/")
    assert answer["error"] == "database_missing", answer
    assert "createdb" in answer["message"] and f'CREATE DATABASE "{name}"' in answer["message"]
