"""Peewee models: every durable fact signoff keeps, grouped by concept.

The rows are the truth; a queue message is only a wake-up. Times are UTC epoch
seconds stored as floats, so SQLite and PostgreSQL read back the same values.
Ids are 64-bit; strings from hosts, drafters and people are ``Text`` (no length
limit, stored losslessly on every engine). Opening the database, and every
difference between engines, is ``storage``'s.

The concepts, in this order: intake (monitors, deliveries, the event-id inbox,
gaps), tasks (and their attempts, dead letters, purges, batches), approvals
(the nonces of signed ones, and standing policies), the audit log, webhooks,
reviewers (and their keys), notifications,
MCP Events subscriptions, the drafter's usage, and workers. ``MODELS`` is every
table of the one schema each home has.
"""

from peewee import (
    EXCLUDED, SQL, BigAutoField, BigIntegerField, BooleanField, CharField, DoubleField,
    IntegerField, Model, CompositeKey,
)

from .storage import JSON, Text, db, insert_rows  # noqa: F401 (insert_rows: re-exported)


class BaseModel(Model):
    """A table of the one schema every home has, on the database its ``Signoff`` binds."""

    class Meta:
        database = db
        legacy_table_names = False


def _index_suspects(model, name):
    """Index ``model``'s suspects by when they are due, as ``name``.

    A row whose last lease expired without an outcome (a suspect, see
    state/leases.py) is looked for first at every claim: a small partial index
    finds the few there are without reading the waiting rows. Its condition is
    written as the claim writes it (storage/engines.py), so SQLite matches them.
    """
    model.add_index(model.index(model.next_at, name=name, where=SQL("suspect")))


# -- intake: monitors, the deliveries they accept, the event-id inbox, gaps ------------

class Monitor(BaseModel):
    """A standing subscription bound from the host's grant context at bind time."""

    id = Text(primary_key=True)
    document = Text()
    event_names = JSON()
    expires_at = DoubleField()
    window_s = DoubleField()
    approval_ttl_s = DoubleField(null=True)
    approvals = IntegerField(default=1)  # distinct approvers a task's digest needs (quorum)
    # Only a decision signed by its reviewer's key counts (decisions/signing.py).
    signed_approvals = BooleanField(default=False)
    grant_digest = CharField(max_length=64)
    active = BooleanField(default=True)
    created_at = DoubleField()
    cancelled_at = DoubleField(null=True)
    # Paused (admin/monitors.py): its deliveries wait unclaimed from paused_at on.
    # The last pause that ended is kept, so events that waited through it are
    # judged fresh as of when they arrived (steps/ingest.py).
    paused_at = DoubleField(null=True)
    last_pause_from = DoubleField(null=True)
    last_pause_until = DoubleField(null=True)


class Delivery(BaseModel):
    """One received copy of an event: only its five identifying fields."""

    id = BigAutoField()
    monitor = Text()
    event_id = Text()
    name = Text()
    document = Text()
    record_id = Text()
    occurred = BigIntegerField()
    status = Text()  # state.statuses.DeliveryStatus
    outcome = Text(null=True)
    task_key = CharField(max_length=64, null=True)
    attempts = IntegerField(default=0)
    failures = JSON(default=dict)  # failed attempts per step, reset on replay
    last_code = Text(null=True)
    # Why the last attempt failed, in words (never a record's text); null once
    # an attempt succeeds or the delivery is replayed.
    last_reason = Text(null=True)
    next_at = DoubleField()
    lease_owner = Text(null=True)
    lease_until = DoubleField(null=True)
    lease_token = Text(null=True)
    suspect = BooleanField(default=False)  # its last lease expired without an outcome
    accepted_at = DoubleField()
    updated_at = DoubleField()
    # The W3C trace context of the span that accepted it (signoff/tracing.py), if traced.
    traceparent = Text(null=True)
    tracestate = Text(null=True)

    class Meta:
        # Claim order (storage.claim): due first, then as accepted.
        indexes = ((("status", "next_at", "id"), False),)


_index_suspects(Delivery, "delivery_suspects")


class Inbox(BaseModel):
    """The first outcome per (monitor, event id): the event-id dedupe layer."""

    monitor = Text()
    event_id = Text()
    outcome = Text()
    task_key = CharField(max_length=64, null=True)
    at = DoubleField()

    class Meta:
        primary_key = CompositeKey("monitor", "event_id")


class Gap(BaseModel):
    """A span in which a document was not observed: a monitor ended, another resumed it."""

    id = BigAutoField()
    monitor = CharField()  # the monitor bound at the resume
    previous = CharField()  # the monitor that had ended
    document = CharField()
    started_at = DoubleField()  # the end of ``previous`` (cancel or expiry)
    ended_at = DoubleField()  # the resume
    mode = CharField()  # new_only or replay
    replayed = IntegerField(default=0)  # records the host named as changed, queued as events
    # resume: ``previous`` ended and ``monitor`` resumed it; lapse: the MCP Events
    # subscription of ``monitor`` (= ``previous``) lapsed and was subscribed again.
    kind = CharField(default="resume")


# -- tasks: their attempts, dead letters, purges, and the batches that make them -------

class Task(BaseModel):
    """The unit of work for one (monitor, record id, record version)."""

    key = CharField(max_length=64, primary_key=True)
    monitor = Text()
    record_id = Text()
    version = BigIntegerField()
    status = Text()  # state.statuses.TaskStatus
    code = Text(null=True)
    parked = BooleanField(default=False)
    outcome_unknown = BooleanField(default=False)
    write_possible = BooleanField(default=False)
    record = JSON()
    result = JSON()
    digest = CharField(max_length=64)
    approved_digest = CharField(max_length=64, null=True)
    approved_by = Text(null=True)
    approved_at = DoubleField(null=True)
    approval_deadline = DoubleField(null=True)
    attempts = IntegerField(default=0)
    failures = JSON(default=dict)
    next_at = DoubleField(default=0.0)
    lease_owner = Text(null=True)
    lease_until = DoubleField(null=True)
    lease_token = Text(null=True)
    suspect = BooleanField(default=False)  # its last lease expired without an outcome
    created_at = DoubleField()
    updated_at = DoubleField()
    # Earlier drafts, oldest first: {"at", "digest", "result", "record"} each
    # (see redraft.py), and the key of the task that replaced this one.
    previous_drafts = JSON(default=list)
    superseded_by = CharField(max_length=64, null=True)
    # Edits made before approving, oldest first: {by, channel, at, from_digest,
    # to_digest, diff} each (approval.py); the first from_digest is the drafted one.
    edits = JSON(default=list)
    rejected_by = Text(null=True)
    rejected_for = Text(null=True)  # the reviewer a delegate rejected for
    reject_reason = Text(null=True)
    # The W3C trace context of the span that drafted it (signoff/tracing.py), if traced.
    traceparent = Text(null=True)
    tracestate = Text(null=True)
    # The result asks a person open questions (rules/drafts.py): no policy approves it.
    needs_answers = BooleanField(default=False)
    # The drafter call's metadata (model, response id, prompt version, tokens,
    # seconds); never content, never in audit.
    draft_meta = JSON(null=True)
    # A signed reject's proof: {statement (its canonical text), signature, key_id}
    # or {statement, webauthn}.
    reject_proof = JSON(null=True)

    class Meta:
        # Claim order (storage.claim): due first, then as created, then by key. The
        # listings' order (newest first), of all tasks and of some monitors': a page
        # of them reads its rows, not a sort of the whole history.
        indexes = ((("status", "next_at", "created_at", "key"), False),
                   (("monitor", "created_at", "key"), False), (("created_at", "key"), False),
                   (("lease_until",), False))


_index_suspects(Task, "task_suspects")


class Attempt(BaseModel):
    """One try at one step of a delivery or a task: the history operators read."""

    id = BigAutoField()
    kind = Text()  # delivery or task
    ref = Text()
    at = DoubleField()
    step = Text()
    code = Text()
    worker = Text(null=True)

    class Meta:
        indexes = ((("kind", "ref"), False),)


class DeadLetter(BaseModel):
    """A delivery or task whose retry budget was spent."""

    id = BigAutoField()
    kind = Text()
    ref = Text()
    step = Text()
    code = Text()
    attempts = IntegerField()
    first_at = DoubleField()
    last_at = DoubleField()
    replayed = IntegerField(default=0)
    note = Text(null=True)
    reason = Text(null=True)  # why the last attempt failed, in words (the row's last_reason)


class PurgedTask(BaseModel):
    """A finished task whose record snapshot and result retention removed."""

    key = CharField(max_length=64, primary_key=True)
    purged_at = DoubleField()


class MonitorReminders(BaseModel):
    """A monitor bound with ``--remind-after`` / ``--escalate-after`` (chores/reminders.py)."""

    monitor = CharField(primary_key=True)
    remind_after_s = DoubleField(null=True)
    escalate_after_s = DoubleField(null=True)
    escalate_to = JSON(default=list)  # reviewer names


class TaskNudge(BaseModel):
    """How far a ready task's reminders have got: the last round sent, and its escalation.

    A round is claimed by moving ``rounds`` forward in a guarded update, so of
    many workers exactly one reminds each round.
    """

    task_key = CharField(max_length=64, primary_key=True)
    rounds = IntegerField(default=0)
    escalated_at = DoubleField(null=True)


class MonitorBatching(BaseModel):
    """A monitor bound with ``--batch-window``: its records gather into batches."""

    monitor = CharField(primary_key=True)
    window_s = DoubleField()


class RecordBatch(BaseModel):
    """Open review records of one document gathered for one task (open until closed_at)."""

    id = BigAutoField()
    monitor = CharField()
    document = CharField()
    opened_at = DoubleField()
    closes_at = DoubleField()
    closed_at = DoubleField(null=True)
    task_key = CharField(max_length=64, null=True)
    code = CharField(null=True)  # why it closed without a task, or the last failed attempt
    attempts = IntegerField(default=0)  # failed closes
    next_at = DoubleField(default=0.0)  # a failed close is tried again from then

    class Meta:
        indexes = ((("monitor", "document", "closed_at"), False),
                   (("closed_at", "closes_at"), False), (("task_key",), False))


class BatchMember(BaseModel):
    """One (record id, version) of a monitor, in exactly one batch (the primary key says so)."""

    monitor = CharField()
    record_id = CharField()
    version = BigIntegerField()
    batch = BigIntegerField(index=True)
    event_id = CharField()
    kept = BooleanField(null=True)  # at close: read back unchanged and open, so in the task

    class Meta:
        primary_key = CompositeKey("monitor", "record_id", "version")


# -- approvals: each approver's, and standing policies' --------------------------------

class Approval(BaseModel):
    """One approver's approval of one digest of a task: the quorum is counted from these."""

    id = BigAutoField()
    task_key = CharField(max_length=64)
    digest = CharField(max_length=64)
    by = Text()  # an identity (rules/identity.py): the quorum counts distinct ones
    channel = Text()  # cli, page, api, slack or policy
    at = DoubleField()
    note = Text(null=True)  # the CLI's ``--by`` word: shown, never counted
    # A signed decision's statement (its RFC 8785 text) and proof: {signature,
    # key_id} or {webauthn: {...}}. Null for an unsigned one.
    statement = Text(null=True)
    signature = JSON(null=True)
    # The reviewer a delegate decided for (``by`` stays the delegate, counted once).
    for_reviewer = Text(null=True)

    class Meta:
        indexes = ((("task_key", "digest", "by"), True),)


class StatementNonce(BaseModel):
    """A challenge signoff minted: a statement's nonce, or a passkey registration's.

    Valid five minutes by signoff's clock; spent (``used_at``) by the one
    decision that counted with it, never twice.
    """

    nonce = CharField(max_length=64, primary_key=True)
    reviewer = CharField()
    decision = CharField()  # approve, reject, edit, or register (a passkey)
    task_key = CharField(max_length=64, null=True)
    digest = CharField(max_length=64, null=True)
    issued_at = DoubleField()
    used_at = DoubleField(null=True)


class DecisionTime(BaseModel):
    """One human decision of a task and how long after the task became ready it came
    (``/metrics`` ``signoff_decision_seconds``)."""

    id = BigAutoField()
    monitor = Text()
    channel = Text()
    kind = CharField()  # approval_added, approved, edited, rejected
    seconds = DoubleField()
    at = DoubleField()


class Policy(BaseModel):
    """A standing approval: approves its monitor's ready tasks that pass acceptance."""

    id = BigAutoField()
    monitor = CharField()
    grant_digest = CharField(max_length=64)  # the grant it is bound to; a change ends it
    expires_at = DoubleField()
    max_per_hour = IntegerField(null=True)
    created_by = Text()
    created_at = DoubleField()
    ended_at = DoubleField(null=True)
    end_code = CharField(null=True)  # revoked, expired, cancelled, scope_changed, action


class PolicyDecision(BaseModel):
    """What one policy decided about one task, once: approved, capped or refused."""

    policy = BigIntegerField()
    task_key = CharField(max_length=64)
    decision = CharField()
    at = DoubleField()

    class Meta:
        primary_key = CompositeKey("policy", "task_key")


# -- the audit log ---------------------------------------------------------------------

class Audit(BaseModel):
    """What happened, by identifiers and code only: never bodies, text or secrets."""

    seq = BigAutoField()
    at = DoubleField()
    monitor = Text(null=True)
    event_id = Text(null=True)
    task_key = CharField(max_length=64, null=True)
    code = Text()
    # Who made a human decision and through which face (cli, page, api, policy);
    # null for what the engine did by itself. The actor is an identity: an
    # authenticated reviewer, ``operator:<OS account>`` on the CLI, ``policy:<id>``.
    actor = Text(null=True)
    channel = Text(null=True)
    # The CLI's ``--by`` word, kept beside the identity it does not replace.
    note = Text(null=True)
    # What a change of a reviewer, secret, policy or monitor was about (its name or id).
    subject = Text(null=True)
    # Identifiers and proofs an entry carries beyond the columns above (a digest, a
    # quorum's size, a signed statement and its signature, a key's public part),
    # never bodies, record text or secrets.
    data = JSON(null=True)
    # The hash chain (rules/auditchain.py): the chain this entry joins (null: it
    # stands alone), the hash of that chain's entry before it (null: the first),
    # this entry's own hash, and the checkpoint that covers it (null: none yet).
    chain = Text(null=True)
    prev = CharField(max_length=64, null=True)
    hash = CharField(max_length=64, null=True)
    checkpoint = BigIntegerField(null=True)

    class Meta:
        # A chain's head is its entry of highest seq (state/history.py); the
        # entries a checkpoint covers, or that none covers yet (null), in order.
        indexes = ((("chain", "seq"), False), (("checkpoint", "seq"), False))


# A task's entries outside its chain (written without its row held, or before the
# chain existed), found by the task's timeline without reading the whole audit:
# few rows, so the index costs the hot path nothing.
Audit.add_index(Audit.index(Audit.task_key, Audit.seq, name="audit_unchained_task",
                            where=SQL("chain IS NULL AND task_key IS NOT NULL")))


class Checkpoint(BaseModel):
    """A signed commitment to every chain's head: the statement and its signature
    (rules/auditchain.py), made every minute by a worker and at each export."""

    id = BigIntegerField(primary_key=True)  # the statement's ``n``: one after the last
    at = DoubleField()
    statement = JSON()
    hash = CharField(max_length=64)
    signature = Text()


class AuditReviewer(BaseModel):
    """The reviewer an audit row is about (a login): only ever a known reviewer's name."""

    seq = BigIntegerField(primary_key=True)  # the audit row's
    reviewer = CharField()


# -- webhooks (signoff serve): secrets, first answers, refusals ------------------------

class WebhookSecret(BaseModel):
    """A Standard Webhooks signing secret of a monitor (several at once = rotation)."""

    id = BigAutoField()
    monitor = CharField()
    secret = Text()  # never listed, logged or audited: shown once, at `add`
    created_at = DoubleField()

    class Meta:
        indexes = ((("monitor",), False),)


class WebhookAnswer(BaseModel):
    """The first answer to a ``webhook-id`` of a monitor: the HTTP dedupe layer."""

    monitor = CharField()
    webhook_id = CharField()
    delivery = BigIntegerField()
    event_id = Text()
    at = DoubleField(index=True)  # retention drops answers past its period

    class Meta:
        primary_key = CompositeKey("monitor", "webhook_id")


class WebhookDigest(BaseModel):
    """The sha256 of the body first answered under a ``webhook-id`` of a monitor.

    Written with the answer; a later body under the id that differs from it
    still gets the first answer, and is counted as a reuse.
    """

    monitor = CharField()
    webhook_id = CharField()
    digest = CharField(max_length=64)

    class Meta:
        primary_key = CompositeKey("monitor", "webhook_id")


class WebhookRefusal(BaseModel):
    """Refused webhook requests counted per monitor, minute and code."""

    monitor = CharField()  # "" for a monitor that does not exist
    minute = BigIntegerField(index=True)  # 0: every minute retention has folded
    code = CharField()
    count = BigIntegerField(default=0)

    class Meta:
        primary_key = CompositeKey("monitor", "minute", "code")

    @classmethod
    def add(cls, monitor, minute, code, count):
        """Count ``count`` more refusals of ``code`` for ``monitor`` in ``minute``."""
        (cls.insert(monitor=monitor, minute=minute, code=code, count=count)
         .on_conflict(conflict_target=[cls.monitor, cls.minute, cls.code],
                      update={cls.count: cls.count + EXCLUDED.count})
         .execute())


# -- reviewers (signoff serve): who may review, which monitors, sessions ---------------

class Reviewer(BaseModel):
    """A person who may use the review pages; the token is kept as its sha256."""

    name = CharField(primary_key=True)  # normalised (rules/names.py)
    token_hash = CharField(max_length=64)
    read_only = BooleanField(default=False)
    created_at = DoubleField()
    # The name's UTS #39 skeleton: unique, so two adds at once can never make
    # two reviewers who look alike. Null for reviewers added before version 6.
    skeleton = Text(null=True)
    email = Text(null=True)  # where email links to decide go (rules/contacts.py); null: none
    slack_user = Text(null=True)  # the Slack user id whose clicks are this reviewer's

    class Meta:
        indexes = ((("skeleton",), True), (("slack_user",), True))


class Delegation(BaseModel):
    """``reviewer`` lets ``delegate`` decide for them (until ``until``; null: until undone)."""

    reviewer = CharField(primary_key=True)
    delegate = CharField(index=True)
    until = DoubleField(null=True)
    created_at = DoubleField()


class ReviewerMonitor(BaseModel):
    """A monitor a limited reviewer may see and act on; a reviewer with none sees all."""

    reviewer = CharField()
    monitor = Text()

    class Meta:
        primary_key = CompositeKey("reviewer", "monitor")


class ReviewerKey(BaseModel):
    """A public key a reviewer signs decisions with: an Ed25519 key or a passkey.

    ``public_key`` is base64url: the 32 raw bytes of an Ed25519 key, or a
    passkey's COSE key; ``credential_id`` (base64url) names a passkey to its
    authenticator, and ``sign_count`` is the authenticator's last counter.
    """

    key_id = CharField(max_length=64, primary_key=True)
    reviewer = CharField(index=True)
    kind = CharField()  # ed25519 or webauthn
    public_key = Text()
    fingerprint = Text(unique=True)
    credential_id = Text(null=True, unique=True)
    sign_count = BigIntegerField(default=0)
    created_at = DoubleField()


class EmailLink(BaseModel):
    """A link mailed to a reviewer to decide one task's one digest: only its token's sha256."""

    token_hash = CharField(max_length=64, primary_key=True)
    reviewer = CharField()
    task_key = CharField(max_length=64, index=True)
    digest = CharField(max_length=64)
    created_at = DoubleField()
    expires_at = DoubleField(index=True)  # pruned a week after (chores/reminders.py)
    spent_at = DoubleField(null=True)  # the first decision through it


class ReviewSession(BaseModel):
    """A logged-in browser: the sha256 of its cookie, whose session it is, until when."""

    token_hash = CharField(max_length=64, primary_key=True)
    reviewer = CharField(index=True)
    created_at = DoubleField()
    expires_at = DoubleField()


# -- notifications: the outbox and how far the audit log was read ----------------------

class Notification(BaseModel):
    """One notification to send (the outbox).

    A ``task.ready`` one is keyed by its task (one per task, ever). A decision's
    (``task.rejected``, ``task.approval_added``), a reminder's or an escalation's is
    keyed by the digest of its audit row's seq, and names its task in ``task`` and
    its row in ``audit_seq``; an email (type ``email``, chores/mail.py) by the digest
    of its row's seq and its ``reviewer``.
    """

    task_key = CharField(max_length=64, primary_key=True)
    type = Text(null=True)  # null: task.ready
    task = CharField(max_length=64, null=True)
    audit_seq = BigIntegerField(null=True)
    reviewer = Text(null=True)  # an email's addressee (type ``email``)
    status = CharField(default="pending")  # pending, sent, dead
    attempts = IntegerField(default=0)
    last_code = CharField(null=True)
    next_at = DoubleField()
    created_at = DoubleField()
    updated_at = DoubleField()

    class Meta:
        indexes = ((("status", "next_at"), False),)


class SlackMessage(BaseModel):
    """The Slack message that announced a task: where it is, so it can be updated."""

    task_key = CharField(max_length=64, primary_key=True)
    channel = Text()
    ts = Text()
    posted_at = DoubleField()


class MonitorSlack(BaseModel):
    """A monitor bound with ``--slack-channel``: its ready tasks are posted there."""

    monitor = CharField(primary_key=True)
    channel = Text()


class Cursor(BaseModel):
    """How far a reader of the audit log has got (the notification pump's place)."""

    name = CharField(primary_key=True)
    seq = BigIntegerField(default=0)


# -- MCP Events: subscriptions signoff asked a host's MCP server for -------------------

class Subscription(BaseModel):
    """One ``events/subscribe`` signoff made for a monitor (admin/subscriptions.py).

    Written as ``pending`` before the server is asked (its callback
    verification arrives before the answer), ``active`` once it answered.
    ``name``, ``arguments``, ``url`` and ``secret`` are what was sent: the
    server names the subscription by them, so a refresh and an unsubscribe
    send them again. The secret is never listed, logged or audited.
    """

    id = BigAutoField()
    monitor = CharField(index=True)
    name = Text()  # the server's event name
    arguments = JSON()  # with the monitor's document filled in
    field_map = JSON()  # where the event's fields are in a delivery
    url = Text()  # the callback: <public_url>/hooks/<monitor>
    secret = Text()
    ttl_s = DoubleField()
    subscription_id = Text(null=True)  # the server's id, once known
    status = Text()  # state.statuses.SubscriptionStatus: pending, active, lapsed, ended
    refresh_before = DoubleField(null=True)  # when the server drops it unless refreshed
    subscribed_at = DoubleField(null=True)  # the last subscribe the server answered
    last_delivery_at = DoubleField(null=True)
    lapsed_at = DoubleField(null=True)
    ended_at = DoubleField(null=True)
    end_code = Text(null=True)  # cancelled, expired, scope_changed, subscribe_failed, ...
    unsubscribed = BooleanField(default=False)  # the server said it is gone (or never held it)
    # The worker chore that refreshes, resubscribes and unsubscribes: due at
    # next_at, claimed by writing a lease token (and moving next_at on).
    next_at = DoubleField(default=0.0)
    lease_token = Text(null=True)
    attempts = IntegerField(default=0)  # failed tries since the last success
    last_code = Text(null=True)
    created_at = DoubleField()
    updated_at = DoubleField()

    class Meta:
        indexes = ((("next_at",), False),)


class EventDeliveryCount(BaseModel):
    """Requests that came through a subscription, counted by what they were answered."""

    code = CharField(primary_key=True)  # accepted, duplicate, verified, or the refusal
    count = BigIntegerField(default=0)

    @classmethod
    def add(cls, counts):
        """Add ``{code: n}`` to the counts."""
        for code, n in sorted(counts.items()):
            (cls.insert(code=code, count=n)
             .on_conflict(conflict_target=[cls.code], update={cls.count: cls.count + EXCLUDED.count})
             .execute())


# -- the model drafter: tokens per monitor and hour, calls by outcome ------------------

class DrafterUsage(BaseModel):
    """Tokens the drafter spent for one monitor in one clock hour (``tokens_per_hour``)."""

    monitor = CharField()
    hour = BigIntegerField()  # Unix seconds // 3600, by signoff's clock
    input_tokens = BigIntegerField(default=0)
    output_tokens = BigIntegerField(default=0)
    calls = BigIntegerField(default=0)

    class Meta:
        primary_key = CompositeKey("monitor", "hour")


class DrafterCallCount(BaseModel):
    """Drafter calls counted by outcome (``ok`` or the failed attempt's code)."""

    outcome = CharField(primary_key=True)
    count = BigIntegerField(default=0)


# -- workers: running processes and the chores they share ------------------------------

class WorkerBeat(BaseModel):
    """A running worker process: where it runs, since when, and its loop's last beat."""

    id = CharField(max_length=32, primary_key=True)  # one per run of a process
    host = Text()
    pid = BigIntegerField()
    threads = IntegerField()
    started_at = DoubleField()
    beat_at = DoubleField()


class Chore(BaseModel):
    """A periodic job shared by every worker: the last start is claimed on this row."""

    name = CharField(primary_key=True)
    last_run_at = DoubleField(default=0.0)
    last_summary = JSON(null=True)


# -- tallies: counts of finished rows, kept as they finish ------------------------------

class Tallied(BaseModel):
    """The key and count of a tally (``Tally``) and of what a transaction added to one
    (``TallyDelta``): kind, monitor, status and detail (an outcome, a flag, a step
    and code)."""

    kind = CharField()
    monitor = Text()
    status = CharField()
    detail = Text()  # an outcome may be a host's code of any text
    n = BigIntegerField(default=0)


class Tally(Tallied):
    """How many rows of a kind reached a status they never leave (a done delivery, a
    done, rejected or expired task, a sent notification, an attempt): the counts
    ``stats``, ``/metrics`` and the listings read instead of counting the whole history."""

    class Meta:
        primary_key = CompositeKey("kind", "monitor", "status", "detail")


class TallyDelta(Tallied):
    """What a transaction added to the tallies, inserted beside its moves (writers
    never update a shared row) and folded into ``Tally`` in the background."""

    id = BigAutoField()


# Every table, by concept as above: `signoff init` creates them all.
MODELS = [
    Monitor, Delivery, Inbox, Gap,
    Task, Attempt, DeadLetter, PurgedTask, MonitorBatching, RecordBatch, BatchMember,
    MonitorReminders, TaskNudge,
    Approval, StatementNonce, DecisionTime, Policy, PolicyDecision,
    Audit, AuditReviewer, Checkpoint,
    WebhookSecret, WebhookAnswer, WebhookDigest, WebhookRefusal,
    Reviewer, ReviewerMonitor, ReviewerKey, EmailLink, ReviewSession, Delegation,
    Notification, SlackMessage, MonitorSlack, Cursor,
    Subscription, EventDeliveryCount,
    DrafterUsage, DrafterCallCount,
    WorkerBeat, Chore,
    Tally, TallyDelta,
]
