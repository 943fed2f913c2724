"""Purge time for N finished tasks (default 100,000) on a fresh SQLite home.

    python bench/purge.py [--tasks N] [--json]

Builds N finished tasks (done, rejected, cancelled, expired, blocked in turn)
that finished 40 days ago, then times ``signoff purge --dry-run`` and
``signoff purge`` through the Python API, and reports the peak RSS.
"""

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from signoff import storage  # noqa: E402
from signoff.chores import retention  # noqa: E402
from signoff.app import Signoff  # noqa: E402
from signoff.models import Task, db, insert_rows  # noqa: E402

STATUSES = ("done", "rejected", "cancelled", "expired", "blocked")


def build(rt, n):
    """Insert ``n`` finished tasks with a realistic snapshot and result."""
    at = rt.clock.now() - 40 * retention.DAY_S
    record = {"id": "r", "document": "doc-demo", "version": 1, "tenant": "demo-tenant",
              "status": "open", "kind": "review", "text": "x" * 200,
              "source": "reference://doc-demo/r"}
    result = {"record_id": "r", "version": 1, "draft": "Suggested demo date " * 5,
              "sources": ["reference://doc-demo/r", "reference://materials/doc-demo"]}
    with storage.bind(rt.database), db.atomic():
        for lo in range(0, n, 5000):
            insert_rows(Task, [{"key": f"{i:064x}", "monitor": "default", "record_id": f"r{i}",
                                "version": 1, "status": STATUSES[i % len(STATUSES)],
                                "record": record, "result": result, "digest": "0" * 64,
                                "created_at": at, "updated_at": at}
                               for i in range(lo, min(n, lo + 5000))])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rt = Signoff.init(Path(folder) / "home")
        build(rt, args.tasks)
        started = time.monotonic()
        counted = rt.purge(dry_run=True)["purged"]
        dry_s = time.monotonic() - started
        started = time.monotonic()
        purged = rt.purge()["purged"]
        purge_s = time.monotonic() - started
        rt.database.close()
    report = {"tasks": args.tasks, "dry_run_counted": counted, "dry_run_s": round(dry_s, 2),
              "purged": purged, "purge_s": round(purge_s, 2),
              "tasks_per_s": round(purged / purge_s) if purge_s else None,
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}
    print(json.dumps(report, indent=2) if args.json else
          "\n".join(f"{k:16} {v}" for k, v in report.items()))
    return 0 if purged == counted == args.tasks else 1


if __name__ == "__main__":
    sys.exit(main())
