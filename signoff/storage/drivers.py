"""Server drivers, imported by name where a home on a server needs one.

Peewee and Huey import psycopg and redis themselves when they are installed;
signoff leaves them to it (deferring those imports would change both libraries
for every program that imports signoff). ``load`` is the one place signoff
asks for a driver, so a missing extra is found in one place (``urls``).
"""

import importlib


def load(name):
    """The driver module ``name`` (``psycopg`` or ``redis``); ImportError if absent."""
    return importlib.import_module(name)
