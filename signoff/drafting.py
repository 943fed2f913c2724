"""The name ``signoff.toml`` files use for the template drafter (``signoff.drafting:template``).

The drafters live in ``signoff.drafters``; this module keeps the factory name
that ``signoff init`` writes, and that existing homes name, working.
"""

from .drafters.template import template

__all__ = ["template"]
