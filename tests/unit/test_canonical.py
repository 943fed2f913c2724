"""Canonical JSON: the one serialisation every digest, task key and idempotency key
is built on. Keys already stored and sent to hosts depend on it byte for byte."""

import json

from hypothesis import given, strategies as st

from signoff.rules.canonical import canonical, digest, task_key

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(st.characters(codec=None)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)


def test_canonical_json_has_sorted_keys_no_spaces_and_unescaped_text():
    value = {"b": [1, 2.5, None, True], "a": {"z": "ünï 漢", "y": "\x00\ud800"}}
    # Compared as bytes: a lone surrogate stays as it is (its UTF-8 form, surrogatepass).
    assert canonical(value).encode("utf-8", "surrogatepass") == (
        b'{"a":{"y":"\\u0000\xed\xa0\x80","z":"\xc3\xbcn\xc3\xaf \xe6\xbc\xa2"},'
        b'"b":[1,2.5,null,true]}')
    # A task key is sent to hosts as the idempotency key: it never changes form.
    assert task_key("default", "g" * 64, "comment-1", 3) == (
        "bd569ac4dd43002e613435ee3db5b7a51380803e0e444b5da4c2c0f0f36093f4")


@given(JSON)
def test_canonical_json_is_the_standard_library_s_with_the_canonical_options(value):
    expected = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    # As bytes: a failure's message must not carry a lone surrogate to the test runner.
    assert canonical(value).encode("utf-8", "surrogatepass") == expected.encode(
        "utf-8", "surrogatepass")
    assert digest(value) == digest(json.loads(expected))
