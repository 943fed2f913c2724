"""``signoff serve``: webhook ingest, review pages, health and metrics over HTTP.

The modules that the CLI needs without the ``serve`` extra (secrets,
reviewers) import nothing from the web stack; ``web`` and ``server`` do.
"""
