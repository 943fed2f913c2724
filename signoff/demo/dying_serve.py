"""``signoff serve`` that is killed (SIGKILL) right after its first commit of an event.

    python -m signoff.demo.dying_serve --home HOME serve --port PORT

It is ``signoff serve`` (``serve.server.run``, the command's own call), except
that the home is opened as a ``DyingSite``: the first group commit that stored an accepted event is
followed by ``kill -9`` of this process, so the delivery row and its
``webhook-id`` answer are durable and the sender never gets its 202. The demo
(and the tests) use it to show that the sender's retry is then answered as a
duplicate, with nothing stored twice.
"""

import argparse
import os
import signal

from ..intake.webhooks import Accept
from ..serve import server
from ..serve.site import Site


class DyingSite(Site):
    """A home whose process dies right after it stored a webhook's accepted event."""

    def write_webhooks(self, jobs):
        """Write the jobs as ``Site`` does; once an accepted event is stored, die."""
        answers = super().write_webhooks(jobs)
        if any(isinstance(job, Accept) for job in jobs):
            os.kill(os.getpid(), signal.SIGKILL)
        return answers


def main(argv=None):
    """``--home HOME serve [--port PORT]``: serve the home opened as a ``DyingSite``."""
    parser = argparse.ArgumentParser(prog="python -m signoff.demo.dying_serve")
    parser.add_argument("--home", required=True)
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server.run(args.home, port=args.port, site=DyingSite)


if __name__ == "__main__":
    main()
