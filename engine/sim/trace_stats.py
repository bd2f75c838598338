"""Statistics of a request stream (a trace or a drawn workload): rate, burstiness, length percentiles."""

from __future__ import annotations

import numpy as np
import pandas as pd

PERCENTILES = (50, 90, 99)
BUCKETED_SHARE = 0.5  # half the requests or more sharing a timestamp with the one before: the times are bucketed


def bucket_s(arrival_s: np.ndarray) -> float | None:
    """The step of bucketed timestamps (the median gap between distinct times) when at least ``BUCKETED_SHARE``
    of the gaps are 0 (Mooncake's traces: requests stamped in 3-s buckets), else None."""
    gaps = np.diff(arrival_s)
    if len(gaps) == 0 or np.mean(gaps == 0) < BUCKETED_SHARE:
        return None
    distinct = np.diff(np.unique(arrival_s))
    return float(np.median(distinct)) if len(distinct) else None


def trace_statistics(arrival_s: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> dict:
    """Rate (req/s), inter-arrival cv, per-minute-count cv and token-length percentiles.

    rate = (requests - 1) / span; the per-minute cv (std/mean of requests per 60 s window) measures burstiness at
    a scale that quantised timestamps do not distort; ``bucket_s``: the step of bucketed timestamps (None: none).
    """
    n = len(arrival_s)
    span_s = float(arrival_s[-1] - arrival_s[0]) if n > 1 else 0.0
    gaps = np.diff(arrival_s)
    per_minute = per_minute_rate(arrival_s)["requests_per_s"].to_numpy() * 60.0
    stats = {
        "requests": n,
        "span_s": span_s,
        "rate_per_s": (n - 1) / span_s if span_s > 0 else float("nan"),
        "iat_cv": float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else float("nan"),
        "minute_cv": float(per_minute.std() / per_minute.mean()) if len(per_minute) > 1 else float("nan"),
        "bucket_s": bucket_s(arrival_s),
    }
    for name, values in (("prompt", prompt_tokens), ("output", output_tokens)):
        stats[f"{name}_mean"] = float(np.mean(values))
        for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES)):
            stats[f"{name}_p{p}"] = float(v)
        stats[f"{name}_max"] = int(np.max(values))
    return stats


def per_minute_rate(arrival_s: np.ndarray) -> pd.DataFrame:
    """Requests per second in each whole minute since the first arrival (a trailing partial minute is left out)."""
    minutes = ((arrival_s - arrival_s[0]) // 60.0).astype(np.int64)
    counts = np.bincount(minutes)
    if len(counts) > 1:
        counts = counts[:-1]
    return pd.DataFrame({"minute": np.arange(len(counts)), "requests_per_s": counts / 60.0})
