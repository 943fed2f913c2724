"""Tasks and the human channel: ``tasks``, ``approve``, ``reject``, ``policy``."""

import click

from ..errors import Refused
from ..state.statuses import TaskStatus as T
from .output import emit, table
from .plumbing import (INT64_MAX, KEY_HINT, SECONDS, Status, bounded, by_option, command,
                       command_line_only, group, listing, sign_options)


@group()
def tasks():
    """List, show and retry tasks."""


TASK_COLUMNS = ["key", "monitor", "record_id", "version", "status", "code",
                "outcome_unknown", "needs_answers", "attempts", "updated_at"]


@command("list", group=tasks)
@click.option("--status", type=Status("task"), default=None)
@bounded
def tasks_list(obj, as_json, status, limit):
    """List tasks, newest first, optionally of one status."""
    listing(obj, as_json, "tasks", limit, TASK_COLUMNS, status=status, hint=KEY_HINT)


@command("show", group=tasks)
@click.argument("key")
def tasks_show(obj, as_json, key):
    """One task (KEY or a unique prefix) with its record, result, digests and history."""
    from .render import render_task
    emit(obj.open().task(key), as_json, render_task)


@command("retry", group=tasks)
@click.argument("key")
@by_option
def tasks_retry(obj, as_json, key, by):
    """Queue a parked, approved or uncertain task again."""
    emit(obj.open().retry(key, by=by), as_json, lambda a: f"{a['key']}: {a['status']}, queued")


@command("cancel", group=tasks)
@click.argument("key")
@by_option
def tasks_cancel(obj, as_json, key, by):
    """Cancel one ready, approved or uncertain task (uncertain ones end outcome unknown)."""
    emit(obj.open().cancel_task(key, by=by, channel="cli"), as_json,
         lambda a: f"{a['key']}: {a['status']}"
                   + (", outcome unknown: the host may have written it" if a["outcome_unknown"] else ""))


@command("redraft", group=tasks)
@click.argument("key")
@by_option
def tasks_redraft(obj, as_json, key, by):
    """Re-read the record and material and draft a ready or blocked task again."""
    from .render import render_redraft
    emit(obj.open().redraft(key, by=by), as_json, render_redraft)


@command()
@click.argument("key")
@command_line_only("--digest", required=True, help="Digest of the result you reviewed.")
@by_option
@command_line_only("--edit", "edit_file", type=click.File("rb"), default=None,
          help="A file (or -) holding the draft as you want it submitted; the approval "
               "binds the edited draft.")
@command_line_only("--ack-hidden-characters", is_flag=True,
          help="Approve a draft holding hidden characters (shown as <U+XXXX> by tasks show).")
@sign_options
def approve(obj, as_json, key, digest, by, edit_file, ack_hidden_characters, sign_with, signer):
    """Approve a ready task (KEY or a unique prefix) whose result has DIGEST.

    With a quorum (monitor bind --approvals N) the task is approved once N
    different people approved the same digest; until then it stays ready.
    With --sign-with KEYFILE --as NAME the approval is signed with reviewer
    NAME's Ed25519 key and counts as NAME's.
    """
    if _signing(sign_with, signer, edit_file, ack_hidden_characters, by):
        emit(obj.open().sign_and_decide(key, digest, sign_with.read(), signer), as_json,
             _approved_line)
        return
    edit = None if edit_file is None else _edit_text(edit_file.read())
    emit(obj.open().approve(key, digest, by, edit=edit,
                            ack_hidden_characters=ack_hidden_characters),
         as_json, _approved_line)


def _signing(sign_with, signer, *unsigned):
    """True for a signed decision; a usage error for half of one, or one with unsigned options."""
    if (sign_with is None) != (signer is None):
        raise click.UsageError("--sign-with and --as go together")
    if sign_with is not None and any(unsigned):
        raise click.UsageError("a signed decision takes neither --by, --edit nor "
                               "--ack-hidden-characters")
    return sign_with is not None


def _edit_text(data):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refused("invalid_edit", f"the edit file is not UTF-8 (byte {exc.start})") from None


def _approved_line(a):
    missing = a.get("approvals_missing")
    waiting = f", {missing} more approval(s) needed" if a["status"] == T.READY and missing else ""
    edited = f", edited (digest {a['digest']})" if a.get("digest") else ""
    return f"{a['key']}: {a['status']}{edited}{waiting}"


@command()
@click.argument("key")
@click.option("--reason", default=None,
              help="Why (1-200 printable characters); kept and shown with the task.")
@by_option
@command_line_only("--digest", default=None,
                   help="Digest of the result you reviewed (a signed reject needs it).")
@sign_options
def reject(obj, as_json, key, reason, by, digest, sign_with, signer):
    """Reject a ready task (signed with --sign-with KEYFILE --as NAME: as reviewer NAME)."""
    if _signing(sign_with, signer, by):
        if digest is None:
            raise click.UsageError("a signed reject names the result it saw: --digest")
        answer = obj.open().sign_and_decide(key, digest, sign_with.read(), signer, "reject",
                                            reason)
    else:
        answer = obj.open().reject(key, reason, by=by, digest=digest)
    emit(answer, as_json, lambda a: f"{a['key']}: {a['status']}")


@group()
def policy():
    """Standing approval policies: add, list, revoke."""


POLICY_COLUMNS = ["policy", "monitor", "active", "expires_at", "max_per_hour", "by", "approved",
                  "end_code", "digest"]


@command("add", group=policy)
@command_line_only("--monitor", "monitor_id", required=True, help="The monitor whose tasks it approves.")
@command_line_only("--ttl", type=SECONDS, default=None, help="Seconds (default: until the monitor ends).")
@command_line_only("--max-per-hour", type=click.IntRange(min=1, max=INT64_MAX), default=None,
          help="At most this many approvals in any hour; the rest wait for people.")
@by_option
@command_line_only("--include-waiting", is_flag=True,
          help="Approve the tasks already waiting too (default: only those ready from now on).")
def policy_add(obj, as_json, monitor_id, ttl, max_per_hour, by, include_waiting):
    """Approve the monitor's tasks that become ready and pass acceptance, until it ends.

    One active policy per monitor.
    """
    p = obj.open().add_policy(monitor_id, ttl, max_per_hour, by, include_waiting)
    emit(p, as_json, lambda p: table([p], POLICY_COLUMNS, short=("digest",)) + "\n" + (
        f"covers the {p['waiting_included']} task(s) waiting" if include_waiting else
        f"{p['waiting_left']} task(s) waiting are left to people (--include-waiting covers them)"))


@command("list", group=policy)
def policy_list(obj, as_json):
    """List policies."""
    emit(obj.open().policies(), as_json,
         lambda rows: table(rows, POLICY_COLUMNS, short=("digest",)))


@command("revoke", group=policy)
@click.argument("policy_id", metavar="POLICY", type=click.IntRange(min=0, max=INT64_MAX))
@by_option
def policy_revoke(obj, as_json, policy_id, by):
    """End a policy; tasks it approved whose write has not started go back to ready."""
    emit(obj.open().revoke_policy(policy_id, by=by), as_json,
         lambda p: f"policy {p['policy']} ended ({p['end_code']}); "
                   f"{p['tasks_returned']} task(s) back to ready")
