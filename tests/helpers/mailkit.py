"""A real SMTP server in the test process (aiosmtpd, as ``signoff demo --channels`` runs
it), and reading what it received."""

import pytest

from signoff.demo.channels import LINK, Mailbox as Inbox


@pytest.fixture
def inbox():
    """An ``Inbox`` for one test (import it into the test module to use it)."""
    box = Inbox()
    yield box
    box.close()


def toml(inbox, public_url="http://127.0.0.1:1", **extra):
    """The ``[notify.email]`` table of a home mailing through ``inbox``."""
    lines = [f'smtp_url = "{inbox.url}"', 'from = "signoff@example.com"',
             f'public_url = "{public_url}"', "base_delay_s = 0.05", "max_delay_s = 0.2",
             *(f"{k} = {v}" for k, v in extra.items())]
    return "[notify.email]\n" + "\n".join(lines) + "\n"


def body(message):
    """The text of a message."""
    return message.get_content()


def link_of(message):
    """``(url, token)`` of the link a message holds."""
    found = LINK.search(body(message))
    assert found, body(message)
    return found.group(1), found.group(2)
