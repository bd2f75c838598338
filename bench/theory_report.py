"""Theory checks with more seeds than the test suite: simulated vs predicted mean queue delay.

Usage: python bench/theory_report.py [--seeds 20] [--requests 40000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.teach.theory import theory_checks  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--requests", type=int, default=40_000)
    args = parser.parse_args()
    checks = theory_checks(seeds=range(100, 100 + args.seeds), num_requests=args.requests)
    print(f"{args.seeds} seeds x {args.requests:,} requests, first 10% of the arrival span cut as warm-up\n")
    print("| set-up | class | theory (ms) | simulated (ms) | std. error (ms) | error |")
    print("|---|---|---:|---:|---:|---:|")
    for c in checks:
        print(f"| {c.name} | {c.cls} | {c.theory_ms:.2f} | {c.simulated_ms:.2f} | {c.std_error_ms:.2f} | "
              f"{100 * c.rel_error:+.2f}% |")


if __name__ == "__main__":
    main()
