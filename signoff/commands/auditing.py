"""The audit log: ``audit`` (the listing), ``audit key``, ``audit export``, ``audit verify``."""

import sys

import click

from .output import dumps, emit, safe
from .plumbing import EnvGroup, bounded, command, listing
from .watching import AUDIT_COLUMNS


@command(cls=EnvGroup, invoke_without_command=True)
@bounded
def audit(obj, as_json, limit):
    """The audit log, newest first: identifiers and codes, never content.

    Its subcommands take the log out of the home and check it offline.
    """
    if click.get_current_context().invoked_subcommand is None:
        listing(obj, as_json, "audit", limit, AUDIT_COLUMNS, short=("task_key",))


@command("key", group=audit)
def audit_key(obj, as_json):
    """The home's public key (PEM), then its fingerprint: what `audit verify` is given."""
    from ..app import Signoff
    emit(Signoff.audit_key(obj.home), as_json,
         lambda d: f"{d['public_key'].rstrip()}\nfingerprint: {d['fingerprint']}")


@command("export", group=audit)
@click.option("--since", metavar="HEAD",
              help="Start after the checkpoint with this head (one an earlier export printed).")
def audit_export(obj, as_json, since):
    """Write every audit entry and checkpoint as JSON Lines on stdout, ending with a
    close signed now; the head goes to stderr."""
    out = sys.stdout
    head = obj.open().audit_export(out.write, since)
    out.flush()
    click.echo(dumps({"head": head}) if as_json else f"head: {head}", err=True)


@command("verify", group=audit)
@click.argument("file", type=click.File("r", encoding="utf-8", errors="surrogateescape"))
@click.option("--home-key", "home_key", required=True, type=click.File("r", encoding="utf-8"),
              metavar="PUB", help="The home's public key: a file holding `audit key`'s output "
                                  "or the PEM key itself.")
@click.option("--head", metavar="HASH", help="A head published earlier: a checkpoint of the "
                                             "file must have it (else head_mismatch).")
def audit_verify(obj, as_json, file, home_key, head):
    """Check an export offline (no database, no network): chain links, signatures,
    quorums and digests, in file order; exit 1 naming the first failure."""
    from ..rules.auditverify import read_public_key, verify_lines
    from ..storage.homekey import home_id
    key = read_public_key(home_key.read())
    report = verify_lines(file, key, home_id(key), head)
    emit(report, as_json, _said)
    if not report["ok"]:
        sys.exit(1)


def _said(report):
    done = (f"{report['entries']} entries, {report['checkpoints']} checkpoints, "
            f"head {report['head']}")
    failure = report["failure"]
    if failure is None:
        return f"ok: {done}"
    where = f"line {failure['line']}: " if failure["line"] else ""
    task = f" (task {failure['task']})" if failure["task"] else ""
    return f"{failure['code']}: {where}{safe(failure['message'])}{task}"
