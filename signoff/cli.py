"""The ``signoff`` command line (SPEC section 8): parse, call one function, print."""

import functools
import itertools
import json
import math
import sys

import click

from .errors import SignoffError
from .output import emit, fail, table


INT64_MAX = 2**63 - 1
INT64 = click.IntRange(-INT64_MAX - 1, INT64_MAX)  # what every database column can hold


class Seconds(click.ParamType):
    """A number of seconds: finite (``inf`` and ``nan`` are not durations)."""

    name = "seconds"

    def __init__(self, min=None):
        self.number = click.FLOAT if min is None else click.FloatRange(min=min)

    def convert(self, value, param, ctx):
        rv = self.number.convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return rv


SECONDS = Seconds()


class Ctx:
    """What every command needs: the home, opened only when a command uses it."""

    def __init__(self, home):
        self.home = home

    def open(self):
        """The home as a ``Signoff`` (refuses with ``no_home`` if it is missing)."""
        from .app import Signoff
        return Signoff(self.home)

    def reference_host(self):
        """The reference host of an existing home."""
        from .config import load_config, resolve_home
        from .hosts.reference import ReferenceHost
        home = resolve_home(self.home)
        load_config(home)  # refuses with no_home before creating any file
        return ReferenceHost(home)


def command(group, name=None, **kwargs):
    """A subcommand with ``--json``; refusals and failures exit 1 with one line, no traceback."""
    def wrap(f):
        @group.command(name, **kwargs)
        @click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
        @click.pass_obj
        @functools.wraps(f)
        def run(obj, as_json, **params):
            try:
                return f(obj, as_json, **params)
            except SignoffError as exc:
                fail(exc.code, exc.message, as_json)
            except (click.exceptions.ClickException, click.exceptions.Abort,
                    click.exceptions.Exit, BrokenPipeError):
                raise  # usage errors (exit 2), Ctrl-C and closed pipes are click's to report
            except OSError as exc:
                # e.g. a home or config path that is a folder, or not readable
                fail("os_error", f"{type(exc).__name__}: {exc}", as_json)
            except Exception as exc:
                # One line, never a traceback: the command failed (exit 1).
                from peewee import DatabaseError
                code = "database_error" if isinstance(exc, DatabaseError) else "internal_error"
                fail(code, f"{type(exc).__name__}: {exc}", as_json)
        return run
    return wrap


@click.group()
@click.option("--home", type=click.Path(file_okay=False), default=None,
              help="signoff home folder (default: $SIGNOFF_HOME, else ./.signoff).")
@click.version_option(package_name="signoff")
@click.pass_context
def main(ctx, home):
    """signoff: durable, human-approved, exactly-once actions on change events."""
    ctx.obj = Ctx(home)


@command(main)
def init(obj, as_json):
    """Create the home, its config and databases (idempotent; never resets data)."""
    from .app import Signoff
    rt = Signoff.init(obj.home)
    emit({"home": str(rt.home), "config": str(rt.home / "signoff.toml")}, as_json,
         lambda d: f"signoff home ready at {d['home']}")


# -- host --------------------------------------------------------------------

@main.group()
def host():
    """Drive the reference host (records, materials, grant, faults, results)."""


@command(host, "record")
@click.option("--id", "record_id", required=True)
@click.option("--document")
@click.option("--version", type=INT64)
@click.option("--status")
@click.option("--kind")
@click.option("--tenant")
@click.option("--text")
def host_record(obj, as_json, record_id, **changes):
    """Insert or update a record; options not given keep their value."""
    emit(obj.reference_host().put_record(record_id, **changes), as_json)


@command(host, "material")
@click.option("--document", required=True)
@click.option("--demo-date", required=True)
def host_material(obj, as_json, document, demo_date):
    """Set the material for a document."""
    emit(obj.reference_host().put_material(document, demo_date), as_json)


@command(host, "grant")
@click.option("--tenant")
@click.option("--user")
@click.option("--doc", "docs", multiple=True)
@click.option("--action", "actions", multiple=True)
@click.option("--revision", type=INT64)
def host_grant(obj, as_json, tenant, user, docs, actions, revision):
    """Change the current grant context; options not given keep their value."""
    grant = obj.reference_host().put_grant(tenant=tenant, user=user, docs=list(docs) or None,
                                           actions=list(actions) or None, revision=revision)
    emit(grant, as_json)


@command(host, "fault")
@click.argument("name")
@click.option("--times", type=click.IntRange(min=1, max=INT64_MAX), default=1, show_default=True)
def host_fault(obj, as_json, name, times):
    """Arm a fault (read-timeout, lose-ack, bad-receipt), or `clear` them all."""
    ref = obj.reference_host()
    faults = ref.clear_faults() if name == "clear" else ref.set_fault(name, times)
    emit({"faults": faults}, as_json)


@command(host, "results")
def host_results(obj, as_json):
    """Results written to the reference host."""
    emit(obj.reference_host().results(), as_json,
         lambda rows: table([{"key": r["key"], "result": r["result"]} for r in rows],
                            ["key", "result"]))


# -- monitors --------------------------------------------------------------

@main.group()
def monitor():
    """Bind, cancel and list monitors."""


MONITOR_COLUMNS = ["id", "document", "event_names", "active", "expires_at", "window_s",
                   "grant_digest"]


@command(monitor, "bind")
@click.option("--id", "monitor_id", default="default", show_default=True)
@click.option("--document", required=True)
@click.option("--event", "events", multiple=True, help="Event name (repeatable).")
@click.option("--ttl", type=SECONDS, default=24 * 3600, show_default=True, help="Seconds.")
@click.option("--window", type=SECONDS, default=60, show_default=True, help="Seconds.")
@click.option("--approval-ttl", type=SECONDS, default=None, help="Seconds.")
def monitor_bind(obj, as_json, monitor_id, document, events, ttl, window, approval_ttl):
    """Bind a monitor from the host's current grant."""
    from .monitors import DEFAULT_EVENTS
    m = obj.open().bind(document, monitor_id, event_names=list(events or DEFAULT_EVENTS),
                        ttl_s=ttl, window_s=window, approval_ttl_s=approval_ttl)
    emit(m, as_json, lambda m: table([m], MONITOR_COLUMNS, short=("grant_digest",)))


@command(monitor, "cancel")
@click.argument("monitor_id")
def monitor_cancel(obj, as_json, monitor_id):
    """Cancel a monitor: stop intake and end its open tasks."""
    m = obj.open().cancel(monitor_id)
    emit(m, as_json, lambda m: f"monitor {m['id']} cancelled; {m['tasks_cancelled']} open task(s) cancelled")


@command(monitor, "list")
def monitor_list(obj, as_json):
    """List monitors."""
    emit(obj.open().monitors(), as_json,
         lambda rows: table(rows, MONITOR_COLUMNS, short=("grant_digest",)))


@monitor.group("secret")
def monitor_secret():
    """Webhook signing secrets of a monitor (several at once for rotation)."""


@command(monitor_secret, "add")
@click.argument("monitor_id")
@click.option("--secret", default=None,
              help="whsec_<base64 of 24-64 bytes>, or - to read it from stdin (default: a new one).")
def monitor_secret_add(obj, as_json, monitor_id, secret):
    """Add a secret; it is printed this once and never shown again."""
    from .serve import secrets
    if secret == "-":
        secret = sys.stdin.readline().strip()
    emit(secrets.add(obj.open(), monitor_id, secret), as_json,
         lambda r: f"secret {r['secret_id']} for monitor {r['monitor']} (shown once): {r['secret']}")


@command(monitor_secret, "list")
@click.argument("monitor_id")
def monitor_secret_list(obj, as_json, monitor_id):
    """The monitor's secret ids and when they were added (never the secrets)."""
    from .serve import secrets
    obj.open()
    emit(secrets.listing(monitor_id), as_json,
         lambda rows: table(rows, ["secret_id", "created_at"]))


@command(monitor_secret, "remove")
@click.argument("monitor_id")
@click.argument("secret_id", type=click.IntRange(min=0, max=INT64_MAX))
def monitor_secret_remove(obj, as_json, monitor_id, secret_id):
    """Remove a secret (effective for the next request)."""
    from .serve import secrets
    emit(secrets.remove(obj.open(), monitor_id, secret_id), as_json,
         lambda r: f"secret {r['secret_id']} of monitor {r['monitor']} removed")


# -- intake and worker ------------------------------------------------------

@command(main)
@click.option("--monitor", "monitor_id", default="default", show_default=True)
@click.argument("source", type=click.File("rb"), default="-")
def enqueue(obj, as_json, monitor_id, source):
    """Accept events: JSON Lines from FILE or standard input (-)."""
    sys.exit(_enqueue(obj.open(), source, monitor_id, as_json))


def _enqueue(rt, source, monitor_id, as_json):
    # Streams both ways: lines are read in chunks and answers printed as they
    # come, so a file of any length runs in constant memory.
    show_progress = sys.stderr.isatty()

    def progress(lines):
        if show_progress:
            click.echo(f"\r{lines} lines read", err=True, nl=False)

    results = rt.enqueue(source, monitor_id, progress=progress)
    # The first step runs the whole-call checks (an unknown monitor refuses
    # everything), so it happens before anything is printed: a refusal is then
    # the only JSON document on stdout.
    head = next(results, None)
    results = itertools.chain([] if head is None else [head], results)
    accepted = rejected = 0
    first = True
    if as_json:
        click.echo("[", nl=False)
    for r in results:
        if r.accepted:
            accepted += 1
        else:
            rejected += 1
        if as_json:
            click.echo(("\n" if first else ",\n") + json.dumps(r.as_dict(), ensure_ascii=False), nl=False)
            first = False
        elif not r.accepted:
            click.echo(f"line {r.line}: rejected: {r.code}: {r.reason}")
    if show_progress:
        click.echo("", err=True)
    if as_json:
        click.echo("\n]")
    else:
        click.echo(f"accepted {accepted}, rejected {rejected}")
    return 1 if rejected else 0


@command(main)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--drain", is_flag=True, help="Exit 0 once nothing can still progress.")
@click.option("--lease-ttl", type=Seconds(min=0.1), default=None,
              help="Lease seconds (default from signoff.toml, 30).")
def worker(obj, as_json, workers, drain, lease_ttl):
    """Run the worker until SIGTERM/SIGINT (or, with --drain, until idle)."""
    import logging
    from .worker import run
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    summary = run(obj.home, workers=workers, drain=drain, lease_ttl=lease_ttl)
    emit(summary, as_json, lambda s: f"worker stopped: {s['stopped']} after {s['seconds']}s")


@command(main)
@click.option("--status", default=None)
@click.option("--limit", type=click.IntRange(min=1, max=INT64_MAX), default=None)
def events(obj, as_json, status, limit):
    """Deliveries and what became of them."""
    rows = obj.open().events(status=status, limit=limit)
    emit(rows, as_json, lambda rows: table(rows, [
        "delivery", "event_id", "monitor", "status", "outcome", "task_key", "attempts",
        "last_code"], short=("task_key",)))


# -- tasks and the human channel -------------------------------------------------

@main.group()
def tasks():
    """List, show and retry tasks."""


TASK_COLUMNS = ["key", "monitor", "record_id", "version", "status", "code",
                "outcome_unknown", "attempts", "updated_at"]


@command(tasks, "list")
@click.option("--status", default=None)
def tasks_list(obj, as_json, status):
    """List tasks, optionally of one status."""
    emit(obj.open().tasks(status), as_json, lambda rows: table(rows, TASK_COLUMNS))


@command(tasks, "show")
@click.argument("key")
def tasks_show(obj, as_json, key):
    """One task with its record, result, digests and history."""
    from .timeline import render_task
    emit(obj.open().task(key), as_json, render_task)


@command(tasks, "retry")
@click.argument("key")
def tasks_retry(obj, as_json, key):
    """Queue a parked, approved or uncertain task again."""
    emit(obj.open().retry(key), as_json, lambda a: f"{a['key']}: {a['status']}, queued")


@command(main)
@click.argument("key")
@click.option("--digest", required=True, help="Digest of the result you reviewed.")
@click.option("--by", default="operator", show_default=True)
def approve(obj, as_json, key, digest, by):
    """Approve a ready task whose result has DIGEST."""
    emit(obj.open().approve(key, digest, by), as_json, lambda a: f"{a['key']}: {a['status']}")


@command(main)
@click.argument("key")
@click.option("--reason", default=None)
def reject(obj, as_json, key, reason):
    """Reject a ready task."""
    emit(obj.open().reject(key, reason), as_json, lambda a: f"{a['key']}: {a['status']}")


@main.group()
def reviewer():
    """People who may use the review pages of `signoff serve`."""


@command(reviewer, "add")
@click.argument("name")
@click.option("--read-only", is_flag=True, help="May look, may not approve or change anything.")
def reviewer_add(obj, as_json, name, read_only):
    """Create a reviewer; their login token is printed this once."""
    from .serve import reviewers
    emit(reviewers.add(obj.open(), name, read_only), as_json,
         lambda r: f"reviewer {r['name']}{' (read-only)' if r['read_only'] else ''}, "
                   f"token (shown once): {r['token']}")


@command(reviewer, "remove")
@click.argument("name")
def reviewer_remove(obj, as_json, name):
    """Delete a reviewer and end their sessions."""
    from .serve import reviewers
    emit(reviewers.remove(obj.open(), name), as_json,
         lambda r: f"reviewer {r['name']} removed; {r['sessions_ended']} session(s) ended")


@command(reviewer, "list")
def reviewer_list(obj, as_json):
    """Reviewers (never their tokens)."""
    from .serve import reviewers
    obj.open()
    emit(reviewers.listing(), as_json,
         lambda rows: table(rows, ["name", "read_only", "created_at"]))


@command(main)
@click.option("--host", "bind_host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8080, show_default=True)
@click.option("--secure-cookies/--no-secure-cookies", default=None,
              help="Mark the session cookie Secure (behind HTTPS; default from [serve]).")
def serve(obj, as_json, bind_host, port, secure_cookies):
    """Serve webhooks, the review pages, /healthz and /metrics until SIGTERM."""
    from .errors import ConfigError
    try:
        from .serve.server import run
    except ImportError as exc:
        raise ConfigError("missing_extra", f"signoff serve needs the serve extra "
                          f"(pip install 'signoff[serve]'): {exc}") from None
    summary = run(obj.home, host=bind_host, port=port, secure_cookies=secure_cookies)
    emit(summary, as_json, lambda s: f"serve stopped ({s['stopped']})")


@main.group()
def dlq():
    """Dead letters: list and replay."""


@command(dlq, "list")
def dlq_list(obj, as_json):
    """Deliveries and tasks whose retry budget was spent."""
    emit(obj.open().dead_letters(), as_json, lambda rows: table(rows, [
        "id", "kind", "ref", "step", "code", "attempts", "first_at", "last_at", "replayed"],
        short=("ref",)))


@command(dlq, "replay")
@click.argument("letter_id", type=click.IntRange(min=0, max=INT64_MAX))
def dlq_replay(obj, as_json, letter_id):
    """Queue a dead letter again with a fresh budget and the same keys."""
    emit(obj.open().replay(letter_id), as_json,
         lambda r: f"dead letter {r['id']} ({r['kind']} {r['ref']}) queued again")


# -- operator views ---------------------------------------------------------

@command(main)
@click.option("--limit", type=click.IntRange(min=1, max=INT64_MAX), default=None)
def audit(obj, as_json, limit):
    """The audit log: identifiers and codes, never content."""
    emit(obj.open().audit(limit=limit), as_json, lambda rows: table(rows, [
        "seq", "at", "monitor", "event_id", "task_key", "code"], short=("task_key",)))


@command(main)
def stats(obj, as_json):
    """Counts of states, leases, retries, uncertainty, dead letters and gaps."""
    from .timeline import render_stats
    emit(obj.open().stats(), as_json, render_stats)


@command(main)
@click.option("--interval", type=Seconds(min=0.1), default=1.0, show_default=True)
def watch(obj, as_json, interval):
    """A live view that refreshes until Ctrl-C (--json: one snapshot per line)."""
    from .watch import watch as run_watch
    run_watch(obj.open(), interval, as_json)


@command(main)
@click.option("--keep", type=click.Path(file_okay=False), default=None,
              help="Run in this folder (kept) instead of a temporary one.")
def demo(obj, as_json, keep):
    """The whole story in a fresh home, with a real worker killed and restarted."""
    from .demo import run_demo
    report = run_demo(keep, as_json)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
    sys.exit(0 if report["passed"] else 1)


@command(main)
@click.option("--events", "n_events", type=click.IntRange(min=1), default=2000, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--growth", is_flag=True, help="Also measure ingest with 100,000 finished tasks present.")
@click.option("--http", is_flag=True, help="Measure `signoff serve` webhook ingest against a bare endpoint.")
def bench(obj, as_json, n_events, workers, growth, http):
    """Measure signoff against plain Huey on this machine, in one run."""
    if http:
        from click.core import ParameterSource
        from .serve.bench_http import EVENTS, run_http_bench
        given = click.get_current_context().get_parameter_source("n_events") != ParameterSource.DEFAULT
        report = run_http_bench(events=n_events if given else EVENTS, as_json=as_json)
        if as_json:
            click.echo(json.dumps(report, ensure_ascii=False, indent=2))
        return
    from .bench import run_bench
    report = run_bench(n_events=n_events, workers=workers, growth=growth, as_json=as_json)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
