"""The model drafter's pure rules: usage counts, the server's words, the answer's cap."""

import zlib

import pytest

from signoff.drafters.bounded import AnswerRefused, Inflater
from signoff.drafters.chat import _environment_proxy, quotes, server_said, texts_of, usage_count
from signoff.rules.drafts import MAX_TOKENS, tokens

pytestmark = pytest.mark.backend_independent


@pytest.mark.parametrize("value", [0, 1, 10**9, None])
def test_a_usage_count_from_0_to_10_9_or_none_is_taken(value):
    assert usage_count(value, "prompt_tokens") == value


@pytest.mark.parametrize("value, said", [
    (10**9 + 1, "1,000,000,001, outside 0 to 1,000,000,000"),
    (-1, "-1, outside"), (2**62, "4,611,686,018,427,387,904, outside"),
    (2**200, "a larger number, outside"), (True, "a boolean, not a whole number"),
    (1.0, "a number, not a whole number"), ("12", "a string, not a whole number"),
])
def test_any_other_usage_count_is_refused_saying_what_it_was(value, said):
    with pytest.raises(ValueError, match=f"usage.prompt_tokens is {said}"):
        usage_count(value, "prompt_tokens")


def test_the_hours_budget_counts_no_token_count_past_the_bound():
    # What any drafter's metadata says: never an overflow, never a spent hour.
    assert tokens({"input_tokens": 2**70, "output_tokens": 5}) == (0, 5)
    assert tokens({"input_tokens": MAX_TOKENS, "output_tokens": -3}) == (MAX_TOKENS, 0)


PRIVATE = ("sk-test-0123456789abcdef", "Please add the demo date\nof the second rehearsal.",
           "2026-11-01", "ok")


@pytest.mark.parametrize("text", [
    "Invalid key sk-test-0123456789abcdef",  # whole
    "bad key: 0123456789abcd",  # a run of 12 of the key
    "cannot parse 'the demo date of the second'",  # a run, white space as one space
    "material 2026-11-01 is not allowed",  # a short text of the request, whole
    "the demo",  # the message is a piece of one
])
def test_a_message_sharing_text_with_the_request_is_a_quote(text):
    assert quotes(text, PRIVATE)


@pytest.mark.parametrize("text", ["Rate limit reached (tier 1).", "ok then", "date 2026-11"])
def test_a_message_of_its_own_is_no_quote(text):
    # "ok" is shorter than a quote can be told from ordinary words.
    assert not quotes(text, PRIVATE)


def test_what_the_server_said_is_one_marked_line_or_withheld():
    assert server_said({"message": "Rate\nlimit\t reached", "type": "x"}, PRIVATE) == \
        "; it said: Rate limit reached"
    assert server_said("unprocessable", PRIVATE) == "; it said: unprocessable"
    assert server_said({"message": "\u202eevil"}, ()) == "; it said: ⟨U+202E⟩evil"
    assert len(server_said({"message": "x" * 5000}, ())) == len("; it said: ") + 300
    assert server_said({"message": "bad key sk-test-0123456789abcdef"}, PRIVATE) == \
        "; its message quotes the request, so it is not kept"
    for body in (None, {}, {"message": 5}, {"message": "  "}, "", ["x"]):
        assert server_said(body, PRIVATE) == ""


def test_the_texts_of_a_request_are_every_string_inside_it():
    record = {"id": "c-1", "version": 3, "text": "add it", "tags": ["a", {"b": "deep"}]}
    assert sorted(texts_of(record, {"source": "m@1"})) == ["a", "add it", "c-1", "deep", "m@1"]


def fed(inflater, chunks):
    return [piece for chunk in chunks for piece in inflater.feed(chunk)]


def test_a_body_within_the_cap_comes_whole_in_each_encoding():
    body = b'{"x": "' + b"y" * 3000 + b'"}'
    packer = zlib.compressobj(wbits=-15)
    encoded = {"identity": body, "gzip": zlib.compress(body, wbits=31),
               "deflate": zlib.compress(body)}
    for encoding, data in encoded.items():
        chunks = [data[at:at + 100] for at in range(0, len(data), 100)]
        assert b"".join(fed(Inflater(encoding, 4096), chunks)) == body, encoding
    raw = packer.compress(body) + packer.flush()  # deflate without its zlib header
    assert b"".join(fed(Inflater("deflate", 4096), [raw])) == body


def test_a_bomb_is_refused_one_byte_past_the_cap_never_inflated_further():
    bomb = zlib.compress(b" " * (32 << 20), wbits=31)  # 32 KiB inflating to 32 MiB
    inflater = Inflater("gzip", 1 << 20)
    with pytest.raises(AnswerRefused, match="larger than max_answer_bytes.*decompressed"):
        fed(inflater, [bomb])
    assert inflater.count == (1 << 20) + 1


def test_a_plain_body_is_refused_past_the_cap():
    with pytest.raises(AnswerRefused, match=r"larger than max_answer_bytes \(1,024 bytes\)"):
        fed(Inflater("identity", 1024), [b"x" * 1000, b"x" * 25])


@pytest.mark.parametrize("encoding, data, said", [
    ("br", b"", "encoded as 'br'"), ("gzip, gzip", b"", "encoded as 'gzip, gzip'"),
    ("gzip", b"plain text", "gzip encoding is broken"),
])
def test_another_encoding_or_a_broken_one_is_refused(encoding, data, said):
    with pytest.raises(AnswerRefused, match=said):
        fed(Inflater(encoding, 1024), [data])


def test_the_proxy_is_the_environments_unless_no_proxy_exempts_the_host(monkeypatch):
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "https_proxy",
                 "http_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert _environment_proxy("https://api.example.com/v1") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("ALL_PROXY", "http://all.internal:3128")
    assert _environment_proxy("https://api.example.com/v1") == "http://proxy.internal:3128"
    assert _environment_proxy("http://127.0.0.1:8000/v1") == "http://all.internal:3128"
    monkeypatch.setenv("NO_PROXY", "api.example.com,127.0.0.1")
    assert _environment_proxy("https://api.example.com/v1") is None
    assert _environment_proxy("http://127.0.0.1:8000/v1") is None
