"""Which fields of a task's detail hold characters that render differently (the JSON API's
``hidden_characters_by_field``)."""

from signoff.views import PERSON_READ, hidden_by_field


def test_each_person_read_field_lists_its_own_hidden_characters():
    detail = {"monitor": "default", "record_id": "comment-1",
              "record": {"id": "comment-1", "text": "pay \u202e0$", "nested": [{"\u200b": 1}]},
              "result": {"draft": "ok\U000e0100", "sources": ["s\u2066"]},
              "draft_meta": {"model": "gpt\u202e", "input_tokens": 3},
              "edits": [{"by": "alice", "diff": "-a\n+a\u200d"}], "reject_reason": None,
              "audit": [{"actor": "bob", "code": "approved"}], "digest": "\u202e" * 3}
    found = hidden_by_field(detail)
    assert set(found) == set(PERSON_READ)  # every field has its list, the clean ones empty
    assert found["record"] == ["U+202E", "U+200B"]  # keys count: a person reads them too
    assert found["draft_meta"] == ["U+202E"] and found["edits"] == ["U+200D"]
    assert "U+2066" in found["result"]
    assert found["monitor"] == found["audit"] == found["reject_reason"] == []
    assert "digest" not in found  # not text a person reads: an id of a result
