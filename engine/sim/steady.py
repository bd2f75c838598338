"""Whether a constant-rate run reached steady state, from when, and whether it lasted long enough to say so.

A fleet sized on a run that ends before it fills says nothing about the fleet once it is full: a reasoning model's
answers live for minutes, so a run of a few thousand requests can end while the KV caches are still filling and
the queue has not begun to grow. Three checks, on the population in flight (arrived and not yet finished: running
or waiting), averaged exactly over ``GRID_INTERVALS`` equal intervals of the arrival span:

* **Warm-up** (MSER-5, White 1997): batch means of ``MSER_BATCH`` intervals; the warm-up ends at the truncation
  ``d`` (searched over the first half) that minimises the squared deviations of the batch means after it over
  (batches after it) squared. Latencies are judged on the requests arriving after it.
* **Settled**: after the warm-up, neither the mean in flight nor the mean queue (arrived, not yet started) over the
  last half of the batches exceeds the first half's by more than ``SETTLE_GROWTH`` of its mean and more than
  ``SETTLE_SIGMAS`` standard errors of that difference. A queue that grows (offered work above what the fleet
  holds) fails it; the queue is tested apart because a large population in service can hide its growth. A full
  KV cache alone does not show it (it is flat at capacity exactly when the queue grows), so the populations are
  the test.
* **Long enough** (Little's law, L = lambda W): the run holds at least ``STEADY_FLIGHTS`` times the mean number
  in flight in requests, that is it lasts ``STEADY_FLIGHTS`` mean times in the system (its steady part, after a
  warm-up of at most half, at least half of that). ``requests_needed`` says how many requests a run needs.

Only for a constant arrival rate: a curve's or a trace's population moves with its traffic by design.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..scenario.summary import SteadyState

GRID_INTERVALS = 100  # intervals of the arrival span the population in flight is averaged over
MSER_BATCH = 5  # MSER-5: batch means of five intervals (20 batches)
SETTLE_GROWTH = 0.10  # the most the mean in flight may grow from the first to the last half of the steady part
SETTLE_SIGMAS = 3.0  # ... and in standard errors of that difference (batch means)
STEADY_FLIGHTS = 10  # a run's steady part lasts at least this many mean times in the system (Little's law)


def time_integral(times_s: np.ndarray, edges_s: np.ndarray) -> np.ndarray:
    """For each edge x: the integral from 0 to x of the number of ``times_s`` (sorted) at or before t, that is
    the sum over times before x of (x - time)."""
    before = np.searchsorted(times_s, edges_s, side="right")
    sums = np.concatenate(([0.0], np.cumsum(times_s)))
    return edges_s * before - sums[before]


def in_flight(arrival_s: np.ndarray, leave_s: np.ndarray, edges_s: np.ndarray) -> np.ndarray:
    """The time-average number of requests in flight over each interval between ``edges_s``: arrived (at
    ``arrival_s``) and not yet left (at ``leave_s``; NaN: still there when the run stopped). Exact."""
    left = np.sort(leave_s[~np.isnan(leave_s)])
    area = time_integral(np.sort(arrival_s), edges_s) - time_integral(left, edges_s)
    return np.diff(area) / np.diff(edges_s)


def queued(arrival_s: np.ndarray, start_s: np.ndarray, leave_s: np.ndarray,
           edges_s: np.ndarray) -> np.ndarray:
    """The time-average queue over each interval between ``edges_s``: requests arrived and not yet first scheduled
    (at ``start_s``; one never scheduled leaves the queue when it leaves, at ``leave_s``; NaN in both: still
    there). Exact (``in_flight``)."""
    return in_flight(arrival_s, np.where(np.isnan(start_s), leave_s, start_s), edges_s)


def mser_cut(batches: np.ndarray) -> int:
    """MSER's truncation: the number of leading ``batches`` (searched up to half of them) whose removal minimises
    the sum of squared deviations of the rest from their mean over the count of the rest squared."""
    count = len(batches)
    best, cut = math.inf, 0
    for d in range(count // 2 + 1):
        rest = batches[d:]
        statistic = float(np.sum((rest - rest.mean()) ** 2)) / len(rest) ** 2
        if statistic < best:
            best, cut = statistic, d
    return cut


def _grows(batches: np.ndarray, floor: float) -> bool:
    """Whether the mean of ``batches``' last half exceeds their first half's by more than ``SETTLE_GROWTH`` of
    their mean, ``SETTLE_SIGMAS`` standard errors of that difference and ``floor``."""
    half = len(batches) // 2
    early, late = batches[:half], batches[len(batches) - half:]
    growth = float(late.mean() - early.mean())
    error = math.sqrt(float(early.var(ddof=1)) / half + float(late.var(ddof=1)) / half) if half > 1 else 0.0
    return growth > max(SETTLE_GROWTH * float(batches.mean()), SETTLE_SIGMAS * error, floor)


def steady_state(arrival_s: np.ndarray, start_s: np.ndarray, leave_s: np.ndarray) -> Optional[SteadyState]:
    """The steady state of a run whose requests arrived at ``arrival_s``, were first scheduled at ``start_s``
    and left at ``leave_s`` (same order; NaN: had not left or started), or None when there is no span to measure
    it over (all at once, or too few); its ``classes`` and ``overall`` metrics are left empty for the caller
    (``simulate``) to fill. Settled: neither the population in flight nor the queue (arrived, not yet started)
    grows after the warm-up (the queue by at most one request more than the test allows: a queue near empty
    is noise)."""
    if len(arrival_s) < 2:
        return None
    first_s, last_s = float(arrival_s.min()), float(arrival_s.max())
    if last_s <= first_s:
        return None
    edges = np.linspace(first_s, last_s, GRID_INTERVALS + 1)
    flying = in_flight(arrival_s, leave_s, edges).reshape(-1, MSER_BATCH).mean(axis=1)
    waiting = queued(arrival_s, start_s, leave_s, edges).reshape(-1, MSER_BATCH).mean(axis=1)
    cut = mser_cut(flying)
    warmup_s = float(edges[cut * MSER_BATCH])
    rest = flying[cut:]
    mean = float(rest.mean())
    half = len(rest) // 2
    growth = float(rest[len(rest) - half:].mean() / rest[:half].mean() - 1.0) if rest[:half].mean() > 0 else 0.0
    settled = not _grows(rest, 0.0) and not _grows(waiting[cut:], 1.0)
    steady_requests = int(np.count_nonzero(arrival_s >= warmup_s))
    return {"warmup_s": warmup_s, "settled": bool(settled), "mean_in_flight": mean, "growth_frac": growth,
            "steady_requests": steady_requests, "flights": len(arrival_s) / mean if mean > 0 else math.inf,
            "classes": {}, "overall": {}}


def requests_needed(steady: SteadyState, requests: int) -> int:
    """How many requests a run (of ``requests``, whose steady state is ``steady``) needs to last ``STEADY_FLIGHTS``
    mean times in the system, with a tenth more for the mean in flight to move: ``requests`` when it did."""
    if steady["flights"] >= STEADY_FLIGHTS:
        return requests
    return max(requests + 1, math.ceil(1.1 * STEADY_FLIGHTS * steady["mean_in_flight"]))
