"""The exceptions signoff raises and understands.

Every refusal carries a stable snake_case ``code``; the CLI prints it and scripts
match on it. The class docstring is the default message.
"""


class SignoffError(Exception):
    """signoff refused the request."""

    code = "error"

    def __init__(self, code=None, message=None):
        if code is not None:
            self.code = code
        self.message = message or (self.__doc__ or "").strip()
        super().__init__(f"{self.code}: {self.message}")


class Blocked(SignoffError):
    """The host refused permanently."""

    code = "blocked"


class InvalidRecord(Blocked):
    """The host answered a record or material that signoff cannot use or keep."""

    code = "invalid_record"


class Refused(SignoffError):
    """The request was refused."""

    code = "refused"


class InvalidEvent(SignoffError):
    """The event is not valid."""

    code = "invalid_event"

    def __init__(self, reason):
        super().__init__("invalid_event", reason)
        self.reason = reason


class ConfigError(SignoffError):
    """The configuration is not usable."""

    code = "bad_config"


class NoHome(SignoffError):
    """No signoff home here."""

    code = "no_home"


class StorageError(SignoffError):
    """The database cannot be used as it is."""

    code = "database_error"


class AttemptFailed(SignoffError):
    """One try of a step failed."""

    code = "attempt_failed"

    def __init__(self, code=None, message=None, *, final=False, retry_after=None, meta=None):
        """The step that catches it records an attempt under ``code``.

        ``final`` sends the work to the dead letters at once (replayable once
        the cause is fixed) instead of spending the rest of the budget on tries
        that cannot succeed. ``retry_after`` is the soonest the next try may
        start, in seconds from now (``None``: the step's own backoff decides).
        ``meta`` is the failed call's metadata when an answer came back (its
        tokens were spent), else ``None``.
        """
        super().__init__(code, message)
        self.final = final
        self.retry_after = retry_after
        self.meta = meta


class McpCallError(Exception):
    """An MCP server answered a call with a protocol error or an unreadable result.

    An ordinary failed attempt for a host, not a ``SignoffError``. It lives here,
    not beside the MCP session, so that code that only reads MCP Events
    deliveries (``signoff serve``'s callback) need not import the MCP SDK,
    which takes a second and a half.

    ``code``, ``message`` and ``data`` are the JSON-RPC error's when the server
    answered one (``code`` is ``None`` for an unreadable result).
    """

    def __init__(self, text, code=None, message=None, data=None):
        super().__init__(text)
        self.code, self.message, self.data = code, message or text, data


class SignatureRefused(Refused):
    """A signed decision was refused: its signature, key, statement or nonce does not hold.

    Answered 403 on the JSON API and the pages (a webhook's ``bad_signature``
    stays 401: that is a request not authenticated, this a decision not proven).
    """

    status = 403
