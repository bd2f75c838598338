"""Time of the planner on the article preset: every GPU with an offer, every tensor-parallel degree that fits,
four policies, interactive TTFT p99 at most 1 s (goal: under 30 s on 2 cores).

Usage: python bench/bench_plan.py [--requests N] [--seeds K]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.decide.planner import DEFAULT_REQUESTS, DEFAULT_SEEDS, Question, plan  # noqa: E402
from engine.decide.targets import parse_target  # noqa: E402
from engine.scenario.config import read_toml  # noqa: E402
from engine.sim.parallel import cores  # noqa: E402
from engine.sim.simulate import warm_up  # noqa: E402

SCENARIO = REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"
POLICIES = ("fifo", "priority", "wfq", "dynamic")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS)
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS)
    args = parser.parse_args()
    warm_up()  # load the compiled loop before timing
    question = Question((parse_target("interactive.ttft_p99_ms=1000"),), policies=POLICIES, seeds=args.seeds,
                        requests=args.requests)
    started = time.perf_counter()
    answer = plan(read_toml(SCENARIO), question)
    wall_s = time.perf_counter() - started
    best = answer["recommendation"]
    plans = 1 + len(answer["alternatives"])
    print(f"{SCENARIO.name}, {len(POLICIES)} policies, {args.requests:,} requests x {args.seeds} seeds per decision, "
          f"{cores()} cores: {wall_s:.1f} s, {answer['run']['evaluations']:,} runs, {plans} priced plans; recommended "
          f"{best['replicas']} x TP{best['tensor_parallel']} {best['gpu']} through {best['offer']}, "
          f"{best['monthly_cost']['low']:,.0f} {best['monthly_cost']['currency']} per month")


if __name__ == "__main__":
    main()
