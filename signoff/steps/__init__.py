"""Steps: what a worker does with the rows it claims.

``batch`` opens a claimed batch, ``ingest`` turns deliveries into ready tasks,
``submit`` writes approved results exactly once and confirms them, ``reaper``
recovers what a crash orphaned, ``batching`` gathers records into one task.
"""
