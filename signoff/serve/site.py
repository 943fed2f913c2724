"""``Site``: a home opened by ``signoff serve``, with what its endpoints alone ask of it.

The webhook endpoint's batched reads and writes, the review pages' logins and
lists, the JSON API's bearer tokens and pages of tasks, and ``/metrics``. None
of it imports the web stack: ``web`` and ``server`` do.
"""

from .. import storage, views
from ..admin import gaps, keys, reviewers, secrets, subscriptions
from ..app import Signoff
from ..decisions import links
from ..intake import webhooks
from ..steps import drafting
from ..storage import own_database


def _once_each(read, keys):
    """``[read(key) for key in keys]``, each distinct key read once."""
    done = {key: read(key) for key in set(keys)}
    return [done[key] for key in keys]


class Site(Signoff):
    """A ``Signoff`` as ``signoff serve`` opens it (``server.run``)."""

    # -- webhooks -------------------------------------------------------------

    @own_database
    def webhook_secrets(self, monitor_ids):
        """``(monitor exists, its current secrets)`` for each of ``monitor_ids``: what
        webhook requests are verified against. A monitor named twice is read once."""
        return _once_each(secrets.current, monitor_ids)

    @own_database
    def subscription_callbacks(self, monitor_ids):
        """For each of ``monitor_ids``, the MCP Events subscriptions whose callback is
        ``/hooks/<monitor>``. A monitor named twice is read once."""
        return _once_each(subscriptions.for_callback, monitor_ids)

    @own_database
    def first_webhook_answer(self, monitor_id, webhook_id):
        """The stored answer to a monitor's ``webhook-id`` (marked duplicate), or ``None``."""
        return webhooks.first_answer(monitor_id, webhook_id)

    @own_database
    def write_webhooks(self, jobs):
        """Write a batch of webhook jobs (``webhooks.Accept``/``Refusal``/``Noted``) in
        one transaction; one ``(status, body)`` or ``None`` per job."""
        return webhooks.write_batch(self, jobs)

    # -- who is asking --------------------------------------------------------

    @own_database
    def reviewer_for_token(self, token):
        """The reviewer (a ``reviewers.Viewer``) whose API token is ``token``, or ``None``."""
        return reviewers.viewer_for_token(token, self.clock.now())

    @own_database
    def viewer_for(self, session_token):
        """The reviewer of a review-page session (a ``reviewers.Viewer``), or ``None``."""
        return reviewers.viewer_for(session_token, self.clock.now())

    @own_database
    def log_in(self, name, token):
        """``(session token, reviewer)`` for a good login, ``(None, reviewer or None)``
        otherwise (``reviewers.log_in``)."""
        return reviewers.log_in(name, token, self.clock.now())

    @own_database
    def log_out(self, session_token):
        """End a review-page session."""
        return reviewers.log_out(session_token)

    @own_database
    def viewer_for_task(self, viewer, key):
        """``viewer`` widened to task ``key``'s monitor when it was escalated to them."""
        return reviewers.viewer_for_task(viewer, key)

    @own_database
    def viewer_for_slack_user(self, uid):
        """The reviewer (a ``reviewers.Viewer``) mapped to Slack user ``uid``, or ``None``."""
        return reviewers.viewer_for_slack_user(uid, self.clock.now())

    # -- email links ----------------------------------------------------------

    @own_database
    def open_link(self, token):
        """What an email link leads to, and why it decides nothing if it does not
        (``links.open_link``)."""
        return links.open_link(self, token)

    @own_database
    def decide_by_link(self, token, decision, reason=None, ack_hidden_characters=False):
        """Approve or reject (``decision``) through an email link (``links.decide``)."""
        return links.decide(self, token, decision, reason, ack_hidden_characters)

    @own_database
    def passkey_options(self, name, origin):
        """WebAuthn creation options for reviewer ``name`` on the page at ``origin``."""
        return keys.passkey_options(self, name, origin)

    @own_database
    def register_passkey(self, name, credential, origin):
        """Keep the passkey reviewer ``name`` created at ``origin`` once it verifies."""
        return keys.register_passkey(self, name, credential, origin)

    # -- what the pages and the API list --------------------------------------

    @own_database
    def task_page(self, status=None, monitor=None, parked=False, monitors=None, limit=50,
                  offset=0):
        """``(rows, more)``: a page of tasks, newest first (``views.task_page``)."""
        return views.task_page(status, monitor, parked, monitors, limit, offset)

    @own_database
    def review_list(self, status, monitor=None, parked=False, monitors=None, limit=200):
        """The review pages' task list and counts (``views.review_list``)."""
        return views.review_list(status, monitor, parked, monitors, limit)

    @own_database
    def unobserved(self, monitors=None):
        """What no monitor observed: the gaps' summary the pages show (``gaps.summary``),
        of ``monitors`` alone if given."""
        return gaps.summary(monitors=monitors)

    @own_database
    def oldest_waiting(self, monitors=None):
        """``{monitor: {since, age_s}}``: each monitor's oldest task waiting for a decision
        (of ``monitors`` alone, if given)."""
        return views.timing.oldest_waiting(self.clock.now(), monitors)

    @own_database
    def metrics(self):
        """``stats`` and the grouped counts ``/metrics`` adds, in one snapshot."""
        with storage.read_snapshot(self.database):
            now = self.clock.now()
            return dict(views.stats(now, drafting.tokens_per_hour(self)),
                        **views.metric_counts(now))
