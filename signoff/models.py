"""Peewee models: every durable fact signoff keeps, and the database seam.

The rows are the truth; a queue message is only a wake-up. Times are UTC epoch
seconds stored as floats, so SQLite and PostgreSQL read back the same values.
"""

from contextlib import contextmanager

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
    # Earlier drafts, oldest first: {"at", "digest", "result", "record"} each
    # (see redraft.py), and the key of the task that replaced this one.
    previous_drafts = JSONField(default=list)
    superseded_by = CharField(max_length=64, null=True)

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


class PurgedTask(BaseModel):
    """A finished task whose record snapshot and result retention removed."""

    key = CharField(max_length=64, primary_key=True)
    purged_at = DoubleField()


class Chore(BaseModel):
    """A periodic job shared by every worker: the last start is claimed on this row."""

    name = CharField(primary_key=True)
    last_run_at = DoubleField(default=0.0)
    last_summary = JSONField(null=True)


class Policy(BaseModel):
    """A standing approval: approves its monitor's ready tasks that pass acceptance."""

    id = BigAutoField()
    monitor = CharField()
    grant_digest = CharField(max_length=64)  # the grant it is bound to; a change ends it
    expires_at = DoubleField()
    max_per_hour = IntegerField(null=True)
    created_by = TextField()
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


# A row whose last lease expired without an outcome (a "suspect", see
# leases.py) is looked for first at every claim: a small partial index finds
# the few there are without reading the waiting rows.
Delivery.add_index(Delivery.index(Delivery.next_at, name="delivery_suspect",
                                  where=(Delivery.last_code == "lease_expired")))
Task.add_index(Task.index(Task.next_at, name="task_suspect", where=(Task.code == "lease_expired")))

MODELS = [Monitor, Delivery, Inbox, Task, Attempt, Audit, DeadLetter, PurgedTask, Chore,
          Policy, PolicyDecision, Gap, MonitorBatching, RecordBatch, BatchMember]


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


@contextmanager
def read_snapshot():
    """One read-only transaction: every query inside sees the same committed state.

    SQLite: a deferred ``BEGIN`` (the database's ``atomic()`` takes the write
    lock, which a reader must not); the snapshot starts at the first read.
    PostgreSQL: ``REPEATABLE READ READ ONLY``.
    """
    if is_sqlite():
        begin = {"lock_type": "DEFERRED"}
    else:
        begin = {"isolation_level": "REPEATABLE READ READ ONLY"}
    with db.obj.transaction(**begin):
        yield


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
