"""The source article's benchmark against the simulator (``engine.teach.article``):
data/scenarios/article_mixed_8xa100.toml
under the article's four policies, each run as the article describes it.

Prints, and writes into the manual's page docs/article.md (between the article markers), the article's figures
beside the simulated ones and which of the article's claims (orderings between policies) the simulation
reproduces, with the reason where it does not: at the article's 50 req/s, and at the rates where the
offered-load estimate reaches 1.0 and 1.2 (the simulated fleet serves 50 req/s without a queue, so the
policies only differ above it). The Article page of the app shows the same comparison.

Usage: python bench/article_report.py [--seeds 3] [--requests 30000]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.teach.article import (ARTICLE, EXTRA_METRICS, METRICS, POLICIES, article_rate, compare, contended_rates,
                                  verdicts)


def figures_table(sim: dict) -> list[str]:
    lines = ["| metric | " + " | ".join(f"{name}: article | simulated" for name in POLICIES) + " |",
             "|---|" + "---:|---:|" * len(POLICIES)]
    for key, label in {**METRICS, **EXTRA_METRICS}.items():
        cells = []
        for name in POLICIES:
            article = ARTICLE[name].get(key)
            shown = "-" if article is None else f"{article:,}"
            value = sim[name][key]
            cells.append(f"{shown} | {value:.1f}" if key in ("timeout_pct", "offline_longest_wait_s") else
                         f"{shown} | {value:,.0f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def report(runs: dict, seeds: int, requests: int) -> str:
    """``runs``: rate -> policy -> figures. Figures per rate, then the claims at every rate, then why not."""
    lines = [f"Mean of {seeds} seeds x {requests:,} requests per point, same arrivals for every policy; each policy "
             f"as the article describes it (only the dynamic cost preempts, keeping the KV cache).", ""]
    for rate, sim in runs.items():
        lines += [f"**{rate:g} req/s** (offered load {sim['FIFO']['offered_load']:.2f}, an estimate; GPUs busy "
                  f"{sim['FIFO']['busy']:.0%} under FIFO in the steady state):", "", *figures_table(sim), ""]
    rates = list(runs)
    checked = {rate: verdicts(sim) for rate, sim in runs.items()}
    lines += ["| the article's claim | " + " | ".join(f"{r:g} req/s" for r in rates) + " |",
              "|---|" + "---|" * len(rates)]
    for i, (claim, _, _) in enumerate(checked[rates[0]]):
        lines.append(f"| {claim} | " + " | ".join("yes" if checked[r][i][1] else "no" for r in rates) + " |")
    reasons = {(claim, why) for r in rates for claim, holds, why in checked[r] if not holds and r != rates[0]}
    if reasons:
        lines += ["", "Where the simulation disagrees at the contended loads, and why:", ""]
        lines += [f"- *{claim}*: {why}." for claim, why in sorted(reasons)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=30000)
    args = parser.parse_args()
    rate = article_rate()
    first = compare([rate], args.seeds, args.requests)
    rates = [rate, *contended_rates(rate, first[rate]["FIFO"]["offered_load"])]
    runs = {**first, **compare(rates[1:], args.seeds, args.requests)}
    text = report(runs, args.seeds, args.requests)
    print(text)
    page = REPO / "docs" / "article.md"
    page.write_text(re.sub(r"(<!-- article:start -->\n).*?(<!-- article:end -->)",
                           lambda m: m.group(1) + text + m.group(2), page.read_text(), flags=re.S))


if __name__ == "__main__":
    main()
