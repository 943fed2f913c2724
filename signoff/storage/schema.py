"""The schema: create it, bring an older one up to date, and refuse one this code does not know."""

import json
import time

from peewee import DatabaseError, JSONField

from ..errors import NoHome, StorageError
from .database import bind, engine_of
from .engines import label
from .faults import describe

# Bumped whenever a table, column or index changes; `signoff init` records it
# (and brings an older schema up to date).
SCHEMA_VERSION = 8
SCHEMA_TABLE = "signoff_schema"
# Indexes of older versions that `init` drops. Version 2 made each claim index
# end in the claim's tie-break, so every engine claims in the same order;
# version 3 indexed the times retention prunes webhook answers and refusals by;
# version 4 moved the suspect mark out of the message columns into a column of
# its own, with its own partial indexes; version 5 added columns and tables only
# (traces, heartbeats, subscriptions, quorum and edits, pauses, reviewers per
# monitor, decision notifications, drafter usage), which init adds with their
# defaults; version 6 added columns only (identities' notes and audit subjects,
# the reason of a delivery's failed attempt); version 7 added the audit's data, its
# hash chain and the checkpoints that seal it (entries from before stand alone), the
# tallies of finished rows (counted from the rows by the upgrade), tasks indexed in
# the listings' order (all, and by monitor, replacing ``task_monitor``), and the
# signed approvals' columns and tables (reviewer keys, statement nonces, a monitor's
# signed approvals, the statements and signatures kept with decisions), reviewers'
# email addresses, email links, reminders and escalation and an email
# notification's addressee, and Slack users, messages and channels, delegations,
# whom a delegate decided for, and decision times; version 8 indexed a task's audit
# entries outside its chain, so its timeline is read through indexes.
RETIRED_INDEXES = ("delivery_status_next_at", "task_status_next_at", "delivery_suspect",
                   "task_suspect", "task_monitor")
# The tallies (state/tallies.py) counted afresh from the rows: what an upgrade to
# version 7 starts them from. The same statuses as ``tallies.SETTLED``.
TALLY_RECOUNT = (
    "DELETE FROM tally",
    "DELETE FROM tally_delta",
    "INSERT INTO tally (kind, monitor, status, detail, n) SELECT 'delivery', monitor, status, "
    "COALESCE(outcome, ''), COUNT(*) FROM delivery WHERE status = 'done' "
    "GROUP BY monitor, status, COALESCE(outcome, '')",
    "INSERT INTO tally (kind, monitor, status, detail, n) SELECT 'task', monitor, status, '', "
    "COUNT(*) FROM task WHERE status IN ('done', 'rejected', 'expired') GROUP BY monitor, status",
    *("INSERT INTO tally (kind, monitor, status, detail, n) SELECT 'task', monitor, status, "
      f"'{flag}', COUNT(*) FROM task WHERE status IN ('done', 'rejected', 'expired') "
      f"AND {where} GROUP BY monitor, status"
      for flag, where in (("parked", "parked = {true}"),
                          ("outcome_unknown", "outcome_unknown = {true}"),
                          ("recovered", "status = 'done' AND write_possible = {true} "
                                        "AND attempts > 1"))),
    "INSERT INTO tally (kind, monitor, status, detail, n) SELECT 'notification', '', status, "
    "'', COUNT(*) FROM notification WHERE status = 'sent' GROUP BY status",
    "INSERT INTO tally (kind, monitor, status, detail, n) SELECT 'attempt', '', step, code, "
    "COUNT(*) FROM attempt GROUP BY step, code",
)
# Data an upgrade from below a version must carry over, run once the columns exist.
BACKFILLS = {
    4: ("UPDATE delivery SET suspect = {true} WHERE last_code = 'lease_expired' "
        "AND status IN ('queued', 'retrying', 'processing')",
        "UPDATE task SET suspect = {true} WHERE code = 'lease_expired' "
        "AND status IN ('approved', 'uncertain')"),
    7: TALLY_RECOUNT,
}


def create_schema(database, models):
    """Create every missing table, column and index and record the schema version.

    Safe when several processes run it at once: PostgreSQL serialises them on
    an advisory lock, SQLite on the write lock its transaction takes at BEGIN.
    Never drops or resets data; a column a newer version added to an existing
    table is added with its default.
    """
    with bind(database), database.atomic():
        engine_of(database).lock_schema()
        found = _recorded_version(database)
        for name in RETIRED_INDEXES:
            database.execute_sql(f'DROP INDEX IF EXISTS "{name}"')
        _add_missing_columns(database, models)
        database.create_tables(models, safe=True)
        for version, statements in sorted(BACKFILLS.items()):
            if found is not None and found < version:
                for sql in statements:
                    database.execute_sql(sql.format(true=engine_of(database).true))
        database.execute_sql(f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} "
                             "(version INTEGER NOT NULL, at DOUBLE PRECISION NOT NULL)")
        database.execute_sql(f"DELETE FROM {SCHEMA_TABLE}")
        database.execute_sql(f"INSERT INTO {SCHEMA_TABLE} VALUES ({database.param}, "
                             f"{database.param})", (SCHEMA_VERSION, time.time()))


def recount_tallies(database):
    """Count the tallies afresh from the rows (for rows written around the writers:
    a bench's history, a restore), in one transaction."""
    with bind(database), database.atomic():
        for sql in TALLY_RECOUNT:
            database.execute_sql(sql.format(true=engine_of(database).true))


def _recorded_version(database):
    if SCHEMA_TABLE not in database.get_tables():
        return None
    row = database.execute_sql(f"SELECT version FROM {SCHEMA_TABLE}").fetchone()
    return row[0] if row else None


def _add_missing_columns(database, models):
    """``ALTER TABLE … ADD COLUMN`` for each field an existing table lacks."""
    tables = set(database.get_tables())
    for model in models:
        table = model._meta.table_name
        if table not in tables:
            continue  # create_tables makes it whole
        present = {c.name for c in database.get_columns(table)}
        for field in model._meta.sorted_fields:
            if field.column_name not in present:
                database.execute_sql(f'ALTER TABLE "{table}" ADD COLUMN '
                                     + _column_definition(database, field))


def _column_definition(database, field):
    ctx = database.get_sql_context()
    ctx.sql(field.ddl(ctx))
    sql, _ = ctx.query()
    default = field.default() if callable(field.default) else field.default
    if default is not None:
        value = json.dumps(default) if isinstance(field, JSONField) else field.db_value(default)
        sql += " DEFAULT " + _literal(value)
    elif not field.null:
        raise StorageError("schema_mismatch", f"cannot add column {field.column_name!r}: "
                           "it is not null and has no default")
    return sql


def _literal(value):
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def check_schema(database):
    """Refuse a database without this version's schema, with what to run."""
    where = label(database)
    try:
        with bind(database):
            tables = set(database.get_tables())
            if SCHEMA_TABLE not in tables:
                if {"delivery", "task"} <= tables:  # made before versions were recorded
                    raise StorageError("schema_mismatch", f"{where} has signoff tables but no "
                                       "schema version: run `signoff init` to record it")
                if tables:
                    raise StorageError("database_error", f"{where} is not a signoff database "
                                       "(it holds other tables): point signoff elsewhere, "
                                       "or move it away and run `signoff init`")
                raise NoHome("no_home", f"{where} holds no signoff schema: run `signoff init`")
            found = [v for (v,) in database.execute_sql(f"SELECT version FROM {SCHEMA_TABLE}")]
    except DatabaseError as exc:
        raise StorageError(*describe(exc, database)) from None
    if found != [SCHEMA_VERSION]:
        what = ("run `signoff init` to bring it up to date" if found and found[0] < SCHEMA_VERSION
                else "upgrade signoff, or run `signoff init` on a new database")
        raise StorageError("schema_mismatch", f"{where} has schema version "
                           f"{found[0] if found else 'none'}, this signoff knows "
                           f"{SCHEMA_VERSION}: {what}")
