"""``signoff demo``: the seed's story end to end, with real worker processes.

``story`` runs it against the reference host in the home; ``mcp`` runs it with
the host reached over MCP; ``events`` with the host pushing its events over MCP
Events to ``signoff serve`` (``dying_serve`` is the serve it kills after a
write). None imports the command line: the ``demo`` command hands its ``main`` in.
"""

from .story import run_demo, run_sealed, sealed

__all__ = ["run_demo", "run_sealed", "sealed"]
