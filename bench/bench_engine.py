"""Simulator speed on the default scenario (data/scenarios/example.toml).

Measures, in one run on this machine:
- simulated requests/s and request-iterations/s (sum of batch sizes over iterations) at
  10k, 100k and 1M requests, after compilation;
- the same loop uncompiled (NUMBA_DISABLE_JIT=1, in a subprocess) on the 10k scenario, as a ratio;
- the start-up of a fresh process with the on-disk compile cache warm versus empty;
- fleets: the same scenario with R times the arrival rate on R replicas, per router, against one
  replica at the base rate (same requests per replica);
- the cost of the wall-clock limit: the compiled loop reading the clock every 16 events and returning
  every 50 ms, against one call for the whole run, alternated, best of three each.

Usage: python bench/bench_engine.py [--sizes 10000 100000 1000000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import engine  # noqa: E402

SCENARIO = REPO / "data" / "scenarios" / "example.toml"
CHILD = """
import sys, time, json
t0 = time.perf_counter()
sys.path.insert(0, {repo!r})
import engine
s = engine.load_scenario({scenario!r}, overrides=["workload.num_requests={n}"])
t1 = time.perf_counter()
r = engine.simulate(s)
t2 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "simulate_s": t2 - t1, "total_s": t2 - t0}}))
"""


def best_run(scenario: engine.Scenario, repeats: int) -> tuple[engine.Result, float]:
    """The last result and the fastest wall time of ``repeats`` simulations."""
    best = None
    for _ in range(repeats):
        started = time.perf_counter()
        result = engine.simulate(scenario)
        elapsed = time.perf_counter() - started
        best = elapsed if best is None else min(best, elapsed)
    return result, best


def measure(n: int, repeats: int) -> dict:
    result, best = best_run(engine.load_scenario(SCENARIO, overrides=[f"workload.num_requests={n}"]), repeats)
    system = result.summary["system"]
    request_iterations = system["mean_batch_size"] * system["iterations"]
    return {"requests": n, "wall_s": best, "iterations": system["iterations"],
            "requests_per_s": n / best, "request_iterations_per_s": request_iterations / best}


def measure_fleet(n: int, replicas: int, router: str, repeats: int = 2) -> dict:
    """``n`` requests at ``replicas`` x the default rate over ``replicas`` replicas."""
    rate = engine.load_scenario(SCENARIO).workload.arrival.rate_per_s * replicas
    result, best = best_run(engine.load_scenario(SCENARIO, overrides=[
        f"workload.num_requests={n}", f"workload.arrival.rate_per_s={rate}", f"fleet.replicas={replicas}",
        f"fleet.router={router}"]), repeats)
    return {"replicas": replicas, "router": router, "requests": n, "wall_s": best,
            "iterations": result.summary["system"]["iterations"], "requests_per_s": n / best,
            "ttft_p99_ms": result.summary["overall"]["ttft_ms"]["p99"]}


def child(n: int, env_extra: dict) -> dict:
    env = {**os.environ, **env_extra}
    code = CHILD.format(repo=str(REPO), scenario=str(SCENARIO), n=n)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_slicing(n: int, repeats: int = 3) -> dict:
    """Best wall time of the run in slices (as shipped) and in one call of the compiled loop, alternated."""
    sim_module = sys.modules["engine.sim.simulate"]
    scenario = engine.load_scenario(SCENARIO, overrides=[f"workload.num_requests={n}"])
    shipped = sim_module.SLICE_S
    best = {"sliced_s": float("inf"), "one_call_s": float("inf")}
    for _ in range(repeats):
        for key, slice_s in (("sliced_s", shipped), ("one_call_s", 1e9)):
            sim_module.SLICE_S = slice_s
            best[key] = min(best[key], best_run(scenario, 1)[1])
    sim_module.SLICE_S = shipped
    return {"requests": n, **best, "ratio": best["sliced_s"] / best["one_call_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--uncompiled-size", type=int, default=10_000)
    parser.add_argument("--fleet-requests", type=int, default=100_000)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    engine.simulate(engine.load_scenario(SCENARIO, overrides=["workload.num_requests=100"]))  # compile/load
    rows = [measure(n, repeats=3 if n <= 100_000 else 1) for n in args.sizes]
    compiled = next((r for r in rows if r["requests"] == args.uncompiled_size), None) \
        or measure(args.uncompiled_size, repeats=3)
    plain = child(args.uncompiled_size, {"NUMBA_DISABLE_JIT": "1"})
    with tempfile.TemporaryDirectory() as empty_cache:
        cold = child(1000, {"NUMBA_CACHE_DIR": empty_cache})
    warm = child(1000, {})

    print(f"Default scenario: {SCENARIO.relative_to(REPO)} (fixed 20 ms step, batch 8, 2.5 req/s)\n")
    print("| requests | wall (s) | iterations | requests/s | request-iterations/s |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['requests']:,} | {r['wall_s']:.3f} | {r['iterations']:,} | {r['requests_per_s']:,.0f} | "
              f"{r['request_iterations_per_s']:,.0f} |")
    ratio = plain["simulate_s"] / compiled["wall_s"]
    print(f"\nUncompiled (NUMBA_DISABLE_JIT=1), {args.uncompiled_size:,} requests: {plain['simulate_s']:.2f} s "
          f"vs compiled {compiled['wall_s']:.3f} s: {ratio:,.0f}x faster compiled")
    print(f"Fresh process, 1,000 requests: {warm['total_s']:.2f} s with the compile cache warm "
          f"vs {cold['total_s']:.2f} s with an empty cache ({cold['total_s'] / warm['total_s']:.0f}x)")
    fleets = [measure_fleet(args.fleet_requests, 1, "round-robin")]
    fleets += [measure_fleet(args.fleet_requests, 8, router)
               for router in ("round-robin", "least-tokens", "shortest-queue")]
    print(f"\nFleets, {args.fleet_requests:,} requests, R replicas at R x the default rate:\n")
    print("| replicas | router | wall (s) | iterations | requests/s | TTFT p99 (ms) |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in fleets:
        print(f"| {r['replicas']} | {r['router']} | {r['wall_s']:.3f} | {r['iterations']:,} | "
              f"{r['requests_per_s']:,.0f} | {r['ttft_p99_ms']:,.0f} |")
    slicing = measure_slicing(args.fleet_requests)
    print(f"\nSlices against one call, {slicing['requests']:,} requests: {slicing['sliced_s']:.3f} s vs "
          f"{slicing['one_call_s']:.3f} s ({slicing['ratio']:.3f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps({"sizes": rows, "fleets": fleets, "slicing": slicing, "uncompiled": plain,
                                               "compiled_same_size": compiled,
                                               "ratio_uncompiled_over_compiled": ratio,
                                               "process_start_warm": warm, "process_start_cold": cold}, indent=2))


if __name__ == "__main__":
    main()
