"""Ingest with an empty history and with ROWS finished tasks already stored.

    python bench/growth.py [--events N] [--workers K] [--rows ROWS] [--json]

Same as ``python -m bench --growth --growth-rows ROWS`` (100,000 by default; a
million takes a few minutes to write): every figure of the bench, plus
``ingest_growth_ratio`` (target >= 0.9) and ``claim_growth_ratio``, the
median claim statement's time with ROWS finished tasks over an empty
database's (target <= 1.25).
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pipeline import run_bench  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = run_bench(n_events=args.events, workers=args.workers, growth=True, as_json=args.json,
                       growth_rows=args.rows)
    if args.json:
        print(json.dumps(report, indent=2))
    targets = report["targets"]
    return 0 if targets["ingest_growth_ratio"]["pass"] and targets["claim_growth_ratio"]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
