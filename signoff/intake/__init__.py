"""Intake: events arriving (``enqueue``, one line at a time or a stream) and webhooks
(``webhooks``: verified, deduplicated, stored in group commits), made durable before
anything else happens.
"""
