"""What a command logs, set for one invocation: warning lines for every command, and
the log lines of the running processes (``worker``, ``serve``)."""

import contextlib
import logging
import sys

import click

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
# Loggers whose warnings every command prints as one ``warning: CODE: ...`` line: a
# wake-up that cannot be sent after a commit, tracing asked for that cannot run. The
# answers stand; the line tells the operator.
WARNING_LOGGERS = ("signoff.wakeups", "signoff.tracing")


class _WarningLine(logging.Handler):
    """Prints a warning as one ``warning: CODE: ...`` line on stderr."""

    def emit(self, record):
        click.echo(f"warning: {record.getMessage()}", err=True)


@contextlib.contextmanager
def warning_lines(level):
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
def log_lines(level):
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
