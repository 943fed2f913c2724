"""signoff's own MCP servers: ``hostserver`` serves the reference host (``signoff host
mcp``), ``agents`` lets agents report events (``signoff mcp``); ``strict`` and
``stdio`` are what both share (strict argument checks, a bounded stdio transport).
The client side, a host reached over MCP and its MCP Events subscriptions, is
``hosts.mcp``. Everything here needs the ``signoff[mcp]`` extra.
"""
