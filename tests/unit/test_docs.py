"""The documentation stays true to the repository: links resolve, every command, option
and configuration key is named."""

import re

import click
import pytest
from helpers import ROOT

import signoff
from signoff.cli import main
from signoff.config import KEYS, SERVE_DEFAULTS
from signoff.chores.notify import NotifySettings

pytestmark = pytest.mark.backend_independent

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def relative_links(page):
    """The link targets of a Markdown page outside its code blocks, without URLs."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or a place on the same page
        yield target.split("#", 1)[0]


def test_the_pages_exist():
    assert (ROOT / "docs" / "index.md").is_file() and (ROOT / "docs" / "cli.md").is_file()
    assert len(PAGES) > 2


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_at_a_file_that_exists(page):
    broken = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"


def subcommand(group, name):
    """The command ``name`` of ``group``, loaded as a run would load it (lazily at the root)."""
    return group.get_command(click.Context(group), name)


def command_paths(group, prefix=()):
    """Every command and group under ``group``, as tuples of names."""
    for name in group.list_commands(click.Context(group)):
        command = subcommand(group, name)
        path = (*prefix, name)
        yield path
        if isinstance(command, click.Group):
            yield from command_paths(command, path)


def test_every_command_is_named_in_the_commands_page():
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    paths = list(command_paths(main))
    assert ("monitor", "secret", "add") in paths  # the walk reaches nested groups
    missing = [" ".join(p) for p in paths
               if not re.search(r"`" + re.escape(" ".join(p)) + r"[ `]", page)]
    assert not missing, f"commands missing from docs/cli.md: {missing}"


def test_every_option_is_named_in_its_commands_row():
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = []
    for path in command_paths(main):
        command = main
        for name in path:
            command = subcommand(command, name)
        if isinstance(command, click.Group):
            continue
        name = " ".join(path)
        rows = "\n".join(line for line in page.splitlines()
                         if re.search(r"`" + re.escape(name) + r"[ `]", line))
        missing += [f"{name} {option}" for param in command.params
                    for option in (*param.opts, *getattr(param, "secondary_opts", ()))
                    if option.startswith("--") and option not in ("--help", "--json")
                    and option not in rows]
    assert not missing, f"options missing from their rows in docs/cli.md: {missing}"


def test_every_key_the_config_accepts_is_on_the_configuration_page():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    keys = [*((section, key) for section, names in KEYS.items() for key in names),
            *(("serve", key) for key in SERVE_DEFAULTS),
            *(("notify", key) for key in NotifySettings.__dataclass_fields__)]
    assert ("serve", "login_window_s") in keys and ("notify", "review_url") in keys

    def named(section, key):  # in a row of the section's table, alone or after another key
        rows = [line for line in page.splitlines() if line.startswith(f"| `[{section}")]
        return any(f"] {key}`" in row or f"`{key}`" in row or f"[{section}.{key}]" in row
                   for row in rows)

    missing = [f"[{section}] {key}" for section, key in keys if not named(section, key)]
    assert not missing, f"keys missing from docs/configuration.md: {missing}"


def test_every_name_the_package_exports_is_on_the_api_reference_page():
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    rendered = set(re.findall(r"^::: ([\w.]+)$", page, re.M))
    assert "signoff.app.Signoff" in rendered
    missing = [name for name in signoff.__all__
               if f"{getattr(signoff, name).__module__}.{name}" not in rendered]
    assert not missing, f"exported but not on docs/api.md: {missing}"
