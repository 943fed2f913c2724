"""Decisions people (and standing policies) make about tasks and deliveries: approve,
edit, reject, cancel and retry (``approval``), draft again (``redraft``), approve
without a click within bounds (``policy``), hurry a retry (``deliveries``), replay a
dead letter (``deadletters``). Each one checks and acts in one transaction.
"""
