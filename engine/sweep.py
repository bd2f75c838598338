"""One scenario under every policy, on the same arrivals.

The scenario is passed as plain data (the dict ``load_scenario`` takes) so callers can cache on it.
Policies differ only in ``policy.name``; the other ``[policy]`` keys and the seed stay, so every
variant sees exactly the same requests.
"""

from __future__ import annotations

from typing import Optional

import pandas as pd

from .config import apply_overrides, load_scenario
from .metrics import flat_metrics
from .origin import Origin
from .policies import POLICIES
from .simulate import simulate


def run_summary(data: dict, origin: Origin = Origin()) -> dict:
    return simulate(load_scenario(data, origin=origin)).summary


def tagged_metrics(summary: dict, **tags) -> pd.DataFrame:
    """Flat metrics of one run (one row per class), led by ``tags`` columns, with its system verdicts."""
    frame = flat_metrics(summary)
    for key, value in reversed(tags.items()):
        frame.insert(0, key, value)
    frame["offered_load"] = summary["system"]["offered_load"]
    frame["unstable"] = summary["system"]["unstable"]
    frame["preemptions"] = summary["system"]["preemptions"]
    frame["gpu_busy_frac"] = summary["system"]["gpu_busy_frac"]
    return frame


def compare_policies(data: dict, origin: Origin = Origin(), policies: Optional[list[str]] = None) -> pd.DataFrame:
    """Flat metrics of every policy (default: all registered) on the same arrivals, one row per class."""
    frames = []
    for name in policies or list(POLICIES):
        summary = run_summary(apply_overrides(data, {"policy.name": name}), origin)
        frames.append(tagged_metrics(summary, policy=name))
    return pd.concat(frames, ignore_index=True)
