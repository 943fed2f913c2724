"""The JSON API under ``/api/v1``: tasks for scripts, approval bots and other UIs.

Every request carries ``Authorization: Bearer <reviewer token>`` (the token
``signoff reviewer add`` printed); there is no cookie, so no CSRF. Answers and
error codes are the CLI's ``--json`` ones (``{"error": CODE, "message"}`` for a
refusal), each refusal with the status the pages give it (``refusals.py``): 401
without a valid token, 403 for a read-only reviewer's write (``read_only``),
404 for an unknown task (and for another monitor's task, to a reviewer limited
to others), 400 for a body that is not one JSON object of the fields named (a
key named twice included), 409 for a stale digest and the other refusals of
the life cycle. A client address whose tokens and logins failed ``[serve]
login_client_failures`` times is answered 429 ``throttled``, with
``Retry-After``, until they age out (``logins.py``). State is reached only
through the ``Site`` methods, in the thread pool.
"""

import inspect

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..decisions.signing import Proof
from ..errors import Refused
from .bodies import API_LIMIT, json_object, read_body
from .pages import STATUSES
from .passkeys import origin_of
from .refusals import status_of

PREFIX = "/api/v1"
DEFAULT_LIMIT, MAX_LIMIT = 50, 1000
# Fields each action's body may hold, and their types; the rest is refused.
# A signed decision adds its statement and an Ed25519 signature with its key's
# id, or a passkey's assertion (docs/concepts.md, "Signed approvals").
SIGNED_FIELDS = {"statement": dict, "signature": str, "key_id": str, "webauthn": dict}
APPROVE_FIELDS = {"digest": str, "edit": str, "ack_hidden_characters": bool, "for": str,
                  **SIGNED_FIELDS}
REJECT_FIELDS = {"reason": str, "for": str, **SIGNED_FIELDS}
STATEMENT_FIELDS = {"edit": str}


def refusal(code, message, status=None):
    """A refusal answered as the CLI's ``--json`` prints it, with the pages' status
    (``status``: a refusal's own, as a signed decision's 403)."""
    return JSONResponse({"error": code, "message": message},
                        status_code=status or status_of(code),
                        headers={"www-authenticate": "Bearer"} if code == "unauthorized" else None)


class Api:
    """The ``/api/v1`` endpoints of one ``signoff serve`` (``rt``: its ``Site``)."""

    def __init__(self, rt, logins):
        self.rt = rt
        self.logins = logins
        # Fields the approve of this version takes beyond (key, digest): ``edit``
        # and ``ack_hidden_characters`` are passed on only when it names them.
        self.approve_takes = set(inspect.signature(rt.approve).parameters)

    def routes(self):
        """The routes to mount in the serve app."""
        return [Route(PREFIX + "/tasks", self.endpoint(self.list_tasks), methods=["GET"]),
                Route(PREFIX + "/tasks/{key}", self.endpoint(self.show_task), methods=["GET"]),
                Route(PREFIX + "/tasks/{key}/statement", self.endpoint(self.statement, write=True),
                      methods=["GET", "POST"]),
                Route(PREFIX + "/tasks/{key}/approve", self.endpoint(self.approve, write=True),
                      methods=["POST"]),
                Route(PREFIX + "/tasks/{key}/reject", self.endpoint(self.reject, write=True),
                      methods=["POST"]),
                Route(PREFIX + "/tasks/{key}/cancel", self.endpoint(self.cancel, write=True),
                      methods=["POST"]),
                Route(PREFIX + "/tasks/{key}/retry", self.endpoint(self.retry, write=True),
                      methods=["POST"]),
                Route(PREFIX + "/tasks/{key}/redraft", self.endpoint(self.redraft, write=True),
                      methods=["POST"])]

    def endpoint(self, action, write=False):
        """An endpoint: the bearer token checked, then ``action(request, viewer)``
        run in the thread pool; a ``Refused`` becomes its JSON refusal."""
        async def run(request):
            viewer, denied = await self._bearer(request)
            if denied:
                return denied
            if write and viewer.read_only:
                return refusal("read_only", "a read-only reviewer cannot change anything")
            try:
                body = await read_body(request, API_LIMIT) if write else b""
                answer = await run_in_threadpool(action, request, viewer, body)
            except Refused as exc:
                return refusal(exc.code, exc.message, getattr(exc, "status", None))
            return JSONResponse(answer)
        return run

    async def _bearer(self, request):
        """``(viewer, None)`` for a valid bearer token, else ``(None, refusal)``;
        a client address with too many failed tokens is not even checked."""
        client = request.client.host if request.client else "-"
        wait_s = self.logins.wait_s(client)
        if wait_s:
            answer = refusal("throttled", f"too many failed tokens: try again in {wait_s} s")
            answer.headers["retry-after"] = str(wait_s)
            return None, answer
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        viewer = None
        if scheme.lower() == "bearer" and token.strip():
            viewer = await run_in_threadpool(self.rt.reviewer_for_token, token.strip())
        if viewer is None:
            self.logins.failed(client)
            return None, refusal("unauthorized", "send Authorization: Bearer <reviewer token>")
        return viewer, None

    # -- reading ---------------------------------------------------------------

    def list_tasks(self, request, viewer, body):
        """``GET /api/v1/tasks``: ``status`` (or ``all``), ``monitor``, ``parked=1``,
        ``limit``, ``offset``.

        Newest first, as the listings; the rows after this page are counted in
        the answer's ``more`` (as the CLI's "N more" note).
        """
        q = request.query_params
        status = q.get("status") or None
        if status == "all":  # as on the pages
            status = None
        if status is not None and status not in STATUSES:
            raise Refused("invalid_body", f"status: one of {', '.join(STATUSES)} or all")
        monitor = q.get("monitor") or None  # another's lists nothing, as one with no tasks
        limit = _number(q, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        offset = _number(q, "offset", 0, 0, 2 ** 62)
        rows, more = self.rt.task_page(status, monitor, q.get("parked") == "1", viewer.monitors,
                                       limit, offset)
        return {"tasks": rows, "more": more, "limit": limit, "offset": offset}

    def show_task(self, request, viewer, body):
        """``GET /api/v1/tasks/{key}``: the task as ``tasks show --json``."""
        key = request.path_params["key"]
        return self.rt.task(key, self.rt.viewer_for_task(viewer, key).monitors)

    # -- deciding ----------------------------------------------------------------

    def statement(self, request, viewer, body):
        """``GET …/statement[?decision=approve|reject]`` (``POST …?decision=edit`` with
        ``{edit}``): ``{statement, canonical, challenge}`` for the reviewer to sign;
        a new nonce each call."""
        decision = request.query_params.get("decision") or "approve"
        edit = _body(body, STATEMENT_FIELDS).get("edit") if request.method == "POST" else None
        if (request.method == "POST") != (decision == "edit"):
            raise Refused("invalid_body", "an edit's statement is a POST of {edit} with "
                          "decision=edit; approve and reject statements are a GET")
        return self.rt.statement(request.path_params["key"], viewer.name, decision, edit,
                                 viewer.monitors)

    def approve(self, request, viewer, body):
        """``POST …/approve`` ``{digest, edit?, ack_hidden_characters?, for?}`` (``for``: the
        reviewer a delegate approves for), signed with ``{statement, signature, key_id}``
        or ``{statement, webauthn}``."""
        fields = _body(body, APPROVE_FIELDS, required=("digest",))
        extra = {name: fields[name] for name in ("edit", "ack_hidden_characters")
                 if name in fields}
        missing = set(extra) - self.approve_takes
        if missing:
            raise Refused("invalid_body", f"{sorted(missing)[0]}: not supported by this server")
        key = request.path_params["key"]
        proof = proof_of(fields, "edit" if "edit" in fields else "approve", origin_of(request))
        return self.rt.approve(key, fields["digest"], by=viewer.name, channel="api",
                               monitors=self.rt.viewer_for_task(viewer, key).monitors,
                               proof=proof, for_reviewer=fields.get("for"), **extra)

    def reject(self, request, viewer, body):
        """``POST …/reject`` ``{reason, for?}``, signed as ``approve`` is."""
        fields = _body(body, REJECT_FIELDS)
        key = request.path_params["key"]
        return self.rt.reject(key, reason=fields.get("reason"), by=viewer.name, channel="api",
                              monitors=self.rt.viewer_for_task(viewer, key).monitors,
                              proof=proof_of(fields, "reject", origin_of(request)),
                              for_reviewer=fields.get("for"))

    def cancel(self, request, viewer, body):
        """``POST …/cancel`` (an empty body or ``{}``): the life cycle's cancel of one task."""
        _body(body, {})
        return self.rt.cancel_task(request.path_params["key"], by=viewer.name, channel="api",
                                   monitors=viewer.monitors)

    def retry(self, request, viewer, body):
        """``POST …/retry`` (an empty body or ``{}``): ``tasks retry``, due now."""
        _body(body, {})
        return self.rt.retry(request.path_params["key"], by=viewer.name, channel="api",
                             monitors=viewer.monitors)

    def redraft(self, request, viewer, body):
        """``POST …/redraft`` (an empty body or ``{}``): draft the task again from a fresh
        read, as ``tasks redraft --json`` answers (``key``: the task to review now)."""
        _body(body, {})
        return self.rt.redraft(request.path_params["key"], by=viewer.name, channel="api",
                               monitors=viewer.monitors)


def proof_of(fields, expect, origin):
    """The ``Proof`` a request's signed fields make, or ``None`` for an unsigned decision."""
    given = {name: fields[name] for name in SIGNED_FIELDS if name in fields}
    if not given:
        return None
    ed25519 = {"statement", "signature", "key_id"}
    if set(given) not in (ed25519, {"statement", "webauthn"}):
        raise Refused("invalid_body", "a signed decision sends statement with signature and "
                      "key_id, or statement with webauthn")
    return Proof(given["statement"], expect, given.get("signature"), given.get("key_id"),
                 given.get("webauthn"), origin)


def _number(query, name, default, low, high):
    text = query.get(name)
    if text is None or text == "":
        return default
    if not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
        raise Refused("invalid_body", f"{name}: a whole number from {low} to {high}")
    return int(text)


def _body(raw, types, required=()):
    """The request body as a dict of the fields in ``types`` (``invalid_body`` if not).

    An empty body is an empty object. A key named twice, an unknown field or
    one of the wrong type is refused.
    """
    value = json_object(raw)
    for name, item in value.items():
        if name not in types:
            raise Refused("invalid_body", f"{name}: not a field of this request "
                          f"({', '.join(types) or 'none'})")
        if not isinstance(item, types[name]):
            raise Refused("invalid_body", f"{name}: must be a {types[name].__name__}")
    for name in required:
        if name not in value:
            raise Refused("invalid_body", f"{name}: missing")
    return value
