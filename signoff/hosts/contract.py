"""The host contract in code: what every host answers, and what a host may add.

``Host`` is what a ``[host] factory`` must return (docs/plugins.md says what each
call answers and raises); each optional capability is a Protocol of its own,
named by a ``Capability``. signoff asks ``supports(host, capability)`` and
nothing else before it uses one, and ``check_host`` refuses, when a host is
loaded, an object that lacks a required call, naming what is missing.

The Protocols are for reading and for type checkers (a host need not inherit
from them): what signoff relies on at run time is ``check_host`` and
``supports``.
"""

import enum
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigError

Record = dict[str, Any]  # {id, document, version: int, tenant, status, kind, text, source}
Result = dict[str, Any]  # what a drafter made and a reviewer approved
Expected = Record | list[Record]  # the record a result was drafted from (a batch: its records)


@runtime_checkable
class Host(Protocol):
    """The calls every host answers.

    Transient failures raise ``TimeoutError`` or ``ConnectionError`` (retried
    within the budget); permanent ones raise ``signoff.Blocked(code)``.
    """

    def context(self) -> dict[str, Any]:
        """The current principal's grant: ``{tenant, user, docs, actions, revision}``."""

    def get(self, record_id: str) -> Record:
        """The authoritative record; ``Blocked("missing")`` or ``Blocked("access")``."""

    def read_material(self, document: str) -> dict[str, Any]:
        """The material a draft is made from: ``{document, source, ...}``."""

    def submit(self, key: str, expected: Expected, result: Result) -> None:
        """Write ``result`` once under the idempotency key ``key``.

        The same key with the same result again is not a second write; with
        another result it is ``Blocked("idempotency_conflict")``. A source that is
        no longer ``expected``, or no longer open, is ``Blocked("source_changed")``.
        """

    def receipt(self, key: str) -> Result | None:
        """The result stored under ``key``, or ``None``."""


@runtime_checkable
class GetMany(Protocol):
    """Optional: the records of a batch in one call."""

    def get_many(self, record_ids: list[str]) -> dict[str, Record]:
        """``{record_id: record}``; an id left out is asked again with ``get``."""


@runtime_checkable
class Receipts(Protocol):
    """Optional: the receipts of a batch in one call."""

    def receipts(self, keys: list[str]) -> dict[str, Result]:
        """``{key: result}``; a key left out holds none."""


@runtime_checkable
class SubmitMany(Protocol):
    """Optional: a batch written in one call (for a host that commits, one commit)."""

    def submit_many(self, items: list[tuple[str, Expected, Result]]) -> dict[str, str]:
        """Each ``(key, expected, result)`` written as ``submit`` would; ``{key: code}``
        for the items refused. A transient failure of the call fails every item."""


@runtime_checkable
class Changes(Protocol):
    """Optional: what changed in a document, for ``monitor resume --replay`` and lapses."""

    def changes(self, document: str, since: float) -> list[str]:
        """Ids of the records of ``document`` changed at or after ``since`` (Unix seconds)."""


@runtime_checkable
class Events(Protocol):
    """Optional: a host whose monitors subscribe to its MCP Events (``McpHost`` with
    ``events`` options); ``events_settings`` is ``None`` when they do not."""

    events_settings: Any

    def events_client(self) -> Any:
        """An ``EventsClient`` on the host's session."""


@runtime_checkable
class Closing(Protocol):
    """Optional: a host that holds connections, closed when signoff is done with it."""

    def close(self) -> None:
        """Release what the host holds."""


class Capability(enum.Enum):
    """An optional part of the contract, by the calls that make it up."""

    GET_MANY = ("get_many",)
    RECEIPTS = ("receipts",)
    SUBMIT_MANY = ("submit_many",)
    CHANGES = ("changes",)
    EVENTS = ("events_client",)
    CLOSE = ("close",)


REQUIRED = ("context", "get", "read_material", "submit", "receipt")
# Every call of the contract, required or not (tracing makes each a span).
CALLS = (*REQUIRED, "changes", "get_many", "receipts", "submit_many")


def covered(expected):
    """The records a result was drafted from: a batch's result covers several."""
    return expected if isinstance(expected, list) else [expected]


def verdict(held, expected, result, current):
    """What ``submit`` does with one item: ``write``, ``held`` (``held``, the result
    already stored under its key, is this one) or the refusal's code
    (``idempotency_conflict``, ``source_changed``); ``current``: ``{id: record}`` as
    the host holds the records now. For hosts to share the contract's rule."""
    if held is not None:
        return "held" if held == result else "idempotency_conflict"
    for record in covered(expected):
        now = current.get(record.get("id"))
        if now != record or now.get("status") != "open":
            return "source_changed"
    return "write"


def supports(host, capability):
    """True when ``host`` offers ``capability``: every call of it is there and callable.

    The one capability check: a wrapper that hands on its host's attributes
    (tracing's, a batch's reads) answers as its host does. Events also needs
    the host's ``events_settings``, which says its monitors subscribe.
    """
    if not all(callable(getattr(host, name, None)) for name in capability.value):
        return False
    return capability is not Capability.EVENTS or getattr(host, "events_settings", None) is not None


def missing_calls(host):
    """The required calls ``host`` lacks (not there, or not callable), in contract order."""
    return [name for name in REQUIRED if not callable(getattr(host, name, None))]


def check_host(host, spec):
    """Refuse (``bad_config``) a host made by factory ``spec`` that lacks a required call."""
    missing = missing_calls(host)
    if missing:
        raise ConfigError("bad_config", f"host factory {spec} made a {type(host).__name__}, "
                          f"which lacks the host contract's {', '.join(missing)} "
                          "(see signoff.hosts.contract.Host, docs/plugins.md)")
    return host
