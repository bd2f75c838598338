"""Simulator speed on the workload peer simulators are compared on, and on the app's default preset.

The peer-comparable workload: Llama-2-70B FP16 over 2 x A100-80G (tensor parallel), 512-token prompts and
128 output tokens, Poisson arrivals at 1 request/s, vLLM's first-come-first-served policy with vLLM V1's
limits (256 sequences, 8,192 tokens per iteration): ``data/scenarios/engine_vllm_v1.toml`` with those
overrides. For 10,000 and 100,000 requests it measures, in this process after compilation (best of three),
the whole ``simulate()`` and the compiled loop alone (``simulate.execute`` on a prepared run), as
simulated requests per wall second; and the default preset with 100,000 requests. Each figure is measured
twice in the same run, with event skipping (the default) and deciding every iteration
(``event_skipping=False``, the loop before skipping), and given as the ratio of the two. The goals these
figures are held to (350,000 requests/s on the peer workload, under 0.2 s for the default preset) are in
the manual's speed page (docs/speed.md).

Usage: python bench/bench_peer.py [--sizes 10000 100000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import engine  # noqa: E402
from engine.sim.simulate import execute, prepare  # noqa: E402

PEER = REPO / "data" / "scenarios" / "engine_vllm_v1.toml"
PEER_OVERRIDES = ["workload.arrival.rate_per_s=1.0", "server.max_batch_size=256", "server.max_batched_tokens=8192",
                  "policy.name=vllm-fcfs"]
DEFAULT = REPO / "data" / "scenarios" / "chat_and_batch_a100_8b.toml"


def best_of(repeats: int, run) -> float:
    """The fastest wall time of ``repeats`` calls of ``run``."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def timed(scenario, repeats: int, event_skipping: bool) -> tuple[float, float, dict]:
    """Best wall seconds of ``simulate()`` and of the compiled loop alone, and the run's system counters."""
    system = engine.simulate(scenario, event_skipping=event_skipping).summary["system"]
    whole_s = best_of(repeats, lambda: engine.simulate(scenario, event_skipping=event_skipping))
    prepared = prepare(scenario, event_skipping=event_skipping)
    loop_s = best_of(repeats, lambda: execute(prepared))
    return whole_s, loop_s, system


def measure(name: str, scenario, repeats: int = 3) -> dict:
    whole_s, loop_s, system = timed(scenario, repeats, True)
    stepped_s, stepped_loop_s, _ = timed(scenario, repeats, False)
    n = scenario.workload.num_requests
    return {"workload": name, "requests": n, "simulate_s": whole_s, "loop_s": loop_s, "requests_per_s": n / whole_s,
            "loop_requests_per_s": n / loop_s, "speedup": stepped_s / whole_s, "loop_speedup": stepped_loop_s / loop_s,
            "iterations": system["iterations"], "skipped_share": system["skipped_iterations"] / system["iterations"],
            "mean_batch_size": system["mean_batch_size"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    engine.simulate(engine.load_scenario(PEER, overrides=[*PEER_OVERRIDES, "workload.num_requests=100"]))  # compile
    rows = [measure("peer", engine.load_scenario(PEER, overrides=[*PEER_OVERRIDES, f"workload.num_requests={n}"]))
            for n in args.sizes]
    rows.append(measure("default preset", engine.load_scenario(DEFAULT, overrides=["workload.num_requests=100000"])))
    print("Peer-comparable workload (Llama-2-70B FP16, TP2 A100-80G, 512 + 128 tokens, Poisson 1 req/s, vllm-fcfs) "
          f"and the default preset ({DEFAULT.name}); x = times faster than deciding every iteration:\n")
    print("| workload | requests | simulate() (s) | requests/s | x | compiled loop alone (s) | requests/s | x | "
          "iterations | skipped | mean batch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {r['requests']:,} | {r['simulate_s']:.3f} | {r['requests_per_s']:,.0f} | "
              f"{r['speedup']:.2f} | {r['loop_s']:.3f} | {r['loop_requests_per_s']:,.0f} | {r['loop_speedup']:.2f} | "
              f"{r['iterations']:,} | {r['skipped_share']:.0%} | {r['mean_batch_size']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
