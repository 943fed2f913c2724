"""The ``signoff`` command line (every command in docs/cli.md): parse, call one function, print.

This module is the root group; the commands and what they share are the
modules of ``commands/``:

- ``plumbing``: what every command shares: the ``command`` decorator (``--json``,
  one-line refusals), options from ``SIGNOFF_*`` variables and those that are
  command-line only, the parameter types, the listings' ``--limit`` and
  ``--all``, and ``Ctx``, the home opened on use;
- ``logs``: the warning lines of every command and the log lines of ``worker``
  and ``serve``, set per invocation; ``libraries``: Peewee and Huey imported as
  the home needs them, when the command owns its process;
- ``output``, ``render``, ``watch``: how it prints (tables and JSON, tasks and
  stats for people, the live view);
- the commands, a module per section of docs/cli.md: ``setup`` (``init``,
  ``host``), ``monitors``, ``events`` (``enqueue``, ``worker``, ``events``,
  ``dlq``), ``tasks`` (``tasks``, ``approve``, ``reject``, ``policy``),
  ``watching`` (``stats``, ``healthcheck``, ``watch``, ``gaps``,
  ``subscriptions``, ``purge``), ``auditing`` (``audit`` and its ``key``,
  ``export``, ``verify``) and ``serving`` (``serve``, ``reviewer``,
  ``mcp``, ``demo``).

``main`` is the root group; ``signoff.__main__`` runs it in a process of its own.
"""

import logging

import click

from .commands import auditing, events, monitors, serving, setup, tasks, watching
from .commands.libraries import import_libraries
from .commands.logs import LOG_LEVELS, WARNING_LOGGERS, warning_lines
from .commands.plumbing import ENV_PREFIX, Ctx, JsonAwareGroup, Launch, Seconds, Within
from .commands.watching import AUDIT_COLUMNS

__all__ = ["main", "Launch", "Seconds", "Within", "AUDIT_COLUMNS", "WARNING_LOGGERS"]


def _home_option(ctx, param, value):
    if value is not None and not value.strip():
        raise click.BadParameter("must name a folder (an empty path is not the default home)")
    return value


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
    launch = ctx.obj if isinstance(ctx.obj, Launch) else Launch()  # main(obj=Launch(...))
    if launch.own_process:
        import_libraries(home)
    ctx.obj = Ctx(home, launch, logging.getLevelName(log_level.upper()))
    ctx.with_resource(warning_lines(ctx.obj.log_level))
    from . import tracing
    tracing.start()  # when the OTEL_* variables ask for traces


for _module in (setup, monitors, events, tasks, watching, auditing, serving):
    for _command in _module.COMMANDS:
        main.add_command(_command)
