"""Peewee models: every durable fact signoff keeps, and the database seam.

The rows are the truth; a queue message is only a wake-up. Times are UTC epoch
seconds stored as floats, so SQLite and PostgreSQL read back the same values.
"""

from peewee import (
    AutoField, BigAutoField, BigIntegerField, BooleanField, CharField, DatabaseProxy, DoubleField,
    IntegerField, JSONField, Model, PostgresqlDatabase, SqliteDatabase, TextField,
    CompositeKey,
)

from .errors import ConfigError

db = DatabaseProxy()


class BaseModel(Model):
    class Meta:
        database = db
        legacy_table_names = False


class Monitor(BaseModel):
    """A standing subscription bound from the host's grant context at bind time."""

    id = CharField(primary_key=True)
    document = CharField()
    event_names = JSONField()
    expires_at = DoubleField()
    window_s = DoubleField()
    approval_ttl_s = DoubleField(null=True)
    grant_digest = CharField(max_length=64)
    active = BooleanField(default=True)
    created_at = DoubleField()
    cancelled_at = DoubleField(null=True)


class Delivery(BaseModel):
    """One received copy of an event: only its five identifying fields."""

    id = AutoField()
    monitor = CharField()
    event_id = CharField()
    name = CharField()
    document = CharField()
    record_id = CharField()
    occurred = BigIntegerField()
    status = CharField(default="queued")  # queued, processing, retrying, done, dead
    outcome = CharField(null=True)
    task_key = CharField(max_length=64, null=True)
    attempts = IntegerField(default=0)
    failures = JSONField(default=dict)  # failed attempts per step, reset on replay
    last_code = CharField(null=True)
    next_at = DoubleField()
    lease_owner = CharField(null=True)
    lease_until = DoubleField(null=True)
    lease_token = CharField(null=True)
    accepted_at = DoubleField()
    updated_at = DoubleField()

    class Meta:
        indexes = ((("status", "next_at"), False),)


class Inbox(BaseModel):
    """The first outcome per (monitor, event id): the event-id dedupe layer."""

    monitor = CharField()
    event_id = CharField()
    outcome = CharField()
    task_key = CharField(max_length=64, null=True)
    at = DoubleField()

    class Meta:
        primary_key = CompositeKey("monitor", "event_id")


class Task(BaseModel):
    """The unit of work for one (monitor, record id, record version)."""

    key = CharField(max_length=64, primary_key=True)
    monitor = CharField()
    record_id = CharField()
    version = BigIntegerField()
    status = CharField(default="ready")
    code = CharField(null=True)
    parked = BooleanField(default=False)
    outcome_unknown = BooleanField(default=False)
    write_possible = BooleanField(default=False)
    record = JSONField()
    result = JSONField()
    digest = CharField(max_length=64)
    approved_digest = CharField(max_length=64, null=True)
    approved_by = CharField(null=True)
    approved_at = DoubleField(null=True)
    approval_deadline = DoubleField(null=True)
    attempts = IntegerField(default=0)
    failures = JSONField(default=dict)
    next_at = DoubleField(default=0.0)
    lease_owner = CharField(null=True)
    lease_until = DoubleField(null=True)
    lease_token = CharField(null=True)
    created_at = DoubleField()
    updated_at = DoubleField()

    class Meta:
        indexes = ((("status", "next_at"), False), (("monitor",), False),
                   (("lease_until",), False))


class Attempt(BaseModel):
    """One try at one step of a delivery or a task: the history operators read."""

    id = AutoField()
    kind = CharField()  # delivery or task
    ref = CharField()
    at = DoubleField()
    step = CharField()
    code = CharField()
    worker = CharField(null=True)

    class Meta:
        indexes = ((("kind", "ref"), False),)


class Audit(BaseModel):
    """What happened, by identifiers and code only: never bodies, text or secrets."""

    seq = AutoField()
    at = DoubleField()
    monitor = CharField(null=True)
    event_id = CharField(null=True)
    task_key = CharField(max_length=64, null=True)
    code = CharField()


class DeadLetter(BaseModel):
    """A delivery or task whose retry budget was spent."""

    id = AutoField()
    kind = CharField()
    ref = CharField()
    step = CharField()
    code = CharField()
    attempts = IntegerField()
    first_at = DoubleField()
    last_at = DoubleField()
    replayed = IntegerField(default=0)
    note = TextField(null=True)


# A row whose last lease expired without an outcome (a "suspect", see
# leases.py) is looked for first at every claim: a small partial index finds
# the few there are without reading the waiting rows.
Delivery.add_index(Delivery.index(Delivery.next_at, name="delivery_suspect",
                                  where=(Delivery.last_code == "lease_expired")))
Task.add_index(Task.index(Task.next_at, name="task_suspect", where=(Task.code == "lease_expired")))

MODELS = [Monitor, Delivery, Inbox, Task, Attempt, Audit, DeadLetter]


# -- signoff serve: webhook secrets and answers, reviewers, notifications -----

class WebhookSecret(BaseModel):
    """A Standard Webhooks signing secret of a monitor (several at once = rotation)."""

    id = BigAutoField()
    monitor = CharField()
    secret = TextField()  # never listed, logged or audited: shown once, at `add`
    created_at = DoubleField()

    class Meta:
        indexes = ((("monitor",), False),)


class WebhookAnswer(BaseModel):
    """The first answer to a ``webhook-id`` of a monitor: the HTTP dedupe layer."""

    monitor = CharField()
    webhook_id = CharField()
    delivery = BigIntegerField()
    event_id = TextField()
    at = DoubleField()

    class Meta:
        primary_key = CompositeKey("monitor", "webhook_id")


class WebhookRefusal(BaseModel):
    """Refused webhook requests counted per monitor, minute and code."""

    monitor = CharField()  # "" for a monitor that does not exist
    minute = BigIntegerField()
    code = CharField()
    count = BigIntegerField(default=0)

    class Meta:
        primary_key = CompositeKey("monitor", "minute", "code")


class Reviewer(BaseModel):
    """A person who may use the review pages; the token is kept as its sha256."""

    name = CharField(primary_key=True)
    token_hash = CharField(max_length=64)
    read_only = BooleanField(default=False)
    created_at = DoubleField()


class ReviewSession(BaseModel):
    """A logged-in browser: the sha256 of its cookie, whose session it is, until when."""

    token_hash = CharField(max_length=64, primary_key=True)
    reviewer = CharField(index=True)
    created_at = DoubleField()
    expires_at = DoubleField()


class Notification(BaseModel):
    """One ``task.ready`` notification to send (the outbox), keyed by task."""

    task_key = CharField(max_length=64, primary_key=True)
    status = CharField(default="pending")  # pending, sent, dead
    attempts = IntegerField(default=0)
    last_code = CharField(null=True)
    next_at = DoubleField()
    created_at = DoubleField()
    updated_at = DoubleField()

    class Meta:
        indexes = ((("status", "next_at"), False),)


class Cursor(BaseModel):
    """How far a reader of the audit log has got (the notification pump's place)."""

    name = CharField(primary_key=True)
    seq = BigIntegerField(default=0)


SERVE_MODELS = [WebhookSecret, WebhookAnswer, WebhookRefusal, Reviewer, ReviewSession,
                Notification, Cursor]
MODELS += SERVE_MODELS


def open_database(config):
    """Point the models at the database ``config`` names (SQLite file by default)."""
    url = config.database_url
    if url is None:
        database = SqliteDatabase(
            str(config.state_path),
            pragmas={"journal_mode": "wal", "synchronous": "full",
                     "foreign_keys": 1, "busy_timeout": 30_000},
            timeout=30,
            # Every transaction takes the write lock at BEGIN: a deferred
            # read-then-write transaction fails at once under contention.
            lock_type="IMMEDIATE",
            returning_clause=True,
        )
    elif url.startswith(("postgres://", "postgresql://")):
        database = PostgresqlDatabase(url, prefer_psycopg3=True, autorollback=True)
    else:
        raise ConfigError("bad_config", f"unsupported database url {url!r}")
    db.initialize(database)
    return database


def create_schema():
    """Create every table and index that is missing; never drops or resets data."""
    db.create_tables(MODELS, safe=True)


def is_sqlite():
    """True when the state database is SQLite (the claim statement differs)."""
    return isinstance(db.obj, SqliteDatabase)


MAX_PARAMS = 30_000  # below SQLite's 32,766 bound parameters per statement


def insert_rows(model, rows, ignore_conflicts=False, returning=()):
    """Insert dicts into ``model`` in as few statements as the parameter limit allows.

    Writes what ``model.insert_many(rows)`` writes (field defaults included),
    without building a query tree per value, which for a batch of dozens of rows
    is most of the cost. ``ignore_conflicts`` skips rows that hit a unique key
    (``ON CONFLICT DO NOTHING``); ``returning`` names fields to return for the
    rows actually inserted.
    """
    if not rows:
        return []
    database = db.obj
    sqlite = isinstance(database, SqliteDatabase)
    defaults = {f.name: d for f, d in model._meta.defaults.items() if f.name not in rows[0]}
    fields = [model._meta.fields[name] for name in (*rows[0], *defaults)]
    holders, convert = [], []
    for f in fields:
        if sqlite and isinstance(f, JSONField):
            # As JSONField stores on SQLite: json(text), JSON-typed; None is NULL.
            holders.append(f"json({database.param})")
            convert.append(lambda v, dumps=f._dumps: None if v is None else dumps(v))
        else:
            holders.append(database.param)
            convert.append(f.db_value)
    sql = (f'INSERT INTO "{model._meta.table_name}" ('
           + ", ".join(f'"{f.column_name}"' for f in fields) + ") VALUES ")
    tail = " ON CONFLICT DO NOTHING" if ignore_conflicts else ""
    if returning:
        tail += " RETURNING " + ", ".join(f'"{model._meta.fields[n].column_name}"' for n in returning)
    one = "(" + ", ".join(holders) + ")"
    fixed = {name: d() if callable(d) else d for name, d in defaults.items()}
    per = max(1, MAX_PARAMS // len(fields))
    out = []
    for lo in range(0, len(rows), per):
        chunk = rows[lo:lo + per]
        params = [c(r[f.name] if f.name in r else fixed[f.name])
                  for r in chunk for f, c in zip(fields, convert)]
        cursor = database.execute_sql(sql + ", ".join([one] * len(chunk)) + tail, params)
        if returning:
            out.extend(tuple(row) for row in cursor.fetchall())
    return out
