"""The reference host (instrumented, ``testhosts.RecordingHost``) as an MCP server over
streamable HTTP on an address of the caller's choosing: a partition test's namespace.

``python -m labhost HOST_HOME ADDRESS PORT``. One pause can be armed (``arm_pause``):
the next submit that writes a result stops right after the write committed,
names its key in ``<home>/paused``, and answers only once ``<home>/go``
exists, so a test can cut the network between the write and its answer.
"""

import sys
import time
from pathlib import Path

from testhosts import RecordingHost

ARMED, PAUSED, GO = "pause-armed", "paused", "go"
PAUSE_MOST_S = 60.0  # a pause nobody ends answers after this anyway


def arm_pause(home):
    """Make the next written submit pause before answering (see the module)."""
    for name in (PAUSED, GO):
        Path(home, name).unlink(missing_ok=True)
    Path(home, ARMED).write_text("1", encoding="utf-8")


def paused_key(home):
    """The key of the submit that paused, once it has."""
    path = Path(home, PAUSED)
    return path.read_text(encoding="utf-8") if path.exists() else None


def let_it_answer(home):
    """End the pause: the submit answers (into whatever network there is now)."""
    Path(home, GO).write_text("1", encoding="utf-8")


class PausingHost(RecordingHost):
    """``RecordingHost`` whose next written submit may pause before answering."""

    def submit(self, key, expected, result):
        before = self._writes(key)
        super().submit(key, expected, result)
        armed = self.home / ARMED
        if self._writes(key) > before and armed.exists():
            armed.unlink()
            (self.home / PAUSED).write_text(key, encoding="utf-8")
            deadline = time.monotonic() + PAUSE_MOST_S
            while not (self.home / GO).exists() and time.monotonic() < deadline:
                time.sleep(0.02)


def main(home, address, port):
    import uvicorn
    from signoff.mcp.hostserver import build
    server = build(PausingHost(Path(home)))
    app = server.streamable_http_app(host=address)
    uvicorn.Server(uvicorn.Config(app, host=address, port=int(port), log_level="warning")).run()


if __name__ == "__main__":
    main(*sys.argv[1:])
