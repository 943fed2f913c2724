"""How the CLI prints: tables for people, one JSON document for scripts."""

import itertools
import json
import math
import sys
import time

import click

from ..rules.text import visible


STREAM_PAGE = 500  # rows held at once when streaming (the first page sizes a table)


def safe(text):
    """``text`` as one cell or line: hidden characters marked ``⟨U+XXXX⟩`` (``rules/text``),
    and a line break or tab, which would forge a line or a column, escaped."""
    if text.isascii() and text.isprintable():
        return text
    return visible(text).replace("\n", "\\x0a").replace("\t", "\\x09")


def when(at):
    """A time (Unix seconds) as every human view prints one: UTC, to the second."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))
    except (OverflowError, OSError, ValueError):  # past what the platform can show
        return str(at)


def fmt(value):
    """One cell of a human table (or one value in a human view), safe to print."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value > 1e9:  # a table cell's time, by its size
        return when(value)
    if isinstance(value, (list, dict)):
        return safe(json.dumps(value, ensure_ascii=False))
    return safe(str(value))


def table(rows, columns, short=()):
    """Render ``rows`` (dicts) as aligned columns; ``short`` columns are cut to 12."""
    if not rows:
        return "(none)"
    cells = _cells(rows, columns, short)
    widths = _widths(cells, columns)
    return "\n".join([_line(columns, widths)] + [_line(row, widths) for row in cells])


def _cells(rows, columns, short):
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    return [[v[:12] if c in short and len(v) > 12 else v for v, c in zip(row, columns)]
            for row in cells]


def _widths(cells, columns):
    return [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]


def _line(cells, widths):
    return "  ".join(v.ljust(w) for v, w in zip(cells, widths)).rstrip()


def stream(rows, more, as_json, columns, short=(), hint=None):
    """Print a listing as it is read: a JSON array, or a table for people.

    ``rows`` is any iterable (read once, never held whole); ``more`` the number
    of rows left out by a limit, reported on its own line ("N more ...") on
    standard output for people and on standard error under ``--json``, so the
    JSON stays one list. ``hint`` is a line for people after the table.
    """
    rows = iter(rows)
    if as_json:
        _stream_json(rows)
    else:
        _stream_table(rows, columns, short, hint)
    if more:
        click.echo(f"{more} more; use --limit N or --all to see them", err=as_json)


def _stream_json(rows):
    # One write per page of rows: a write (and flush) per row is most of the cost.
    first = True
    click.echo("[", nl=False)
    for page in _pages(rows):
        text = ",\n".join(_compact(row) for row in page)
        click.echo(("\n" if first else ",\n") + text, nl=False)
        first = False
    click.echo("]" if first else "\n]")


def _stream_table(rows, columns, short, hint):
    pages = _pages(rows)
    page = next(pages, None)
    if page is None:
        click.echo("(none)")
        return
    cells = _cells(page, columns, short)
    widths = _widths(cells, columns)  # sized on the first page; longer cells just push
    click.echo("\n".join([_line(columns, widths)] + [_line(row, widths) for row in cells]))
    for page in pages:
        click.echo("\n".join(_line(row, widths) for row in _cells(page, columns, short)))
    if hint:
        click.echo(hint)


def _pages(rows):
    while True:
        page = list(itertools.islice(rows, STREAM_PAGE))
        if not page:
            return
        yield page


def _compact(data):
    try:
        return json.dumps(data, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(data), ensure_ascii=False, allow_nan=False)


def dumps(data):
    """``data`` as a JSON document (``inf``/``nan``, which JSON lacks, become null)."""
    try:
        return json.dumps(data, ensure_ascii=False, indent=2, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(data), ensure_ascii=False, indent=2, allow_nan=False)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def emit(data, as_json, human=None):
    """Print ``data`` as JSON, or as ``human(data)`` text."""
    if as_json or human is None:
        click.echo(dumps(data))
    else:
        click.echo(human(data))


def fail(code, message, as_json):
    """Report a refusal and exit 1."""
    if as_json:
        click.echo(json.dumps({"error": code, "message": message}, ensure_ascii=False))
    else:
        click.echo(f"error: {code}: {safe(message)}", err=True)
    sys.exit(1)
