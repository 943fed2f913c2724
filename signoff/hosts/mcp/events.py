"""MCP Events, the subscriber's side: list, check, subscribe, unsubscribe, and deliveries.

An MCP server that offers MCP Events (the draft extension at protocol
2026-07-28, webhook delivery) lists its events with ``events/list``; a client
subscribes with ``events/subscribe`` giving the event's ``name`` and
``arguments``, a callback URL and a ``whsec_`` secret of its own making. The
server proves the callback wants the deliveries (a signed ``verification``
request whose ``challenge`` must be echoed) before it answers, then POSTs each
event there, signed with that secret per Standard Webhooks, with the
subscription's id in ``X-MCP-Subscription-Id``. The id is derived from
(principal, url, name, arguments), so subscribing again with the same
parameters refreshes the same subscription, and unsubscribing names it by
those parameters, not by its id.

Nothing here reads or writes signoff's tables: this is the protocol, for the
code that binds monitors and serves the callback. Needs the ``signoff[mcp]``
and ``signoff[serve]`` extras.
"""

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone

from ...errors import ConfigError, InvalidEvent, McpCallError, Refused
from ...rules.events import check_label
from ...rules.signatures import generate as new_secret  # noqa: F401 (re-exported: a subscription's secret)
from ...rules.signatures import signed_by_one_of

SUBSCRIBE_TIMEOUT_S = 30.0
TTL_S = 24 * 60 * 60.0  # asked for; servers clamp it (1 h to 7 days is common)
MAX_DELIVERY_BYTES = 256 * 1024  # the draft's limit on one delivery body
MAX_LIST_PAGES = 100  # a server that pages forever is not followed forever
MAX_CHALLENGE = 1024
METHOD_NOT_FOUND = -32601
NOT_FOUND = -32011  # the draft's answer to unsubscribing what the server does not hold
MAPPABLE = ("record_id", "document", "name")  # event_id and occurred are fixed
SUBSCRIPTION_HEADER = "x-mcp-subscription-id"


class EventsClient:
    """``events/*`` over an ``McpSession``: what a subscriber asks an MCP Events server."""

    def __init__(self, session, subscribe_timeout_s=SUBSCRIBE_TIMEOUT_S):
        self.session = session
        self.subscribe_timeout_s = float(subscribe_timeout_s)

    def list(self):
        """The server's event descriptions (``name``, ``delivery``, ``inputSchema``, ...)."""
        described, cursor = [], None
        for _ in range(MAX_LIST_PAGES):
            page = self.session.request("events/list", {"cursor": cursor} if cursor else {})
            events = page.get("events")
            if not isinstance(events, list):
                raise McpCallError("mcp: events/list answered no list of events")
            described += [e for e in events if isinstance(e, dict) and isinstance(e.get("name"), str)]
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return described

    def check(self, name, arguments):
        """The description of event ``name`` once ``arguments`` fit its ``inputSchema``.

        Refuses ``unknown_event`` when the server does not offer ``name`` with
        webhook delivery, ``invalid_arguments`` when the schema refuses them.
        """
        try:
            offered = self.list()
        except McpCallError as exc:
            if exc.code != METHOD_NOT_FOUND:
                raise
            raise Refused("unknown_event", "the MCP server offers no events "
                                           "(it does not know events/list)") from None
        found = next((e for e in offered if e["name"] == name), None)
        if found is None:
            names = ", ".join(repr(e["name"]) for e in offered[:10]) or "none"
            raise Refused("unknown_event", _short(f"the MCP server offers no event {name!r}; "
                                                  f"it offers: {names}"))
        delivery = found.get("delivery")
        if not isinstance(delivery, list) or "webhook" not in delivery:
            raise Refused("unknown_event", f"the MCP server offers {name!r} without webhook delivery")
        check_arguments(name, found.get("inputSchema", {"type": "object"}), arguments)
        return found

    def subscribe(self, name, arguments, url, secret, ttl_s):
        """Subscribe (or refresh: the same parameters name the same subscription).

        Answers ``{id, refresh_before, cursor}``; ``refresh_before`` is epoch
        seconds, or ``None`` when the server granted no expiry. The server
        verifies ``url`` before it answers, so this waits up to
        ``subscribe_timeout_s``. A refusal, a failed verification included, is
        ``Refused("subscribe_failed", <the server's reason>)``.
        """
        params = {"name": name, "arguments": arguments,
                  "delivery": {"mode": "webhook", "url": url, "secret": secret},
                  "ttlMs": int(ttl_s * 1000)}
        try:
            answer = self.session.request("events/subscribe", params, self.subscribe_timeout_s)
        except McpCallError as exc:
            raise Refused("subscribe_failed", _reason(exc)) from None
        return _subscription(answer)

    def unsubscribe(self, name, arguments, url, secret):
        """End the subscription that ``subscribe`` with these parameters made.

        One the server no longer holds is ended already; any other refusal is
        ``Refused("unsubscribe_failed", <the server's reason>)``.
        """
        params = {"name": name, "arguments": arguments,
                  "delivery": {"mode": "webhook", "url": url, "secret": secret}}
        try:
            self.session.request("events/unsubscribe", params)
        except McpCallError as exc:
            if exc.code != NOT_FOUND:
                raise Refused("unsubscribe_failed", _reason(exc)) from None


@dataclass(frozen=True)
class EventsSettings:
    """``[host.options.events]``: the event a monitor on this host subscribes to.

    ``arguments`` may say ``{document}`` in its strings: the monitor's document
    goes there. ``field_map`` is the ``map`` table (see ``map_delivery``).
    """

    name: str
    arguments: dict
    field_map: dict
    ttl_s: float = TTL_S
    subscribe_timeout_s: float = SUBSCRIBE_TIMEOUT_S

    def arguments_for(self, document):
        """The subscribe arguments of a monitor watching ``document``."""
        return _filled(self.arguments, document)


def _filled(value, document):
    if isinstance(value, str):
        return value.replace("{document}", document)
    if isinstance(value, dict):
        return {k: _filled(v, document) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, document) for v in value]
    return value


SETTINGS_KEYS = ("name", "arguments", "map", "ttl_s", "subscribe_timeout_s")


def events_settings(table):
    """``EventsSettings`` from the ``[host.options.events]`` table; ``bad_config`` if wrong."""
    if not isinstance(table, dict):
        raise ConfigError("bad_config", "host.options.events must be a table")
    unknown = sorted(set(table) - set(SETTINGS_KEYS))
    if unknown:
        raise ConfigError("bad_config", f"host.options.events: unknown key {unknown[0]!r}; "
                                        f"known: {', '.join(SETTINGS_KEYS)}")
    name = table.get("name")
    try:
        check_label("name", name)
    except InvalidEvent as exc:
        raise ConfigError("bad_config", f"host.options.events.{exc.reason}") from None
    arguments = table.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ConfigError("bad_config", "host.options.events.arguments must be a table")
    field_map = check_map(table.get("map"))
    seconds = {}
    for key, default in (("ttl_s", TTL_S), ("subscribe_timeout_s", SUBSCRIBE_TIMEOUT_S)):
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError("bad_config", f"host.options.events.{key} must be a positive "
                                            "number of seconds")
        seconds[key] = float(value)
    return EventsSettings(name, arguments, dict(field_map), **seconds)


def check_arguments(name, schema, arguments):
    """Refuse ``invalid_arguments`` unless ``arguments`` fit the event's ``inputSchema``."""
    import jsonschema  # here: a fifth of a second, and only binding checks arguments
    try:
        validator = jsonschema.validators.validator_for(schema)
        validator.check_schema(schema)
        error = jsonschema.exceptions.best_match(validator(schema).iter_errors(arguments))
    except Exception as exc:  # a schema that cannot be used: no arguments fit it
        raise Refused("invalid_arguments", f"the MCP server's inputSchema of {name!r} cannot be "
                                           f"used: {_short(str(exc).splitlines()[0])}") from None
    if error is not None:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        raise Refused("invalid_arguments", f"arguments{where}: {_short(error.message)} "
                                           f"(the inputSchema of {name!r})")


def _reason(exc):
    """The server's words for a refused subscribe, on one line."""
    reason = exc.data.get("reason") if isinstance(exc.data, dict) else None
    text = f"{exc.message} ({reason})" if isinstance(reason, str) else exc.message
    return _short(f"{text} [error {exc.code}]" if exc.code is not None else text)


def _short(text, limit=300):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _subscription(answer):
    try:
        sub_id = check_label("id", answer.get("id"))
    except InvalidEvent as exc:
        raise Refused("subscribe_failed", f"the MCP server answered events/subscribe without "
                                          f"a usable subscription {exc.reason}") from None
    refresh = answer.get("refreshBefore")
    try:
        refresh_before = None if refresh is None else _iso_seconds(refresh)
    except ValueError:
        raise Refused("subscribe_failed", "the MCP server answered a refreshBefore that is "
                                          "not an ISO 8601 time") from None
    cursor = answer.get("cursor")
    return {"id": sub_id, "refresh_before": refresh_before,
            "cursor": cursor if isinstance(cursor, str) else None}


def _iso_seconds(value):
    """Whole Unix seconds of an ISO 8601 time (UTC when it names no offset); ``ValueError``."""
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return math.floor(moment.timestamp())
    except (TypeError, OverflowError):  # not a string; out of range
        raise ValueError(f"not an ISO 8601 time: {value!r:.40}") from None


def verification_answer(body_bytes, headers, secrets):
    """``{"challenge": ...}`` for a verification request signed with one of ``secrets``.

    The request is a Standard-Webhooks-signed ``{"type": "verification",
    "challenge": ...}`` carrying ``X-MCP-Subscription-Id``; anything else,
    however malformed, gives ``None``. Signatures are compared in constant time.
    """
    try:
        given = {str(k).lower(): v for k, v in headers.items() if isinstance(v, str)}
        if (not isinstance(body_bytes, bytes) or len(body_bytes) > MAX_DELIVERY_BYTES
                or not given.get(SUBSCRIPTION_HEADER)):
            return None
        text = body_bytes.decode("utf-8")
        if not signed_by_one_of(text, given, secrets):
            return None
        body = json.loads(text)
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None
    if not isinstance(body, dict) or body.get("type") != "verification":
        return None
    challenge = body.get("challenge")
    if not isinstance(challenge, str) or not 1 <= len(challenge) <= MAX_CHALLENGE:
        return None
    return {"challenge": challenge}


def check_map(field_map):
    """Refuse (``bad_config``) a map that is not dotted paths for record_id, document, name.

    ``record_id`` is required; ``event_id`` and ``occurred`` cannot be mapped.
    """
    if not isinstance(field_map, dict) or "record_id" not in field_map:
        raise ConfigError("bad_config", "events.map: needs record_id, a dotted path into the "
                                        "delivery such as \"data.comment_id\"")
    for field, path in field_map.items():
        if field not in MAPPABLE:
            raise ConfigError("bad_config", f"events.map: {field!r} cannot be mapped; "
                                            f"mappable: {', '.join(MAPPABLE)}")
        if not isinstance(path, str) or not all(path.split(".")):
            raise ConfigError("bad_config", f"events.map.{field}: must be a dotted path such as "
                                            "\"data.comment_id\"")
    return field_map


def map_delivery(body, field_map, document):
    """The signoff event in a delivery's parsed ``body``, or ``InvalidEvent`` naming what is missing.

    ``event_id`` is the ``eventId``, ``occurred`` the ``timestamp`` in whole
    seconds, ``name`` the delivery's unless mapped, ``record_id`` and
    ``document`` (``document`` when not mapped) from the map's dotted paths.
    Only these five fields are returned, for ``signoff.rules.events.validate``.
    """
    check_map(field_map)
    if not isinstance(body, dict):
        raise InvalidEvent("body: a delivery must be a JSON object")
    if "type" in body:  # the draft's control messages (verification, gap, terminated)
        raise InvalidEvent("body: a control message (it has a type), not an event")
    if "eventId" not in body:
        raise InvalidEvent("event_id: the delivery has no eventId")
    if "timestamp" not in body:
        raise InvalidEvent("occurred: the delivery has no timestamp")
    try:
        occurred = _iso_seconds(body["timestamp"])
    except ValueError:
        raise InvalidEvent("occurred: the delivery's timestamp is not an ISO 8601 time") from None
    paths = {"name": "name", **field_map}
    event = {"event_id": body["eventId"], "occurred": occurred, "document": document}
    for field, path in paths.items():
        event[field] = _at(body, path, field)
    return event


def _at(body, path, field):
    value = body
    for step in path.split("."):
        if not isinstance(value, dict) or step not in value:
            raise InvalidEvent(f"{field}: the delivery has no {path}")
        value = value[step]
    return value
