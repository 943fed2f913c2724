"""Rules: pure decisions with no I/O, shared by every layer above.

``canonical`` (canonical JSON, digests, task keys), ``events`` (what an
acceptable event is, and reading JSON Lines), ``gate`` (does the standing
permission still hold) and ``retry`` (how long to wait, or give up).
"""
