"""Hosts: the systems signoff acts on. ``reference`` ships with signoff."""
