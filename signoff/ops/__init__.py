"""Operations: what people, operators and scripts do, through ``Signoff``.

Intake (``intake``), the human channel (``approval``, ``redraft``, ``policy``),
monitors and their gaps (``monitors``, ``gaps``), dead letters, retention,
notifications, webhook secrets and reviewers, and the read-only ``views``.
"""
