"""signoff: a durable background worker for human-approved, exactly-once actions.

The map, from the faces down (each layer imports only the layers below it, and
nothing imports in a circle: ``lint-imports`` checks both, with the contracts in
``pyproject.toml``):

- faces: ``cli`` (the ``signoff`` command; its commands, plumbing and printing in
  ``commands/``),
  ``demo/`` (the story, end to end), ``testing`` (an in-memory host and a
  ready home for users' tests), ``worker`` (running the consumer and the
  chores), ``serve/`` (webhooks, review pages, the JSON API, metrics over HTTP;
  ``serve.site``: ``Site``, the home as ``serve`` opens it),
  ``mcp/`` (signoff's own MCP servers);
- ``app``: ``Signoff``, one home opened for use; the public Python API, the door
  every face uses;
- ``engine``: ``Engine``, a home's worker side (the batches its Huey tasks run,
  the reaper, the subscription pass);
- the rooms of what people, operators and the fleet do: ``intake/`` (events
  arriving), ``decisions/`` (approve, edit, reject, cancel, retry, redraft,
  policies), ``views/`` (what every face shows), ``admin/`` (monitors, gaps,
  subscriptions, reviewers, secrets, the audit's export), ``chores/``
  (background jobs: the notify outbox and its email, reminders and escalation,
  retention, the audit's checkpoints);
- ``steps/``: what a worker does with the rows it claims (claiming, ingest,
  submit, the reaper, record batches); ``tasks``: the Huey tasks that wake it,
  and when wake-ups are sent;
- ``state/``: the life cycles (the one place a status is written), leases and
  worker heartbeats;
- ``models``: the Peewee models, every durable fact;
- ``storage/``: the backend seam (SQLite, PostgreSQL, the queues);
- plug-ins: ``hosts/`` (the systems signoff acts on; ``hosts.mcp`` with its MCP
  client) and ``drafters/``;
- ``config``, ``rules/`` (pure decisions: digests, event validation, the gate,
  retries, names, hidden characters, signatures, the audit's chain and its
  offline check), ``tracing`` (OpenTelemetry
  spans, the one module that imports it), ``clock``; ``errors`` at the bottom.
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
