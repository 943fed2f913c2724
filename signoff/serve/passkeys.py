"""Passkeys on the review pages: registering one at ``/keys``, and the task page's
signed approval and reject, whose WebAuthn assertion signs the task's statement.

The browser's side is ``templates/passkeys.js`` (served as ``/passkeys.js``, so the
CSP allows scripts from this site alone). Its requests are JSON with the session's
CSRF token in ``X-CSRF-Token``; as on every page, a session is needed and a
read-only reviewer decides nothing. The checks are the JSON API's
(``decisions/signing.py``), on this server's origin.
"""

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, PlainTextResponse

from ..decisions.signing import Proof
from ..errors import Refused
from .bodies import API_LIMIT, json_object, read_body
from .pages import to_login
from .refusals import status_of
from .rendering import FOLDER

SCRIPT = (FOLDER / "passkeys.js").read_text(encoding="utf-8")


def origin_of(request):
    """The origin a browser on this server names in a passkey's client data."""
    return f"{request.url.scheme}://{request.url.netloc}"


def _refusal(exc):
    return JSONResponse({"error": exc.code, "message": exc.message},
                        status_code=getattr(exc, "status", None) or status_of(exc.code))


class Passkeys:
    """The passkey endpoints of one ``signoff serve`` (``pages``: its ``Pages``)."""

    def __init__(self, rt, pages):
        self.rt = rt
        self.pages = pages

    async def keys_page(self, request):
        """``GET /keys``: the reviewer's keys, and a button to register a passkey."""
        viewer = await self.pages.viewer(request)
        if viewer is None:
            return to_login(request)
        rows = await run_in_threadpool(self.rt.reviewer_keys, viewer.name)
        return self.pages.render(request, "keys.html", viewer=viewer, rows=rows)

    async def script(self, request):
        """``GET /passkeys.js``."""
        return PlainTextResponse(SCRIPT, media_type="text/javascript")

    async def options(self, request):
        """``POST /keys/options``: creation options for a new passkey."""
        return await self._json(request, lambda viewer, body: self.rt.passkey_options(
            viewer.name, origin_of(request)))

    async def register(self, request):
        """``POST /keys/register`` with the created credential (base64url fields)."""
        return await self._json(request, lambda viewer, body: self.rt.register_passkey(
            viewer.name, body, origin_of(request)))

    async def statement(self, request):
        """``POST /tasks/{key}/statement`` ``{decision}``: the statement to sign, and the
        reviewer's passkeys' credential ids (the ones the browser may use)."""
        def mint(viewer, body):
            minted = self.rt.statement(request.path_params["key"], viewer.name,
                                       body.get("decision", "approve"), monitors=viewer.monitors)
            held = self.rt.reviewer_keys(viewer.name)
            return dict(minted, credentials=[k["credential_id"] for k in held
                                             if k["credential_id"]])
        return await self._json(request, mint)

    async def approve(self, request):
        """``POST /tasks/{key}/approve-signed`` ``{digest, statement, webauthn,
        ack_hidden_characters?}``."""
        def decide(viewer, body):
            return self.rt.approve(request.path_params["key"], _digest(body), by=viewer.name,
                                   channel="page", monitors=viewer.monitors,
                                   ack_hidden_characters=body.get("ack_hidden_characters") is True,
                                   proof=_proof(body, "approve", request))
        return await self._json(request, decide)

    async def reject(self, request):
        """``POST /tasks/{key}/reject-signed`` ``{digest, statement, webauthn, reason?}``."""
        def decide(viewer, body):
            return self.rt.reject(request.path_params["key"], body.get("reason"), by=viewer.name,
                                  channel="page", digest=_digest(body), monitors=viewer.monitors,
                                  proof=_proof(body, "reject", request))
        return await self._json(request, decide)

    async def _json(self, request, action):
        """``action(viewer, body)`` for a logged-in, CSRF-checked, deciding reviewer's JSON
        request; its answer (or refusal) as JSON."""
        viewer = await self.pages.viewer(request)
        if viewer is None:
            return JSONResponse({"error": "unauthorized", "message": "not logged in"},
                                status_code=401)
        try:
            if not viewer.csrf_ok(request.headers.get("x-csrf-token")):
                raise Refused("bad_csrf_token", "the request's CSRF token is missing or wrong")
            if viewer.read_only:
                raise Refused("read_only", "a read-only reviewer cannot change anything")
            body = json_object(await read_body(request, API_LIMIT))
            return JSONResponse(await run_in_threadpool(action, viewer, body))
        except Refused as exc:
            return _refusal(exc)


def _digest(body):
    if not isinstance(body.get("digest"), str):
        raise Refused("invalid_body", "digest: missing")
    return body["digest"]


def _proof(body, decision, request):
    return Proof(body.get("statement"), decision, webauthn=body.get("webauthn"),
                 origin=origin_of(request))
