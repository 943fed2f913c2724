"""The HTTP status of each refusal code: one table for every face of ``signoff serve``.

The review pages, the JSON API and the webhook endpoints answer a refusal with
the status this table gives its code, so one refusal never gets two statuses
(a script and a person see the same). Every refusal of the life cycle not named
here (a stale digest, a task that moved on, a gate that refused …) is a
conflict with the task's state: 409.
"""

STATUS = {
    # The request itself is not one the rules take: fix it and send it again.
    "invalid_body": 400, "invalid_event": 400, "ambiguous_key": 400, "invalid_reason": 400,
    "invalid_edit": 400, "invalid_name": 400, "hidden_characters": 400,
    "unauthorized": 401, "bad_signature": 401,
    "read_only": 403, "bad_csrf_token": 403, "not_allowed": 403, "not_delegated": 403,
    # What does not exist, and what a limited reviewer may not see.
    "unknown_task": 404, "unknown_delivery": 404, "unknown_dead_letter": 404,
    "unknown_monitor": 404, "unknown_link": 404,
    "subscription_ended": 410, "link_expired": 410,
    "too_large": 413,
    "unsupported_media_type": 415,
    "throttled": 429,
    "host_unavailable": 503, "subscription_pending": 503,
}
CONFLICT = 409


def status_of(code):
    """The HTTP status a refusal ``code`` is answered with."""
    return STATUS.get(code, CONFLICT)
