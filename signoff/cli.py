"""The ``signoff`` command line (every command in docs/cli.md): parse, call one function, print."""

import contextlib
import functools
import itertools
import json
import logging
import math
import os
import signal
import sys

import click

from .errors import Refused, SignoffError
from .commands.output import emit, fail, fmt, safe, stream, table
from .config import LEASE_S, PURGE_DAYS, WORKERS
from .state.statuses import TaskStatus as T


INT64_MAX = 2**63 - 1
INT64 = click.IntRange(-INT64_MAX - 1, INT64_MAX)  # what every database column can hold


class Seconds(click.ParamType):
    """A finite duration (``inf`` and ``nan`` are not durations), in seconds unless ``unit`` says."""

    name = "seconds"

    def __init__(self, min=None, unit="seconds"):
        self.number = click.FLOAT if min is None else click.FloatRange(min=min)
        self.name = unit

    def convert(self, value, param, ctx):
        rv = self.number.convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number of {self.name}", param, ctx)
        return rv


SECONDS = Seconds()


class Within(click.ParamType):
    """A number within a ``config.Range``: the command line takes what signoff.toml
    takes for the same setting, and a value outside is a usage error naming the range."""

    def __init__(self, allowed, unit="seconds", integer=False):
        self.allowed = allowed
        self.number = click.INT if integer else click.FLOAT
        self.name = unit

    def convert(self, value, param, ctx):
        rv = self.number.convert(value, param, ctx)
        if not self.allowed.holds(rv):
            self.fail(f"{value} is not a number of {self.name} {self.allowed}", param, ctx)
        return rv


class Ctx:
    """What every command needs: the home, opened only when a command uses it."""

    def __init__(self, home):
        self.home = home
        self.database = None  # once opened: named in a database error's message

    def open(self):
        """The home as a ``Signoff`` (refuses with ``no_home`` if it is missing)."""
        from .app import Signoff
        rt = Signoff(self.home)
        click.get_current_context().call_on_close(rt.close)
        self.database = rt.database
        return rt

    def reference_host(self):
        """The reference host of an existing home."""
        from .config import load_config, resolve_home
        from .hosts.reference import ReferenceHost
        home = resolve_home(self.home)
        load_config(home)  # refuses with no_home before creating any file
        return ReferenceHost(home)


def command(group, name=None, json_help="Print one JSON document.", **kwargs):
    """A subcommand with ``--json``; refusals and failures exit 1 with one line, no traceback."""
    def wrap(f):
        @group.command(name, **kwargs)
        # Named "json", so that its variable is SIGNOFF_<COMMAND>_JSON.
        @click.option("--json", is_flag=True, help=json_help)
        @click.pass_obj
        @functools.wraps(f)
        def run(obj, **params):
            as_json = params.pop("json")
            try:
                return f(obj, as_json, **params)
            except SignoffError as exc:
                fail(exc.code, exc.message, as_json)
            except (click.exceptions.ClickException, click.exceptions.Abort,
                    click.exceptions.Exit, BrokenPipeError):
                raise  # usage errors (exit 2), Ctrl-C and closed pipes are click's to report
            except OSError as exc:
                # e.g. a home or config path that is a folder, or not readable
                fail("os_error", _os_message(exc), as_json)
            except Exception as exc:
                # One line, never a traceback: the command failed (exit 1).
                from peewee import DatabaseError
                if isinstance(exc, DatabaseError):
                    from .storage import describe
                    fail(*describe(exc, obj.database), as_json)
                fail("internal_error", f"{type(exc).__name__}: {exc}", as_json)
        return run
    return wrap


ENV_NOTE = " Command line only: never read from a SIGNOFF_* variable."


def command_line_only(*names, **kwargs):
    """A ``click.option`` never read from the environment, and whose help says so.

    For options that change what is approved or who may approve: a variable left
    in a shell or a unit file must never approve, edit, acknowledge, grant or sign
    anything by itself (docs/cli.md, "Options from the environment"); and for the
    demo's folder, which no variable may point at a real home.
    """
    kwargs["help"] = (kwargs.get("help") or "").rstrip() + ENV_NOTE
    return click.option(*names, allow_from_autoenv=False, **kwargs)


def by_option(f):
    """``--by WORD``: a note kept with a decision; the identity is the OS account."""
    return command_line_only("--by", default=None,
                    help="A note kept with the decision and shown beside it (1-128 "
                         "characters, nothing hidden). Not an identity: the decision is "
                         "counted as operator:<your OS account>.")(f)


def _os_message(exc):
    """An operating-system failure in words: what failed, on which path."""
    what = exc.strerror or "the operating system refused"
    where = f": {exc.filename}" if exc.filename else ""
    return f"{what}{where}"


class JsonUsageError(click.UsageError):
    """A usage error reported as ``{"error": "usage", "message": ...}`` on stdout."""

    def __init__(self, original):
        super().__init__(original.format_message(), original.ctx)

    def show(self, file=None):
        click.echo(json.dumps({"error": "usage", "message": self.message}, ensure_ascii=False))


ENV_PREFIX = "SIGNOFF"


class EnvCommand(click.Command):
    """A command whose every option can also come from the environment.

    The variable is click's ``auto_envvar_prefix`` name (``SIGNOFF_`` + the
    command path + the option's parameter name), shown in ``--help``; a flag on
    the command line wins. A bad value read from a variable is a usage error
    that names the variable, since the command line shows no such value.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, click.Option) and param.allow_from_autoenv:
                param.show_envvar = True

    def get_help_option(self, ctx):
        """``--help``, never read from the environment (``SIGNOFF_HELP`` is no request)."""
        option = super().get_help_option(ctx)
        if option is not None:
            option.allow_from_autoenv = False
        return option

    def make_context(self, info_name, args, parent=None, **extra):
        given = list(args)
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.BadParameter as exc:
            variable = env_source(exc.ctx, exc.param, given)
            if variable is not None and exc.param_hint is None:
                exc.param_hint = f"{exc.param.get_error_hint(exc.ctx)} (from {variable})"
            raise


def env_source(ctx, param, args):
    """The variable that gave ``param`` its value, or ``None`` when ``args`` gave it.

    click reads the environment only for an option the command line lacks.
    """
    if ctx is None or not isinstance(param, click.Option) or not param.allow_from_autoenv:
        return None
    names = param.opts + param.secondary_opts
    if any(a == n or a.startswith(n + "=") for a in args for n in names):
        return None
    variable = param.envvar or f"{ctx.auto_envvar_prefix}_{param.name.upper()}"
    return variable if os.environ.get(variable) else None


class EnvGroup(EnvCommand, click.Group):
    """A group of ``EnvCommand`` commands and groups like itself."""

    command_class = EnvCommand
    group_class = type


class JsonAwareGroup(EnvGroup):
    """The root group: under ``--json``, usage errors (exit 2) are JSON too.

    click raises them while parsing each level (``make_context``) and while
    resolving and running subcommands (``invoke``); both pass through here.
    """

    def make_context(self, info_name, args, parent=None, **extra):
        self._json_wanted = "--json" in args
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise self._converted(exc) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise self._converted(exc) from None

    group_class = EnvGroup

    def _converted(self, exc):
        if getattr(self, "_json_wanted", False) and not isinstance(exc, JsonUsageError):
            return JsonUsageError(exc)
        return exc


def _home_option(ctx, param, value):
    if value is not None and not value.strip():
        raise click.BadParameter("must name a folder (an empty path is not the default home)")
    return value


LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
# Loggers whose warnings every command prints as one ``warning: CODE: ...`` line: a
# wake-up that cannot be sent after a commit, tracing asked for that cannot run. The
# answers stand; the line tells the operator.
WARNING_LOGGERS = ("signoff.wakeups", "signoff.tracing")


@click.group(cls=JsonAwareGroup, context_settings={"auto_envvar_prefix": ENV_PREFIX})
@click.option("--home", type=click.Path(file_okay=False), default=None, callback=_home_option,
              help="signoff home folder (default: ./.signoff).")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False),
              default="info", show_default=True,
              help="Least severe line logged on stderr: the lines of worker and serve, "
                   "and every command's warning lines (error: none).")
@click.version_option(package_name="signoff", allow_from_autoenv=False)
@click.pass_context
def main(ctx, home, log_level):
    """signoff: durable, human-approved, exactly-once actions on change events."""
    ctx.obj = Ctx(home)
    ctx.obj.log_level = logging.getLevelName(log_level.upper())
    ctx.with_resource(_warning_lines(ctx.obj.log_level))
    from . import tracing
    tracing.start()  # when the OTEL_* variables ask for traces


class _WarningLine(logging.Handler):
    """Prints a warning as one ``warning: CODE: ...`` line on stderr."""

    def emit(self, record):
        click.echo(f"warning: {record.getMessage()}", err=True)


@contextlib.contextmanager
def _warning_lines(level):
    """The warning lines for one invocation, taken away when it ends.

    Set per invocation, not per process: an invocation in a process that runs
    several (a test's CliRunner, an embedding program) neither stacks handlers
    nor leaves its level or its lines behind for the next one or the Python API.
    """
    handler = _WarningLine(max(level, logging.WARNING))
    loggers = [logging.getLogger(name) for name in WARNING_LOGGERS]
    saved = [logger.propagate for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.propagate = False  # printed here, not again by a root handler
    try:
        yield
    finally:
        for logger, propagate in zip(loggers, saved):
            logger.removeHandler(handler)
            logger.propagate = propagate


@contextlib.contextmanager
def _log_lines(level):
    """Log lines of the running process (worker, serve) on stderr, for this invocation."""
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.addFilter(_without_sql_parameters)
    saved = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved)


def _without_sql_parameters(record):
    """Keep a statement peewee logs (at debug, as ``(sql, params)``) and drop its
    parameters: they are the values stored, record text and drafts among them."""
    if record.name == "peewee" and isinstance(record.msg, tuple) and len(record.msg) == 2:
        record.msg, record.args = str(record.msg[0]), ()
    return True


@command(main)
def init(obj, as_json):
    """Create the home, its config and databases (idempotent; never resets data)."""
    from .app import Signoff
    rt = Signoff.init(obj.home)
    click.get_current_context().call_on_close(rt.close)
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
    """Insert or update a record; options not given keep their value.

    A new record is published as `comment.created` when `host mcp --events` serves this home.
    """
    from .hosts.reference import EVENTS_FILENAME
    reference = obj.reference_host()
    new = not reference.has_record(record_id)
    record = reference.put_record(record_id, **changes)
    store = reference.path.parent / EVENTS_FILENAME
    if new and store.exists():
        _mcp_module("hostserver").publish_created(store, record)
    emit(record, as_json)


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
    """Arm a fault (read-timeout, lose-ack, bad-receipt, crash-after-write), or `clear` them all."""
    ref = obj.reference_host()
    faults = ref.clear_faults() if name == "clear" else ref.set_fault(name, times)
    emit({"faults": faults}, as_json)


@command(host, "results")
def host_results(obj, as_json):
    """Results written to the reference host."""
    emit(obj.reference_host().results(), as_json,
         lambda rows: table([{"key": r["key"], "result": r["result"]} for r in rows],
                            ["key", "result"]))


@command(host, "mcp")
@click.option("--http", "over_http", is_flag=True,
              help="Serve streamable HTTP on 127.0.0.1 instead of stdio.")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=0, show_default=True,
              help="With --http (0: a free port; the URL is printed as JSON).")
@click.option("--events", is_flag=True,
              help="With --http: offer MCP Events (comment.created, published by `host record`).")
@click.option("--loopback-callbacks", is_flag=True,
              help="With --events: deliver only to this machine, plain http allowed (tests, demo).")
def host_mcp(obj, as_json, over_http, port, events, loopback_callbacks):
    """Serve the reference host as an MCP server (for `signoff.hosts.mcp:McpHost`)."""
    if (events or loopback_callbacks or port) and not over_http:
        raise click.UsageError("--port, --events and --loopback-callbacks need --http")
    if loopback_callbacks and not events:
        raise click.UsageError("--loopback-callbacks needs --events")
    reference = obj.reference_host()  # no home: refused before the SDK is imported
    server = _mcp_module("hostserver")
    if over_http:
        server.serve_http(reference, reference.path.parent, port, events, loopback_callbacks)
    else:
        server.serve(reference)


def _serve_module():
    """``signoff.serve.server``, or a one-line refusal when the ``serve`` extra is missing."""
    from .errors import ConfigError
    try:
        from .serve import server
    except ImportError as exc:
        raise ConfigError("missing_extra", f"signoff serve needs the serve extra "
                          f"(pip install 'signoff[serve]'): {exc}") from None
    return server


def _mcp_module(name):
    """``signoff.mcp.NAME``, or a one-line refusal when the ``mcp`` extra is missing."""
    import importlib
    from .errors import ConfigError
    try:
        return importlib.import_module(f"signoff.mcp.{name}")
    except ImportError as exc:
        raise ConfigError("missing_extra", f"install signoff[mcp] for MCP: {exc}") from None


# -- monitors --------------------------------------------------------------

@main.group()
def monitor():
    """Bind, pause, unpause, cancel and list monitors."""


MONITOR_COLUMNS = ["id", "document", "event_names", "active", "paused", "expires_at", "window_s",
                   "grant_digest"]
@command(monitor, "bind")
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
def monitor_bind(obj, as_json, monitor_id, document, events, ttl, window, approval_ttl,
                 batch_window, approvals):
    """Bind a monitor from the host's current grant (subscribing it when the host offers events)."""
    m = obj.open().bind(document, monitor_id, event_names=list(events) or None,
                        ttl_s=ttl, window_s=window, approval_ttl_s=approval_ttl,
                        batch_window_s=batch_window, approvals=approvals)
    emit(m, as_json, lambda m: table([m], MONITOR_COLUMNS, short=("grant_digest",)))


@command(monitor, "cancel")
@click.argument("monitor_id")
@by_option
def monitor_cancel(obj, as_json, monitor_id, by):
    """Cancel a monitor: stop intake and end its open tasks."""
    m = obj.open().cancel(monitor_id, by=by)
    emit(m, as_json, lambda m: f"monitor {m['id']} cancelled; {m['tasks_cancelled']} open task(s) "
         f"cancelled, {m['writes_in_flight']} with a write in flight "
         "(done if its receipt confirms)")


@command(monitor, "pause")
@click.argument("monitor_id")
@by_option
def monitor_pause(obj, as_json, monitor_id, by):
    """Hold a monitor's new events (still accepted) without ending it; approved tasks still submit."""
    m = obj.open().pause(monitor_id, by=by, channel="cli")
    emit(m, as_json, lambda m: f"monitor {m['id']} paused: its events are accepted and wait")


@command(monitor, "unpause")
@click.argument("monitor_id")
@by_option
def monitor_unpause(obj, as_json, monitor_id, by):
    """Process a paused monitor's events again, those that waited first."""
    m = obj.open().unpause(monitor_id, by=by, channel="cli")
    emit(m, as_json, lambda m: f"monitor {m['id']} unpaused")


@command(monitor, "resume")
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
@command_line_only("--secret", default=None,
          help="whsec_<base64 of 24-64 bytes>, or - to read it from stdin (default: a new one).")
@by_option
def monitor_secret_add(obj, as_json, monitor_id, secret, by):
    """Add a secret; it is printed this once and never shown again."""
    if secret == "-":
        secret = sys.stdin.readline().strip()
    emit(obj.open().add_secret(monitor_id, secret, by=by), as_json,
         lambda r: f"secret {r['secret_id']} for monitor {r['monitor']} (shown once): {r['secret']}")


@command(monitor_secret, "list")
@click.argument("monitor_id")
def monitor_secret_list(obj, as_json, monitor_id):
    """The monitor's secret ids and when they were added (never the secrets)."""
    emit(obj.open().monitor_secrets(monitor_id), as_json,
         lambda rows: table(rows, ["secret_id", "created_at"]))


@command(monitor_secret, "remove")
@click.argument("monitor_id")
@click.argument("secret_id", type=click.IntRange(min=0, max=INT64_MAX))
@by_option
def monitor_secret_remove(obj, as_json, monitor_id, secret_id, by):
    """Remove a secret (effective for the next request)."""
    emit(obj.open().remove_secret(monitor_id, secret_id, by=by), as_json,
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


@command(main)
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
    from .worker import run
    click.get_current_context().with_resource(_log_lines(obj.log_level))
    summary = run(obj.home, workers=workers, drain=drain, lease_ttl=lease_ttl,
                  drain_wait=drain_wait)
    emit(summary, as_json, _stopped_line)


def _stopped_line(summary):
    left = summary.get("left_waiting") or {}
    waiting = "" if not (left.get("deliveries") or left.get("tasks")) else (
        f"; left waiting: {left['deliveries']} delivery and {left['tasks']} task "
        f"retries, the first due at {fmt(left['next_due_at'])} UTC")
    return f"worker stopped: {summary['stopped']} after {summary['seconds']}s{waiting}"


DEFAULT_LIMIT = 50
KEY_HINT = ("KEY: the key column, or any unique prefix of 8+ characters; DIGEST: "
            "`signoff tasks show KEY` prints it")


def statuses(kind):
    """Every delivery or task status, sorted: the ``--status`` choices."""
    from .state.statuses import DELIVERY_EDGES, TASK_EDGES
    edges = DELIVERY_EDGES if kind == "delivery" else TASK_EDGES
    return sorted({str(getattr(status, "value", status)) for edge in edges for status in edge})


def bounded(f):
    """``--limit`` (default 50) and ``--all`` for a listing; passes ``limit`` (None = all)."""
    @click.option("--limit", type=click.IntRange(min=1, max=INT64_MAX), default=None,
                  help=f"Show at most this many, newest first (default {DEFAULT_LIMIT}).")
    @click.option("--all", "show_all", is_flag=True,
                  help="Show every row, streamed (constant memory).")
    @functools.wraps(f)
    def run(obj, as_json, limit, show_all, **params):
        if show_all and limit is not None:
            raise click.UsageError("--limit and --all exclude each other")
        return f(obj, as_json, limit=None if show_all else (limit or DEFAULT_LIMIT), **params)
    return run


def _listing(obj, as_json, name, limit, columns, status=None, short=(), hint=None):
    rows, more = obj.open().listing(name, status=status, limit=limit)
    stream(rows, more, as_json, columns, short=short, hint=hint)


@command(main, cls=EnvGroup, invoke_without_command=True)
@click.option("--status", type=click.Choice(statuses("delivery")), default=None)
@bounded
def events(obj, as_json, status, limit):
    """Deliveries and what became of them, newest first (`events retry ID`: hurry one)."""
    ctx = click.get_current_context()
    if ctx.invoked_subcommand is not None:
        _listing_options_alone(ctx)
        return
    _listing(obj, as_json, "events", limit, [
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


@command(events, "retry")
@click.argument("delivery_id", metavar="ID", type=click.IntRange(min=0, max=INT64_MAX))
@by_option
def events_retry(obj, as_json, delivery_id, by):
    """Make a retrying delivery due now (ID: the delivery column of `signoff events`)."""
    emit(obj.open().retry_delivery(delivery_id, by=by, channel="cli"), as_json,
         lambda d: f"delivery {d['delivery']}: {d['status']}, due now ({d['last_code']})")


@command(main, "mcp")
@click.option("--monitor", "monitor_id", required=True, help="The monitor events are reported to.")
def mcp_agents(obj, as_json, monitor_id):
    """Serve signoff to agents over MCP stdio: report_event, list_tasks, show_task.

    There is no tool that approves, rejects or cancels: approval stays with people.
    """
    rt = obj.open()  # no home: refused before the SDK is imported
    _mcp_module("agents").serve(rt, monitor_id)


# -- tasks and the human channel -------------------------------------------------

@main.group()
def tasks():
    """List, show and retry tasks."""


TASK_COLUMNS = ["key", "monitor", "record_id", "version", "status", "code",
                "outcome_unknown", "needs_answers", "attempts", "updated_at"]


@command(tasks, "list")
@click.option("--status", type=click.Choice(statuses("task")), default=None)
@bounded
def tasks_list(obj, as_json, status, limit):
    """List tasks, newest first, optionally of one status."""
    _listing(obj, as_json, "tasks", limit, TASK_COLUMNS, status=status, hint=KEY_HINT)


@command(tasks, "show")
@click.argument("key")
def tasks_show(obj, as_json, key):
    """One task (KEY or a unique prefix) with its record, result, digests and history."""
    from .commands.render import render_task
    emit(obj.open().task(key), as_json, render_task)


@command(tasks, "retry")
@click.argument("key")
@by_option
def tasks_retry(obj, as_json, key, by):
    """Queue a parked, approved or uncertain task again."""
    emit(obj.open().retry(key, by=by), as_json, lambda a: f"{a['key']}: {a['status']}, queued")


@command(tasks, "cancel")
@click.argument("key")
@by_option
def tasks_cancel(obj, as_json, key, by):
    """Cancel one ready, approved or uncertain task (uncertain ones end outcome unknown)."""
    emit(obj.open().cancel_task(key, by=by, channel="cli"), as_json,
         lambda a: f"{a['key']}: {a['status']}"
                   + (", outcome unknown: the host may have written it" if a["outcome_unknown"] else ""))


@command(tasks, "redraft")
@click.argument("key")
@by_option
def tasks_redraft(obj, as_json, key, by):
    """Re-read the record and material and draft a ready or blocked task again."""
    from .commands.render import render_redraft
    emit(obj.open().redraft(key, by=by), as_json, render_redraft)


@command(main)
@click.argument("key")
@command_line_only("--digest", required=True, help="Digest of the result you reviewed.")
@by_option
@command_line_only("--edit", "edit_file", type=click.File("rb"), default=None,
          help="A file (or -) holding the draft as you want it submitted; the approval "
               "binds the edited draft.")
@command_line_only("--ack-hidden-characters", is_flag=True,
          help="Approve a draft holding hidden characters (shown as <U+XXXX> by tasks show).")
def approve(obj, as_json, key, digest, by, edit_file, ack_hidden_characters):
    """Approve a ready task (KEY or a unique prefix) whose result has DIGEST.

    With a quorum (monitor bind --approvals N) the task is approved once N
    different people approved the same digest; until then it stays ready.
    """
    edit = None if edit_file is None else _edit_text(edit_file.read())
    emit(obj.open().approve(key, digest, by, edit=edit,
                            ack_hidden_characters=ack_hidden_characters),
         as_json, _approved_line)


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


@command(main)
@click.argument("key")
@click.option("--reason", default=None,
              help="Why (1-200 printable characters); kept and shown with the task.")
@by_option
def reject(obj, as_json, key, reason, by):
    """Reject a ready task."""
    emit(obj.open().reject(key, reason, by=by), as_json, lambda a: f"{a['key']}: {a['status']}")


@main.group()
def policy():
    """Standing approval policies: add, list, revoke."""


POLICY_COLUMNS = ["policy", "monitor", "active", "expires_at", "max_per_hour", "by", "approved",
                  "end_code", "digest"]


@command(policy, "add")
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


@command(policy, "list")
def policy_list(obj, as_json):
    """List policies."""
    emit(obj.open().policies(), as_json,
         lambda rows: table(rows, POLICY_COLUMNS, short=("digest",)))


@command(policy, "revoke")
@click.argument("policy_id", metavar="POLICY", type=click.IntRange(min=0, max=INT64_MAX))
@by_option
def policy_revoke(obj, as_json, policy_id, by):
    """End a policy; tasks it approved whose write has not started go back to ready."""
    emit(obj.open().revoke_policy(policy_id, by=by), as_json,
         lambda p: f"policy {p['policy']} ended ({p['end_code']}); "
                   f"{p['tasks_returned']} task(s) back to ready")


@main.group()
def reviewer():
    """People who may use the review pages of `signoff serve`."""


@command(reviewer, "add")
@click.argument("name")
@command_line_only("--read-only", is_flag=True, help="May look, may not approve or change anything.")
@command_line_only("--monitor", "monitors", multiple=True,
          help="Limit the reviewer to this monitor's tasks (repeatable; default: every monitor).")
@by_option
def reviewer_add(obj, as_json, name, read_only, monitors, by):
    """Create a reviewer; their login and API token is printed this once."""
    emit(obj.open().add_reviewer(name, read_only, monitors, by=by, channel="cli"), as_json,
         lambda r: f"reviewer {r['name']}{' (read-only)' if r['read_only'] else ''}, "
                   f"token (shown once): {r['token']}")


@command(reviewer, "remove")
@click.argument("name")
@by_option
def reviewer_remove(obj, as_json, name, by):
    """Delete a reviewer and end their sessions."""
    emit(obj.open().remove_reviewer(name, by=by), as_json,
         lambda r: f"reviewer {r['name']} removed; {r['sessions_ended']} session(s) ended")


@command(reviewer, "list")
def reviewer_list(obj, as_json):
    """Reviewers (never their tokens)."""
    emit(obj.open().reviewers(), as_json,
         lambda rows: table(rows, ["name", "read_only", "monitors", "created_at"]))


@command(main)
@click.option("--host", "bind_host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8080, show_default=True)
@click.option("--secure-cookies/--no-secure-cookies", default=None,
              help="Mark the session cookie Secure (behind HTTPS; default from [serve]).")
@click.option("--access-log", is_flag=True, help="Log one line per request on stderr.")
def serve(obj, as_json, bind_host, port, secure_cookies, access_log):
    """Serve webhooks, the review pages, /healthz and /metrics until SIGTERM."""
    click.get_current_context().with_resource(_log_lines(obj.log_level))
    summary = _serve_module().run(obj.home, host=bind_host, port=port,
                                  secure_cookies=secure_cookies, access_log=access_log)
    emit(summary, as_json, lambda s: f"serve stopped ({s['stopped']})")


@main.group()
def dlq():
    """Dead letters: list and replay."""


@command(dlq, "list")
@bounded
def dlq_list(obj, as_json, limit):
    """Deliveries and tasks whose retry budget was spent, newest first."""
    _listing(obj, as_json, "dead_letters", limit, [
        "id", "kind", "ref", "step", "code", "attempts", "first_at", "last_at", "replayed",
        "reason"], short=("ref",))


@command(dlq, "replay")
@click.argument("letter_id", type=click.IntRange(min=0, max=INT64_MAX))
@by_option
def dlq_replay(obj, as_json, letter_id, by):
    """Queue a dead letter again with a fresh budget and the same keys."""
    emit(obj.open().replay(letter_id, by=by), as_json,
         lambda r: f"dead letter {r['id']} ({r['kind']} {r['ref']}) queued again")


# -- operator views ---------------------------------------------------------

AUDIT_COLUMNS = ["seq", "at", "monitor", "event_id", "task_key", "code", "actor", "channel",
                 "note", "subject", "reviewer"]


@command(main)
@bounded
def audit(obj, as_json, limit):
    """The audit log, newest first: identifiers and codes, never content."""
    _listing(obj, as_json, "audit", limit, AUDIT_COLUMNS, short=("task_key",))


SUBSCRIPTION_COLUMNS = ["monitor", "event", "subscription_id", "state", "refresh_before",
                        "last_delivery_at"]


@command(main)
def subscriptions(obj, as_json):
    """MCP Events subscriptions of monitors: state, expiry, last delivery (never the secret)."""
    emit(obj.open().subscriptions(), as_json,
         lambda rows: table(rows, SUBSCRIPTION_COLUMNS))


@command(main)
def gaps(obj, as_json):
    """What was not observed: resume gaps and stale events."""
    from .commands.render import render_gaps
    emit(obj.open().gaps(), as_json, render_gaps)


@command(main)
def stats(obj, as_json):
    """Counts of states, leases, retries, uncertainty, dead letters and gaps."""
    from .commands.render import render_stats
    emit(obj.open().stats(), as_json, render_stats)


@command(main)
@click.option("--max-age", type=Seconds(min=0), default=30.0, show_default=True,
              help="Seconds: a worker that beat within them is live.")
def healthcheck(obj, as_json, max_age):
    """Exit 0 when the database and queue answer, the schema is current and a worker is live.

    No HTTP: for container HEALTHCHECKs, Kubernetes exec probes and systemd.
    Answers within a few seconds even when a server does not.
    """
    from .commands.render import render_health
    from .views.health import check, first_failure
    report = check(obj.home, max_age)
    emit(report, as_json, render_health)
    failed = first_failure(report)
    if failed is not None:
        if not as_json:
            click.echo(f"error: {failed[1]}: {failed[0]}: {safe(failed[2])}", err=True)
        sys.exit(1)


@command(main)
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


@command(main, json_help="Stream one JSON snapshot (as `stats --json`) per line, "
                         "every --interval, until Ctrl-C.")
@click.option("--interval", type=Seconds(min=0.1), default=1.0, show_default=True)
def watch(obj, as_json, interval):
    """A live view that refreshes until Ctrl-C (--json: one JSON snapshot per line)."""
    from .commands.watch import watch as run_watch
    run_watch(obj.open(), interval, as_json)


@command(main)
@command_line_only("--keep", type=click.Path(file_okay=False), default=None,
                   help="Run in this folder (kept) instead of a temporary one.")
@click.option("--mcp", "over_mcp", is_flag=True,
              help="Reach the host over MCP (`signoff host mcp`), and kill its server once.")
@click.option("--events", "pushed", is_flag=True,
              help="The host pushes events over MCP Events to `signoff serve` (needs the serve "
                   "and mcp extras); serve is killed once after a write.")
def demo(obj, as_json, keep, over_mcp, pushed):
    """The whole story in a fresh home, with a real worker killed and restarted.

    It ignores every SIGNOFF_* variable: it never reaches a configured home, database
    or queue.
    """
    from .demo import run_demo, run_sealed, sealed
    if over_mcp and pushed:
        raise click.UsageError("give at most one of --mcp and --events")
    if over_mcp or pushed:
        _mcp_module("session")  # a one-line refusal when the extra is missing
    if pushed:
        _serve_module()
    if not sealed():
        sys.exit(run_sealed(keep, as_json, mcp=over_mcp, events=pushed))
    report = run_demo(main, keep, as_json, mcp=over_mcp, events=pushed)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
    sys.exit(0 if report["passed"] else 1)
