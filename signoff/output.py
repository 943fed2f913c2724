"""How the CLI prints: tables for people, one JSON document for scripts."""

import json
import math
import sys
import time

import click


def fmt(value):
    """One cell of a human table."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value > 1e9:
        try:
            return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(value))
        except (OverflowError, OSError, ValueError):  # past what the platform can show
            return str(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def table(rows, columns, short=()):
    """Render ``rows`` (dicts) as aligned columns; ``short`` columns are cut to 12."""
    if not rows:
        return "(none)"
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    cells = [[v[:12] if c in short and len(v) > 12 else v for v, c in zip(row, columns)]
             for row in cells]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


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
        click.echo(f"error: {code}: {message}", err=True)
    sys.exit(1)
