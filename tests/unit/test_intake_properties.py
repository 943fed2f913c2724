"""Event intake: what is accepted, what is rejected, and what a rejection leaves behind.

The property tests compare intake against an oracle written here from the rules
(labels are strings of 1-128 characters with no lone surrogates, no control
characters and no bidi controls or line separators; ``occurred`` is an integer >= 0 that is neither bool nor float), and
check the stored rows rather than the answers alone.
"""

import io
import json
import math
import unicodedata

import pytest
from helpers import T0, examples, make_event
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from signoff.models import MODELS, Audit, Delivery

LABELS = ("event_id", "name", "document", "record_id")
LIMIT = 64 * 1024

PROPERTY_SETTINGS = settings(max_examples=examples(60), deadline=None,
                             suppress_health_check=[HealthCheck.function_scoped_fixture])


# -- the oracle ------------------------------------------------------------------


def label_ok(value):
    return (isinstance(value, str) and 1 <= len(value) <= 128
            and not any(0xD800 <= ord(c) <= 0xDFFF or unicodedata.category(c) == "Cc"
                        or c in VIEW_BREAKING for c in value))


def occurred_ok(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def event_ok(value):
    return (isinstance(value, dict) and all(label_ok(value.get(f)) for f in LABELS)
            and "occurred" in value and occurred_ok(value["occurred"]))


# -- strategies -------------------------------------------------------------------

surrogate = st.integers(0xD800, 0xDFFF).map(chr)
control = st.sampled_from(["\x00", "\x01", "\t", "\n", "\r", "\x1b", "\x7f", "\x85", "\x9f"])
# Bidi controls and line separators could forge an operator's view: never a label.
VIEW_BREAKING = "\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e" \
    "\u2066\u2067\u2068\u2069"
good_label = st.text(st.characters(exclude_categories=("Cs", "Cc"),
                                   exclude_characters=VIEW_BREAKING), min_size=1, max_size=128)


@st.composite
def spoiled_label(draw):
    """A string with a surrogate or control character spliced in somewhere."""
    base = draw(st.text(st.characters(exclude_categories=("Cs",)), max_size=20))
    bad = draw(st.one_of(surrogate, control, st.sampled_from(VIEW_BREAKING)))
    at = draw(st.integers(0, len(base)))
    return base[:at] + bad + base[at:]


bad_label = st.one_of(
    spoiled_label(), spoiled_label(), spoiled_label(),
    st.just(""),
    st.text(st.characters(exclude_categories=("Cs", "Cc")), min_size=129, max_size=160),
    st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=1),
)

# Integers stay within a signed 64-bit column; the rules set no other upper bound.
good_occurred = st.integers(0, 2**62)
bad_occurred = st.one_of(
    st.integers(-(2**63), -1),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.text(max_size=5), st.lists(st.integers(), max_size=1),
)
FIELDS = LABELS + ("occurred",)


@st.composite
def events(draw):
    """A JSON value: mostly an event with zero, one or two fields spoiled, sometimes no object."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.one_of(st.none(), st.integers(), st.text(max_size=10), st.booleans(),
                              st.lists(st.integers(), max_size=3)))
    value = {f: draw(good_label) for f in LABELS}
    value["occurred"] = draw(good_occurred)
    spoil = draw(st.sampled_from([0, 1, 1, 1, 2]))
    for field in draw(st.lists(st.sampled_from(FIELDS), min_size=spoil, max_size=spoil,
                               unique=True)):
        how = draw(st.integers(0, 4))
        if how == 0:
            del value[field]
        else:
            value[field] = draw(bad_occurred if field == "occurred" else bad_label)
    if draw(st.booleans()):
        value["text"] = draw(st.text(max_size=40))
    if draw(st.booleans()):
        value[draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in value))] = draw(
            st.one_of(st.integers(), st.text(max_size=5), st.none()))
    return value


valid_events = st.builds(
    lambda e, n, d, r, o: {"event_id": e, "name": n, "document": d, "record_id": r, "occurred": o},
    good_label, good_label, good_label, good_label, good_occurred)


def encode(value):
    """One JSON line; non-ASCII escaped so lone surrogates reach the parser intact."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True).encode("ascii")


def feed(rt, values):
    raw = b"".join(encode(v) + b"\n" for v in values)
    return list(rt.enqueue(io.BytesIO(raw)))


def feed_bytes(rt, raw):
    return list(rt.enqueue(io.BytesIO(raw)))


def table_counts():
    return {model.__name__: model.select().count() for model in MODELS}


def assert_every_delivery_is_valid():
    for row in Delivery.select():
        for field in LABELS:
            assert label_ok(getattr(row, field)), (field, getattr(row, field))
        assert occurred_ok(row.occurred), row.occurred
        assert type(row.occurred) is int


# -- properties ---------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(values=st.lists(events(), min_size=1, max_size=5))
def test_intake_accepts_exactly_the_valid_events(rt, values):
    before = Delivery.select().count()
    results = feed(rt, values)
    assert [r.line for r in results] == list(range(1, len(values) + 1))
    for value, result in zip(values, results):
        assert result.accepted == event_ok(value), (value, result)
        if result.accepted:
            row = Delivery.get_by_id(result.delivery)
            assert {f: getattr(row, f) for f in LABELS + ("occurred",)} == \
                {f: value[f] for f in LABELS + ("occurred",)}
            assert row.monitor == "default" and row.status == "queued"
        else:
            assert (result.code, result.delivery) == ("invalid_event", None)
    assert Delivery.select().count() == before + sum(r.accepted for r in results)
    assert_every_delivery_is_valid()


@PROPERTY_SETTINGS
@given(value=events().filter(lambda v: not event_ok(v)))
def test_a_rejected_line_writes_one_audit_row_and_nothing_else(rt, value):
    before = table_counts()
    pending = rt.wakers.pending()
    last_seq = max([a["seq"] for a in rt.audit()] or [0])
    [result] = feed(rt, [value])
    assert not result.accepted
    assert result.code == "invalid_event"
    assert result.reason
    after = table_counts()
    expected = dict(before, Audit=before["Audit"] + 1)
    assert after == expected
    assert rt.wakers.pending() == pending  # nothing queued either
    [row] = rt.audit(after=last_seq)
    assert (row["code"], row["event_id"], row["task_key"]) == ("invalid_event", None, None)


@PROPERTY_SETTINGS
@given(batch=st.lists(st.tuples(st.booleans(), valid_events, events()), min_size=1, max_size=8))
def test_good_lines_in_a_mixed_batch_are_still_accepted(rt, batch):
    values = [good if use_good else other for use_good, good, other in batch]
    expected = [event_ok(v) for v in values]
    before = table_counts()
    results = feed(rt, values)
    assert [r.accepted for r in results] == expected
    assert [r.line for r in results] == list(range(1, len(values) + 1))
    for value, result in zip(values, results):
        if result.accepted:
            assert result.event_id == value["event_id"]
            assert Delivery.get_by_id(result.delivery).event_id == value["event_id"]
    after = table_counts()
    assert after["Delivery"] == before["Delivery"] + sum(expected)
    assert after["Audit"] == before["Audit"] + len(values) - sum(expected)
    assert after["Task"] == before["Task"] and after["Inbox"] == before["Inbox"]
    assert_every_delivery_is_valid()


# -- plain cases ----------------------------------------------------------------------


def padded_line(size):
    """A valid event line of exactly ``size`` bytes (padding in the ignored ``text``)."""
    line = encode(make_event(text=""))
    line = encode(make_event(text="x" * (size - len(line))))
    assert len(line) == size
    return line


def test_a_line_over_64_kib_is_rejected_and_its_neighbours_are_not(rt):
    before = table_counts()
    raw = (encode(make_event(event_id="before")) + b"\n" + padded_line(LIMIT + 1) + b"\n"
           + encode(make_event(event_id="after")) + b"\n")
    results = feed_bytes(rt, raw)
    assert [(r.line, r.accepted) for r in results] == [(1, True), (2, False), (3, True)]
    assert results[1].code == "invalid_event"
    assert "line" in results[1].reason
    after = table_counts()
    assert after["Delivery"] == before["Delivery"] + 2
    assert after["Audit"] == before["Audit"] + 1


def test_a_line_of_exactly_64_kib_is_still_read(rt):
    results = feed_bytes(rt, padded_line(LIMIT) + b"\n" + padded_line(LIMIT + 1))
    assert [r.accepted for r in results] == [True, False]


def test_a_huge_line_without_newlines_is_rejected_once(rt):
    before = table_counts()
    results = feed_bytes(rt, b'{"event_id": "' + b"a" * (3 * LIMIT))
    assert [(r.line, r.accepted, r.code) for r in results] == [(1, False, "invalid_event")]
    assert table_counts() == dict(before, Audit=before["Audit"] + 1)


@pytest.mark.parametrize("raw", [
    b"\xff\xfe\n",
    b'{"event_id": "caf\xc3", "name": "comment.created", "document": "doc-demo", '
    b'"record_id": "comment-1", "occurred": 1000000}\n',
    b'{"event_id": "\xed\xa0\x80", "name": "comment.created", "document": "doc-demo", '
    b'"record_id": "comment-1", "occurred": 1000000}\n',
])
def test_invalid_utf8_is_rejected(rt, raw):
    before = table_counts()
    [result] = feed_bytes(rt, raw)
    assert (result.accepted, result.code) == (False, "invalid_event")
    assert "UTF-8" in result.reason
    assert table_counts() == dict(before, Audit=before["Audit"] + 1)


@pytest.mark.parametrize("field", LABELS)
@pytest.mark.parametrize("char", ["\x00", "\x07", "\n", "\x1f", "\x7f", "\x85"])
def test_control_characters_in_a_label_are_rejected(rt, field, char):
    [result] = feed(rt, [make_event(**{field: f"a{char}b"})])
    assert (result.accepted, result.code) == (False, "invalid_event")
    assert result.reason.startswith(field)
    assert Delivery.select().count() == 0


@pytest.mark.parametrize("raw", [
    b'\x00{"event_id": "e"}\n',
    # An unescaped control character inside a JSON string is not JSON.
    b'{"event_id": "a\x01b", "name": "comment.created", "document": "doc-demo", '
    b'"record_id": "comment-1", "occurred": 1000000}\n',
    b'{"event_id": "a\x00b", "name": "comment.created", "document": "doc-demo", '
    b'"record_id": "comment-1", "occurred": 1000000}\n',
])
def test_raw_nul_and_control_bytes_are_rejected(rt, raw):
    [result] = feed_bytes(rt, raw)
    assert (result.accepted, result.code) == (False, "invalid_event")
    assert Delivery.select().count() == 0


@pytest.mark.parametrize("literal", [
    b"1000000.0", b"1e6", b"1.5", b"-0.0", b"true", b"false", b"NaN", b"Infinity",
    b"-Infinity", b"null", b'"1000000"', b"[1000000]", b"-1",
])
def test_occurred_must_be_a_non_negative_integer(rt, literal):
    raw = (b'{"event_id": "e", "name": "comment.created", "document": "doc-demo", '
           b'"record_id": "comment-1", "occurred": ' + literal + b"}\n")
    [result] = feed_bytes(rt, raw)
    assert (result.accepted, result.code) == (False, "invalid_event")
    assert "occurred" in result.reason or "JSON" in result.reason
    assert Delivery.select().count() == 0


@pytest.mark.parametrize("occurred", [0, T0, 2**62])
def test_integer_occurred_values_are_accepted(rt, occurred):
    [result] = feed(rt, [make_event(occurred=occurred)])
    assert result.accepted
    assert Delivery.get_by_id(result.delivery).occurred == occurred


@pytest.mark.parametrize("raw", [
    b"{\n", b'{"event_id": "e",}\n', b"not json at all\n", b"[1, 2\n", b'"unterminated\n',
    b"{'event_id': 'single quotes'}\n", b"}{\n",
])
def test_broken_json_is_rejected_and_the_next_line_still_counts(rt, raw):
    before = table_counts()
    results = feed_bytes(rt, raw + encode(make_event()) + b"\n")
    assert [(r.line, r.accepted) for r in results] == [(1, False), (2, True)]
    assert "JSON" in results[0].reason
    after = table_counts()
    assert after["Audit"] == before["Audit"] + 1
    assert after["Delivery"] == before["Delivery"] + 1


def test_a_pretty_printed_object_is_one_event_on_line_one(rt):
    raw = json.dumps(make_event(event_id="pretty"), indent=2).encode() + b"\n"
    assert raw.count(b"\n") > 5
    results = feed_bytes(rt, raw)
    assert [(r.line, r.accepted, r.event_id) for r in results] == [(1, True, "pretty")]
    [row] = Delivery.select()
    assert (row.event_id, row.record_id, row.occurred) == ("pretty", "comment-1", T0)


def test_a_pretty_printed_invalid_object_is_one_rejection(rt):
    before = table_counts()
    raw = json.dumps(make_event(occurred=1.5), indent=2).encode()
    results = feed_bytes(rt, raw)
    assert [(r.line, r.accepted, r.code) for r in results] == [(1, False, "invalid_event")]
    assert "occurred" in results[0].reason
    assert table_counts() == dict(before, Audit=before["Audit"] + 1)


def test_blank_lines_are_skipped_but_counted_and_crlf_is_accepted(rt):
    raw = (b"\n  \n" + encode(make_event(event_id="third")) + b"\r\n\n"
           + encode(make_event(event_id="fifth")) + b"\r\n")
    results = feed_bytes(rt, raw)
    assert [(r.line, r.accepted, r.event_id) for r in results] == \
        [(3, True, "third"), (5, True, "fifth")]


def test_text_and_unknown_fields_are_dropped_at_intake(rt):
    [result] = feed(rt, [make_event(text="drop me", extra={"nested": [1, 2]}, priority=9)])
    assert result.accepted
    row = Delivery.get_by_id(result.delivery)
    stored = {f.name for f in Delivery._meta.sorted_fields}
    assert "text" not in stored and "extra" not in stored
    assert "drop me" not in repr(row.__data__)


def test_nan_occurred_is_not_silently_coerced(rt):
    # json.dumps writes NaN as a bare literal, which is not JSON.
    value = make_event(occurred=math.nan)
    [result] = feed(rt, [value])
    assert not result.accepted
    assert Audit.select().where(Audit.code == "invalid_event").count() == 1
