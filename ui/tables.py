"""Result frames as a reader sees them: words with one unit as column headers, each metric rounded its
way (``engine.scenario.metric_table``), policy labels instead of ids, and the decisive columns first.

Cells stay numbers (so a click on a header sorts them); a missing value reads "—", and the caption under the
table says what it means; a latency of an unstable run reads "unstable".
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pandas.io.formats.style import Styler

from engine.scenario.metric_table import DURATION, METRICS
from engine.sim.policies import POLICY_LABELS
from ui.text import sentence

# Columns that are not metrics: (header, help).
PLAIN_COLUMNS = {
    "policy": ("Policy", "scheduling policy"),
    "class": ("Class", "request class, or overall for the whole run"),
    "rate_per_s": ("Arrival rate (req/s)", "mean arrivals per second"),
    "unstable": ("Cut or unstable", "the run was cut short or its queue kept growing: its figures are a lower "
                                    "bound"),
    "shape": ("Shape", "replicas x tensor-parallel degree"),
    "replica": ("Replica", "server number"),
    "routed": ("Requests routed", "arrivals the router sent to this replica"),
    "output_tokens": ("Output tokens", "output tokens of the requests completed on this replica"),
    "role": ("Serves", "colocated: whole requests; prefill: prompts and first tokens; decode: the tokens after"),
    "hardware": ("Hardware", "the replica's cards: tensor-parallel degree, GPU and weight format"),
    "speed": ("Relative speed", "the replica's speed on this workload, the fastest replica's 1; the router weighs "
                                "turns and loads by it"),
    "note": ("Note", None),
    "strategy": ("Way to buy", "a fixed fleet at the autoscaled run's peak, the autoscaled fleet billed by use, or "
                               "its minimum reserved with the replicas above billed by use"),
    "per_month": ("Per month", "the month's bill, low-high over the offers' price ranges"),
    "replica_hours": ("Replica-hours billed", "replicas up, provisioning or draining, over the run"),
    "fleet": ("Fleet", None),
    "offers": ("Offers", "the cheapest firm offers that host a replica (spot ones for spot bursts)"),
}


def show(frame: pd.DataFrame, columns: list[str], currency: str = "", key: str | None = None) -> None:
    """``frame``'s ``columns`` (in that order, those present) as a readable table."""
    shown = frame[[c for c in columns if c in frame.columns]].copy()
    config = {}
    for column in shown.columns:
        if column in METRICS:
            m = METRICS[column]
            shown[column] = [m.table_value(v) for v in shown[column]]
            config[column] = st.column_config.NumberColumn(m.title(currency), help=sentence(m.help),
                                                           format="localized")
        elif column in PLAIN_COLUMNS:
            header, help_text = PLAIN_COLUMNS[column]
            kind = st.column_config.NumberColumn if pd.api.types.is_integer_dtype(shown[column]) else \
                st.column_config.Column  # counts with thousands separators, as the metrics' columns
            config[column] = kind(header, help=sentence(help_text) if help_text else None,
                                  **({"format": "localized"} if kind is st.column_config.NumberColumn else {}))
    if "policy" in shown.columns:
        shown["policy"] = shown["policy"].map(lambda p: POLICY_LABELS.get(p, p))
    st.dataframe(unstable_latencies(shown, frame), hide_index=True, width="stretch", column_config=config, key=key,
                 placeholder=MISSING)


UNSTABLE = "unstable"  # what a latency of a run whose queue kept growing reads: it measures the backlog, not the fleet


def unstable_latencies(shown: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame | Styler:
    """``shown`` with every latency of an unstable row (``frame``'s ``unstable`` column) written "unstable": such a
    run's latency is the length of its backlog when it stopped (millions of ms), not a figure of the fleet. The
    cells keep their numbers, so a click on a header still sorts them."""
    if "unstable" not in frame.columns or not frame["unstable"].fillna(False).astype(bool).any():
        return shown
    rows = frame["unstable"].fillna(False).astype(bool).to_numpy()
    latencies = [c for c in shown.columns if c in METRICS and METRICS[c].kind == DURATION]
    shown = shown.reset_index(drop=True)
    return shown.style.format(lambda _: UNSTABLE, subset=pd.IndexSlice[shown.index[rows], latencies])


MISSING = "—"  # what an empty cell reads, on every table of every page
