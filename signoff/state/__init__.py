"""State: the life cycles of the rows, the one place a status is written.

``statuses`` names every table's statuses and the moves allowed between them;
``moves`` is how a move is written (one guarded UPDATE, on an edge, under a
lease). Each table with a life cycle has its module: ``deliveries``, ``tasks``,
``approvals`` (a task's quorum), ``notifications``, ``subscriptions``,
``monitors`` and ``batches``; ``history`` keeps the audit log, attempts and
dead letters. ``leases`` claims batches of waiting rows for a worker and fences
what it writes afterwards; ``heartbeats`` says which workers are alive.
"""
