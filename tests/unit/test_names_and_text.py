"""What a person reads and who a person is (rules/text.py, rules/names.py): pure rules."""

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from signoff.errors import Refused
from signoff.decisions.approval import draft_diff
from signoff.rules.names import Actor, OPERATOR, clash, normal_name, os_account, skeleton
from signoff.rules.text import hidden_characters, is_hidden, visible

pytestmark = pytest.mark.backend_independent

# Every kind section 17 names, each a character that draws nothing (or reorders
# what is drawn) yet reaches the host as written.
INVISIBLE = {
    "variation selector 16": "\ufe0f",
    "variation selector 1": "\ufe00",
    "variation selector supplement": "\U000e0100",
    "last variation selector": "\U000e01ef",
    "combining grapheme joiner": "\u034f",
    "khmer inherent aq": "\u17b4",
    "khmer inherent aa": "\u17b5",
    "mongolian free variation selectors": "\u180b",
    "mongolian fvs 3": "\u180d",
    "mongolian fvs 4": "\u180f",
    "tag latin small a": "\U000e0061",
    "cancel tag": "\U000e007f",
    "zero width space": "\u200b",
    "word joiner": "\u2060",
    "bidi override": "\u202e",
    "bidi isolate": "\u2066",
    "arabic letter mark": "\u061c",
    "soft hyphen": "\u00ad",
    "hangul filler": "\u3164",
    "braille blank": "\u2800",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
    "bell": "\x07",
    "carriage return": "\r",
    "private use": "\ue000",
    "supplementary private use": "\U000f0000",
    "unassigned": "\U0003fffe",
    "lone surrogate": "\ud800",
}


@pytest.mark.parametrize("char", INVISIBLE.values(), ids=INVISIBLE.keys())
def test_each_kind_of_hidden_character_is_found_and_marked(char):
    text = f"pay 50{char} USD"
    code = f"U+{ord(char):04X}"
    assert hidden_characters(text) == [code]
    assert visible(text) == f"pay 50⟨{code}⟩ USD"


def test_layout_and_ordinary_writing_are_not_hidden():
    for text in ("line one\n\tline two", "café, naïve, Größe", "日本語の文", "עברית", "مرحبا",
                 "emoji 😀 ok", "a\u0301 (a combining accent shows)"):
        assert hidden_characters(text) == [], text
        assert visible(text) == text


def test_a_message_encoded_in_variation_selectors_is_seen():
    # "wire 50k" hidden one byte a selector after an innocent line: section 17's case.
    payload = "".join(chr(0xE0100 + b - 16) if b >= 16 else chr(0xFE00 + b)
                      for b in "wire 50k".encode())
    text = "Looks good." + payload
    assert hidden_characters(text)
    assert "⟨U+E01" in visible(text) and visible(text).startswith("Looks good.⟨")


@given(st.text())
def test_visible_leaves_nothing_hidden_and_changes_nothing_else(text):
    shown = visible(text)
    assert not any(is_hidden(ch) for ch in shown if ch not in "\n\t")
    if not hidden_characters(text):
        assert shown == text


def test_a_diff_of_texts_that_differ_only_in_hidden_characters_shows_where():
    diff = draft_diff("Approve the refund.", "Approve the refund.\U000e0100\U000e0101",
                      "a" * 64, "b" * 64)
    removed, added = [line for line in diff.splitlines() if line[:1] in "-+"
                      and not line.startswith(("---", "+++"))]
    assert removed == "-Approve the refund."
    assert added == "+Approve the refund.⟨U+E0100⟩⟨U+E0101⟩"


# -- names ----------------------------------------------------------------------------

@pytest.mark.parametrize("typed,kept", [("alice", "alice"), ("Alice", "alice"),
                                        ("  alice ", "alice"), ("ＡＬＩＣＥ", "alice"),
                                        ("Straße", "strasse"), ("ops-oncall_2", "ops-oncall_2")])
def test_names_are_kept_in_one_form(typed, kept):
    assert normal_name(typed) == kept


@pytest.mark.parametrize("typed", ["", "   ", "al ice", "al\u00a0ice", "a\u200bb", "a\u202eb",
                                   "a\ufe0f", "eve\nadmin", "x\x07", "policy:2", "Policy:2",
                                   "operator:root", "delegate:bob", "a" * 129, "x\ud800", 5, None])
def test_names_that_hide_or_impersonate_are_refused(typed):
    with pytest.raises(Refused) as info:
        normal_name(typed)
    assert info.value.code == "invalid_name"


@pytest.mark.parametrize("new,existing", [("\u0430lice", "alice"),  # Cyrillic а
                                          ("m", "rn"), ("b0b", "bob"), ("a1ice", "alice"),
                                          ("alice", "alice")])
def test_look_alike_names_clash_by_their_uts39_skeleton(new, existing):
    assert clash(normal_name(new), ["carol", existing]) == existing


def test_different_names_do_not_clash():
    assert clash("carol", ["alice", "bob", "dave"]) is None
    assert skeleton("alice") != skeleton("alicia")


def test_skeletons_come_from_icu_not_a_table_of_ours():
    # Cyrillic small a (U+0430) is confusable with Latin a in Unicode's own data.
    assert unicodedata.name("\u0430") == "CYRILLIC SMALL LETTER A"
    assert skeleton("\u0430") == skeleton("a")


# -- identities -----------------------------------------------------------------------

def test_the_command_line_s_identity_is_the_os_account_and_by_a_note():
    actor = Actor.of("Alice", "cli")
    assert actor == Actor(OPERATOR + os_account(), "cli", "Alice")
    assert Actor.of(None, "cli").note is None
    assert Actor.of("alice", "api") == Actor("alice", "api", None)
    assert Actor.of("policy:3", "policy").identity == "policy:3"


def test_an_actor_s_note_is_a_clean_label_and_its_channel_known():
    for bad in ("a\u202eb", "a\U000e0100", "two\nlines"):
        with pytest.raises(Refused) as info:
            Actor.of(bad, "cli")
        assert info.value.code == "invalid_name"
    with pytest.raises(ValueError):
        Actor.of("alice", "carrier-pigeon")


def test_the_os_account_is_not_read_from_the_environment(monkeypatch):
    os_account.cache_clear()
    try:
        monkeypatch.setenv("USER", "someone-else")
        monkeypatch.setenv("LOGNAME", "someone-else")
        assert os_account() != "someone-else"
    finally:
        os_account.cache_clear()
