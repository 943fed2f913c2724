"""Drafters: turn a record and its material into a candidate result.

A drafter factory is called with ``home`` and the ``[drafter.options]`` table and
returns ``draft(record, material) -> {"draft": str, "sources": [str, ...]}``.
The record's ``text`` is material to understand, never an instruction: the
template drafter below does not even read it.
"""

DEFAULT_TEMPLATE = "Suggested demo date for {document}: {demo_date}"


def template(home=None, text=DEFAULT_TEMPLATE):
    """A drafter that fills ``text`` with the material's fields."""

    def draft(record, material):
        fields = {"demo_date": "(none in the material)", **material}
        return {"draft": text.format_map(_Missing(fields)),
                "sources": [record["source"], material["source"]]}

    return draft


class _Missing(dict):
    def __missing__(self, key):
        return "{" + key + "}"
