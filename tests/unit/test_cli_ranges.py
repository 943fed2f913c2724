"""Numeric options take the ranges of their signoff.toml twins: one definition each.

A value outside is a usage error (exit 2) that names the range, whether it came
from the command line or from the option's ``SIGNOFF_*`` variable, and nothing is
opened or created.
"""

import pytest
from click.testing import CliRunner

from signoff.cli import main
from signoff.config import LEASE_S, PURGE_DAYS, WORKERS, load_config
from signoff.errors import ConfigError

pytestmark = pytest.mark.backend_independent

# (command, option, variable, range, values outside it, values at its ends)
RANGED = [
    ("worker", "--workers", "SIGNOFF_WORKER_WORKERS", WORKERS,
     ["100000", "0", "-3"], ["1", "256"]),
    ("worker", "--lease-ttl", "SIGNOFF_WORKER_LEASE_TTL", LEASE_S,
     ["1e308", "86400.5", "0.05", "inf", "nan"], ["0.1", "86400"]),
    ("purge", "--older-than", "SIGNOFF_PURGE_OLDER_THAN", PURGE_DAYS,
     ["36501", "1e308", "-1", "inf"], ["0", "36500"]),
]
CASES = [(c, o, v, r, bad) for c, o, v, r, bads, _ in RANGED for bad in bads]


def run(home, args, env=None):
    return CliRunner().invoke(main, ["--home", str(home), *args], env=env)


@pytest.mark.parametrize("command,option,variable,allowed,bad", CASES,
                         ids=[f"{o}={bad}" for _, o, _, _, bad in CASES])
def test_a_value_outside_the_range_is_a_usage_error_naming_it(tmp_path, command, option,
                                                              variable, allowed, bad):
    home = tmp_path / "home"
    given = run(home, [command, f"{option}={bad}"])
    assert given.exit_code == 2, given.output
    assert f"'{option}'" in given.output and str(allowed) in given.output
    from_env = run(home, [command], env={variable: bad})
    assert from_env.exit_code == 2, from_env.output
    assert f"(from {variable})" in from_env.output and str(allowed) in from_env.output
    assert not home.exists()


@pytest.mark.parametrize("command,option,ends", [(c, o, e) for c, o, _, _, _, e in RANGED])
def test_the_ends_of_each_range_are_accepted(tmp_path, command, option, ends):
    for value in ends:
        # Past the parsing, the missing home is what refuses: exit 1, not a usage error.
        answer = run(tmp_path / "none", [command, option, value, "--json"])
        assert answer.exit_code == 1 and '"no_home"' in answer.output, answer.output


def test_the_config_file_refuses_the_same_lease_with_the_same_words(tmp_path):
    (tmp_path / "signoff.toml").write_text("[worker]\nlease_ttl_s = 1e308\n", encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_config(tmp_path)
    assert f"must be {LEASE_S}" in refused.value.message
