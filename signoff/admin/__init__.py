"""Administration: monitors (bind, cancel, pause) and their gaps (resume), MCP Events
subscriptions, reviewers and their sessions, webhook secrets.
"""
