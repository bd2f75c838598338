"""Time of the planner on the article preset: every GPU with an offer, every tensor-parallel degree that fits,
four policies, interactive TTFT p99 at most 1 s (goal: under 30 s on 2 cores); with ``--story r1``, DeepSeek-R1 for
a reasoning product over a day (bench/scenarios/deepseek_r1_reasoning_day.toml: every GPU with an offer, chat TTFT
p99 at most 3 s; goal: under 60 s on 2 cores, within the plan's own time limit of 300 s).

Usage: python bench/bench_plan.py [--story article|r1] [--requests N] [--seeds K]
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
STORIES = {"article": (SCENARIO, "interactive.ttft_p99_ms=1000", POLICIES),
           "r1": (REPO / "bench" / "scenarios" / "deepseek_r1_reasoning_day.toml", "chat.ttft_p99_ms=3000", ("fifo",))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--story", choices=sorted(STORIES), default="article")
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS)
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS)
    args = parser.parse_args()
    scenario, target, policies = STORIES[args.story]
    warm_up()  # load the compiled loop before timing
    question = Question((parse_target(target),), policies=policies, seeds=args.seeds, requests=args.requests)
    started = time.perf_counter()
    answer = plan(read_toml(scenario), question)
    wall_s = time.perf_counter() - started
    best = answer["recommendation"]
    plans = 1 + len(answer["alternatives"])
    cut = f"; cut short: {answer['run']['cut']}" if answer["run"]["cut"] else ""
    said = (f"recommended {best['replicas']} x TP{best['tensor_parallel']} {best['gpu']} through {best['offer']}, "
            f"{best['monthly_cost']['low']:,.0f} {best['monthly_cost']['currency']} per month" if best else
            "no recommendation")
    print(f"{scenario.name}, {len(policies)} policies, at least {args.requests:,} requests x {args.seeds} seeds per "
          f"decision, {cores()} cores: {wall_s:.1f} s, {answer['run']['evaluations']:,} runs, {plans} priced plans; "
          f"{said}{cut}")


if __name__ == "__main__":
    main()
