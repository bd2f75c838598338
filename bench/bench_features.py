"""How each serving feature changes the planner's answer, on the source article's workload and on the Mooncake
conversation trace (``../shared/traces``).

For each workload the same question is asked of the planner with the scenario as shipped (plain decoding, no
prefix cache, colocated servers), then with one feature at a time: speculative decoding offered as a decoding
(Llama-3.2-1B drafting 4 tokens, 70% accepted), prefix caching (with the prefix-affinity router), a disaggregated
fleet (the planner splits the servers between the pools), and the mixed fleet the planner proposes beside its
answer. Printed: the recommendation (fleet, cards, monthly cost) and its change against the baseline, and the
runs and wall time each answer took, measured in this one run.

Usage: python bench/bench_features.py [--requests 800] [--seeds 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.decide.plan_text import mix_text, shape  # noqa: E402
from engine.decide.planner import Question, plan  # noqa: E402
from engine.decide.targets import parse_target  # noqa: E402
from engine.scenario.config import apply_overrides, read_toml  # noqa: E402

TRACES = REPO.parent / "shared" / "traces"
ARTICLE = REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"
GPUS = ("A100-80G", "H100-80G")
SPECULATIVE = {"draft_tokens": 4, "acceptance": 0.7, "draft_model": "Llama-3.2-1B"}
POOLS = {"fleet.mode": "disaggregated", "fleet.prefill": {"replicas": 1}, "fleet.decode": {"replicas": 1}}


def article() -> dict:
    return read_toml(ARTICLE)


def mooncake() -> dict:
    """The Mooncake conversation trace replayed (arrivals jittered within its 3 s buckets) on Llama-3-8B."""
    return {"name": "Mooncake conversation trace, Llama-3-8B", "seed": 3,
            "workload": {"classes": [{"name": "chat", "share": 1.0, "sla_ttft_ms": 5000}],
                         "trace": {"path": str(TRACES / "mooncake_fast25" / "conversation_trace.jsonl"),
                                   "format": "mooncake", "jitter_ms": 3000}},
            "server": {"step_model": "roofline", "model": "Llama-3-8B", "quant": "fp16", "max_batch_size": 64,
                       "max_batched_tokens": 16384},
            "fleet": {"router": "least-tokens"}}


WORKLOADS = {"article": (article, "interactive.ttft_p99_ms=1000,interactive.tpot_mean_ms=20"),
             "mooncake": (mooncake, "chat.ttft_p99_ms=5000")}


def variants(data: dict) -> dict[str, tuple[dict, dict]]:
    """feature -> (scenario, question changes)."""
    cached = apply_overrides(data, {"server.prefix_caching": True, "fleet.router": "prefix-affinity"})
    return {"baseline": (data, {}),
            "speculative decoding": (apply_overrides(data, {"server.speculative": SPECULATIVE}),
                                     {"decodings": ("plain", "speculative")}),
            "prefix caching": (cached, {}),
            "disaggregated": (apply_overrides(data, POOLS), {})}


def answer_row(answer: dict) -> dict:
    best = answer["recommendation"]
    if best is None:
        return {"fleet": None, "note": answer["not_possible"][:1]}
    return {"fleet": f"{shape(best)} {best['gpu']} {best['quant']} ({best['decoding']})", "cards": best["cards"],
            "monthly_low": round(best["monthly_cost"]["low"]), "currency": best["monthly_cost"]["currency"],
            "targets": {t["target"]: t["value"] for t in best["targets"]}, "mix": mix_text(answer),
            "runs": answer["run"]["evaluations"], "wall_s": round(answer["run"]["wall_s"], 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--workloads", default="article,mooncake")
    parser.add_argument("--json")
    args = parser.parse_args()
    results = {}
    for name in args.workloads.split(","):
        make, targets = WORKLOADS[name]
        question = dict(targets=tuple(parse_target(t) for t in targets.split(",")), gpus=GPUS, seeds=args.seeds,
                        requests=args.requests, prices="any")  # A100-80G has no firm price
        results[name] = {}
        for feature, (data, changes) in variants(make()).items():
            started = time.perf_counter()
            row = answer_row(plan(data, Question(**question, **changes)))
            results[name][feature] = row
            print(f"{name:9} {feature:21} {row.get('fleet')}: {row.get('cards')} cards, {row.get('monthly_low')} "
                  f"{row.get('currency')}/month, {row.get('targets')}; {row.get('runs')} runs, "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
            if feature == "baseline" and row.get("mix"):
                print(f"{'':31} {row['mix']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
