"""Sampling token lengths and inter-arrival gaps from the scenario's distributions.

All draws use the one seeded ``numpy.random.Generator`` of a run, outside the
compiled loop. Each family is parameterised as the scenario states it (mean
and cv rather than the native parameters) and converted here.
"""

from __future__ import annotations

import math

import numpy as np

from .config import Arrival, TokenDist


def sample_tokens(dist: TokenDist, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw ``n`` token counts (int64, each >= 1, clipped to ``dist.max`` when given)."""
    if dist.dist == "constant":
        values = np.full(n, dist.value, dtype=np.int64)
    elif dist.dist == "uniform":
        values = rng.integers(dist.low, dist.high, size=n, endpoint=True, dtype=np.int64)
    elif dist.dist == "geometric":
        # numpy's geometric lives on {1, 2, ...} with mean 1/p.
        values = rng.geometric(1.0 / dist.mean, size=n).astype(np.int64)
    else:  # lognormal with the given mean and cv of the continuous law, rounded
        sigma2 = math.log1p(dist.cv ** 2)
        mu = math.log(dist.mean) - sigma2 / 2.0
        values = np.rint(rng.lognormal(mu, math.sqrt(sigma2), size=n)).astype(np.int64)
    np.maximum(values, 1, out=values)
    if dist.max is not None:
        np.minimum(values, dist.max, out=values)
    return values


def sample_gaps_s(arrival: Arrival, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw ``n`` inter-arrival gaps in seconds with mean ``1 / rate_per_s``."""
    mean_gap_s = 1.0 / arrival.rate_per_s
    if arrival.process == "poisson":
        return rng.exponential(mean_gap_s, size=n)
    shape = 1.0 / arrival.cv ** 2  # gamma: cv = 1 / sqrt(shape)
    return rng.gamma(shape, mean_gap_s / shape, size=n)
