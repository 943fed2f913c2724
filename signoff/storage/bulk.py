"""Rows in bulk: inserts in as few statements as the engine allows, and fetched rows
turned into model instances after the transaction that fetched them."""

import functools

from peewee import (CharField, FloatField, IntegerField, JSONField, ModelObjectCursorWrapper,
                    ModelTupleCursorWrapper, TextField)

from .database import resolve
from .fields import Text, escape_text, lossless_dumps


class Fetched:
    """Rows a statement returned, kept raw until ``instances()`` is asked for.

    A claim runs under the write lock (SQLite has one for the whole file):
    turning fifty rows into model instances there cost more than the claim's
    own SQL, and every other writer, a caller enqueueing one event included,
    waited for it. So the rows are only fetched in the transaction, and made
    into instances after it.
    """

    def __init__(self, model, description, rows):
        self.model, self.description, self.rows = model, description, rows

    @classmethod
    def run(cls, model, sql, params):
        """Run ``sql`` and fetch every row it returns."""
        cursor = model._meta.database.execute_sql(sql, params)
        return cls(model, cursor.description, cursor.fetchall())

    def __bool__(self):
        return bool(self.rows)

    def instances(self):
        """The rows as ``model`` instances, converted as a query would convert them."""
        if not self.rows:
            return []
        columns = tuple(d[0] for d in self.description)
        build = _builder(self.model, columns)
        if build is None:  # a column that is not a field of the model, or one twice
            return list(ModelObjectCursorWrapper(_Replay(self.description, self.rows),
                                                 self.model, [], self.model))
        return build(self.rows)


def select_instances(query):
    """``list(query)`` for a select of ``query.model``'s columns, built as ``Fetched`` builds.

    For the reads of many whole rows at once (a bulk approval's tasks), where
    Peewee's own wrapper, which sets each value through the field's descriptor,
    costs more than the statement.
    """
    sql, params = query.sql()
    return Fetched.run(query.model, sql, params).instances()


class KeyedSelect:
    """A select over a list of keys, built by Peewee once for each engine and run again
    with other keys.

    For the reads a hot path makes every batch with a key list and nothing else
    changing (a chain's heads, submit's look at the chain, the check before each
    write to a host without a batch write): building such a select costs as much
    as the database's answer. ``build(keys)`` makes the
    query with the SQL node ``keys`` as its condition on ``field`` (``column IN
    the keys``, all of them one parameter: ``Engine.key_set``). Rows come back
    as the driver returns them: for columns whose values are kept as read
    (keys, hashes, numbers).
    """

    def __init__(self, build, field):
        self.build, self.field = build, field
        self.plans = {}

    def rows(self, keys):
        """The rows of the select for ``keys`` (values of ``field``)."""
        database = resolve()
        engine = database.engine
        plan = self.plans.get(type(engine))
        if plan is None:
            plan = self.plans[type(engine)] = self._plan(engine)
        sql, params, at = plan
        convert = to_param(self.field)
        params = list(params)
        params[at] = engine.key_set(self.field.column_name, [convert(k) for k in keys]).params[0]
        return database.execute_sql(sql, params).fetchall()

    def _plan(self, engine):
        """``(sql, params, the position of the keys' parameter)``."""
        node = engine.key_set(self.field.column_name, ["(the keys of a keyed select)"])
        sql, params = self.build(node).sql()
        return sql, params, params.index(node.params[0])


def select_tuples(query):
    """``list(query.tuples())``, with each value already of its column's type kept as read.

    Peewee calls every column's ``python_value`` for every row; for the plain
    text, integer and real columns (keys, digests, counts) that returns the value
    itself. A bulk approval reads four such lists of thousands of rows.
    """
    fetched = Fetched.run(query.model, *query.sql())
    rows = fetched.rows
    if not rows:
        return []
    columns = ModelTupleCursorWrapper(_Replay(fetched.description, ()), query.model,
                                      query._returning)
    columns.initialize()  # Peewee's own match of the columns to their fields
    convert = [(i, read) for i, read in enumerate(map(_reader, columns.fields,
                                                      columns.converters)) if read]
    if not convert:
        return [tuple(row) for row in rows]
    out = []
    for row in rows:
        row = list(row)
        for i, read in convert:
            row[i] = read(row[i])
        out.append(tuple(row))
    return out


def _reader(field, converter):
    """What turns a column's value into Python; None where the value is kept as read."""
    kind = _kept(field) if converter is not None and field is not None else None
    if kind is None:
        return converter
    return lambda v: v if v is None or type(v) is kind else converter(v)


def _kept(field):
    """The type whose values ``field`` reads back as they are (``python_value`` would
    return them unchanged); None where every value converts. Not ``Text``: an
    escaped character may be in any text."""
    return None if isinstance(field, Text) else _kind(field)


def _kind(field):
    """The Python type a plain text, integer or real column holds; else None."""
    return (str if isinstance(field, (TextField, CharField)) else
            int if isinstance(field, IntegerField) else
            float if isinstance(field, FloatField) else None)


@functools.lru_cache(maxsize=256)
def _builder(model, columns):
    # What Peewee's ModelObjectCursorWrapper makes of a row (each value as its
    # field's python_value gives it, into the instance's data, nothing dirty),
    # without its dict of keyword arguments and a descriptor call per value: 27 µs
    # a task row through Peewee, 17 µs here. None when a column is not a field of
    # ``model`` or comes twice (Peewee renames the second).
    fields = model._meta.combined
    if len(set(columns)) < len(columns) or not all(c in fields for c in columns):
        return None
    # A NULL reads as None through every field, and a value of its column's kept
    # type as it is (``_kept``: python_value would return it unchanged, in two
    # calls); other columns always convert (no value's type is None).
    plan = [(i, fields[c].name, _kept(fields[c]), fields[c].python_value)
            for i, c in enumerate(columns)]
    new = object.__new__

    def build(rows):
        out = []
        for row in rows:
            instance = new(model)
            instance.__data__ = {name: value if (value := row[i]) is None or type(value) is kind
                                 else read(value) for i, name, kind, read in plan}
            instance._dirty = set()
            instance.__rel__ = {}
            out.append(instance)
        return out
    return build


class _Replay:
    """Just enough of a DB-API cursor to hand fetched rows to Peewee's row wrappers."""

    def __init__(self, description, rows):
        self.description, self._rows = description, iter(rows)

    def fetchone(self):
        return next(self._rows, None)

    def close(self):
        pass


# -- bulk inserts --------------------------------------------------------------

MAX_PARAMS = 30_000  # below SQLite's 32,766 bound parameters per statement
# Where the engine takes arrays (PostgreSQL), an insert of more values than this
# sends one array per column instead: psycopg parses a statement of at most 50
# parameters once and keeps it, a longer one every time; and turning a list into
# an array costs more than a few placeholders of a statement parsed already
# (one event a call: 77 µs of CPU with VALUES, 133 µs with arrays).
CACHED_PARAMS = 50


def insert_rows(model, rows, ignore_conflicts=False, returning=()):
    """Insert dicts into ``model`` in as few statements as the parameter limit allows.

    Writes what ``model.insert_many(rows)`` writes (field defaults included),
    without building a query tree per value, which for a batch of dozens of rows
    is most of the cost. ``ignore_conflicts`` skips rows that hit a unique key
    (``ON CONFLICT DO NOTHING``); ``returning`` names fields to return for the
    rows actually inserted.
    """
    return PreparedInsert(model, rows, ignore_conflicts, returning).run()


class PreparedInsert:
    """The rows of an ``insert_rows`` call converted to parameters now, inserted by ``run``.

    Converting values (JSON above all) is most of an insert's Python work; a
    writer that prepares its rows before its transaction holds the write lock
    for the statements only.
    """

    def __init__(self, model, rows, ignore_conflicts=False, returning=()):
        self.database = None
        self.params = []
        if not rows:
            return
        database = model._meta.database
        self.database = resolve(database)  # resolved once, not per value
        self.plan = plan = _insert_plan(model, tuple(rows[0]), type(self.database.engine),
                                        ignore_conflicts, tuple(returning))
        fixed = plan.fixed
        self.params = [[c(r[name]) for name, c in plan.given]
                       + (fixed if fixed is not None else plan.defaults()) for r in rows]

    def run(self, only=None):
        """Insert the rows (those at the positions in ``only``, if given); the returned rows."""
        params = self.params if only is None else [self.params[i] for i in only]
        if not params:
            return []
        plan = self.plan
        if plan.columnar and len(params) * len(plan.fields) > CACHED_PARAMS:
            chunks = [(plan.columnar, [list(column) for column in zip(*params)])]
        else:
            per = max(1, MAX_PARAMS // len(plan.fields))
            chunks = [(plan.head + ", ".join([plan.one] * len(chunk)) + plan.tail,
                       [v for row in chunk for v in row])
                      for chunk in (params[lo:lo + per] for lo in range(0, len(params), per))]
        out, back = [], plan.returning
        for sql, values in chunks:
            cursor = self.database.execute_sql(sql, values)
            if back:  # as a query would give them: text read back is unescaped
                out.extend(tuple(f.python_value(v) for f, v in zip(back, row))
                           for row in cursor.fetchall())
        return out


class _InsertPlan:
    """One insert shape's SQL pieces and value converters (see ``_insert_plan``)."""

    def __init__(self, model, names, engine, ignore_conflicts, returning):
        meta = model._meta
        defaults = {f.name: d for f, d in meta.defaults.items() if f.name not in names}
        self.fields = [meta.fields[name] for name in (*names, *defaults)]
        holders, convert = [], []
        for f in self.fields:
            if isinstance(f, JSONField):
                # JSON text, stored as the engine stores a JSONField; None is NULL.
                holders.append(engine.json_holder)
                convert.append(lambda v, dumps=f._dumps: None if v is None
                               else lossless_dumps(v, dumps))
            else:
                holders.append(engine.param)
                convert.append(to_param(f))
        # The rows' own fields first, then the defaulted ones with their defaults.
        self.given = list(zip(names, convert))
        self.defaulted = list(zip(convert[len(names):], defaults.values()))
        # Unless a default is made by a call other than an empty list's or dict's
        # (a uuid4: a new value for every row, as Peewee makes it), the defaults
        # are the same parameters for every row: converted once, here (a JSON one
        # is a dumps).
        made = any(callable(d) and d not in (dict, list) for _, d in self.defaulted)
        self.fixed = None if made else self.defaults()
        self.tail = " ON CONFLICT DO NOTHING" if ignore_conflicts else ""
        self.returning = [meta.fields[n] for n in returning]
        if returning:
            self.tail += " RETURNING " + ", ".join(f'"{f.column_name}"' for f in self.returning)
        into = (f'INSERT INTO "{meta.table_name}" ('
                + ", ".join(f'"{f.column_name}"' for f in self.fields) + ") ")
        self.head = into + "VALUES "
        # Where the engine takes arrays: the same insert with one array per column.
        # Rows come out of unnest in the arrays' order, so RETURNING answers in the
        # rows' order, as with VALUES.
        arrays = engine.array_types or {}
        self.columnar = None
        if arrays and all(f.field_type in arrays for f in self.fields):
            self.columnar = (into + "SELECT * FROM unnest("
                             + ", ".join(f"{engine.array_param}::{arrays[f.field_type]}[]"
                                         for f in self.fields) + ")" + self.tail)
        self.one = "(" + ", ".join(holders) + ")"

    def defaults(self):
        """The defaulted fields' parameters, converted now."""
        return [c(d() if callable(d) else d) for c, d in self.defaulted]


def to_param(field):
    """What turns a value into the parameter ``field`` stores (its ``db_value``).

    A value already of the column's own type, or None, needs no conversion:
    skipping the field's db_value for it is a third of the cost of a bulk insert.
    """
    # Made once per field (most enqueue calls convert a key list of one key). By
    # identity, the field kept so its id is never reused: a field's ``==`` makes
    # an SQL expression, which a cache keyed by the field would take for true.
    made = _PARAMS.get(id(field))
    if made is None:
        made = _PARAMS[id(field)] = (field, _to_param(field))
    return made[1]


_PARAMS = {}


def _to_param(field):
    kind = _kind(field)
    if kind is None:
        return field.db_value
    # None is NULL through every one of these fields' db_value, which Peewee
    # reaches in three calls (an audit row holds five to eight of them).
    if isinstance(field, Text):
        return lambda v: (escape_text(v) if type(v) is str
                          else None if v is None else field.db_value(v))
    return lambda v: v if type(v) is kind or v is None else field.db_value(v)


@functools.lru_cache(maxsize=256)
def _insert_plan(model, names, engine, ignore_conflicts, returning):
    # Callers insert the same few shapes over and over (one event per webhook
    # call): building the statement once per shape, not per call, halves the
    # Python cost of storing one row.
    return _InsertPlan(model, names, engine, ignore_conflicts, returning)
