"""Variants of one scenario: every policy on the same arrivals, the arrival rate swept against the estimated
capacity, the dynamic policy's (alpha, gamma) grid.

The scenario is passed as plain data (the dict ``load_scenario`` takes) so callers can cache on it. A
variant is (overrides, tags): the keys it changes and the columns that label its rows. Policies differ only
in ``policy.name``; the other ``[policy]`` keys and the seed stay, so every variant sees exactly the same
requests.
"""

from __future__ import annotations

import math
from typing import Optional

import pandas as pd

from ..scenario.config import OVERALL, Arrival, Trace, apply_overrides, field_bounds, field_meta
from ..scenario.metric_table import round_significant
from ..scenario.origin import Origin
from ..scenario.summary import Summary
from .metrics import flat_rows, metrics_frame
from .parallel import summaries
from .policies import POLICIES


def tagged_rows(summary: Summary, **tags) -> list[dict]:
    """Flat metrics of one run (one record per class), led by ``tags``, with its system verdicts."""
    system = summary["system"]
    verdicts = {key: system[key] for key in ("offered_load", "unstable", "preemptions", "gpu_busy_frac")}
    return [{**tags, **row, **verdicts} for row in flat_rows(summary)]


def tagged_frame(runs: list[tuple[Summary, dict]]) -> pd.DataFrame:
    """Flat metrics of many (summary, tags) runs, one row per run and class, in one frame."""
    return metrics_frame([row for summary, tags in runs for row in tagged_rows(summary, **tags)])


def compare_policies(data: dict, origin: Origin = Origin(), policies: Optional[list[str]] = None) -> pd.DataFrame:
    """Flat metrics of every policy (default: all registered) on the same arrivals, one row per class (the runs
    on all cores)."""
    variants = policy_variants(policies or list(POLICIES))
    runs = summaries([apply_overrides(data, overrides) for overrides, _ in variants], origin)
    return tagged_frame([(summary, tags) for summary, (_, tags) in zip(runs, variants)])


FLAT_POLICIES = 0.05  # every class's figure within 5% across the policies: they "hardly differ"
TEACHING_LOAD = 0.95  # the offered load the Lab offers when policies hardly differ: queues form, none explodes


def policies_differ(frame: pd.DataFrame, key: str = "ttft_p99_ms") -> bool:
    """True when, for some class, ``key`` differs by more than ``FLAT_POLICIES`` of its largest value between the
    policies of a comparison frame (``compare_policies``); a class without values says nothing."""
    for _, group in frame[frame["class"] != OVERALL].groupby("class"):
        values = group[key].dropna()
        if len(values) > 1 and values.max() > 0 and values.max() - values.min() > FLAT_POLICIES * values.max():
            return True
    return False


def rate_for_load(rate_per_s: float, offered_load: float, target_load: float = TEACHING_LOAD) -> float:
    """The arrival rate at which the estimated offered load becomes ``target_load`` (three significant digits):
    the load is proportional to the rate."""
    return round_significant(rate_per_s * target_load / offered_load)


SWEEP_LOAD_FACTORS = (0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1)  # fractions of the estimated capacity
Variant = tuple[dict, dict]


def sweep_rates(rate_per_s: float, offered_load: float) -> list[float]:
    """Arrival rates at fixed fractions of the estimated capacity (rate / offered load), three significant
    digits each, within the rates a scenario accepts: moving the rate keeps the same curves. A current rate
    outside them is added, so the curves always reach it."""
    capacity_per_s = rate_per_s / offered_load if offered_load > 0 else rate_per_s
    if not math.isfinite(capacity_per_s):
        capacity_per_s = rate_per_s
    low, high = field_bounds(field_meta(Arrival, "rate_per_s")[1])
    rates = sorted({min(max(round_significant(capacity_per_s * f), low), high) for f in SWEEP_LOAD_FACTORS})
    if not rates[0] <= rate_per_s <= rates[-1]:  # far past (or below) capacity: the curves reach the current rate
        rates = sorted({*rates, rate_per_s})
    return rates


def policy_variants(policies: list[str]) -> list[Variant]:
    return [({"policy.name": name}, {"policy": name}) for name in policies]


def rate_variants(rates: list[float], policies: list[str]) -> list[Variant]:
    return [({"workload.arrival.rate_per_s": rate, "policy.name": name}, {"rate_per_s": rate, "policy": name})
            for rate in rates for name in policies]


def trace_rate_variants(rates: list[float], policies: list[str], trace_rate_per_s: float) -> list[Variant]:
    """A replayed trace at each arrival rate: its speed-up (``workload.trace.rate_scale``) is the rate over the
    trace's own (``trace_rate_per_s``, at speed-up 1), within the speed-ups a scenario accepts (the rate tagged is
    the one the speed-up gives)."""
    low, high = field_bounds(field_meta(Trace, "rate_scale")[1])
    scales = [min(max(rate / trace_rate_per_s, low), high) for rate in rates]
    return [({"workload.trace.rate_scale": scale, "policy.name": name},
             {"rate_per_s": scale * trace_rate_per_s, "policy": name}) for scale in scales for name in policies]


def alpha_gamma_variants(alphas: list[float], gammas: list[float]) -> list[Variant]:
    return [({"policy.name": "dynamic", "policy.alpha": a, "policy.gamma": g}, {"alpha": a, "gamma": g})
            for a in alphas for g in gammas]
