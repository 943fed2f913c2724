"""Events given as Python values (``enqueue_events``, agents) get the answers their
JSON lines would get, whether they take the direct path or the JSON one."""

import io
import json

import pytest
from helpers import examples, make_event
from hypothesis import given, settings
from hypothesis import strategies as st

from signoff.errors import InvalidEvent
from signoff.rules.events import MAX_LINE_BYTES, check_value, read_events

# Pure functions on Python values: no home, no database, no queue.
pytestmark = pytest.mark.backend_independent

FIELDS = ("event_id", "name", "document", "record_id", "occurred", "text")

scalars = (st.text(max_size=20) | st.text(alphabet=st.characters(max_codepoint=127), max_size=20)
           | st.integers(min_value=-2**64, max_value=2**64) | st.booleans() | st.none()
           | st.floats(allow_nan=True) | st.sampled_from(["\ud800", "a\x00b", "\u202e"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
events = st.fixed_dictionaries({}, optional={f: values for f in FIELDS}) | values


def as_answer(outcome):
    if isinstance(outcome, InvalidEvent):
        return ("invalid", outcome.reason)
    return ("event", outcome)


def read_as_line(value):
    raw = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
    [(number, outcome)] = list(read_events(io.BytesIO(raw)))
    assert number == 1
    return as_answer(outcome)


@settings(max_examples=examples(300), deadline=None)
@given(events)
def test_a_value_gets_the_answer_of_its_json_line(value):
    assert as_answer(check_value(value)) == read_as_line(value)


def test_valid_and_invalid_plain_events_agree_with_their_lines():
    for value in (make_event(), make_event(occurred=-1), make_event(occurred=True),
                  make_event(event_id=""), make_event(name="x" * 129), make_event(text=None),
                  make_event(event_id="a\ud800"), make_event(text="\udfff"),
                  make_event(record_id="caf\u00e9"), make_event(name="a\u202eb"),
                  make_event(document="a\x00b"), make_event(occurred=2**70), make_event(occurred=1.0),
                  {k: v for k, v in make_event().items() if k != "document"}):
        assert as_answer(check_value(value)) == read_as_line(value)


def test_a_line_over_the_limit_is_refused_as_a_line_would_be():
    value = make_event(text="x" * MAX_LINE_BYTES)
    answer = as_answer(check_value(value))
    assert answer[0] == "invalid" and answer[1].startswith("line: longer than")
    assert answer == read_as_line(value)
