"""The ``signoff`` command, and ``python -m signoff``."""

from .cli import Launch, main as cli


def main():
    """Run the command line in a process of its own: Peewee and Huey are imported
    as its home needs them (``commands.libraries``)."""
    cli(obj=Launch(own_process=True))


if __name__ == "__main__":
    main()
