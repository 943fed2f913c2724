"""A drafter's answer, as the workflow takes it (pure rules, no I/O).

Every drafter returns ``{"draft", "sources"}`` and may add ``open_questions``
(what the material did not answer) and ``meta`` (the call's metadata). The
result kept on a task carries the questions, so the digest a person approves
covers them; the metadata stays beside the result, never in it or in audit.
"""

import difflib

from ..errors import AttemptFailed
from .text import visible

# The metadata a task keeps about the call that drafted it; anything else a
# drafter puts in ``meta`` is dropped (it may be content).
META_FIELDS = ("model", "response_id", "prompt_version", "input_tokens", "output_tokens",
               "seconds")
SHAPE = "the drafter must return {'draft': str, 'sources': [str, ...]}"
# The most tokens one call can be charged: a larger count is no count of a real
# call (a drafter's bug or a server's), and would overflow the hour's column.
MAX_TOKENS = 10**9


def drafted_answer(drafted):
    """``drafted`` reduced to ``{draft, sources, open_questions, meta}``.

    Raises ``TypeError`` when it is not the drafter contract's shape (a
    drafter's bug: a failed attempt under that class name).
    """
    if (not isinstance(drafted, dict) or not isinstance(drafted.get("draft"), str)
            or not _strings(drafted.get("sources"))):
        raise TypeError(SHAPE)
    questions = drafted.get("open_questions") or []
    if not _strings(questions):
        raise TypeError("the drafter's open_questions must be a list of strings")
    return {"draft": drafted["draft"], "sources": list(drafted["sources"]),
            "open_questions": list(questions), "meta": call_meta(drafted.get("meta"))}


def call_meta(meta):
    """The recordable part of a drafter's ``meta`` (``None`` when it gave none)."""
    if not isinstance(meta, dict):
        return None
    return {name: meta.get(name) for name in META_FIELDS
            if isinstance(meta.get(name), (str, int, float)) and not isinstance(meta.get(name), bool)}


def result_fields(answer):
    """The fields an answer adds to a task's result; ``open_questions`` only when asked."""
    fields = {"draft": answer["draft"], "sources": list(answer["sources"])}
    if answer.get("open_questions"):
        fields["open_questions"] = list(answer["open_questions"])
    return fields


def task_fields(answer):
    """The task columns an answer sets beside its result."""
    return {"needs_answers": needs_answers(answer), "draft_meta": answer.get("meta")}


def needs_answers(result):
    """True when the result (or answer) carries open questions for a person."""
    return bool(isinstance(result, dict) and result.get("open_questions"))


def tokens(meta):
    """``(input, output)`` tokens a call's metadata counts (0 for what it does not say,
    and for a count outside 0 to ``MAX_TOKENS``)."""
    meta = meta or {}
    return tuple(v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_TOKENS
                 else 0 for v in (meta.get("input_tokens"), meta.get("output_tokens")))


def failure_meta(exc):
    """The metadata of a failed call that still spent tokens, else ``None``."""
    return call_meta(exc.meta) if isinstance(exc, AttemptFailed) else None


def _strings(value):
    return isinstance(value, list) and all(isinstance(s, str) for s in value)


def draft_diff(before, after, from_digest, to_digest):
    """A unified diff of two draft texts, labelled by their digests.

    Diffed as a person sees them (hidden characters marked): two lines that
    differ only in an invisible character show where, never as two equal lines.
    """
    before = visible(before) if isinstance(before, str) else ""
    return "\n".join(difflib.unified_diff(
        before.splitlines(), visible(after).splitlines(), fromfile=f"draft {from_digest[:12]}",
        tofile=f"draft {to_digest[:12]}", lineterm=""))
