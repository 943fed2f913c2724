"""``POST /slack/actions``: the clicks on a task's Slack message (``chores/slack.py`` posts it).

Slack's interactivity requests are signed: the route checks the signature and
timestamp with ``slack_sdk``'s ``SignatureVerifier`` (5 minutes) before reading
anything, and answers a forged or stale request 401 without calling Slack.
Then the Slack user who clicked is mapped to a reviewer (``reviewer add/set
--slack-user``). A refusal — an unmapped user, a read-only reviewer, one not
allowed for that task's monitor, a digest that is no longer the task's, any
refusal of the decision itself — is an ephemeral reply through the action's
``response_url`` (only the person who clicked sees it), answered 200: Slack
never sees a 5xx for a refusal, and nothing is decided.

Approve counts one place of the quorum through the decisions (channel
``slack``), as the page and the API do. Reject opens a modal asking the reason
(``views.open`` with the click's ``trigger_id``); its submission rejects,
bound to the digest the button showed, and a refusal is shown in the modal.
The message itself is updated by the worker's outbox from the audit row the
decision wrote.
"""

import json
import logging
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..chores.slack import slack_settings
from ..errors import Refused, SignoffError
from .bodies import FORM_LIMIT, read_body

log = logging.getLogger("signoff.serve.slack")
REJECT_VIEW = "signoff_reject"


def slack_routes(rt):
    """``POST /slack/actions`` when ``[notify.slack]`` is set, else no route.

    A signing secret or token whose variable is not set stops serve here, naming it.
    """
    settings = slack_settings(rt.home)
    if settings is None:
        return []
    return [Route("/slack/actions", SlackActions(rt, settings).endpoint, methods=["POST"])]


class SlackActions:
    """The ``/slack/actions`` endpoint of one ``signoff serve`` (``rt``: its ``Signoff``;
    ``settings``: ``[notify.slack]``)."""

    def __init__(self, rt, settings):
        from slack_sdk.signature import SignatureVerifier
        self.rt = rt
        self.verifier = SignatureVerifier(settings.signing_secret)
        self.client = settings.client()

    async def endpoint(self, request):
        """Verify, then act on one interactivity request."""
        try:
            body = await read_body(request, FORM_LIMIT)
        except Refused as exc:
            return JSONResponse({"error": exc.code, "message": exc.message}, status_code=413)
        if not self._verified(body, request.headers):
            return JSONResponse({"error": "bad_signature",
                                 "message": "not signed by Slack, or older than 5 minutes"},
                                status_code=401)
        payload = _payload(body)
        if payload is None:
            return JSONResponse({"error": "invalid_body", "message": "no interaction payload"},
                                status_code=400)
        if payload.get("type") == "view_submission":
            answer = await run_in_threadpool(self._submitted, payload)
            return JSONResponse(answer) if answer else Response(status_code=200)
        if payload.get("type") == "block_actions":
            await run_in_threadpool(self._clicked, payload)
        return Response(status_code=200)

    def _verified(self, body, headers):
        try:
            return self.verifier.is_valid_request(body, dict(headers))
        except (ValueError, TypeError, UnicodeDecodeError):  # a timestamp that is no number
            return False

    # -- a button ----------------------------------------------------------------

    def _clicked(self, payload):
        from slack_sdk.errors import SlackApiError
        action = (payload.get("actions") or [{}])[0]
        which = action.get("action_id")
        if which not in ("approve", "reject"):
            return  # Open is a link: Slack tells us of the click, there is nothing to do
        respond = _responder(payload.get("response_url"))
        try:
            key, seen = _button(action.get("value"))
            viewer = self._reviewer(payload)
            if which == "approve":
                self.rt.approve(key, seen, by=viewer.name, channel="slack",
                                monitors=viewer.monitors)
            else:
                self._ask_reason(payload, viewer, key, seen)
        except SignoffError as exc:
            respond(f"Not decided: {exc.code}: {exc.message}")
        except (SlackApiError, OSError) as exc:  # views.open failed: nothing was decided
            respond(f"Not decided: the reason dialog could not be opened ({type(exc).__name__})")

    def _reviewer(self, payload):
        """The reviewer behind the Slack user who clicked (refused if none, or read-only)."""
        uid = (payload.get("user") or {}).get("id")
        viewer = self.rt.viewer_for_slack_user(uid)
        if viewer is None:
            raise Refused("unknown_reviewer", f"Slack user {uid} is not a signoff reviewer; "
                          f"an operator maps them with `signoff reviewer set NAME --slack-user {uid}`")
        if viewer.read_only:
            raise Refused("read_only", "a read-only reviewer cannot change anything")
        return viewer

    def _ask_reason(self, payload, viewer, key, seen):
        """Open the reject modal, once the reject could be taken (else the refusal)."""
        task = self.rt.task(key, viewer.monitors)  # another monitor's task: unknown_task
        if task["status"] != "ready":
            raise Refused("not_ready", f"task is {task['status']}, not ready")
        if task["digest"] != seen:
            raise Refused("digest_mismatch", "the draft changed since this message was sent: "
                          "look at the updated message")
        meta = json.dumps({"key": task["key"], "digest": seen,
                           "response_url": payload.get("response_url")})
        self.client.views_open(trigger_id=payload.get("trigger_id"), view={
            "type": "modal", "callback_id": REJECT_VIEW, "private_metadata": meta,
            "title": {"type": "plain_text", "text": "Reject"},
            "submit": {"type": "plain_text", "text": "Reject"},
            "close": {"type": "plain_text", "text": "Cancel"},
            "blocks": [{"type": "input", "block_id": "reason", "label": {
                "type": "plain_text", "text": f"Why reject task {task['key'][:12]}?"},
                "element": {"type": "plain_text_input", "action_id": "reason",
                            "max_length": 200}}]})

    # -- the reject modal ----------------------------------------------------------

    def _submitted(self, payload):
        view = payload.get("view") or {}
        if view.get("callback_id") != REJECT_VIEW:
            return None
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            reason = (((view.get("state") or {}).get("values") or {}).get("reason") or {}).get(
                "reason", {}).get("value")
            viewer = self._reviewer(payload)
            self.rt.reject(meta.get("key"), reason=reason, by=viewer.name, channel="slack",
                           digest=meta.get("digest"), monitors=viewer.monitors)
        except (SignoffError, ValueError, AttributeError) as exc:
            said = (f"{exc.code}: {exc.message}" if isinstance(exc, SignoffError)
                    else "the form could not be read")
            return {"response_action": "errors", "errors": {"reason": f"Not rejected: {said}"}}
        return None


def _payload(body):
    """The interaction payload of a form body (``payload=<json>``), or ``None``."""
    try:
        fields = parse_qs(body.decode("utf-8"), strict_parsing=False)
        value = json.loads(fields["payload"][0])
    except (UnicodeDecodeError, KeyError, IndexError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _button(value):
    """``(task key, digest)`` of a button's value ``KEY:DIGEST``."""
    key, _, seen = value.partition(":") if isinstance(value, str) else ("", "", "")
    if not key or not seen:
        raise Refused("invalid_body", "this button names no task and digest")
    return key, seen


def _responder(url):
    """A function posting an ephemeral reply to the action's ``response_url``."""
    def respond(text):
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            return
        from slack_sdk.webhook import WebhookClient
        try:
            WebhookClient(url, timeout=5).send(text=text, response_type="ephemeral",
                                              replace_original=False)
        except OSError:  # Slack unreachable: the refusal stands, nothing was decided
            log.warning("the ephemeral reply could not be sent to Slack")
    return respond
