"""Test-only drafter plug-ins (configured as ``testdrafters:NAME`` in ``[drafter] factory``)."""

from signoff.drafters.template import template


def with_meta(home=None, **meta):
    """The template drafter, each answer carrying ``meta`` as its call's metadata (say a
    ``model`` name, as a model drafter records it)."""
    draft = template(home)

    def drafted(record, material):
        return dict(draft(record, material), meta=dict(meta))
    return drafted
