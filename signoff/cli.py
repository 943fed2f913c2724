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
- the commands, a module per section of docs/cli.md, each imported only when one of
  its commands runs (``_COMMANDS`` below): ``setup`` (``init``,
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

from .commands.libraries import import_libraries
from .commands.logs import LOG_LEVELS, WARNING_LOGGERS, warning_lines
from .commands.plumbing import ENV_PREFIX, Ctx, JsonAwareGroup, Launch, Seconds, Within

__all__ = ["main", "Launch", "Seconds", "Within", "AUDIT_COLUMNS", "WARNING_LOGGERS"]

# Every command: where it lives and its short help (the first sentence of its
# docstring; tests/unit/test_docs.py checks they agree). A command's module is
# imported only when that command runs (``JsonAwareGroup``).
_COMMANDS = {
    "init": ("setup:init", "Create the home, its config and databases (idempotent; never resets data)."),
    "host": ("setup:host", "Drive the reference host (records, materials, grant, faults, results)."),
    "monitor": ("monitors:monitor", "Bind, pause, unpause, cancel and list monitors."),
    "enqueue": ("events:enqueue", "Accept events: JSON Lines from FILE or standard input (-)."),
    "worker": ("events:worker", "Run the worker until SIGTERM/SIGINT (or, with --drain, until idle)."),
    "events": ("events:events", "Deliveries and what became of them, newest first "
                                "(`events retry ID`: hurry one)."),
    "dlq": ("events:dlq", "Dead letters: list and replay."),
    "tasks": ("tasks:tasks", "List, show and retry tasks."),
    "approve": ("tasks:approve", "Approve a ready task (KEY or a unique prefix) whose result "
                                 "has DIGEST."),
    "reject": ("tasks:reject", "Reject a ready task (signed with --sign-with KEYFILE --as NAME: "
                               "as reviewer NAME)."),
    "policy": ("tasks:policy", "Standing approval policies: add, list, revoke."),
    "stats": ("watching:stats", "Counts of states, leases, retries, uncertainty, dead letters "
                                "and gaps."),
    "healthcheck": ("watching:healthcheck", "Exit 0 when the database and queue answer, the "
                                            "schema is current and a worker is live."),
    "watch": ("watching:watch", "A live view that refreshes until Ctrl-C (--json: one JSON "
                                "snapshot per line)."),
    "gaps": ("watching:gaps", "What was not observed: resume gaps and stale events."),
    "subscriptions": ("watching:subscriptions", "MCP Events subscriptions of monitors: state, "
                                                "expiry, last delivery (never the secret)."),
    "purge": ("watching:purge", "Drop the record snapshot and result of finished tasks past "
                                "retention."),
    "audit": ("auditing:audit", "The audit log, newest first: identifiers and codes, never "
                                "content."),
    "serve": ("serving:serve", "Serve webhooks, the review pages, /healthz and /metrics until "
                               "SIGTERM."),
    "reviewer": ("serving:reviewer", "People who may use the review pages of `signoff serve`."),
    "mcp": ("serving:mcp_agents", "Serve signoff to agents over MCP stdio: report_event, list_tasks, "
                           "show_task."),
    "demo": ("serving:demo", "The whole story in a fresh home, with a real worker killed and "
                             "restarted."),
}


def _home_option(ctx, param, value):
    if value is not None and not value.strip():
        raise click.BadParameter("must name a folder (an empty path is not the default home)")
    return value


@click.group(cls=JsonAwareGroup, context_settings={"auto_envvar_prefix": ENV_PREFIX},
             lazy_commands={name: (f"{__package__}.commands.{path}", short)
                            for name, (path, short) in _COMMANDS.items()})
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


def __getattr__(name):
    # Re-exported on first use: importing it would import the ``stats`` family's module.
    if name == "AUDIT_COLUMNS":
        from .commands.watching import AUDIT_COLUMNS
        return AUDIT_COLUMNS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
