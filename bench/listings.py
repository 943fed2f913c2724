"""Build a home with many finished deliveries, to time the listings on a big home.

    python bench/listings.py HOME [--deliveries 200000]
    /usr/bin/time -v signoff --home HOME events > /dev/null          # newest 50
    /usr/bin/time -v signoff --home HOME events --all --json > /dev/null

Rows are written in bulk (``insert_rows``), as finished deliveries with one
audit row each, so the home is ready in seconds.
"""

import argparse
import time

from signoff import storage
from signoff.app import Signoff
from signoff.models import Audit, Delivery, db, insert_rows

CHUNK = 5000


def build(home, deliveries):
    """Initialise ``home`` and fill it with ``deliveries`` done deliveries."""
    rt = Signoff.init(home)
    rt.bind("doc-demo", "big")
    now = time.time()
    for lo in range(0, deliveries, CHUNK):
        n = min(CHUNK, deliveries - lo)
        rows = [{"monitor": "big", "event_id": f"evt-{lo + i}", "name": "comment.created",
                 "document": "doc-demo", "record_id": f"r-{lo + i}", "occurred": int(now),
                 "status": "done", "outcome": "nonmatch", "attempts": 1, "last_code": "nonmatch",
                 "next_at": now, "accepted_at": now, "updated_at": now, "failures": {}}
                for i in range(n)]
        with storage.bind(rt.database), db.atomic():
            insert_rows(Delivery, rows)
            insert_rows(Audit, [{"at": now, "monitor": "big", "event_id": r["event_id"],
                                 "task_key": None, "code": "nonmatch"} for r in rows])
    rt.database.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("home")
    parser.add_argument("--deliveries", type=int, default=200_000)
    args = parser.parse_args()
    build(args.home, args.deliveries)


if __name__ == "__main__":
    main()
