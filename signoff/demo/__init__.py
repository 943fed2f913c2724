"""``signoff demo``: the seed's story end to end, with real worker processes.

``story`` runs it against the reference host in the home; ``mcp`` runs it with
the host reached over MCP; ``pushed`` with the host pushing its events over MCP
Events to ``signoff serve`` (``dying_serve`` is the serve it kills after a
write); ``channels`` with decisions taken where people work: a task approved from
an email link, and in Slack (``slackstand``, a local stand-in for it). None
imports the command line: the ``demo`` command hands its ``main`` in.
"""

from . import story
from .story import run_sealed, sealed

__all__ = ["run_demo", "run_sealed", "sealed"]


def run_demo(cli, keep=None, as_json=False, mcp=False, events=False, channels=False):
    """Run the demo (``story.run_demo``): against the reference host in the home, or
    with the host reached over MCP (``mcp``), or pushing its events over MCP Events
    (``events``), or deciding where people work (``channels``: an email link and
    Slack); return the report (``report["passed"]`` is the verdict)."""
    if channels:
        from .channels import ChannelsDemo as story_class
    elif mcp:
        from .mcp import McpDemo as story_class  # the mcp extra: only this variant needs it
    elif events:
        from .pushed import EventsDemo as story_class
    else:
        story_class = story.Demo
    return story.run_demo(cli, keep, as_json, story_class)
