"""Serving: ``serve``, the ``reviewer`` commands, ``mcp`` for agents, and ``demo``."""

import json
import sys

import click

from .logs import log_lines
from .output import emit, table
from .plumbing import by_option, command, command_line_only, group, mcp_module, serve_module


@command()
@click.option("--host", "bind_host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8080, show_default=True)
@click.option("--secure-cookies/--no-secure-cookies", default=None,
              help="Mark the session cookie Secure (behind HTTPS; default from [serve]).")
@click.option("--access-log", is_flag=True, help="Log one line per request on stderr.")
def serve(obj, as_json, bind_host, port, secure_cookies, access_log):
    """Serve webhooks, the review pages, /healthz and /metrics until SIGTERM."""
    click.get_current_context().with_resource(log_lines(obj.log_level))
    summary = serve_module().run(obj.home, host=bind_host, port=port,
                                 secure_cookies=secure_cookies, access_log=access_log)
    emit(summary, as_json, lambda s: f"serve stopped ({s['stopped']})")


@group()
def reviewer():
    """People who may use the review pages of `signoff serve`."""


@command("add", group=reviewer)
@click.argument("name")
@command_line_only("--read-only", is_flag=True, help="May look, may not approve or change anything.")
@command_line_only("--monitor", "monitors", multiple=True,
          help="Limit the reviewer to this monitor's tasks (repeatable; default: every monitor).")
@command_line_only("--email", default=None, help="Where links to decide tasks are mailed.")
@command_line_only("--slack-user", default=None,
                   help="Their Slack member id (U…): their clicks in Slack decide as them.")
@by_option
def reviewer_add(obj, as_json, name, read_only, monitors, email, slack_user, by):
    """Create a reviewer; their login and API token is printed this once."""
    emit(obj.open().add_reviewer(name, read_only, monitors, by=by, channel="cli", email=email,
                                 slack_user=slack_user), as_json,
         lambda r: f"reviewer {r['name']}{' (read-only)' if r['read_only'] else ''}, "
                   f"token (shown once): {r['token']}")


@command("remove", group=reviewer)
@click.argument("name")
@by_option
def reviewer_remove(obj, as_json, name, by):
    """Delete a reviewer and end their sessions."""
    emit(obj.open().remove_reviewer(name, by=by), as_json,
         lambda r: f"reviewer {r['name']} removed; {r['sessions_ended']} session(s) ended")


@command("set", group=reviewer)
@click.argument("name")
@command_line_only("--email", default=None,
                   help="Where links to decide tasks are mailed (\"\": none).")
@command_line_only("--slack-user", default=None,
                   help="Their Slack member id (U…); an empty value removes it.")
@by_option
def reviewer_set(obj, as_json, name, email, slack_user, by):
    """Change a reviewer's contacts: --email, --slack-user or both."""
    if email is None and slack_user is None:
        raise click.UsageError("give --email, --slack-user or both")
    emit(obj.open().set_reviewer(name, email, slack_user, by=by), as_json,
         lambda r: f"reviewer {r['name']}: email {r['email'] or '(none)'}, "
                   f"slack user {r['slack_user'] or '(none)'}")


@reviewer.group("key")
def reviewer_key():
    """Reviewers' Ed25519 public keys, which sign their decisions (passkeys: the /keys page)."""


@command("add", group=reviewer_key)
@click.argument("name")
@command_line_only("--public-key", type=click.File("rb"), required=True,
                   help="PEM SubjectPublicKeyInfo (openssl pkey -pubout) or an OpenSSH "
                        "ssh-ed25519 line.")
@by_option
def reviewer_key_add(obj, as_json, name, public_key, by):
    """Give reviewer NAME an Ed25519 key to sign decisions with."""
    answer = obj.open().add_reviewer_key(name, public_key.read(), by=by)
    emit({k: answer[k] for k in ("reviewer", "key_id", "fingerprint")}, as_json,
         lambda r: f"reviewer {r['reviewer']}: key {r['key_id']} ({r['fingerprint']})")


@command("list", group=reviewer_key)
@click.argument("name", required=False)
def reviewer_key_list(obj, as_json, name):
    """Reviewers' keys (of NAME alone, if given)."""
    emit(obj.open().reviewer_keys(name), as_json,
         lambda rows: table(rows, ["reviewer", "key_id", "kind", "fingerprint", "created_at"]))


@command("remove", group=reviewer_key)
@click.argument("name")
@click.argument("key_id")
@by_option
def reviewer_key_remove(obj, as_json, name, key_id, by):
    """Take key KEY_ID from reviewer NAME: it signs nothing from now on."""
    emit(obj.open().remove_reviewer_key(name, key_id, by=by), as_json,
         lambda r: f"reviewer {r['reviewer']}: key {r['key_id']} removed")


@command("list", group=reviewer)
def reviewer_list(obj, as_json):
    """Reviewers (never their tokens)."""
    emit(obj.open().reviewers(), as_json,
         lambda rows: table(rows, ["name", "read_only", "monitors", "email", "slack_user",
                                   "delegate", "created_at"]))


@command("delegate", group=reviewer)
@click.argument("name")
@command_line_only("--to", "to", required=True, help="The reviewer who decides for NAME.")
@command_line_only("--until", default=None,
                   help="When it ends: ISO 8601 with a zone, or Unix seconds (default: "
                        "until `reviewer undelegate`).")
@by_option
def reviewer_delegate(obj, as_json, name, to, until, by):
    """Let another reviewer decide for NAME (what both may decide), until --until."""
    emit(obj.open().delegate(name, to, until, by=by), as_json,
         lambda r: f"{r['delegate']} decides for {r['reviewer']}"
                   + (f" until {r['until']:.0f}" if r["until"] is not None else ""))


@command("undelegate", group=reviewer)
@click.argument("name")
@by_option
def reviewer_undelegate(obj, as_json, name, by):
    """End NAME's delegation."""
    emit(obj.open().undelegate(name, by=by), as_json,
         lambda r: f"{r['reviewer']} decides for themselves again")


@command("mcp")
@click.option("--monitor", "monitor_id", required=True, help="The monitor events are reported to.")
def mcp_agents(obj, as_json, monitor_id):
    """Serve signoff to agents over MCP stdio: report_event, list_tasks, show_task.

    There is no tool that approves, rejects or cancels: approval stays with people.
    """
    rt = obj.open()  # no home: refused before the SDK is imported
    mcp_module("agents").serve(rt, monitor_id)


@command()
@command_line_only("--keep", type=click.Path(file_okay=False), default=None,
                   help="Run in this folder (kept) instead of a temporary one.")
@click.option("--mcp", "over_mcp", is_flag=True,
              help="Reach the host over MCP (`signoff host mcp`), and kill its server once.")
@click.option("--events", "pushed", is_flag=True,
              help="The host pushes events over MCP Events to `signoff serve` (needs the serve "
                   "and mcp extras); serve is killed once after a write.")
@click.option("--channels", is_flag=True,
              help="Decide where people work: an email link (a local SMTP server) and a "
                   "Slack click (a local stand-in); needs the serve, channels and slack extras.")
def demo(obj, as_json, keep, over_mcp, pushed, channels):
    """The whole story in a fresh home, with a real worker killed and restarted.

    It ignores every SIGNOFF_* variable: it never reaches a configured home, database
    or queue.
    """
    from ..demo import run_demo, run_sealed, sealed
    if over_mcp + pushed + channels > 1:
        raise click.UsageError("give at most one of --mcp, --events and --channels")
    if over_mcp or pushed:
        mcp_module("hostserver")  # a one-line refusal when the extra is missing
    if pushed or channels:
        serve_module()
    if not sealed():
        sys.exit(run_sealed(keep, as_json, mcp=over_mcp, events=pushed, channels=channels))
    main = click.get_current_context().find_root().command  # the steps run the same CLI
    report = run_demo(main, keep, as_json, mcp=over_mcp, events=pushed, channels=channels)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
    sys.exit(0 if report["passed"] else 1)
