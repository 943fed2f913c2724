"""``signoff watch``: a live terminal view of the numbers in ``stats``."""

import json
import time

import click
from rich.console import Group
from rich.live import Live
from rich.table import Table

from .output import safe
from .render import render_stats


def watch(rt, interval=1.0, as_json=False):
    """Refresh the view every ``interval`` seconds until Ctrl-C."""
    try:
        if as_json:
            while True:
                click.echo(json.dumps(rt.stats()))
                time.sleep(interval)
        with Live(_view(rt), refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(interval)
                live.update(_view(rt))
    except KeyboardInterrupt:
        pass


def _view(rt):
    s = rt.stats()
    grid = Table(title=f"signoff — {rt.home}", show_header=True, expand=False)
    grid.add_column("what")
    grid.add_column("now")
    for line in render_stats(s).splitlines():
        what, _, rest = line.partition("  ")
        grid.add_row(what.strip(), rest.strip())
    workers = Table(title="workers", show_header=True)
    for column in ("host", "pid", "threads", "last beat"):
        workers.add_column(column)
    for w in s["workers"]["workers"]:
        workers.add_row(safe(w["host"]), str(w["pid"]), str(w["threads"]),
                        f"{w['age_s']:.1f}s ago" + ("" if w["live"] else " (silent)"))
    recent = Table(title="recent audit", show_header=True)
    for column in ("seq", "code", "monitor", "event_id", "task"):
        recent.add_column(column)
    for a in rt.audit(latest=8):
        recent.add_row(str(a["seq"]), a["code"], a["monitor"] or "-", a["event_id"] or "-",
                       (a["task_key"] or "-")[:12])
    return Group(grid, workers, recent)
