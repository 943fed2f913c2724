"""Every option of every command can be set in the environment (SIGNOFF_<COMMAND>_<OPTION>)."""

import click
import pytest
from click.core import ParameterSource
from click.testing import CliRunner
from test_docs import command_paths, subcommand

from signoff.cli import Seconds, Within, main
from signoff.config import BACKEND_ENV

pytestmark = pytest.mark.backend_independent


def command_at(path):
    command = main
    for name in path:
        command = subcommand(command, name)
    return command


def options():
    """``(command path, option, variable)`` for every option of every command and group."""
    for path in [(), *command_paths(main)]:
        command = command_at(path)
        for param in command.params:
            if isinstance(param, click.Option) and param.name != "version":
                # The contract's naming, spelled out here rather than asked of click.
                parts = ["SIGNOFF", *path, param.name]
                yield path, param, "_".join(parts).upper().replace("-", "_")


ALL_OPTIONS = list(options())
# Options that change what is approved or who may approve, and the demo's folder:
# command line only.
COMMAND_LINE_ONLY = {v for _, p, v in ALL_OPTIONS if not p.allow_from_autoenv}
OPTIONS = [o for o in ALL_OPTIONS if o[2] not in COMMAND_LINE_ONLY]


def contexts(path):
    """Real click contexts from the root down to ``path``, as a run would make them."""
    ctx = click.Context(main, info_name="signoff", auto_envvar_prefix="SIGNOFF")
    for name in path:
        ctx = click.Context(subcommand(ctx.command, name), info_name=name, parent=ctx)
    return ctx


def sample(param):
    """A value the option accepts, as the environment would hold it, and what it means."""
    if param.is_flag and not param.multiple:
        return "true", True
    if param.multiple:
        return "a b", ("a", "b")
    kind = param.type
    if isinstance(kind, click.Choice):
        return kind.choices[-1], kind.choices[-1]
    if isinstance(kind, (click.IntRange, click.types.IntParamType)):
        return "7", 7
    if isinstance(kind, Seconds):  # seconds or days
        return "7.5", 7.5
    if isinstance(kind, Within):  # within one of signoff.toml's ranges
        return ("7", 7) if kind.number is click.INT else ("7.5", 7.5)
    if isinstance(kind, click.File):
        return None, None
    return "some-value", "some-value"


def test_the_walk_reaches_every_kind_of_option():
    names = {v for _, _, v in ALL_OPTIONS}
    assert {"SIGNOFF_HOME", "SIGNOFF_WORKER_WORKERS", "SIGNOFF_TASKS_LIST_LIMIT",
            "SIGNOFF_MONITOR_SECRET_ADD_SECRET", "SIGNOFF_WORKER_DRAIN",
            "SIGNOFF_STATS_JSON"} <= names
    assert len(OPTIONS) > 60


@pytest.mark.parametrize("path,param,variable", OPTIONS,
                         ids=[v for _, _, v in OPTIONS])
def test_every_option_reads_its_variable_and_help_names_it(path, param, variable, monkeypatch):
    runner = CliRunner()
    shown = runner.invoke(main, [*path, "--help"], terminal_width=240)
    assert shown.exit_code == 0, shown.output
    assert f"env var: {variable}" in shown.output
    raw, meant = sample(param)
    if raw is None:
        return  # a file: named in --help, read as a path like any string
    monkeypatch.setenv(variable, raw)
    ctx = contexts(path)
    value, source = param.consume_value(ctx, {})
    assert source is ParameterSource.ENVIRONMENT
    assert param.type_cast_value(ctx, value) == meant
    # A flag given on the command line wins over the environment.
    value, source = param.consume_value(ctx, {param.name: meant})
    assert source is ParameterSource.COMMANDLINE


def test_the_command_line_only_options_are_exactly_the_contract_s():
    by = {v for v in COMMAND_LINE_ONLY if v.endswith("_BY")}
    assert by == {v for _, p, v in ALL_OPTIONS if p.name == "by"} and len(by) >= 15
    assert COMMAND_LINE_ONLY - by == {
        "SIGNOFF_APPROVE_DIGEST", "SIGNOFF_APPROVE_EDIT_FILE",
        "SIGNOFF_APPROVE_ACK_HIDDEN_CHARACTERS", "SIGNOFF_MONITOR_BIND_APPROVALS",
        "SIGNOFF_MONITOR_SECRET_ADD_SECRET", "SIGNOFF_POLICY_ADD_MONITOR_ID",
        "SIGNOFF_POLICY_ADD_TTL", "SIGNOFF_POLICY_ADD_MAX_PER_HOUR",
        "SIGNOFF_POLICY_ADD_INCLUDE_WAITING", "SIGNOFF_REVIEWER_ADD_READ_ONLY",
        "SIGNOFF_REVIEWER_ADD_MONITORS", "SIGNOFF_DEMO_KEEP",
        "SIGNOFF_APPROVE_SIGN_WITH", "SIGNOFF_APPROVE_SIGNER", "SIGNOFF_REJECT_SIGN_WITH",
        "SIGNOFF_REJECT_SIGNER", "SIGNOFF_REJECT_DIGEST", "SIGNOFF_MONITOR_BIND_SIGNED_APPROVALS",
        "SIGNOFF_MONITOR_SET_SIGNED", "SIGNOFF_REVIEWER_KEY_ADD_PUBLIC_KEY",
        "SIGNOFF_REVIEWER_ADD_EMAIL", "SIGNOFF_REVIEWER_SET_EMAIL",
        "SIGNOFF_MONITOR_BIND_ESCALATE_AFTER", "SIGNOFF_MONITOR_BIND_ESCALATE_TO",
        "SIGNOFF_REVIEWER_ADD_SLACK_USER", "SIGNOFF_REVIEWER_SET_SLACK_USER",
        "SIGNOFF_REVIEWER_DELEGATE_TO", "SIGNOFF_REVIEWER_DELEGATE_UNTIL"}


@pytest.mark.parametrize("path,param,variable", sorted(
    (o for o in ALL_OPTIONS if o[2] in COMMAND_LINE_ONLY), key=lambda o: o[2]),
    ids=sorted(COMMAND_LINE_ONLY))
def test_a_command_line_only_option_ignores_its_variable_and_help_says_so(path, param, variable,
                                                                     monkeypatch):
    shown = CliRunner().invoke(main, [*path, "--help"], terminal_width=240)
    assert shown.exit_code == 0, shown.output
    assert f"env var: {variable}" not in shown.output
    assert "Command line only: never read from a SIGNOFF_* variable." in " ".join(
        shown.output.split())
    raw, _ = sample(param)
    monkeypatch.setenv(variable, raw if raw is not None else "some-file")
    _, source = param.consume_value(contexts(path), {})
    assert source is not ParameterSource.ENVIRONMENT


def test_no_option_reads_a_backend_override_or_a_name_of_another_meaning():
    taken = set(BACKEND_ENV.values())
    clashes = [v for _, _, v in OPTIONS if v in taken]
    assert not clashes
    homes = [(path, p.name) for path, p, v in OPTIONS if v == "SIGNOFF_HOME"]
    assert homes == [((), "home")]
    assert len({v for _, _, v in OPTIONS}) == len(OPTIONS)  # one variable, one option


def test_version_and_help_are_never_read_from_the_environment(tmp_path):
    result = CliRunner().invoke(main, ["--home", str(tmp_path / "none"), "stats", "--json"],
                                env={"SIGNOFF_VERSION": "1", "SIGNOFF_HELP": "1",
                                     "SIGNOFF_STATS_HELP": "1"})
    assert result.exit_code == 1
    assert '"error": "no_home"' in result.output
    assert ", version" not in result.output and "Usage" not in result.output


def test_the_environment_sets_an_option_and_the_command_line_wins(tmp_path):
    runner = CliRunner()
    home = str(tmp_path / "home")
    assert runner.invoke(main, ["--home", home, "init"]).exit_code == 0
    bound = runner.invoke(main, ["--home", home, "monitor", "bind", "--document", "doc-demo"],
                          env={"SIGNOFF_MONITOR_BIND_MONITOR_ID": "from-env",
                               "SIGNOFF_MONITOR_BIND_JSON": "1"})
    assert bound.exit_code == 0, bound.output
    assert '"id": "from-env"' in bound.output
    listed = runner.invoke(main, ["--home", home, "monitor", "bind", "--document", "doc-demo",
                                  "--id", "from-flag", "--json"],
                           env={"SIGNOFF_MONITOR_BIND_MONITOR_ID": "from-env"})
    assert listed.exit_code == 0, listed.output
    assert '"id": "from-flag"' in listed.output


@pytest.mark.parametrize("as_json", [False, True])
def test_a_bad_value_from_the_environment_is_a_usage_error_naming_the_variable(tmp_path,
                                                                              as_json):
    args = ["--home", str(tmp_path), "worker", *(["--json"] if as_json else [])]
    result = CliRunner().invoke(main, args, env={"SIGNOFF_WORKER_WORKERS": "three"})
    assert result.exit_code == 2
    assert "SIGNOFF_WORKER_WORKERS" in result.output and "'three'" in result.output
    # The same value on the command line is named as the flag, not the variable.
    result = CliRunner().invoke(main, ["--home", str(tmp_path), "worker", "--workers", "three"],
                                env={"SIGNOFF_WORKER_WORKERS": "2"})
    assert result.exit_code == 2
    assert "'--workers'" in result.output and "SIGNOFF_WORKER_WORKERS" not in result.output
