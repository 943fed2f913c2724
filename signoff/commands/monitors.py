"""Monitors: ``monitor`` bind, pause, unpause, cancel, resume, list, and their
webhook secrets (``monitor secret``)."""

import sys

import click

from .output import emit, table
from .plumbing import INT64_MAX, SECONDS, by_option, command, command_line_only, group


@group()
def monitor():
    """Bind, pause, unpause, cancel and list monitors."""


MONITOR_COLUMNS = ["id", "document", "event_names", "active", "paused", "expires_at", "window_s",
                   "grant_digest"]


@command("bind", group=monitor)
@click.option("--id", "monitor_id", default="default", show_default=True)
@click.option("--document", required=True)
@click.option("--event", "events", multiple=True,
              help="Event name (repeatable; default comment.created, or the subscribed event).")
@click.option("--ttl", type=SECONDS, default=24 * 3600, show_default=True, help="Seconds.")
@click.option("--window", type=SECONDS, default=60, show_default=True, help="Seconds.")
@click.option("--approval-ttl", type=SECONDS, default=None, help="Seconds.")
@click.option("--batch-window", type=SECONDS, default=None,
              help="Seconds: gather the document's records arriving within it into one task.")
@command_line_only("--approvals", type=click.IntRange(min=1), default=1,
          show_default=True, help="Distinct approvers each task's digest needs (a quorum).")
@command_line_only("--signed-approvals", is_flag=True,
                   help="Count only decisions signed by their reviewer's key (no policies).")
@click.option("--remind-after", type=SECONDS, default=None,
              help="Seconds: remind the reviewers of a waiting task this often.")
@command_line_only("--escalate-after", type=SECONDS, default=None,
                   help="Seconds: after this long, a waiting task is escalated to --escalate-to.")
@command_line_only("--escalate-to", "escalate_to", multiple=True,
                   help="A reviewer who may decide a task once it is escalated (repeatable).")
@click.option("--slack-channel", default=None,
              help="Slack channel id (C…) its ready tasks are posted to ([notify.slack]).")
def monitor_bind(obj, as_json, monitor_id, document, events, ttl, window, approval_ttl,
                 batch_window, approvals, signed_approvals, remind_after, escalate_after,
                 escalate_to, slack_channel):
    """Bind a monitor from the host's current grant (subscribing it when the host offers events)."""
    m = obj.open().bind(document, monitor_id, event_names=list(events) or None,
                        ttl_s=ttl, window_s=window, approval_ttl_s=approval_ttl,
                        batch_window_s=batch_window, approvals=approvals,
                        signed_approvals=signed_approvals,
                        remind_after_s=remind_after, escalate_after_s=escalate_after,
                        escalate_to=escalate_to, slack_channel=slack_channel)
    emit(m, as_json, lambda m: table([m], MONITOR_COLUMNS, short=("grant_digest",)))


@command("set", group=monitor)
@click.argument("monitor_id")
@command_line_only("--signed-approvals/--no-signed-approvals", "signed", default=None,
                   help="Count only decisions signed by their reviewer's key, or stop asking.")
@by_option
def monitor_set(obj, as_json, monitor_id, signed, by):
    """Change a monitor's settings: --signed-approvals or --no-signed-approvals."""
    if signed is None:
        raise click.UsageError("give --signed-approvals or --no-signed-approvals")
    m = obj.open().set_signed_approvals(monitor_id, signed, by=by)
    emit(m, as_json, lambda m: f"monitor {m['id']}: signed approvals "
         + ("on" if m["signed_approvals"] else "off"))


@command("cancel", group=monitor)
@click.argument("monitor_id")
@by_option
def monitor_cancel(obj, as_json, monitor_id, by):
    """Cancel a monitor: stop intake and end its open tasks."""
    m = obj.open().cancel(monitor_id, by=by)
    emit(m, as_json, lambda m: f"monitor {m['id']} cancelled; {m['tasks_cancelled']} open task(s) "
         f"cancelled, {m['writes_in_flight']} with a write in flight "
         "(done if its receipt confirms)")


@command("pause", group=monitor)
@click.argument("monitor_id")
@by_option
def monitor_pause(obj, as_json, monitor_id, by):
    """Hold a monitor's new events (still accepted) without ending it; approved tasks still submit."""
    m = obj.open().pause(monitor_id, by=by, channel="cli")
    emit(m, as_json, lambda m: f"monitor {m['id']} paused: its events are accepted and wait")


@command("unpause", group=monitor)
@click.argument("monitor_id")
@by_option
def monitor_unpause(obj, as_json, monitor_id, by):
    """Process a paused monitor's events again, those that waited first."""
    m = obj.open().unpause(monitor_id, by=by, channel="cli")
    emit(m, as_json, lambda m: f"monitor {m['id']} unpaused")


@command("resume", group=monitor)
@click.argument("monitor_id")
@click.option("--as", "new_id", required=True, help="Id of the monitor to bind.")
@click.option("--new-only", is_flag=True, help="Queue nothing from the gap.")
@click.option("--replay", is_flag=True, help="Queue the records the host says changed in the gap.")
@click.option("--ttl", type=SECONDS, default=24 * 3600, show_default=True, help="Seconds.")
def monitor_resume(obj, as_json, monitor_id, new_id, new_only, replay, ttl):
    """Bind NEW_ID like the ended monitor ID, recording the gap between them."""
    if new_only == replay:
        raise click.UsageError("give exactly one of --new-only and --replay")
    answer = obj.open().resume(monitor_id, new_id, "replay" if replay else "new_only", ttl_s=ttl)
    emit(answer, as_json, lambda a: (
        f"monitor {a['monitor']['id']} bound; gap of {a['gap']['seconds']:.0f}s since "
        f"{monitor_id} ended: {a['gap']['observed']}"))


@command("list", group=monitor)
def monitor_list(obj, as_json):
    """List monitors."""
    emit(obj.open().monitors(), as_json,
         lambda rows: table(rows, MONITOR_COLUMNS, short=("grant_digest",)))


@monitor.group("secret")
def monitor_secret():
    """Webhook signing secrets of a monitor (several at once for rotation)."""


@command("add", group=monitor_secret)
@click.argument("monitor_id")
@command_line_only("--secret", default=None,
          help="whsec_<base64 of 24-64 bytes>, or - to read it from stdin (default: a new one).")
@by_option
def monitor_secret_add(obj, as_json, monitor_id, secret, by):
    """Add a secret; it is printed this once and never shown again."""
    if secret == "-":
        secret = sys.stdin.readline().strip()
    emit(obj.open().add_secret(monitor_id, secret, by=by), as_json,
         lambda r: f"secret {r['secret_id']} for monitor {r['monitor']} (shown once): {r['secret']}")


@command("list", group=monitor_secret)
@click.argument("monitor_id")
def monitor_secret_list(obj, as_json, monitor_id):
    """The monitor's secret ids and when they were added (never the secrets)."""
    emit(obj.open().monitor_secrets(monitor_id), as_json,
         lambda rows: table(rows, ["secret_id", "created_at"]))


@command("remove", group=monitor_secret)
@click.argument("monitor_id")
@click.argument("secret_id", type=click.IntRange(min=0, max=INT64_MAX))
@by_option
def monitor_secret_remove(obj, as_json, monitor_id, secret_id, by):
    """Remove a secret (effective for the next request)."""
    emit(obj.open().remove_secret(monitor_id, secret_id, by=by), as_json,
         lambda r: f"secret {r['secret_id']} of monitor {r['monitor']} removed")
