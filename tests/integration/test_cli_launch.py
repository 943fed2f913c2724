"""A program that runs the command line itself says how (``main(obj=Launch(...))``):
the class given opens the home for every command (the demo's dying serve is one)."""

import json

from click.testing import CliRunner

from signoff import Signoff
from signoff.cli import Launch, main


class Counted(Signoff):
    """A ``Signoff`` that counts the homes it opened."""

    opened = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        type(self).opened += 1


def test_the_class_a_program_gives_opens_the_home_for_its_commands(home):
    runner = CliRunner()
    for args in (["init"], ["monitor", "list"], ["stats"]):
        done = runner.invoke(main, ["--home", str(home), *args, "--json"],
                             obj=Launch(runtime=Counted))
        assert done.exit_code == 0, done.output
    assert Counted.opened == 3
    done = runner.invoke(main, ["--home", str(home), "stats", "--json"])
    assert done.exit_code == 0 and "tasks" in json.loads(done.output)
    assert Counted.opened == 3  # without it, Signoff itself
