"""Ingest with an empty history and with 100,000 finished tasks already stored.

    python bench/growth.py [--events N] [--workers K] [--json]

Same as ``signoff bench --growth``: every figure of the bench, plus
``ingest_growth_per_s`` and ``ingest_growth_ratio`` (target >= 0.9).
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from signoff.bench import run_bench  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = run_bench(n_events=args.events, workers=args.workers, growth=True, as_json=args.json)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0 if report["targets"]["ingest_growth_ratio"]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
