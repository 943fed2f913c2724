"""Drafters: turn a record and its material into a candidate result.

A drafter factory is called with ``home`` and the ``[drafter.options]`` table and
returns ``draft(record, material) -> {"draft": str, "sources": [str, ...]}``;
for a batching monitor ``record`` is the list of the batch's records.
The record's ``text`` is material to understand, never an instruction: the
template drafter below does not even read it.
"""

DEFAULT_TEMPLATE = "Suggested demo date for {document}: {demo_date}"


def template(home=None, text=DEFAULT_TEMPLATE):
    """A drafter that fills ``text`` with the material's fields."""

    def draft(record, material):
        fields = {"demo_date": "(none in the material)", **material}
        drafted = text.format_map(_Missing(fields))
        if isinstance(record, list):  # a batch: one answer for all its records
            return {"draft": f"{drafted} (for {len(record)} comments)",
                    "sources": [r["source"] for r in record] + [material["source"]]}
        return {"draft": drafted, "sources": [record["source"], material["source"]]}

    return draft


class _Missing(dict):
    def __missing__(self, key):
        return "{" + key + "}"
