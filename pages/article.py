"""The article, re-run: its benchmark table beside the simulator's, at its load and where the policies differ.

The comparison lives in ``engine.teach.article`` (also ``bench/article_report.py``, which writes it into the README);
this page runs it on the shared result cache (one seed of ``REQUESTS`` requests per point, the same arrivals
for every policy) and shows, claim by claim, where the simulation agrees and, where it does not, why.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.scenario.config import load_scenario
from engine.sim.simulate import estimated_offered_load, load_text
from engine.teach import article
from ui import entry, runner, text

REQUESTS = 10000
FIGURE, SOURCE = "figure", "source"


def cell(key: str, value: float | None) -> str:
    """A figure rounded as the article rounds it ("-" where it gives none)."""
    if value is None:
        return "-"
    return f"{value:,.1f}" if key in ("timeout_pct", "offline_longest_wait_s") else f"{value:,.0f}"


def side_by_side(sim: dict[str, dict[str, float | None]]) -> pd.DataFrame:
    """One row per figure and source, the article's row right above the simulator's so that each difference
    reads down one column; the figures the article does not report have the simulator's row only."""
    rows = []
    for key, label in {**article.METRICS, **article.EXTRA_METRICS}.items():
        sources = [("the article", article.ARTICLE)] if key in article.METRICS else []
        for at, (source, values) in enumerate([*sources, ("simulated", sim)]):
            rows.append([label if at == 0 else "", source, *(cell(key, values[name].get(key))
                                                             for name in article.POLICIES)])
    return pd.DataFrame(rows, columns=[FIGURE, SOURCE, *article.POLICIES])


def run_rate(rate: float, everyone_preempts: bool) -> dict[str, dict[str, float]] | None:
    """The four policies at ``rate`` (cached for every session), or None when the section's time ran out."""
    results, note = runner.SectionBudget().summaries(article.scenarios(rate, REQUESTS, 0, everyone_preempts))
    if note:
        st.caption(text.plain(note))
        return None
    return {name: article.measure(s) for name, s in zip(article.POLICIES, results)}


entry.through_app()
st.title("The article, re-run")
st.markdown("""The article this project started from benchmarks four scheduling policies on **8x A100 80G serving \
Llama 3 70B INT4** to 70% interactive and 30% offline requests arriving at **50 req/s**. The scenario \
*article: mixed chat + batch* reproduces that set-up (its file says which choices the article leaves open and why). \
Below, the article's figures (measured at 50 req/s) above the simulator's, at the article's load and at the loads \
where the policies differ, then each of the article's claims with the simulator's verdict and, where they differ, the \
reason.""")
st.markdown("\n".join(f"- **{name}**: {article.HOW_DESCRIBED[name]}" for name in article.POLICIES))
everyone = st.toggle("Let every policy preempt as the scenario does (an evicted request recomputes its prompt)",
                     key="article_preempt",
                     help="The scenario makes every policy preemptive: WFQ then evicts running requests and "
                          "recomputes their prompts, which the article does not describe. Off: each policy as the "
                          "article describes it.")

base_rate = article.article_rate()
load = estimated_offered_load(load_scenario(article.PRESET))
rates = [base_rate, *article.contended_rates(base_rate, load)]
st.caption(f"One seed of {REQUESTS:,} requests per point, the same arrivals for every policy; offered loads are "
           f"estimates. Output throughput is of the steady state (after the warm-up, before the drain), where a "
           f"policy that holds offline back shows it. `python bench/article_report.py` runs more seeds.")

results: dict[float, dict] = {}
for rate in rates:
    with st.spinner(f"Running the four policies at {rate:g} req/s..."):
        sim = run_rate(rate, everyone)
    if sim is None:
        continue
    results[rate] = sim
    where = "the article's load" if rate == base_rate else "where the policies differ"
    st.subheader(f"{rate:g} req/s: {where} (offered load {load_text(sim['FIFO']['offered_load'])})")
    st.dataframe(side_by_side(sim), hide_index=True, width="stretch", height="content", placeholder="-")
    if article.policies_alike(sim):
        st.caption(f"Every policy gives the same figures here: {article.NOTHING_QUEUES}.")

if results:
    st.subheader("The article's claims")
    checked = {rate: article.verdicts(sim) for rate, sim in results.items()}
    first = next(iter(checked.values()))
    claims = pd.DataFrame({f"{rate:g} req/s": ["yes" if holds else "no" for _, holds, _ in verdicts]
                           for rate, verdicts in checked.items()}, index=[claim for claim, _, _ in first])
    claims.index.name = "the article's claim"
    st.dataframe(claims, width="stretch", placeholder="-")
    lines, reasons = [], {}
    for rate, verdicts in checked.items():
        if article.policies_alike(results[rate]):
            lines.append(f"- At {rate:g} req/s no ordering between the policies appears: {article.NOTHING_QUEUES}.")
            continue
        for claim, holds, why in verdicts:
            if not holds:
                reasons.setdefault((claim, why), []).append(f"{rate:g}")
    lines += [f"- *{claim}* (no at {', '.join(at)} req/s): {why}." for (claim, why), at in reasons.items()]
    if lines:
        st.markdown("**Where the simulation disagrees, and why**")
        st.markdown("\n".join(lines))
