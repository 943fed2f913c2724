"""MCP: the client session hosts use, and signoff's own MCP servers.

``session`` keeps one MCP client session alive for synchronous code;
``hostserver`` serves the reference host (``signoff host mcp``); ``agents``
lets agents report events (``signoff mcp``). Everything here needs the
``signoff[mcp]`` extra.
"""
