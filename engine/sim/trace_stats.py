"""Statistics of a request stream (a trace or a drawn workload): rate, burstiness, length percentiles."""

from __future__ import annotations

import numpy as np
import pandas as pd

PERCENTILES = (50, 90, 99)


def trace_statistics(arrival_s: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> dict:
    """Rate (req/s), inter-arrival cv, per-minute-count cv and token-length percentiles.

    rate = (requests - 1) / span; the per-minute cv (std/mean of requests per 60 s window) measures
    burstiness at a scale that quantised timestamps do not distort.
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
