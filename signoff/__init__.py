"""signoff: a durable background worker for human-approved, exactly-once actions.

The map, from the faces down (each layer imports only the layers below it):

- faces: ``cli`` (the ``signoff`` command; its printing in ``commands/``),
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

from .app import Signoff
from .errors import Blocked, Refused, SignoffError

__all__ = ["Signoff", "Blocked", "Refused", "SignoffError"]
