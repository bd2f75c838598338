"""Traffic that moves, timed: a day of about a million requests and a week, each at a constant rate, along a
ServeGen day or week shape, and with an autoscaler (and spot interruptions) on the shaped traffic; with the
number of requests, windows, scaling events and SLA attainment of each, and the wall time measured in this one run
(the first run of each shape pays for nothing: the simulator is compiled before the clock starts).

The workload is the example preset's (``data/scenarios/example.toml``: two classes, the fixed step model) on a fleet
of eight replicas at most (batches of eight).

Then a plan of a day: a chat service (prompts of 3,000 tokens on average, answers of 250) on Llama-3.1-70B and
H100-80G along ServeGen's small-language day at 10 req/s on average, TTFT p99 at most 2 s; the planner sizes the
peak, then buys the recommendation three ways over the whole day with the autoscaler's parameters searched
(``decide.over_time``): its wall time, that step's, and the three bills.

Usage: python bench/bench_traffic.py [--day-rate 11.5] [--week-rate 1.6] [--no-plan | --plan-only] [--json PATH]
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
from engine.decide.planner import Question, plan  # noqa: E402
from engine.decide.targets import Target  # noqa: E402
from engine.sim.simulate import warm_up  # noqa: E402
from engine.scenario.config import apply_overrides, read_toml  # noqa: E402

EXAMPLE = REPO / "data" / "scenarios" / "example.toml"
DAY_S, WEEK_S = 86_400, 7 * 86_400
SCALER = {"min_replicas": 1, "max_replicas": 8, "signal": "utilisation", "target": 0.7, "provision_s": 120.0}


def variants(rate_per_s: float, duration_s: int, shape: str) -> dict[str, dict]:
    base = apply_overrides(read_toml(EXAMPLE), {
        "workload.num_requests": None, "workload.duration_s": duration_s, "fleet.replicas": 8,
        "fleet.router": "least-tokens",
        "workload.arrival": {"process": "poisson", "rate_per_s": rate_per_s}})
    shaped = apply_overrides(base, {"workload.arrival.shape": shape})
    scaled = apply_overrides(shaped, {"fleet.replicas": 1, "fleet.autoscale": SCALER})
    spot = apply_overrides(scaled, {"fleet.spot_interruptions_per_hour": 0.5})
    return {"constant rate": base, "shaped": shaped, "shaped, autoscaled": scaled, "autoscaled with spot": spot}


def timed(data: dict) -> dict:
    scenario = engine.load_scenario(data)
    started = time.perf_counter()
    summary = engine.simulate(scenario).summary
    wall_s = time.perf_counter() - started
    scale = summary["system"].get("autoscale") or {}
    return {"requests": summary["run"]["requests"], "wall_s": wall_s, "windows": len(summary["windows"]),
            "sla_attainment": summary["overall"]["sla_attainment"],
            "replica_hours": summary["system"]["replica_hours"], "scaling_events": len(scale.get("events", [])),
            "interruptions": scale.get("interruptions", 0)}


def planned_day() -> dict:
    """The plan of a day of a 70B chat service on H100 (module docstring), timed."""
    data = {"name": "chat day", "seed": 1, "fleet": {"router": "least-tokens"}, "policy": {"name": "fifo"},
            "server": {"step_model": "roofline", "gpu": "H100-80G", "model": "Llama-3.1-70B"},
            "workload": {"duration_s": DAY_S, "arrival": {"process": "poisson", "rate_per_s": 10.0,
                                                          "shape": "servegen-language-small-day"},
                         "classes": [{"name": "chat", "share": 1.0, "sla_ttft_ms": 2000.0,
                                      "prompt_tokens": {"dist": "lognormal", "mean": 3000, "cv": 1.0},
                                      "output_tokens": {"dist": "lognormal", "mean": 250, "cv": 0.8}}]}}
    question = Question(targets=(Target("chat", "ttft_p99_ms", 2000.0),), gpus=("H100-80G",))
    started = time.perf_counter()
    answer = plan(data, question)
    wall_s = time.perf_counter() - started
    over = answer["over_time"]
    best = answer["recommendation"]
    return {"wall_s": wall_s, "over_time_s": over["wall_s"], "over_time_runs": over["runs"],
            "requests": over["requests"], "recommendation": f"{best['replicas']} x TP{best['tensor_parallel']} "
                                                            f"{best['gpu']} through {best['offer']}",
            "bills": [{"strategy": r["strategy"], "per_month_usd": r["monthly_cost"]["low"],
                       "sla_attainment": r["sla_attainment"], "meets_targets": r["meets_targets"],
                       "autoscale": r["autoscale"]} for r in over["strategies"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--day-rate", type=float, default=11.5, help="mean req/s of the day (11.5: ~994,000)")
    parser.add_argument("--week-rate", type=float, default=1.6, help="mean req/s of the week (1.6: ~968,000)")
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--no-plan", action="store_true", help="leave out the plan of a day")
    runs.add_argument("--plan-only", action="store_true", help="the plan of a day alone")
    parser.add_argument("--json", help="write the figures as JSON here")
    args = parser.parse_args()
    warm_up()
    rows = []
    spans = () if args.plan_only else (("day", args.day_rate, DAY_S, "servegen-language-mid-day"),
                                       ("week", args.week_rate, WEEK_S, "servegen-language-mid-week"))
    for span, rate, duration_s, shape in spans:
        for name, data in variants(rate, duration_s, shape).items():
            row = {"span": span, "variant": name, **timed(data)}
            rows.append(row)
            print(f"{span:<5} {name:<22} {row['requests']:>10,} requests {row['wall_s']:6.2f} s  "
                  f"SLA met {100 * row['sla_attainment']:5.1f}%  {row['replica_hours']:8,.1f} replica-hours  "
                  f"{row['scaling_events']:>5,} scaling events  {row['interruptions']} interruptions", flush=True)
    planned = None if args.no_plan else planned_day()
    if planned:
        print(f"plan of a day: {planned['wall_s']:.1f} s, of which {planned['over_time_s']:.1f} s for "
              f"{planned['over_time_runs']} runs of the whole day ({planned['requests']:,} requests each); "
              f"recommended {planned['recommendation']}")
        for bill in planned["bills"]:
            met = "meets the target" if bill["meets_targets"] else "MISSES the target"
            print(f"  {bill['strategy']:<28} {bill['per_month_usd']:>10,.0f} USD a month  SLA met "
                  f"{100 * bill['sla_attainment']:5.1f}%  {met}  {bill['autoscale'] or ''}")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "plan": planned}, indent=1) + "\n")


if __name__ == "__main__":
    main()
