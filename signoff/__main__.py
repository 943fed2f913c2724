"""The ``signoff`` command, and ``python -m signoff``.

The command owns its process, so it imports Peewee and Huey with their server
drivers held back: a driver is imported only when the home's backend needs one
(``storage.drivers`` hands it to both libraries then). Both libraries import
psycopg and redis eagerly, which would cost more than the rest of start-up.
"""

import sys

HELD_BACK = ("psycopg", "redis")  # storage.drivers.DRIVERS (importing it would import Peewee)


def load_libraries():
    """Import Huey and Peewee with the server drivers held back, as the command does
    before anything else (a process that runs the command's ``main`` itself calls it
    first)."""
    held = [name for name in HELD_BACK if name not in sys.modules]
    for name in held:
        sys.modules[name] = None  # an import of it raises ImportError
    try:
        import huey  # noqa: F401 (imported while the drivers are held back)
        import peewee  # noqa: F401
    finally:
        for name in held:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


def main():
    """Run the command line."""
    load_libraries()
    from .cli import main as cli_main
    cli_main()


if __name__ == "__main__":
    main()
