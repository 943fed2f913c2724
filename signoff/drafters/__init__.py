"""Drafters: turn a record and its material into a candidate result.

A drafter factory is called with ``home`` and the ``[drafter.options]`` table
and returns ``draft(record, material) -> {"draft": str, "sources": [str, ...]}``
(for a batching monitor ``record`` is the list of the batch's records).
``template`` fills a sentence from the material and ships as the default.
"""
