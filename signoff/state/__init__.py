"""State: the life cycles of the rows and the leases on them.

``lifecycle`` is the one place a status is written (guarded moves, the audit,
attempts and dead letters); ``leases`` claims batches of waiting rows for a
worker and fences what it writes afterwards.
"""
