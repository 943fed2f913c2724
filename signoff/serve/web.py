"""The ASGI application of ``signoff serve``: routes, headers, start and stop."""

import contextlib

from peewee import DatabaseError, InterfaceError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import metrics
from .api import Api
from .groupcommit import GroupCommit
from .hooks import make_endpoint, reader
from .links import LinkPages
from .logins import Logins
from .pages import Pages
from .passkeys import Passkeys
from .slack import slack_routes

SECURITY_HEADERS = {
    # Scripts from this site alone (passkeys.js: no inline script), no inline styles,
    # requests and forms only here, never framed.
    "content-security-policy": "default-src 'none'; script-src 'self'; connect-src 'self'; "
                               "style-src 'self'; img-src 'self'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


class SecurityHeaders:
    """ASGI middleware adding ``SECURITY_HEADERS`` to every response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = dict(message, headers=headers)
            await send(message)
        return await self.app(scope, receive, with_headers)


async def _database_down(request, exc):
    return JSONResponse({"error": "database_unavailable", "message": type(exc).__name__},
                        status_code=503)


def _people_routes(pages, passkeys, linked):
    """The routes people use in a browser: the review pages, passkeys, email links."""
    return [
        Route("/login", pages.login_page, methods=["GET"]),
        Route("/login", pages.login, methods=["POST"]),
        Route("/logout", pages.logout, methods=["POST"]),
        Route("/", pages.index, methods=["GET"]),
        Route("/approve", pages.approve_many, methods=["POST"]),
        Route("/tasks/{key}", pages.task, methods=["GET"]),
        Route("/tasks/{key}/approve", pages.approve, methods=["POST"]),
        Route("/tasks/{key}/reject", pages.reject, methods=["POST"]),
        Route("/tasks/{key}/retry", pages.retry, methods=["POST"]),
        Route("/tasks/{key}/cancel", pages.cancel, methods=["POST"]),
        Route("/tasks/{key}/redraft", pages.redraft, methods=["POST"]),
        Route("/deliveries/{delivery:int}", pages.delivery, methods=["GET"]),
        Route("/dead-letters", pages.dead_letters, methods=["GET"]),
        Route("/gaps", pages.gaps, methods=["GET"]),
        Route("/monitors", pages.monitors, methods=["GET"]),
        Route("/monitors/{monitor}/pause", pages.pause, methods=["POST"]),
        Route("/monitors/{monitor}/unpause", pages.unpause, methods=["POST"]),
        Route("/dead-letters/{letter:int}/replay", pages.replay, methods=["POST"]),
        Route("/style.css", pages.style, methods=["GET"]),
        Route("/passkeys.js", passkeys.script, methods=["GET"]),
        Route("/keys", passkeys.keys_page, methods=["GET"]),
        Route("/keys/options", passkeys.options, methods=["POST"]),
        Route("/keys/register", passkeys.register, methods=["POST"]),
        Route("/tasks/{key}/statement", passkeys.statement, methods=["POST"]),
        Route("/tasks/{key}/approve-signed", passkeys.approve, methods=["POST"]),
        Route("/tasks/{key}/reject-signed", passkeys.reject, methods=["POST"]),
        Route("/r/{token}", linked.show, methods=["GET"]),
        Route("/r/{token}/approve", linked.approve, methods=["POST"]),
        Route("/r/{token}/reject", linked.reject, methods=["POST"]),
    ]


def build_app(rt, secure_cookies=False, window_s=None, logins=None):
    """The Starlette app serving one signoff home (``rt``, a ``Site``).

    ``logins`` is the login throttle (a ``Logins``; by default its defaults).
    """
    commits = GroupCommit(rt.write_webhooks,  # binds its own database in the commit thread
                          **({} if window_s is None else {"window_s": window_s}))
    # Requests waiting for what they are verified against share one read, in a thread
    # of its own.
    reads = GroupCommit(reader(rt), window_s=0, name="signoff-reads")
    logins = logins or Logins()
    pages = Pages(rt, logins, secure_cookies=secure_cookies)
    registry = metrics.registry_for(rt, logins)

    async def healthz(request):
        ok, report = await run_in_threadpool(metrics.health, rt)
        return JSONResponse(dict(report, ok=ok), status_code=200 if ok else 503)

    async def metrics_page(request):
        body = await run_in_threadpool(metrics.render, registry)
        return Response(body, media_type=metrics.CONTENT_TYPE)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        commits.start()
        reads.start()
        yield
        await commits.stop()  # after uvicorn answered the requests in flight
        await reads.stop()

    routes = [
        Route("/hooks/{monitor}", make_endpoint(rt, commits, reads), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics_page, methods=["GET"]),
        *_people_routes(pages, Passkeys(rt, pages), LinkPages(rt, pages)),
        *Api(rt, logins).routes(),
        *slack_routes(rt),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={DatabaseError: _database_down,
                                        InterfaceError: _database_down})
    app.state.commits = commits
    return SecurityHeaders(app)
