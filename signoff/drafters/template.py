"""The template drafter: a sentence filled from the material's fields.

The record's ``text`` is material to understand, never an instruction: this
drafter does not even read it.
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
