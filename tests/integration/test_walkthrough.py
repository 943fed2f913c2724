"""docs/walkthrough.md shows real outputs: its listings have the columns, and its
`tasks show` and `stats` the fields, that the commands print today."""

import json
import re
import time

import pytest
from click.testing import CliRunner

from signoff.app import Signoff
from signoff.cli import main

from helpers import ROOT

pytestmark = pytest.mark.backend_independent

PAGE = (ROOT / "docs" / "walkthrough.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```[a-z]*\n(.*?)^```", PAGE, re.S | re.M)


def run(home, *args, input=None):
    result = CliRunner().invoke(main, ["--home", str(home), *args], input=input)
    assert result.exit_code == 0, result.output
    return result.stdout


def block_with(first_line_start):
    """The lines of the page's output block that has a line starting so, from that line."""
    for block in BLOCKS:
        lines = block.splitlines()
        for at, line in enumerate(lines):
            if line.startswith(first_line_start):
                return lines[at:]
    raise AssertionError(f"no output block in docs/walkthrough.md has {first_line_start!r}")


def labels(lines):
    """The field names a `show`-style output prints: each unindented line's first word,
    up to its timeline."""
    names = []
    for line in lines:
        if line.startswith("timeline:") or line.startswith("```"):
            break
        if line and not line.startswith(" "):
            names.append(line.split()[0])
    return names


@pytest.fixture(scope="module")
def walked(tmp_path_factory):
    """The walk-through's first steps in a fresh home: the outputs it shows."""
    home = tmp_path_factory.mktemp("walk") / "home"
    run(home, "init")
    run(home, "host", "record", "--id", "comment-1", "--document", "doc-demo")
    run(home, "host", "material", "--document", "doc-demo", "--demo-date", "2026-12-01")
    out = {"bind": run(home, "monitor", "bind", "--document", "doc-demo", "--window", "3600")}
    event = {"event_id": "evt-1", "name": "comment.created", "document": "doc-demo",
             "record_id": "comment-1", "occurred": int(time.time())}
    run(home, "enqueue", "-", input=json.dumps(event) + "\n")
    with Signoff(home) as rt:
        rt.run_until_idle()
    out["events"] = run(home, "events")
    out["tasks"] = run(home, "tasks", "list")
    key = json.loads(run(home, "tasks", "list", "--json"))[0]["key"]
    out["show"] = run(home, "tasks", "show", key)
    out["stats"] = run(home, "stats")
    return out


@pytest.mark.parametrize("command, header", [
    ("bind", "id       document"), ("events", "delivery  event_id"),
    ("tasks", "key                  ")], ids=["monitor bind", "events", "tasks list"])
def test_a_listing_has_the_columns_the_page_shows(walked, command, header):
    shown = block_with(header)[0].split()
    printed = next(line for line in walked[command].splitlines() if line.startswith(header[:8]))
    assert printed.split() == shown


def test_tasks_show_prints_the_fields_the_page_shows(walked):
    shown = labels(block_with("task      49ed118c"))
    assert labels(walked["show"].splitlines()) == shown
    assert {"sources", "digest", "approvals", "draft:"} <= set(shown)


def test_stats_prints_the_lines_the_page_shows(walked):
    shown = labels(block_with("$ signoff stats")[1:])
    assert labels(walked["stats"].splitlines()) == shown
    assert {"deliveries", "tasks", "uncertain", "drafter"} <= set(shown)
