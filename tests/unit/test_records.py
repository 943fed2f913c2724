"""What a host record may hold: the refusal names where the bad value is."""

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from signoff.errors import InvalidRecord
from signoff.rules.canonical import canonical
from signoff.rules.records import _problem, check_material, check_record

RECORD = {"id": "c-1", "document": "d", "status": "open", "kind": "comment", "version": 1,
          "text": "t"}


@pytest.mark.backend_independent
@pytest.mark.parametrize("extra, message", [
    ({"meta": {"ok": [1, {"x\"y": 2 ** 63}]}},
     'record["meta"]["ok"][1]["x\\"y"]: an integer outside the signed 64-bit range'),
    ({"scores": [1.0, float("nan")]}, 'record["scores"][1]: nan is not a finite number'),
    ({"meta": {1: "a"}}, 'record["meta"]: has a key that is not a string'),
    ({"when": {"at": {1, 2}}}, 'record["when"]["at"]: a set is not a JSON value'),
    ({"k" * 50: object()}, f'record["{"k" * 40}"]: a object is not a JSON value'),
])
def test_a_value_no_engine_stores_as_it_is_is_refused_where_it_is(extra, message):
    with pytest.raises(InvalidRecord) as refused:
        check_record({**RECORD, **extra}, 10_000)
    assert (refused.value.code, refused.value.message) == ("invalid_record", message)


@pytest.mark.backend_independent
def test_nesting_past_the_limit_and_a_size_past_the_setting_are_refused():
    deep = {"text": "m"}
    for _ in range(70):
        deep = {"in": deep}
    with pytest.raises(InvalidRecord) as refused:
        check_material(deep, 10_000)
    assert refused.value.message == "material: nested deeper than 64 levels"
    with pytest.raises(InvalidRecord) as refused:
        check_record(dict(RECORD, text="x" * 200), 100)
    assert refused.value.code == "record_too_large"
    assert check_record(dict(RECORD, meta={"a": [1, 2.5, None, True]}), 10_000)["meta"]["a"][1] == 2.5


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30)


@pytest.mark.backend_independent
@given(JSON_VALUES)
@settings(max_examples=examples(300), deadline=None)
def test_the_size_bound_is_never_below_the_size_as_json(value):
    problem, least, most = _problem("record", value)
    size = len(canonical(value).encode("utf-8", "surrogatepass"))
    assert problem is None and least <= size <= most
