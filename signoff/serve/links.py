"""``/r/TOKEN``: a task's page opened from an email link (``decisions/links.py``).

The link is its own session, for that task alone: the page is the task's, as
its reviewer sees it, without the site's navigation; no cookie it sets reaches
another path. ``GET`` never decides (mail scanners open links). It sets a
random value in a strict cookie scoped to the link's path and in the page's
forms; a ``POST`` must carry both, equal (the login form's double submit), so
another site cannot post on the reviewer's behalf.
"""

import hmac
import secrets
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse

from ..decisions.links import PROBLEMS
from ..errors import Refused
from .bodies import FORM_LIMIT, read_form
from .refusals import status_of

COOKIE = "signoff_link"
COOKIE_TTL_S = 3600


@dataclass(frozen=True)
class LinkViewer:
    """The reviewer a link speaks for, as the templates read a viewer."""

    name: str
    csrf: str
    monitors: frozenset
    read_only: bool = False


class LinkPages:
    """The ``/r/TOKEN`` endpoints of one ``signoff serve`` (``pages``: its ``Pages``)."""

    def __init__(self, rt, pages):
        self.rt, self.pages = rt, pages

    async def show(self, request):
        """``GET /r/{token}``: the task's page, and why the link decides nothing if it does not."""
        token = request.path_params["token"]
        value = request.cookies.get(COOKIE) or secrets.token_urlsafe(24)
        try:
            opened = await run_in_threadpool(self.rt.open_link, token)
            viewer = LinkViewer(opened.reviewer, value, frozenset({opened.monitor}))
            view = await run_in_threadpool(self.pages._task_view, opened.task_key, viewer)
        except Refused as exc:
            return self._refused(request, exc, token)
        response = self.pages.render(
            request, "task.html", viewer=viewer, link={
                "base": f"/r/{token}", "problem": opened.problem,
                "message": PROBLEMS.get(opened.problem)}, **view)
        response.set_cookie(COOKIE, value, max_age=COOKIE_TTL_S, httponly=True,
                            samesite="strict", secure=self.pages.secure_cookies,
                            path=f"/r/{token}")
        return response

    async def approve(self, request):
        """``POST /r/{token}/approve`` (``csrf_token``, ``ack_hidden_characters``)."""
        return await self._decide(request, "approve")

    async def reject(self, request):
        """``POST /r/{token}/reject`` (``csrf_token``, ``reason``)."""
        return await self._decide(request, "reject")

    async def _decide(self, request, decision):
        token = request.path_params["token"]
        try:
            form = await read_form(request, FORM_LIMIT)
        except Refused as exc:
            return self._refused(request, exc, token)
        expected, given = request.cookies.get(COOKIE) or "", form.get("csrf_token") or ""
        if not expected or not hmac.compare_digest(expected.encode(), str(given).encode()):
            return self._refused(request, Refused(
                "bad_csrf_token", "open the link again and decide from its page"), token)
        ack = form.get("ack_hidden_characters") in ("1", "on", "true")
        reason = form.get("reason") or None
        try:
            await run_in_threadpool(self.rt.decide_by_link, token, decision, reason, ack)
        except Refused as exc:
            return self._refused(request, exc, token)
        return RedirectResponse(f"/r/{token}", status_code=303)

    def _refused(self, request, exc, token):
        return self.pages.render(request, "outcome.html", status_code=status_of(exc.code),
                                 viewer=None, link={"base": f"/r/{token}"}, title="Refused",
                                 results=[("", exc.code, exc.message)])
