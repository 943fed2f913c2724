"""Drafters: turn a record and its material into a candidate result.

A drafter factory is named in ``signoff.toml`` (``[drafter] factory =
"module:callable"``) and called with ``home=<Path>`` and the keys of
``[drafter.options]``. It returns ``draft(record, material)``, where ``record``
is the record as the host returned it (a list of them for a batching monitor)
and ``material`` the host's material for its document. ``draft`` returns::

    {"draft": str, "sources": [str, ...],      # always
     "open_questions": [str, ...],             # what the material did not answer
     "meta": {...}}                            # the call's metadata, never content

The workflow, not the drafter, decides where a result goes: a drafter's answer
names no key, target, recipient, document or action. One try that fails raises
``signoff.errors.AttemptFailed`` with a code the ingest step records.

``template`` fills a sentence from the material and ships as the default;
``chat`` asks an OpenAI-compatible model, constrained (extra ``signoff[llm]``).
"""
