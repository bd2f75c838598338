"""Time of the policy comparison on the default preset: every policy on the same arrivals, in one run.

Usage: python bench/bench_policies.py [--requests N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.scenario.config import apply_overrides, read_toml  # noqa: E402
from engine.sim.policies import POLICIES  # noqa: E402
from engine.sim.simulate import run_summary  # noqa: E402
from engine.sim.sweep import compare_policies  # noqa: E402

SCENARIO = REPO / "data" / "scenarios" / "example.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, nargs="+", default=[5000, 20000])
    args = parser.parse_args()
    data = read_toml(SCENARIO)
    for name in POLICIES:  # load every compiled variant before timing
        run_summary(apply_overrides(data, {"policy.name": name, "workload.num_requests": 50}))
    print(f"Default scenario {SCENARIO.relative_to(REPO)}, all {len(POLICIES)} policies on the same arrivals\n")
    print("| requests | comparison wall (s) | per policy (s) |")
    print("|---:|---:|---:|")
    for n in args.requests:
        started = time.perf_counter()
        frame = compare_policies(apply_overrides(data, {"workload.num_requests": n}))
        elapsed = time.perf_counter() - started
        print(f"| {n:,} | {elapsed:.2f} | {elapsed / len(POLICIES):.3f} |")
    print(f"\nAt {args.requests[-1]:,} requests:\n")
    print("| policy | interactive TTFT p99 (ms) | interactive SLA | offline longest wait (s) | preemptions |")
    print("|---|---:|---:|---:|---:|")
    rows = frame.set_index(["policy", "class"])
    for name in POLICIES:
        inter, off = rows.loc[(name, "interactive")], rows.loc[(name, "offline")]
        print(f"| {name} | {inter['ttft_p99_ms']:,.0f} | {inter['sla_attainment']:.1%} | "
              f"{off['longest_wait_ms'] / 1000:,.1f} | {inter['preemptions']:,} |")


if __name__ == "__main__":
    main()
