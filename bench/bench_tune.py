"""Time of the tuner on the article preset where requests queue for the batch (64 sequences, 45 req/s: offered
load about 0.9): every tunable policy, 300 candidates, interactive TTFT p99 minimised with no class waiting over
30 s (goal: under 20 s on 2 cores).

Usage: python bench/bench_tune.py [--candidates N] [--requests N] [--seeds K]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.decide.tune_text import tune_text  # noqa: E402
from engine.decide.tuner import (DEFAULT_CANDIDATES, DEFAULT_REQUESTS, DEFAULT_SEEDS, Objective, TuneQuestion,
                                 parse_constraint, tune)
from engine.scenario.config import apply_overrides, read_toml  # noqa: E402
from engine.sim.parallel import cores  # noqa: E402
from engine.sim.simulate import warm_up  # noqa: E402

SCENARIO = REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"
BUSY = {"server.max_batch_size": 64, "workload.arrival.rate_per_s": 45.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=DEFAULT_CANDIDATES)
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS)
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS)
    args = parser.parse_args()
    warm_up()  # load the compiled loop before timing
    constraints = tuple(parse_constraint("*.longest_wait_ms<=30000"))
    question = TuneQuestion(Objective("interactive", "ttft_p99_ms"), constraints, candidates=args.candidates,
                            seeds=args.seeds, requests=args.requests)
    data = apply_overrides(read_toml(SCENARIO), BUSY)
    started = time.perf_counter()
    answer = tune(data, question)
    wall_s = time.perf_counter() - started
    print(tune_text(answer, "article, 64 sequences, 45 req/s"))
    print(f"\n{SCENARIO.name} {BUSY}: {answer['evaluations']} candidates x {args.seeds} seeds x {args.requests:,} "
          f"requests on {cores()} cores: {wall_s:.1f} s")


if __name__ == "__main__":
    main()
