"""Sampling token lengths and inter-arrival gaps from the scenario's distributions.

All draws use the one seeded ``numpy.random.Generator`` of a run, outside the
compiled loop. Each family is parameterised as the scenario states it (mean
and cv rather than the native parameters) and converted here.
"""

from __future__ import annotations

import math

import numpy as np

from ..scenario.caps import DEFAULT_CAPS
from ..scenario.config import Arrival, TokenDist


def sample_tokens(dist: TokenDist, n: int, rng: np.random.Generator,
                  limit_tokens: int = DEFAULT_CAPS.tokens_per_request) -> np.ndarray:
    """Draw ``n`` token counts (int64, each >= 1), clipped to ``dist.max`` when given and always to
    ``limit_tokens`` (the limit of tokens per request; clipping happens before the conversion to integers,
    so a heavy tail can never wrap around)."""
    top = min(dist.max, limit_tokens) if dist.max is not None else limit_tokens
    if dist.dist == "constant":
        values = np.full(n, dist.value, dtype=np.int64)
    elif dist.dist == "uniform":
        values = rng.integers(dist.low, dist.high, size=n, endpoint=True, dtype=np.int64)
    elif dist.dist == "geometric":
        # numpy's geometric lives on {1, 2, ...} with mean 1/p.
        values = rng.geometric(1.0 / dist.mean, size=n)
    else:  # lognormal with the given mean and cv of the continuous law, rounded
        sigma2 = math.log1p(dist.cv ** 2)
        mu = math.log(dist.mean) - sigma2 / 2.0
        values = np.rint(np.minimum(rng.lognormal(mu, math.sqrt(sigma2), size=n), top)).astype(np.int64)
    return np.clip(values, 1, top).astype(np.int64, copy=False)


def sample_gaps_s(arrival: Arrival, n: int, rng: np.random.Generator, mean_gap_s: float | None = None) -> np.ndarray:
    """Draw ``n`` inter-arrival gaps in seconds with mean ``mean_gap_s`` (default ``1 / rate_per_s``; 1 for the
    unit-rate gaps a rate curve rescales)."""
    if mean_gap_s is None:
        mean_gap_s = 1.0 / arrival.rate_per_s
    if arrival.process == "poisson":
        return rng.exponential(mean_gap_s, size=n)
    shape = 1.0 / arrival.cv ** 2  # gamma: cv = 1 / sqrt(shape)
    return rng.gamma(shape, mean_gap_s / shape, size=n)
