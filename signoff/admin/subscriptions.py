"""MCP Events subscriptions of monitors: subscribe, refresh, resubscribe, unsubscribe, list.

A monitor bound on a host whose MCP server offers MCP Events (``McpHost`` with
``[host.options.events]``, docs/events.md) is fed by the server's webhooks,
which ``signoff serve`` takes at ``<[serve] public_url>/hooks/<monitor>``.

- **Subscribe** (``monitor bind``): the server must offer the event and its
  ``inputSchema`` accept the arguments; signoff makes a secret, writes the
  subscription as ``pending`` and commits it (the server verifies the
  callback, through ``signoff serve``, before it answers), asks
  ``events/subscribe``, then writes the monitor and the ``active`` row in one
  transaction. A failure binds nothing; a subscribe that may have reached the
  server is ended, and unsubscribed by the worker.
- **The chore** (a thread of each worker; every row is claimed by one worker
  at a time): refresh before ``refreshBefore``; end the subscription of a
  monitor that was cancelled, expired or whose grant changed; subscribe a
  lapsed one again and record the time without it as an observation gap
  (replayed through the host's ``changes()`` when it has one); unsubscribe
  ended ones until the server confirms. Failures are retried with backoff.
- **Serve's side**: the rows a callback URL verifies against, and the counts
  of what requests through subscriptions were answered.
"""

import logging
import secrets as tokens
import threading
from collections import Counter
from urllib.parse import quote

from peewee import JOIN, fn

from ..config import serve_settings
from ..errors import ConfigError, McpCallError, Refused, SignoffError
from ..hosts.contract import Capability, supports
from ..models import EventDeliveryCount, Monitor, Subscription, db
from ..rules.gate import gate
from ..rules.retry import TRANSIENT, backoff
from ..state.history import audit
from ..state.moves import Fenced
from ..state.statuses import SUBSCRIPTION_LIVE, SubscriptionStatus as S
from ..state.subscriptions import move_subscription, new_subscription
from .. import storage
from ..storage import log_failed_pass
from . import gaps
from ..rules.signatures import generate as new_secret

PENDING_GRACE_S = 30.0  # past the subscribe timeout, a pending row nobody finished is ended
CHECK_S = 60.0  # how often a subscription's monitor and grant are looked at
REFRESH_SHARE = 0.25  # refresh once this share of the time the server granted is left
REFRESH_MARGIN_MAX_S = 3600.0
TEND_LIMIT = 20
INTERVAL_S = 1.0
DELIVERED = ("accepted", "duplicate")
# What a call that got no usable answer raises: a transient failure or a protocol error.
_UNANSWERED = (*TRANSIENT, McpCallError)

log = logging.getLogger("signoff.subscriptions")


def settings_of(rt):
    """The host's ``EventsSettings``, or ``None`` when its monitors are not subscribed."""
    host = rt.host()
    return host.events_settings if supports(host, Capability.EVENTS) else None


def callback_url(rt, monitor_id):
    """Where the server sends the monitor's events: ``<[serve] public_url>/hooks/<id>``."""
    public = serve_settings(rt.home)["public_url"]
    if not public:
        raise ConfigError("bad_config", "[serve] public_url must be set to subscribe: it is "
                                        "the address where the MCP server reaches signoff serve")
    return public.rstrip("/") + "/hooks/" + quote(monitor_id, safe="")


# -- subscribe, at bind ---------------------------------------------------------

def subscribe(rt, events, monitor_id, document, create):
    """Subscribe ``monitor_id`` to the host's event, then ``create()`` the monitor.

    ``create`` writes the monitor; it runs in the transaction that makes the
    subscription ``active``. Refuses ``unknown_event``, ``invalid_arguments``
    or ``subscribe_failed`` (with the server's reason), binding nothing.
    """
    if db.in_transaction():
        # The server's verification request would not see an uncommitted row.
        raise RuntimeError("subscribe must not run inside a transaction")
    url = callback_url(rt, monitor_id)
    arguments = events.arguments_for(document)
    client = rt.host().events_client()
    try:
        client.check(events.name, arguments)
    except _UNANSWERED as exc:
        raise Refused("subscribe_failed", f"events/list got no answer: {exc}") from None
    now = rt.clock.now()
    row = new_subscription(
        now, monitor=monitor_id, name=events.name, arguments=arguments,
        field_map=events.field_map, url=url, secret=new_secret(), ttl_s=events.ttl_s,
        next_at=now + events.subscribe_timeout_s + PENDING_GRACE_S)
    try:
        answer = client.subscribe(events.name, arguments, url, row.secret, events.ttl_s)
    except Refused:
        _give_up(rt, row, unsubscribed=True)  # the server refused: it holds nothing
        raise
    except _UNANSWERED as exc:
        _give_up(rt, row, unsubscribed=False)  # it may hold one: the worker unsubscribes
        raise Refused("subscribe_failed", f"events/subscribe got no answer: {exc}") from None
    try:
        with db.atomic():
            now = rt.clock.now()
            move_subscription(row.id, [S.PENDING], S.ACTIVE, now, **_answered(answer, now))
            audit(now, "subscribed", monitor_id)
            return create()
    except Fenced:
        raise Refused("subscribe_failed", "the subscribe took so long that the worker gave it "
                                          "up; bind again") from None
    except BaseException:
        _give_up(rt, row, unsubscribed=False)
        raise


def _give_up(rt, row, unsubscribed):
    now = rt.clock.now()
    try:
        move_subscription(row.id, [S.PENDING], S.ENDED, now, end_code="subscribe_failed",
                          ended_at=now, unsubscribed=unsubscribed, next_at=now)
    except Fenced:
        pass  # the worker ended it already


def _answered(answer, now):
    """The fields a subscribe answer sets: the server's id and expiry, the next check."""
    return {"subscription_id": answer["id"], "refresh_before": answer["refresh_before"],
            "subscribed_at": now, "attempts": 0, "last_code": None, "lease_token": None,
            "next_at": min(refresh_at(answer["refresh_before"], now), now + CHECK_S)}


def refresh_at(refresh_before, subscribed_at):
    """When to refresh a subscription the server keeps until ``refresh_before``.

    A share of the granted time before it (at most an hour): the server drops
    the subscription at ``refresh_before`` itself.
    """
    if refresh_before is None:
        return float("inf")
    granted = max(0.0, refresh_before - subscribed_at)
    return refresh_before - min(REFRESH_MARGIN_MAX_S, REFRESH_SHARE * granted)


# -- ending ------------------------------------------------------------------------

def end_for_monitor(monitor_id, now, code):
    """End the live subscriptions of a monitor (in the caller's transaction).

    From now on ``signoff serve`` answers their deliveries ``410``; the worker
    unsubscribes them.
    """
    for row in Subscription.select(Subscription.id, Subscription.status).where(
            Subscription.monitor == monitor_id, Subscription.status.in_(list(SUBSCRIPTION_LIVE))):
        move_subscription(row.id, [row.status], S.ENDED, now, end_code=code, ended_at=now,
                          next_at=now, lease_token=None)


# -- the chore -------------------------------------------------------------------

def tend(rt):
    """One pass of the chore over the rows due; ``{what was done: count}``."""
    events = settings_of(rt)
    if events is None:
        return {}
    now = rt.clock.now()
    hold = 2 * events.subscribe_timeout_s + PENDING_GRACE_S
    done = Counter()
    for row in list(_due(now).order_by(Subscription.next_at).limit(TEND_LIMIT)):
        token = _claim(row, now, hold)
        if token is not None:
            done[_Turn(rt, row, token).run()] += 1
    return dict(done)


def _due(now):
    return Subscription.select().where(
        Subscription.next_at <= now,
        (Subscription.status != S.ENDED) | (Subscription.unsubscribed == False))  # noqa: E712


def due_now(now):
    """True while some subscription has chore work due (``worker --drain`` waits for it)."""
    return _due(now).exists()


def _claim(row, now, hold):
    # Compare-and-swap on next_at: one worker wins the row until ``hold`` passes.
    token = tokens.token_hex(8)
    claimed = Subscription.update(lease_token=token, next_at=now + hold).where(
        Subscription.id == row.id, Subscription.next_at == row.next_at,
        Subscription.status == row.status).execute()
    return token if claimed == 1 else None


class _Turn:
    """One claimed row's turn: decide what it needs, ask the server, write the outcome."""

    def __init__(self, rt, row, token):
        self.rt, self.row, self.token, self.status = rt, row, token, S(row.status)

    def run(self):
        """Do the row's work; returns what was done (or the code of a failed try)."""
        try:
            return self._work()
        except Fenced:
            return "fenced"  # a cancel or another worker moved the row meanwhile
        except Exception as exc:  # a failed try, retried with backoff, never the end of the chore
            if not isinstance(exc, (SignoffError, *_UNANSWERED)):
                log.exception("subscription %s of monitor %s", self.row.id, self.row.monitor)
            return self._failed(exc.code if isinstance(exc, SignoffError) else type(exc).__name__)

    def _work(self):
        row, now = self.row, self.rt.clock.now()
        if self.status == S.ENDED:
            return self._unsubscribe()
        if self.status == S.PENDING:
            return self._end("bind_interrupted")  # its bind died between asking and writing
        if self.status == S.ACTIVE and row.refresh_before is not None and now >= row.refresh_before:
            # Whether or not the server answers now: from here on nothing was observed.
            self._move(S.LAPSED, lapsed_at=row.refresh_before)
            audit(now, "subscription_lapsed", row.monitor)
        code = gate(Monitor.get_or_none(Monitor.id == row.monitor), self.rt.host().context(), now)
        if code is not None:
            return self._end(code)
        if self.status == S.LAPSED:
            return self._resubscribe()
        if now >= refresh_at(row.refresh_before, row.subscribed_at):
            self._move(S.ACTIVE, **_answered(self._subscribe(), self.rt.clock.now()))
            return "refreshed"
        self._move(S.ACTIVE, lease_token=None,
                   next_at=min(refresh_at(row.refresh_before, row.subscribed_at), now + CHECK_S))
        return "checked"

    def _subscribe(self):
        row = self.row
        return self.rt.host().events_client().subscribe(row.name, row.arguments, row.url,
                                                        row.secret, row.ttl_s)

    def _resubscribe(self):
        answer = self._subscribe()
        monitor = Monitor.get_by_id(self.row.monitor)
        lapsed_at = self.row.lapsed_at
        changed = gaps.changed_or_none(self.rt, monitor.document, lapsed_at)
        with db.atomic():
            now = self.rt.clock.now()
            self._move(S.ACTIVE, lapsed_at=None, **_answered(answer, now))
            gaps.record_lapse(self.rt, monitor, lapsed_at, now, changed)
        return "resubscribed"

    def _end(self, code):
        now = self.rt.clock.now()
        self._move(S.ENDED, end_code=code, ended_at=now)
        return self._unsubscribe()

    def _unsubscribe(self):
        row = self.row
        if _superseded(row):
            # The server names a subscription by its parameters: unsubscribing these
            # would end the live one that a later bind made with the same.
            self._move(S.ENDED, unsubscribed=True, last_code="superseded", lease_token=None)
            return "superseded"
        self.rt.host().events_client().unsubscribe(row.name, row.arguments, row.url, row.secret)
        now = self.rt.clock.now()
        with db.atomic():
            self._move(S.ENDED, unsubscribed=True, attempts=0, last_code=None, lease_token=None)
            audit(now, "unsubscribed", row.monitor)
        return "unsubscribed"

    def _failed(self, code):
        now, row = self.rt.clock.now(), self.row
        attempts = row.attempts + 1
        next_at = now + backoff(attempts, self.rt.config.retry)
        if self.status == S.ACTIVE and row.refresh_before is not None:
            next_at = min(next_at, max(now, row.refresh_before))  # see the lapse when it comes
        try:
            self._move(self.status, attempts=attempts, last_code=code, next_at=next_at,
                       lease_token=None)
        except Fenced:
            return "fenced"
        return code

    def _move(self, target, **fields):
        move_subscription(self.row.id, [self.status], target, self.rt.clock.now(), self.token,
                          **fields)
        self.status = target
        for name, value in fields.items():
            setattr(self.row, name, value)


def _superseded(row):
    """True when a live subscription has the parameters of the ended ``row``."""
    return any(other.arguments == row.arguments for other in Subscription.select(
        Subscription.arguments).where(
            Subscription.url == row.url, Subscription.name == row.name, Subscription.id != row.id,
            Subscription.status.in_(list(SUBSCRIPTION_LIVE))))


class Tender:
    """The chore's thread in one worker process (subscribe calls wait on the server)."""

    def __init__(self, rt):
        self.rt = rt
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="signoff-subscriptions",
                                        daemon=True)

    def _run(self):
        while not self._stop.wait(INTERVAL_S):
            try:
                self.rt.engine.tend_subscriptions()
            except Exception:
                log_failed_pass(log, "subscription pass", "retrying on the next pass")
        with storage.bind(self.rt.database):
            db.close()  # this thread's connection

    def stop(self):
        """Stop after the call in progress (the thread is a daemon: an exit does not wait)."""
        self._stop.set()
        self._thread.join(timeout=INTERVAL_S + 5)


def start(rt):
    """Start the chore's thread when the host subscribes monitors; returns it or ``None``."""
    if settings_of(rt) is None:
        return None
    tender = Tender(rt)
    tender._thread.start()
    return tender


# -- listing and counts ---------------------------------------------------------------

def view(row):
    """A subscription as ``signoff subscriptions`` shows it (never its secret)."""
    return {"monitor": row.monitor, "event": row.name, "subscription_id": row.subscription_id,
            "state": row.status, "refresh_before": row.refresh_before,
            "last_delivery_at": row.last_delivery_at, "url": row.url,
            "end_code": row.end_code, "unsubscribed": row.unsubscribed,
            "attempts": row.attempts, "last_code": row.last_code, "next_at": row.next_at}


def listing():
    """Every subscription signoff asked for, oldest first."""
    return [view(s) for s in Subscription.select().order_by(Subscription.id)]


def summary():
    """The counts ``stats`` and ``/metrics`` show: rows by state, requests by answer.

    ``unsubscribe_pending``: ended rows the server has not confirmed gone yet.
    """
    states = dict.fromkeys([s.value for s in S], 0)
    waiting = 0
    for status, unsubscribed, n in (Subscription.select(
            Subscription.status, Subscription.unsubscribed, fn.COUNT(Subscription.id))
            .group_by(Subscription.status, Subscription.unsubscribed).tuples()):
        states[status] += n
        waiting += n if status == S.ENDED and not unsubscribed else 0
    requests = dict(EventDeliveryCount.select(EventDeliveryCount.code, EventDeliveryCount.count)
                    .tuples())
    return {"states": states, "unsubscribe_pending": waiting, "requests": requests}


# -- signoff serve's side -----------------------------------------------------------

def for_callback(monitor_id):
    """The subscriptions whose callback is ``/hooks/<monitor_id>``, with their monitor.

    Rows of every state: an ended one still verifies a delivery, which is then
    answered 410 so that the server drops it.
    """
    return list(Subscription.select(
        Subscription.id, Subscription.secret, Subscription.status, Subscription.subscription_id,
        Subscription.field_map, Monitor.document, Monitor.active, Monitor.expires_at)
        .join(Monitor, JOIN.LEFT_OUTER, on=(Monitor.id == Subscription.monitor))
        .where(Subscription.monitor == monitor_id).order_by(Subscription.id.desc()).dicts())


def note(requests, now):
    """Count requests answered through subscriptions (in the caller's transaction).

    ``requests`` holds ``(row id, id the header named or None, answer code)``;
    a delivery sets the row's ``last_delivery_at``, and a row that does not
    know its server id yet (pending) takes the header's.
    """
    if not requests:
        return
    EventDeliveryCount.add(Counter(code for _, _, code in requests))
    delivered = sorted({row for row, _, code in requests if code in DELIVERED})
    if delivered:
        Subscription.update(last_delivery_at=now).where(Subscription.id.in_(delivered)).execute()
    for row, named in sorted({(row, named) for row, named, _ in requests if named}):
        Subscription.update(subscription_id=named).where(
            Subscription.id == row, Subscription.subscription_id.is_null()).execute()
