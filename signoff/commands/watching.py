"""Watching and housekeeping: ``stats``, ``healthcheck``, ``watch``, ``gaps``,
``subscriptions``, ``purge`` (and the audit listing's columns, see ``auditing``)."""

import sys

import click

from ..config import PURGE_DAYS
from .output import emit, safe, table
from .plumbing import Seconds, Within, command


AUDIT_COLUMNS = ["seq", "at", "monitor", "event_id", "task_key", "code", "actor", "channel",
                 "note", "subject", "reviewer"]


SUBSCRIPTION_COLUMNS = ["monitor", "event", "subscription_id", "state", "refresh_before",
                        "last_delivery_at"]


@command()
def subscriptions(obj, as_json):
    """MCP Events subscriptions of monitors: state, expiry, last delivery (never the secret)."""
    emit(obj.open().subscriptions(), as_json,
         lambda rows: table(rows, SUBSCRIPTION_COLUMNS))


@command()
def gaps(obj, as_json):
    """What was not observed: resume gaps and stale events."""
    from .render import render_gaps
    emit(obj.open().gaps(), as_json, render_gaps)


@command()
def stats(obj, as_json):
    """Counts of states, leases, retries, uncertainty, dead letters and gaps."""
    from .render import render_stats
    emit(obj.open().stats(), as_json, render_stats)


@command()
@click.option("--max-age", type=Seconds(min=0), default=30.0, show_default=True,
              help="Seconds: a worker that beat within them is live.")
def healthcheck(obj, as_json, max_age):
    """Exit 0 when the database and queue answer, the schema is current and a worker is live.

    No HTTP: for container HEALTHCHECKs, Kubernetes exec probes and systemd.
    Answers within a few seconds even when a server does not.
    """
    from .render import render_health
    from ..views.health import check, first_failure
    report = check(obj.home, max_age)
    emit(report, as_json, render_health)
    failed = first_failure(report)
    if failed is not None:
        if not as_json:
            click.echo(f"error: {failed[1]}: {failed[0]}: {safe(failed[2])}", err=True)
        sys.exit(1)


@command()
@click.option("--older-than", "older_than", type=Within(PURGE_DAYS, "days"), default=None,
              metavar="DAYS", help=f"Days since a task finished, {PURGE_DAYS} "
                                   "(default: [retention] finished_days, 30).")
@click.option("--dry-run", is_flag=True, help="Only count what would be purged.")
def purge(obj, as_json, older_than, dry_run):
    """Drop the record snapshot and result of finished tasks past retention.

    Webhook answers past it are dropped and refusal counts folded likewise.
    """
    show_progress = sys.stderr.isatty() and not dry_run

    def progress(done):
        if show_progress:
            click.echo(f"\r{done} tasks purged", err=True, nl=False)

    summary = obj.open().purge(older_than, dry_run, progress)
    if show_progress:
        click.echo("", err=True)
    emit(summary, as_json, lambda s: (
        f"{'would purge' if s['dry_run'] else 'purged'} {s['purged']} finished task(s) "
        f"older than {s['older_than_days']:g} day(s) ({_by_status(s['by_status'])}); "
        f"{'would drop' if s['dry_run'] else 'dropped'} {s['webhook_answers']} webhook "
        f"answer(s), {'would fold' if s['dry_run'] else 'folded'} {s['refusal_minutes']} "
        "refusal count(s)"))


def _by_status(counts):
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


@command(json_help="Stream one JSON snapshot (as `stats --json`) per line, "
                         "every --interval, until Ctrl-C.")
@click.option("--interval", type=Seconds(min=0.1), default=1.0, show_default=True)
def watch(obj, as_json, interval):
    """A live view that refreshes until Ctrl-C (--json: one JSON snapshot per line)."""
    from .watch import watch as run_watch
    run_watch(obj.open(), interval, as_json)
