"""The review pages: what is waiting, one task in full, dead letters, and the forms.

Every page needs a session (else a redirect to ``/login``; a POST answers
401); every POST carries the session's CSRF token (form field ``csrf_token``
or header ``X-CSRF-Token``; wrong → 403); read-only reviewers get no action
buttons and their POSTs answer 403; a reviewer limited to some monitors
neither lists nor opens nor acts on other monitors' tasks, deliveries or
monitors: they answer 404 as ones that do not exist. GET never changes state.
Database and host work runs in the thread pool, off the event loop.
"""

import hmac
import secrets
from urllib.parse import urlencode, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.responses import PlainTextResponse, RedirectResponse

from ..errors import Refused
from ..decisions.redraft import redraftable
from ..admin.reviewers import SESSION_TTL_S
from ..state.statuses import TASK_OPEN, TaskStatus as T
from ..views import attempt_rows, current_source
from .bodies import FORM_LIMIT, LOGIN_LIMIT, read_form
from .refusals import CONFLICT, status_of
from .rendering import STYLE, TEMPLATES, excerpt, fold

COOKIE = "signoff_session"
LOGIN_COOKIE = "signoff_login"
LOGIN_FORM_TTL_S = 3600
PAGE_LIMIT = 200
MAX_PATH = 2000  # the longest path login returns to
LIST_LIMIT = 50  # sources, batch records, earlier drafts shown at most
HEADINGS = {"ready": "Waiting for approval", "approved": "Approved", "uncertain": "Outcome uncertain",
            "done": "Done: submitted and confirmed", "rejected": "Rejected", "blocked": "Blocked",
            "expired": "Expired: not approved in time", "cancelled": "Cancelled", "dead": "Given up"}
STATUSES = tuple(T)  # the filters the list offers, in the life cycle's order


class Pages:
    """The page and form endpoints of one ``signoff serve``."""

    def __init__(self, rt, logins, secure_cookies=False):
        self.rt = rt
        self.logins = logins  # the throttle and counts of failed logins (logins.py)
        self.secure_cookies = secure_cookies

    # -- sessions ----------------------------------------------------------

    async def viewer(self, request):
        """The reviewer of this request's session cookie, or ``None``."""
        token = request.cookies.get(COOKIE)
        return await run_in_threadpool(self.rt.viewer_for, token)

    def render(self, request, name, status_code=200, **context):
        """A template rendered with the common context."""
        return TEMPLATES.TemplateResponse(request, name, context, status_code=status_code)

    def _login_form(self, request, back, status_code=200, failed=False, wait_s=0, value=None):
        # Before a session exists, CSRF is a double-submit: a random value in
        # a strict cookie and in the form, which another site can set neither of.
        # A refused login keeps the value it came with, so its answer depends on
        # nothing but the request (and never on whether the name is a reviewer's).
        value = value or secrets.token_urlsafe(24)
        response = self.render(request, "login.html", status_code=status_code, viewer=None,
                               failed=failed, wait_s=wait_s, login_csrf=value, back=back)
        response.set_cookie(LOGIN_COOKIE, value, max_age=LOGIN_FORM_TTL_S, httponly=True,
                            samesite="strict", secure=self.secure_cookies, path="/login")
        if wait_s:
            response.headers["retry-after"] = str(wait_s)
        return response

    async def login_page(self, request):
        """``GET /login`` (``?next=PATH``: where to go once logged in)."""
        return self._login_form(request, return_path(request.query_params.get("next")))

    async def login(self, request):
        """``POST /login``: ``name``, ``token``, ``csrf_token`` (and ``next``); sets the session.

        Failed logins are throttled per client address and per address and name (``logins.py``).
        """
        try:
            form = await read_form(request, LOGIN_LIMIT)
        except Refused as exc:
            return self._refused(request, None, exc)
        back = return_path(form.get("next"))
        expected, given = request.cookies.get(LOGIN_COOKIE) or "", form.get("csrf_token") or ""
        if not expected or not hmac.compare_digest(expected.encode(), str(given).encode()):
            return self._refused(request, None, Refused("bad_csrf_token",
                                                        "open the login page again"))
        name = form.get("name") if isinstance(form.get("name"), str) else None
        client = request.client.host if request.client else "-"
        wait_s = self.logins.wait_s(client, name)
        if wait_s:
            return self._login_form(request, back, status_code=429, wait_s=wait_s,
                                    value=expected)
        session, reviewer = await run_in_threadpool(self.rt.log_in, name, form.get("token"))
        if session is None:
            self.logins.failed(client, name, reviewer)
            return self._login_form(request, back, status_code=401, failed=True, value=expected)
        self.logins.succeeded()
        response = RedirectResponse(back or "/", status_code=303)
        response.set_cookie(COOKIE, session, max_age=SESSION_TTL_S, httponly=True,
                            samesite="strict", secure=self.secure_cookies, path="/")
        return response

    async def logout(self, request):
        """``POST /logout``."""
        viewer, _, refusal = await self.form_guard(request, write=False)
        if refusal:
            return refusal
        await run_in_threadpool(self.rt.log_out, viewer.session_token)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def form_guard(self, request, write=True):
        """``(viewer, form, None)`` for an allowed POST, else ``(None, None, refusal
        response)``. The form is read only once the session is known."""
        viewer = await self.viewer(request)
        if viewer is None:
            return None, None, PlainTextResponse("not logged in", status_code=401)
        try:
            form = await read_form(request, FORM_LIMIT)
        except Refused as exc:
            return None, None, self._refused(request, viewer, exc)
        given = request.headers.get("x-csrf-token") or form.get("csrf_token")
        if not viewer.csrf_ok(given):
            return None, None, self._refused(request, viewer, Refused(
                "bad_csrf_token", "the form's CSRF token is missing or wrong"))
        if write and viewer.read_only:
            return None, None, self._refused(request, viewer, Refused(
                "read_only", "a read-only reviewer cannot change anything"))
        return viewer, form, None

    # -- pages ---------------------------------------------------------------

    async def index(self, request):
        """``GET /``: tasks of one status (``?status=``, ``?monitor=``, ``?parked=1``)."""
        viewer = await self.viewer(request)
        if viewer is None:
            return to_login(request)
        q = request.query_params
        status = q.get("status", "ready")
        status = status if status in STATUSES or status == "all" else "ready"
        monitor, parked = q.get("monitor") or None, q.get("parked") == "1"
        rows, counts = await run_in_threadpool(self.rt.review_list, status, monitor, parked,
                                               viewer.monitors, PAGE_LIMIT)
        for row in rows:  # a ready draft's first lines beside its checkbox
            row["draft"] = None if row["draft"] is None else excerpt(row["draft"])
        unobserved = await run_in_threadpool(self.rt.unobserved, viewer.monitors)
        waiting = await run_in_threadpool(self.rt.oldest_waiting, viewer.monitors)
        return self.render(request, "index.html", viewer=viewer, rows=rows, counts=counts,
                           status=status, monitor=monitor, parked=parked, statuses=STATUSES,
                           limit=PAGE_LIMIT, unobserved=unobserved, waiting=waiting)

    async def task(self, request):
        """``GET /tasks/{key}``: everything an approver needs to decide."""
        viewer = await self.viewer(request)
        if viewer is None:
            return to_login(request)
        key = request.path_params["key"]
        viewer = await run_in_threadpool(self.rt.viewer_for_task, viewer, key)
        try:
            view = await run_in_threadpool(self._task_view, key, viewer)
        except Refused as exc:
            return self._refused(request, viewer, exc)
        return self.render(request, "task.html", viewer=viewer, **view)

    def _task_view(self, key, viewer):
        t = self.rt.task(key, viewer.monitors)
        current, problem = current_source(self.rt, t)
        timeline = [(r["at"], r["kind"], r["code"], r["who"]) for r in t["timeline"]]
        records = t["record"] if isinstance(t["record"], list) else [t["record"] or {}]
        draft = (t["result"] or {}).get("draft")
        return {"t": t, "current": current, "current_problem": problem,
                "changed": current is not None and current != t["record"],
                "heading": HEADINGS.get(t["status"], t["status"]),
                "timeline": timeline[-PAGE_LIMIT:], "timeline_left_out": len(timeline) - PAGE_LIMIT,
                "host_factory": self.rt.config.host_factory,
                "may_be_written": t["may_be_written"],
                # An approved task waiting for a later try (after a failed one) may be
                # hurried; one due now is the worker's already.
                "retry_later": t["status"] == T.APPROVED and not t["parked"]
                and (t["next_at"] or 0) > self.rt.clock.now(),
                "records": records[:LIST_LIMIT], "records_left_out": len(records) - LIST_LIMIT,
                "draft_whole": fold(draft)["left_out"] == 0,
                "previous_drafts": (t.get("previous_drafts") or [])[-LIST_LIMIT:],
                "draft_changes": t.get("draft_changes"), "list_limit": LIST_LIMIT,
                "may_cancel": t["status"] in TASK_OPEN,
                "signed": any(m["id"] == t["monitor"] and m["signed_approvals"]
                              for m in self.rt.monitors()),
                "may_redraft": redraftable(t["status"], t["code"], t["write_possible"])}

    async def delivery(self, request):
        """``GET /deliveries/{id}``: one delivery, its attempts, and its task if it made one."""
        viewer = await self.viewer(request)
        if viewer is None:
            return to_login(request)
        try:
            d = await run_in_threadpool(self.rt.delivery, request.path_params["delivery"],
                                        viewer.monitors)
        except Refused as exc:
            return self._refused(request, viewer, exc)
        return self.render(request, "delivery.html", viewer=viewer, d=d,
                           timeline=[(r["at"], r["kind"], r["code"], r["who"])
                                     for r in attempt_rows(d["history"][-PAGE_LIMIT:])])

    async def dead_letters(self, request):
        """``GET /dead-letters``."""
        viewer = await self.viewer(request)
        if viewer is None:
            return to_login(request)
        letters = await run_in_threadpool(lambda: self.rt.dead_letters(
            limit=PAGE_LIMIT, newest_first=True, monitors=viewer.monitors))
        return self.render(request, "dead_letters.html", viewer=viewer, letters=letters,
                           limit=PAGE_LIMIT)

    async def gaps(self, request):
        """``GET /gaps``: what was not observed (resume gaps and stale events)."""
        viewer = await self.viewer(request)
        if viewer is None:
            return to_login(request)
        listing = await run_in_threadpool(self.rt.gaps, viewer.monitors)
        return self.render(request, "gaps.html", viewer=viewer, limit=PAGE_LIMIT, **listing)

    async def monitors(self, request):
        """``GET /monitors``: each monitor, and the state of its MCP Events subscription."""
        viewer = await self.viewer(request)
        if viewer is None:
            return RedirectResponse("/login", status_code=303)
        rows = await run_in_threadpool(self._monitor_rows, viewer)
        return self.render(request, "monitors.html", viewer=viewer, rows=rows)

    def _monitor_rows(self, viewer):
        latest = {s["monitor"]: s for s in self.rt.subscriptions()}  # the last one asked for
        return [dict(m, subscription=latest.get(m["id"])) for m in self.rt.monitors()
                if viewer.may_see(m["id"])]

    async def style(self, request):
        """``GET /style.css`` (no inline styles, so the CSP can forbid them)."""
        return PlainTextResponse(STYLE, media_type="text/css")

    # -- forms -----------------------------------------------------------------

    async def approve(self, request):
        """``POST /tasks/{key}/approve`` with ``digest`` (and ``edit``, the draft as the
        reviewer edited it; ``ack_hidden_characters``); the reviewer's approval."""
        viewer, form, refusal = await self.form_guard(request)
        if refusal:
            return refusal
        key, digest = request.path_params["key"], form.get("digest") or ""
        edit = form.get("edit")
        if isinstance(edit, str):
            edit = edit.replace("\r\n", "\n")  # browsers send a textarea's lines with CRLF
        ack = form.get("ack_hidden_characters") in ("1", "on", "true")
        viewer = await run_in_threadpool(self.rt.viewer_for_task, viewer, key)
        return await self._act(request, viewer, key, lambda: self.rt.approve(
            key, digest, by=viewer.name, channel="page", edit=edit, ack_hidden_characters=ack,
            monitors=viewer.monitors))

    async def reject(self, request):
        """``POST /tasks/{key}/reject`` with the ``digest`` shown on the page."""
        viewer, form, refusal = await self.form_guard(request)
        if refusal:
            return refusal
        key, digest = request.path_params["key"], form.get("digest") or ""
        reason = form.get("reason") or None  # an empty field: no reason given
        viewer = await run_in_threadpool(self.rt.viewer_for_task, viewer, key)
        return await self._act(request, viewer, key, lambda: self.rt.reject(
            key, reason=reason, by=viewer.name, channel="page", digest=digest,
            monitors=viewer.monitors))

    async def retry(self, request):
        """``POST /tasks/{key}/retry``: queue a parked, approved or uncertain task again."""
        return await self._task_form(request, self.rt.retry)

    async def cancel(self, request):
        """``POST /tasks/{key}/cancel``: the life cycle's cancel of one open task."""
        return await self._task_form(request, self.rt.cancel_task)

    async def redraft(self, request):
        """``POST /tasks/{key}/redraft``: draft the task again from a fresh read; the page
        it leads to is the task to review now (a new one for a new record version)."""
        return await self._task_form(request, self.rt.redraft)

    async def _task_form(self, request, action):
        """A form whose whole meaning is ``action(key, by=reviewer, channel="page")``."""
        viewer, _, refusal = await self.form_guard(request)
        if refusal:
            return refusal
        key = request.path_params["key"]
        return await self._act(request, viewer, key, lambda: action(
            key, by=viewer.name, channel="page", monitors=viewer.monitors))

    async def replay(self, request):
        """``POST /dead-letters/{id}/replay``."""
        viewer, _, refusal = await self.form_guard(request)
        if refusal:
            return refusal
        letter = request.path_params["letter"]
        try:
            await run_in_threadpool(lambda: self.rt.replay(letter, by=viewer.name, channel="page",
                                                           monitors=viewer.monitors))
        except Refused as exc:
            return self._refused(request, viewer, exc)
        return RedirectResponse("/dead-letters", status_code=303)

    async def pause(self, request):
        """``POST /monitors/{monitor}/pause``: hold the monitor's new events (still accepted)."""
        return await self._monitor_action(request, self.rt.pause)

    async def unpause(self, request):
        """``POST /monitors/{monitor}/unpause``: process its events again, the held ones first."""
        return await self._monitor_action(request, self.rt.unpause)

    async def _monitor_action(self, request, action):
        viewer, _, refusal = await self.form_guard(request)
        if refusal:
            return refusal
        monitor = request.path_params["monitor"]

        def checked():
            viewer.check_monitor(monitor)
            return action(monitor, by=viewer.name, channel="page")
        try:
            await run_in_threadpool(checked)
        except Refused as exc:
            return self._refused(request, viewer, exc, monitor)
        return RedirectResponse("/monitors", status_code=303)

    async def approve_many(self, request):
        """``POST /approve``: every checked ``task`` field is ``KEY:DIGEST``."""
        viewer, form, refusal = await self.form_guard(request)
        if refusal:
            return refusal
        items = [tuple(v.split(":", 1)) for v in form.getlist("task") if ":" in v]
        if not items:
            return self.render(request, "outcome.html", status_code=400, viewer=viewer,
                               title="Nothing selected", results=[])
        outcomes = await run_in_threadpool(lambda: self.rt.approve_many(
            items, viewer.name, channel="page", monitors=viewer.monitors))
        results = [(key, o.code, o.message) if isinstance(o, Refused) else (key, o["status"], "")
                   for (key, _), o in zip(items, outcomes)]
        failed = any(isinstance(o, Refused) for o in outcomes)
        # Each item answers for itself on the page; one refused makes the batch a conflict.
        return self.render(request, "outcome.html", status_code=CONFLICT if failed else 200,
                           viewer=viewer, title="Bulk approval", results=results)

    async def _act(self, request, viewer, key, action):
        """``action()``, a decision the reviewer's limits travel into (another monitor's
        task is ``unknown_task``), then to the page of the task its answer names (a
        redraft may name a new one)."""
        try:
            answer = await run_in_threadpool(action)
        except Refused as exc:
            return self._refused(request, viewer, exc, key)
        return RedirectResponse(f"/tasks/{answer['key']}", status_code=303)

    def _refused(self, request, viewer, exc, key=""):
        status = getattr(exc, "status", None) or status_of(exc.code)  # a signed decision's: 403
        return self.render(request, "outcome.html", status_code=status, viewer=viewer,
                           title="Refused", results=[(key, exc.code, exc.message)])


def return_path(value):
    """``value`` when it is a path on this site to go back to after login, else ``None``.

    Only a relative path is followed, never a URL: ``//host`` and ``/\\host``
    (which browsers read as another host), schemes and control characters are not.
    """
    if (not isinstance(value, str) or not value.startswith("/") or len(value) > MAX_PATH
            or value.startswith("//") or "\\" in value
            or not value.isascii() or not value.isprintable()):
        return None
    parts = urlsplit(value)
    return value if not parts.scheme and not parts.netloc else None


def to_login(request):
    """The redirect of a page asked for without a session: to the login, and back after."""
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if here == "/" or return_path(here) is None:
        return RedirectResponse("/login", status_code=303)
    return RedirectResponse("/login?" + urlencode({"next": here}), status_code=303)
