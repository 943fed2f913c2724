"""Hosts: the systems signoff acts on. ``reference`` ships with signoff; ``mcp`` reaches a
host that is an MCP tool server (its client session in ``mcp.session``, its MCP Events
subscriptions in ``mcp.events``)."""
