"""The ``signoff`` commands (``cli`` is their root group), a module per section of
docs/cli.md: ``setup``, ``monitors``, ``events``, ``tasks``, ``watching``,
``serving``; what they share: ``plumbing`` (the click plumbing), ``logs`` and
``libraries``; how they print: ``output``, ``render``, ``watch``."""
