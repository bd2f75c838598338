"""The source article's benchmark against the simulator: data/scenarios/article_mixed_8xa100.toml under
FIFO, strict (preemptive) priority, WFQ 70/30 and the dynamic cost policy, on the same arrivals.

Prints, and writes into the README (between the article markers), the article's figures beside the
simulated ones and which of the article's claims (orderings between policies) the simulation
reproduces: at the article's 50 req/s, and at the rates where the offered-load estimate reaches
``CONTENDED_LOADS`` (policies only differ when requests contend for batch slots, token budget or
memory). Nothing is tuned to match: the preset's choices are documented in its header.

Usage: python bench/article_report.py [--seeds 3] [--requests 30000]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import engine  # noqa: E402

PRESET = REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"
POLICIES = {"FIFO": ["policy.name=fifo"], "strict priority": ["policy.name=priority", "policy.preemptive=true"],
            "WFQ 70/30": ["policy.name=wfq"], "dynamic cost": ["policy.name=dynamic"]}
# The article's figures (shared/reference/article-zh.txt, section 2); None = not given.
ARTICLE = {
    "FIFO": {"p50_ms": 1238, "p99_ms": 7000, "timeout_pct": 18.7, "offline_tok_s": 1010},
    "strict priority": {"p50_ms": 312, "p99_ms": 1047, "timeout_pct": 2.3, "offline_tok_s": 880},
    "WFQ 70/30": {"p50_ms": 415, "p99_ms": 1623, "timeout_pct": None, "offline_tok_s": 1134},
    "dynamic cost": {"p50_ms": None, "p99_ms": 944, "timeout_pct": 1.8, "offline_tok_s": 968},
}
CONTENDED_LOADS = (1.0, 1.2)
METRICS = {"p50_ms": "interactive TTFT p50 (ms)", "p99_ms": "interactive TTFT p99 (ms)",
           "timeout_pct": "interactive time-outs (%)", "offline_tok_s": "offline output tok/s"}


def simulate_policy(overrides: list[str], seeds: int, requests: int, rate_per_s: float) -> dict:
    """Metrics averaged over ``seeds`` runs (same seeds for every policy: same arrivals)."""
    runs = []
    for seed in range(seeds):
        summary = engine.simulate(engine.load_scenario(PRESET, overrides=[
            *overrides, f"seed={seed}", f"workload.num_requests={requests}",
            f"workload.arrival.rate_per_s={rate_per_s}"])).summary
        chat, offline = summary["classes"]["interactive"], summary["classes"]["offline"]
        runs.append({"p50_ms": chat["ttft_ms"]["p50"], "p99_ms": chat["ttft_ms"]["p99"],
                     "e2e_p99_ms": chat["e2e_ms"]["p99"], "timeout_pct": 100.0 * chat["timed_out"] / chat["arrived"],
                     "offline_tok_s": offline["output_tokens_per_s"],
                     "offline_longest_wait_s": offline["longest_wait_ms"] / 1e3,
                     "offered_load": summary["system"]["offered_load"], "busy": summary["system"]["gpu_busy_frac"]})
    return {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}


def claims(sim: dict) -> list[tuple[str, bool]]:
    """The article's qualitative claims, checked on the simulated figures (strictly: a tie is a no)."""
    f, p, w, d = (sim[k] for k in ("FIFO", "strict priority", "WFQ 70/30", "dynamic cost"))
    return [
        ("priority cuts interactive P50 and P99 against FIFO", p["p50_ms"] < f["p50_ms"] and p["p99_ms"] < f["p99_ms"]),
        ("priority cuts interactive time-outs against FIFO", p["timeout_pct"] < f["timeout_pct"]),
        ("priority lowers offline throughput against FIFO", p["offline_tok_s"] < f["offline_tok_s"]),
        ("WFQ gives offline more throughput than priority", w["offline_tok_s"] > p["offline_tok_s"]),
        ("WFQ gives offline more throughput than FIFO", w["offline_tok_s"] > f["offline_tok_s"]),
        ("WFQ's interactive P50 lies between priority's and FIFO's", p["p50_ms"] < w["p50_ms"] < f["p50_ms"]),
        ("dynamic has the lowest interactive P99", d["p99_ms"] < min(f["p99_ms"], p["p99_ms"], w["p99_ms"])),
        ("dynamic has the fewest interactive time-outs", d["timeout_pct"] < min(f["timeout_pct"], p["timeout_pct"],
                                                                                w["timeout_pct"])),
        ("dynamic keeps offline throughput between priority's and WFQ's",
         p["offline_tok_s"] < d["offline_tok_s"] < w["offline_tok_s"]),
    ]


def figures_table(sim: dict) -> list[str]:
    lines = ["| metric | " + " | ".join(f"{name}: article | simulated" for name in POLICIES) + " |",
             "|---|" + "---:|---:|" * len(POLICIES)]
    for key, label in METRICS.items():
        cells = []
        for name in POLICIES:
            article = ARTICLE[name][key]
            shown = "-" if article is None else f"{article:,}"
            cells.append(f"{shown} | {sim[name][key]:.1f}" if key == "timeout_pct" else
                         f"{shown} | {sim[name][key]:,.0f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| interactive end-to-end p99 (ms) | " + " | ".join(f"- | {sim[n]['e2e_p99_ms']:,.0f}"
                                                                    for n in POLICIES) + " |")
    lines.append("| offline longest wait (s) | " + " | ".join(f"- | {sim[n]['offline_longest_wait_s']:,.1f}"
                                                             for n in POLICIES) + " |")
    return lines


def report(runs: dict, seeds: int, requests: int) -> str:
    """``runs``: rate -> policy -> metrics. Figures per rate, then the claims at every rate."""
    lines = [f"Mean of {seeds} seeds x {requests:,} requests per point, same arrivals for every policy.", ""]
    for rate, sim in runs.items():
        lines += [f"**{rate:g} req/s** (offered load {sim['FIFO']['offered_load']:.2f}, an estimate; GPUs busy "
                  f"{sim['FIFO']['busy']:.0%} under FIFO):", "", *figures_table(sim), ""]
    rates = list(runs)
    lines += ["| the article's claim | " + " | ".join(f"{r:g} req/s" for r in rates) + " |",
              "|---|" + "---|" * len(rates)]
    checked = {rate: claims(sim) for rate, sim in runs.items()}
    for i, (text, _) in enumerate(checked[rates[0]]):
        lines.append(f"| {text} | " + " | ".join("yes" if checked[r][i][1] else "no" for r in rates) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=30000)
    args = parser.parse_args()
    article_rate = engine.load_scenario(PRESET).workload.arrival.rate_per_s
    runs = {article_rate: {name: simulate_policy(overrides, args.seeds, args.requests, article_rate)
                           for name, overrides in POLICIES.items()}}
    load = runs[article_rate]["FIFO"]["offered_load"]
    for target in CONTENDED_LOADS:
        rate = round(article_rate * target / load, 1)
        runs[rate] = {name: simulate_policy(overrides, args.seeds, args.requests, rate)
                      for name, overrides in POLICIES.items()}
    text = report(runs, args.seeds, args.requests)
    print(text)
    readme = REPO / "README.md"
    readme.write_text(re.sub(r"(<!-- article:start -->\n).*?(<!-- article:end -->)",
                             lambda m: m.group(1) + text + m.group(2), readme.read_text(), flags=re.S))


if __name__ == "__main__":
    main()
