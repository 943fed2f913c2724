"""signoff: a durable background worker for human-approved, exactly-once actions.

The map, from the faces down (each layer imports only the layers below it):

- faces: ``cli`` (the ``signoff`` command; its commands, plumbing and printing in ``commands/``),
  ``worker`` (running the consumer), ``serve/`` (webhooks, review pages,
  metrics over HTTP), ``mcp/`` (signoff's MCP servers and client session),
  ``demo/`` (the story, end to end);
- ``app``: ``Signoff``, one home opened for use; the one door every face uses;
- ``ops/``: what people, operators and scripts do (intake, approval, redraft,
  policies, monitors, gaps, dead letters, retention, notifications, secrets,
  reviewers, health checks, the read-only views);
- ``steps/``: what a worker does with the rows it claims (ingest, submit,
  the reaper, record batches); ``tasks``: the Huey tasks that wake it;
- ``state/``: the life cycles (the one place a status is written), leases and
  worker heartbeats;
- ``models``: the Peewee models, every durable fact;
- ``storage/``: the backend seam (SQLite, PostgreSQL, the queues);
- ``rules/``: pure decisions (digests, event validation, the gate, retries);
- plug-ins: ``hosts/`` (the systems signoff acts on) and ``drafters/``;
- ``config``, ``errors``, ``clock``: settings, exceptions and time; ``tracing``:
  OpenTelemetry spans (the one module that imports it).
"""


# The public API (docs/api.md): the home, and the exceptions it raises and that
# plug-ins raise to it.
__all__ = ["Signoff", "SignoffError", "Refused", "Blocked", "AttemptFailed", "ConfigError",
           "NoHome", "StorageError"]


def __getattr__(name):
    # Imported on first use: the ``signoff`` command imports Peewee and Huey only
    # once it knows what its home needs of them (``commands.libraries``).
    if name == "Signoff":
        from .app import Signoff
        return Signoff
    if name in __all__:
        from . import errors
        return getattr(errors, name)
    raise AttributeError(f"module 'signoff' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})
