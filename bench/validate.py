"""The step model's accuracy on the held-out runs: errors per GPU family, engine, model, tensor-parallel degree and
metric, recomputed now from the shipped calibration (``engine.calibrate.joint_fit`` says which runs are held out and
why).

Usage: python bench/validate.py [--csv FILE]   (about a minute per hundred runs on one core)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.calibrate.calibration import measurements  # noqa: E402
from engine.calibrate.calibration_report import markdown_table, prediction_table  # noqa: E402
from engine.calibrate.joint_fit import split  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", help="also write every held-out run with its prediction to this file")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    table = measurements()
    started = time.perf_counter()
    predicted = prediction_table(table[split(table)], workers=args.workers)
    print(f"{len(predicted)} held-out runs predicted in {time.perf_counter() - started:.0f} s\n")
    print(markdown_table(predicted.assign(fitted=False)))
    if args.csv:
        predicted.to_csv(args.csv)


if __name__ == "__main__":
    main()
