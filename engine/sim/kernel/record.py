"""Recording: each iteration counted in the replica's statistics (``S_*``: busy time, batch sizes, KV
block-seconds and peak, roofline terms, in the run and in the steady-state window) and in its time series
(``T_*`` columns), which keeps every 2^k-th iteration once it is full; and the trimming of the iterations
still under way when a limit stops the run.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..layout import I_CLASS
from .state import (BUSY, CK_MODE, CK_NEXT_S, CK_WAIT_START_S, C_BATCH, C_PREEMPTIONS, C_PREFIX_HIT_TOKENS,
                    C_PREFIX_QUERY_TOKENS, C_RUNNING, C_USED_BLOCKS, C_WAITING, N_SERIES_FIXED, SV_BLOCK_SIZE_TOKENS,
                    SV_N_CLASSES, SV_WINDOW_END_S, SV_WINDOW_START_S, S_BATCH_SUM, S_BUSY_S, S_COMPUTE_S, S_ITERATIONS,
                    S_KV_BLOCK_SECONDS, S_KV_PEAK_BLOCKS, S_MEMORY_S, S_PREEMPTIONS, S_PREFIX_HIT_TOKENS,
                    S_PREFIX_QUERY_TOKENS, S_SERIES_ROWS, S_SERIES_STRIDE, S_TERMS_S, S_WINDOW_BUSY_S,
                    S_WINDOW_COMPUTE_S, S_WINDOW_MEMORY_S, S_WINDOW_TERMS_S, T_BATCH, T_DECODE_TOKENS, T_KV_USED_TOKENS,
                    T_PREEMPTIONS, T_PREFILL_TOKENS, T_RUNNING, T_START_S, T_STEP_S, T_WAITING)


@njit(cache=True, _nrt=False)
def _record_nb(srv, ints, waiting, batch, cnt, series, row, t, dt, prefill, decode, preemptions):
    """Write the iteration that starts at ``t`` as row ``row`` of the time series (``T_*``, then the batch and the
    waiting requests per class)."""
    series[row, T_START_S] = t
    series[row, T_STEP_S] = dt
    series[row, T_BATCH] = cnt[C_BATCH]
    series[row, T_PREFILL_TOKENS] = prefill
    series[row, T_DECODE_TOKENS] = decode
    series[row, T_KV_USED_TOKENS] = cnt[C_USED_BLOCKS] * srv[SV_BLOCK_SIZE_TOKENS]
    series[row, T_WAITING] = cnt[C_WAITING]
    series[row, T_RUNNING] = cnt[C_RUNNING]
    series[row, T_PREEMPTIONS] = preemptions
    base = N_SERIES_FIXED
    for k in range(2 * srv[SV_N_CLASSES]):
        series[row, base + k] = 0.0
    for i in range(cnt[C_BATCH]):
        series[row, base + ints[batch[i], I_CLASS]] += 1.0
    for i in range(cnt[C_WAITING]):
        series[row, base + srv[SV_N_CLASSES] + ints[waiting[i], I_CLASS]] += 1.0


@njit(cache=True)
def _halve_series_nb(series):
    """Keep every other row (the time series doubles its stride when full)."""
    half = series.shape[0] // 2
    for k in range(half):
        for c in range(series.shape[1]):
            series[k, c] = series[2 * k, c]
    return half


@njit(cache=True, inline="always")
def account_nb(srv, ints, series, stats, waiting, batch, cnt, t, dt, compute_s, memory_s, prefill, decode,
               preemptions):
    """Count the iteration that starts at ``t`` and lasts ``dt`` (``compute_s`` and ``memory_s`` of it are its
    roofline terms) in the statistics and the time series."""
    iterations = np.int64(stats[S_ITERATIONS])
    stride = np.int64(stats[S_SERIES_STRIDE])
    if iterations % stride == 0:
        rows = np.int64(stats[S_SERIES_ROWS])
        if rows == series.shape[0]:
            rows = _halve_series_nb(series)
            stride *= 2
            stats[S_SERIES_STRIDE] = stride
        if iterations % stride == 0:
            _record_nb(srv, ints, waiting, batch, cnt, series, rows, t, dt, prefill, decode, preemptions)
            rows += 1
        stats[S_SERIES_ROWS] = rows
    stats[S_ITERATIONS] = iterations + 1
    stats[S_BUSY_S] += dt
    stats[S_BATCH_SUM] += cnt[C_BATCH]
    stats[S_KV_BLOCK_SECONDS] += cnt[C_USED_BLOCKS] * dt
    stats[S_KV_PEAK_BLOCKS] = max(stats[S_KV_PEAK_BLOCKS], cnt[C_USED_BLOCKS])
    stats[S_PREEMPTIONS] = cnt[C_PREEMPTIONS]
    stats[S_PREFIX_QUERY_TOKENS] = cnt[C_PREFIX_QUERY_TOKENS]
    stats[S_PREFIX_HIT_TOKENS] = cnt[C_PREFIX_HIT_TOKENS]
    stats[S_COMPUTE_S] += compute_s
    stats[S_MEMORY_S] += memory_s
    stats[S_TERMS_S] += dt
    overlap_s = min(t + dt, srv[SV_WINDOW_END_S]) - max(t, srv[SV_WINDOW_START_S])
    if overlap_s > 0.0:
        share = overlap_s / dt
        stats[S_WINDOW_BUSY_S] += overlap_s
        stats[S_WINDOW_TERMS_S] += overlap_s
        stats[S_WINDOW_COMPUTE_S] += compute_s * share
        stats[S_WINDOW_MEMORY_S] += memory_s * share


def settle_in_flight(stats: np.ndarray, cnt: np.ndarray, clock: np.ndarray, end_s: float,
                     window_s: tuple[float, float] = (0.0, 0.0)) -> None:
    """A run stopped by a limit ends while iterations are under way, whose whole duration the statistics
    already hold: keep only the part before ``end_s`` (busy time, in the run and in the steady-state window
    ``window_s``, and KV block-seconds; a replica's blocks do not change during its iteration). A drained run
    has none in flight. The blocks of a replica waiting or idle at the end count until ``end_s``."""
    busy = clock[:, CK_MODE] == BUSY
    next_s = clock[:, CK_NEXT_S]
    ahead_s = np.where(busy, np.maximum(next_s - end_s, 0.0), 0.0)
    stats[:, S_BUSY_S] -= ahead_s
    stats[:, S_KV_BLOCK_SECONDS] -= cnt[:, C_USED_BLOCKS] * ahead_s
    # a replica waiting or idle at the end holds its blocks (cached prefixes, KV on the link) until then
    held_s = np.where(busy, 0.0, np.maximum(end_s - clock[:, CK_WAIT_START_S], 0.0))
    stats[:, S_KV_BLOCK_SECONDS] += cnt[:, C_USED_BLOCKS] * held_s
    start_s, stop_s = window_s
    stats[:, S_WINDOW_BUSY_S] -= np.where(busy, np.maximum(np.minimum(next_s, stop_s) - max(end_s, start_s), 0.0), 0.0)
