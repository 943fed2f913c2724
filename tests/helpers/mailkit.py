"""A real SMTP server in the test process (aiosmtpd), and reading what it received."""

import email
import email.policy
import re
import socket
import threading

import pytest
from aiosmtpd.controller import Controller

LINK = re.compile(r"(https?://\S+/r/(sol_[A-Za-z0-9_-]+))")


class Inbox:
    """An SMTP server on 127.0.0.1 that keeps every message it is sent (``messages``)."""

    def __init__(self):
        self.messages = []  # (envelope recipients, parsed message)
        self._lock = threading.Lock()
        port = _free_port()  # aiosmtpd checks its server by connecting: it needs a real port
        self.controller = Controller(self, hostname="127.0.0.1", port=port)
        self.controller.start()
        self.url = f"smtp://127.0.0.1:{port}"

    async def handle_DATA(self, server, session, envelope):
        """aiosmtpd's hook: keep the message."""
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self._lock:
            self.messages.append((list(envelope.rcpt_tos), parsed))
        return "250 OK"

    def to(self, address):
        """The messages sent to ``address`` so far, oldest first."""
        with self._lock:
            return [m for rcpts, m in self.messages if address in rcpts]

    def close(self):
        """Stop the server (once)."""
        if self.controller._thread is not None:
            self.controller.stop()


@pytest.fixture
def inbox():
    """An ``Inbox`` for one test (import it into the test module to use it)."""
    box = Inbox()
    yield box
    box.close()


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
