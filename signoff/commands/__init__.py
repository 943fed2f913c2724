"""The command line's pieces: how it prints (``output``), renders tasks and
stats for people (``render``) and watches (``watch``). ``signoff.cli`` holds
the commands.
"""
