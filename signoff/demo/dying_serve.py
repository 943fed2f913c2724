"""``signoff serve`` that is killed (SIGKILL) right after its first commit of an event.

    python -m signoff.demo.dying_serve --home HOME serve --port PORT

It is ``signoff serve`` in every way, except that the first group commit that
stored an accepted event is followed by ``kill -9`` of this process: the
delivery row and its ``webhook-id`` answer are durable, and the sender never
gets its 202. The demo (and the tests) use it to show that the sender's retry
is then answered as a duplicate, with nothing stored twice.
"""

import os
import signal


def main():
    """Run the ``signoff`` command line with the dying commit in place."""
    from ..app import Signoff
    from ..cli import main as cli
    from ..intake.webhooks import Accept
    write = Signoff.write_webhooks

    def write_then_die(rt, jobs):
        answers = write(rt, jobs)
        if any(isinstance(job, Accept) for job in jobs):
            os.kill(os.getpid(), signal.SIGKILL)
        return answers

    Signoff.write_webhooks = write_then_die  # before serve builds its commit writer
    cli(prog_name="signoff")


if __name__ == "__main__":
    main()
