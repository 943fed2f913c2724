"""Events and the worker: ``enqueue``, ``worker``, ``events`` (and ``events retry``),
``dlq``."""

import contextlib
import itertools
import json
import signal
import sys

import click

from ..config import LEASE_S, WORKERS
from .logs import log_lines
from .output import emit, fmt, safe
from .plumbing import (INT64_MAX, KEY_HINT, EnvGroup, Seconds, Status, Within, bounded,
                       by_option, command, group, listing)


@command()
@click.option("--monitor", "monitor_id", default="default", show_default=True)
@click.argument("source", type=click.File("rb"), default="-")
def enqueue(obj, as_json, monitor_id, source):
    """Accept events: JSON Lines from FILE or standard input (-)."""
    sys.exit(_enqueue(obj.open(), source, monitor_id, as_json))


def _enqueue(rt, source, monitor_id, as_json):
    # Streams both ways: lines are read in chunks and answers printed as they
    # come, so a file of any length runs in constant memory. Each chunk is
    # committed before its answers are printed: what was printed is stored.
    show_progress = sys.stderr.isatty()

    def progress(lines):
        if show_progress:
            click.echo(f"\r{lines} lines read", err=True, nl=False)

    results = rt.enqueue_stream(source, monitor_id, progress=progress)
    counts = {True: 0, False: 0}
    opened = []  # the JSON list's "[" is out
    try:
        with DeferredInterrupt() as interrupt:
            # The first step runs the whole-call checks (an unknown monitor
            # refuses everything) before anything is printed: a refusal is
            # then the only JSON document on stdout.
            head = next(results, None)
            with interrupt.held():
                _open_list(as_json, opened)
            for r in itertools.chain([] if head is None else [head], results):
                counts[r.accepted] += 1
                with interrupt.held():
                    _print_answer(r, as_json, first=sum(counts.values()) == 1)
    except KeyboardInterrupt:
        # Ctrl-C: every answer printed was committed; close the JSON.
        _open_list(as_json, opened)
        _enqueue_end(as_json, show_progress, counts)
        click.echo("error: interrupted: the answers above were stored; lines read after "
                   "them may be stored too (see `signoff events`)", err=True)
        return 1
    _enqueue_end(as_json, show_progress, counts)
    return 1 if counts[False] else 0


def _open_list(as_json, opened):
    if as_json and not opened:
        click.echo("[", nl=False)
        opened.append(True)


def _print_answer(r, as_json, first):
    if as_json:
        click.echo(("\n" if first else ",\n") + json.dumps(r.as_dict(), ensure_ascii=False),
                   nl=False)
    elif not r.accepted:
        click.echo(f"line {r.line}: rejected: {r.code}: {safe(r.reason)}")


class DeferredInterrupt:
    """Ctrl-C while an answer is being printed waits for that answer to end.

    Elsewhere (reading input, storing a chunk) it interrupts at once as usual;
    so an interrupted ``--json`` output is never cut inside an answer.
    """

    def __init__(self):
        self.writing = self.pending = False
        self.previous = None

    def __enter__(self):
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            self.previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False

    def _on_sigint(self, signum, frame):
        if not self.writing:
            raise KeyboardInterrupt
        self.pending = True

    @contextlib.contextmanager
    def held(self):
        """Hold Ctrl-C for the duration of the block."""
        self.writing = True
        try:
            yield
        finally:
            self.writing = False
        if self.pending:
            raise KeyboardInterrupt


def _enqueue_end(as_json, show_progress, counts):
    if show_progress:
        click.echo("", err=True)
    if as_json:
        click.echo("\n]" if sum(counts.values()) else "]")
    else:
        click.echo(f"accepted {counts[True]}, rejected {counts[False]}")


@command()
@click.option("--workers", type=Within(WORKERS, "threads", integer=True), default=2,
              show_default=True, help=f"Threads ({WORKERS}).")
@click.option("--drain", is_flag=True, help="Exit 0 once nothing can still progress.")
@click.option("--drain-wait", type=Seconds(min=0), default=60.0, show_default=True,
              help="With --drain: wait for retries due within this many seconds; later ones "
                   "are left waiting (and named).")
@click.option("--lease-ttl", type=Within(LEASE_S), default=None,
              help=f"Lease seconds, {LEASE_S} (default from signoff.toml, 30).")
def worker(obj, as_json, workers, drain, drain_wait, lease_ttl):
    """Run the worker until SIGTERM/SIGINT (or, with --drain, until idle)."""
    from ..worker import run
    click.get_current_context().with_resource(log_lines(obj.log_level))
    summary = run(obj.home, workers=workers, drain=drain, lease_ttl=lease_ttl,
                  drain_wait=drain_wait)
    emit(summary, as_json, _stopped_line)


def _stopped_line(summary):
    left = summary.get("left_waiting") or {}
    waiting = "" if not (left.get("deliveries") or left.get("tasks")) else (
        f"; left waiting: {left['deliveries']} delivery and {left['tasks']} task "
        f"retries, the first due at {fmt(left['next_due_at'])} UTC")
    return f"worker stopped: {summary['stopped']} after {summary['seconds']}s{waiting}"


@command(cls=EnvGroup, invoke_without_command=True)
@click.option("--status", type=Status("delivery"), default=None)
@bounded
def events(obj, as_json, status, limit):
    """Deliveries and what became of them, newest first (`events retry ID`: hurry one)."""
    ctx = click.get_current_context()
    if ctx.invoked_subcommand is not None:
        _listing_options_alone(ctx)
        return
    listing(obj, as_json, "events", limit, [
        "delivery", "event_id", "monitor", "status", "outcome", "task_key", "attempts",
        "last_code", "last_reason"], status=status, short=("task_key",), hint=KEY_HINT)


def _listing_options_alone(ctx):
    """Refuse the listing's options given on the command line before a subcommand."""
    given = [f"--{name.replace('show_all', 'all')}" for name in ("status", "limit", "show_all",
                                                                 "json")
             if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(f"{', '.join(given)}: options of the events listing, not of "
                               f"`events {ctx.invoked_subcommand}` (give --json after it)")


@command("retry", group=events)
@click.argument("delivery_id", metavar="ID", type=click.IntRange(min=0, max=INT64_MAX))
@by_option
def events_retry(obj, as_json, delivery_id, by):
    """Make a retrying delivery due now (ID: the delivery column of `signoff events`)."""
    emit(obj.open().retry_delivery(delivery_id, by=by, channel="cli"), as_json,
         lambda d: f"delivery {d['delivery']}: {d['status']}, due now ({d['last_code']})")


@group()
def dlq():
    """Dead letters: list and replay."""


@command("list", group=dlq)
@bounded
def dlq_list(obj, as_json, limit):
    """Deliveries and tasks whose retry budget was spent, newest first."""
    listing(obj, as_json, "dead_letters", limit, [
        "id", "kind", "ref", "step", "code", "attempts", "first_at", "last_at", "replayed",
        "reason"], short=("ref",))


@command("replay", group=dlq)
@click.argument("letter_id", type=click.IntRange(min=0, max=INT64_MAX))
@by_option
def dlq_replay(obj, as_json, letter_id, by):
    """Queue a dead letter again with a fresh budget and the same keys."""
    emit(obj.open().replay(letter_id, by=by), as_json,
         lambda r: f"dead letter {r['id']} ({r['kind']} {r['ref']}) queued again")
