"""What every command shares: the click plumbing.

``command`` makes a command with ``--json`` whose refusals and failures are one
line; ``EnvCommand`` and its groups read every option from a ``SIGNOFF_*``
variable unless ``command_line_only`` says otherwise; the parameter types keep
numbers in the ranges signoff.toml keeps them in; ``bounded`` and ``listing``
make the listings' ``--limit`` and ``--all``; ``Ctx`` is the home, opened only
when a command uses it.
"""

import functools
import importlib
import json
import logging
import math
import os
from dataclasses import dataclass

import click

from ..errors import ConfigError, SignoffError
from .output import fail, stream


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


class Status(click.Choice):
    """A delivery or task status (``--status``), as the life cycle names them.

    The names are read when first needed (a value to check, a ``--help`` to
    print): the life cycle imports the models, and with them Peewee, which the
    ``signoff`` command imports only once it knows its home (``libraries``).
    """

    def __init__(self, kind):
        self.kind = kind
        self.case_sensitive = True

    @functools.cached_property
    def choices(self):
        """Every status of ``kind`` (``delivery`` or ``task``), sorted."""
        from ..state.statuses import DELIVERY_EDGES, TASK_EDGES
        edges = DELIVERY_EDGES if self.kind == "delivery" else TASK_EDGES
        return tuple(sorted({str(getattr(status, "value", status))
                             for edge in edges for status in edge}))


@dataclass(frozen=True)
class Launch:
    """How the program that runs ``main`` wants it run: ``main(obj=Launch(...))``.

    ``own_process``: the command owns its process (``signoff.__main__``), so it
    imports Peewee and Huey as its home needs them (``libraries``); a program
    that calls ``main`` without it keeps its imports as they are.
    """

    own_process: bool = False


class Ctx:
    """What every command needs: the home, opened only when a command uses it."""

    def __init__(self, home, launch, log_level=logging.INFO):
        self.home = home
        self.launch = launch
        self.log_level = log_level
        self.database = None  # once opened: named in a database error's message

    def open(self):
        """The home as a ``Signoff`` (refuses with ``no_home`` if it is missing)."""
        from ..app import Signoff
        rt = Signoff(self.home)
        click.get_current_context().call_on_close(rt.close)
        self.database = rt.database
        return rt

    def reference_host(self):
        """The reference host of an existing home."""
        from ..config import load_config, resolve_home
        from ..hosts.reference import ReferenceHost
        home = resolve_home(self.home)
        load_config(home)  # refuses with no_home before creating any file
        return ReferenceHost(home)


def command(name=None, group=None, json_help="Print one JSON document.", **kwargs):
    """A command (of ``group``, if given) with ``--json``; refusals and failures exit 1
    with one line, no traceback."""
    kwargs.setdefault("cls", EnvCommand)
    make = click.command if group is None else group.command

    def wrap(f):
        @make(name, **kwargs)
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
                    from ..storage import describe
                    fail(*describe(exc, obj.database), as_json)
                fail("internal_error", f"{type(exc).__name__}: {exc}", as_json)
        return run
    return wrap


def group(name=None, **kwargs):
    """A group of commands (``command(group=...)``) and of groups like itself."""
    return click.group(name, cls=EnvGroup, **kwargs)


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


def sign_options(f):
    """``--sign-with KEYFILE --as NAME``: a decision signed with reviewer NAME's key."""
    f = command_line_only("--as", "signer", default=None,
                          help="The reviewer whose key signs; the decision counts as theirs.")(f)
    return command_line_only("--sign-with", type=click.File("rb"), default=None,
                             help="An unencrypted PKCS#8 PEM Ed25519 private key (openssl genpkey "
                                  "-algorithm ed25519) to sign the decision's statement with.")(f)


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

    Its commands are loaded lazily (click's LazyGroup pattern): ``lazy_commands``
    maps each name to ``(module:attribute, short help)``, and a command's module is
    imported only when that command is looked up, so a command's process imports
    none of the others' modules and ``--help`` none at all.
    """

    def __init__(self, *args, lazy_commands=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx, cmd_name):
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            module, _, attribute = self.lazy_commands[cmd_name][0].partition(":")
            loaded = getattr(importlib.import_module(module), attribute)
            self.add_command(loaded, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx, formatter):
        # Listed from the table, with click's own layout, so --help imports no command.
        listed = click.Group(commands=[click.Command(name, help=short)
                                       for name, (_, short) in self.lazy_commands.items()])
        listed.format_commands(ctx, formatter)

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

    def _converted(self, exc):
        if getattr(self, "_json_wanted", False) and not isinstance(exc, JsonUsageError):
            return JsonUsageError(exc)
        return exc


# -- listings: newest first, 50 rows unless --limit or --all says otherwise ----------

DEFAULT_LIMIT = 50
KEY_HINT = ("KEY: the key column, or any unique prefix of 8+ characters; DIGEST: "
            "`signoff tasks show KEY` prints it")


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


def listing(obj, as_json, name, limit, columns, status=None, short=(), hint=None):
    """Print the listing ``name`` of the home (``Signoff.listing``), streamed."""
    rows, more = obj.open().listing(name, status=status, limit=limit)
    stream(rows, more, as_json, columns, short=short, hint=hint)


# -- the extras: a one-line refusal when one a command needs is missing -------------

def serve_module():
    """``signoff.serve.server``, or a one-line refusal when the ``serve`` extra is missing."""
    try:
        from ..serve import server
    except ImportError as exc:
        raise ConfigError("missing_extra", f"signoff serve needs the serve extra "
                          f"(pip install 'signoff[serve]'): {exc}") from None
    return server


def mcp_module(name):
    """``signoff.mcp.NAME``, or a one-line refusal when the ``mcp`` extra is missing."""
    try:
        return importlib.import_module(f"signoff.mcp.{name}")
    except ImportError as exc:
        raise ConfigError("missing_extra", f"install signoff[mcp] for MCP: {exc}") from None
