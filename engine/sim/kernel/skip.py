"""Event skipping: while a replica only decodes and nothing can reach it, the decisions that follow are all
alike, so a stretch of them runs here in one go, with the same step times, statistics and series rows as
deciding each in full (``tests/test_event_skipping.py`` holds it to that, bit for bit).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...hardware.steptime import step_time_terms_nb
from ..layout import I_BLOCKS, I_CLASS, I_DECODES, I_GENERATED, I_KV_TOKENS, I_OUTPUT, I_RECOMPUTE_LEFT, K_WINDOW_TOKENS
from ..policies import policy_charge_nb
from .kv import block_room_nb
from .record import account_nb
from .state import (C_BATCH, C_CAPACITY_BLOCKS, C_USED_BLOCKS, SV_BLOCK_SIZE_TOKENS, SV_HORIZON_S, SV_STATIC_BLOCKS,
                    SV_WINDOW_END_S, SV_WINDOW_START_S, S_SKIPPED)


@njit(cache=True, _nrt=False)
def skip_decodes_nb(srv, step, policy, classes, ints, series, stats, waiting, batch, cnt, cross, t, dt, t_stop):
    """Event skipping: the iteration just scheduled at ``t`` (lasting ``dt``) decodes every running request and
    nothing waits. Until the next event, each following decision would do the same (every request emits a
    token and decodes again), so run those decisions here without the full decision: no request completes
    (bounded by the output left), no time-out (all are past their first token), no admission (nothing waits
    and the router sends nothing before ``t_stop``: the next arrival, end of a KV transfer or decision of a
    prefill replica, which may start one), no memory preemption (the blocks the
    requests grow into are free), the min-batch gate stays open (same requests, later), the horizon is not
    passed. Each skipped iteration gets the step time the full decision computes, from the same integer
    context sums (batch B, KV read = sum of cached tokens, attention pairs = that + B), and the same
    statistics and series rows, in the same order; so the results are the same, bit for bit (the caller
    ensures no other replica's queue can reach the bound before ``t_stop``). Request state is brought up to
    date at the end: every request generated ``m`` more tokens (those emitted inside the steady-state window
    counted for its class), was charged ``m`` decodes, holds the blocks it crossed into. Returns the start and
    duration of the iteration now in flight.

    ``cross[p]``: requests whose KV needs one more block at the skipped decisions j = p (mod block size);
    a request's first such decision is ``blocks x block size - cached tokens`` (``block_room_nb``; at most one
    block ahead,
    except under reserve-full admission, whose blocks already hold the whole output).
    """
    if t + dt >= t_stop:
        return t, dt  # the next decision comes after an arrival: nothing to skip
    n = cnt[C_BATCH]
    bs = srv[SV_BLOCK_SIZE_TOKENS]
    grows = srv[SV_STATIC_BLOCKS] == 0
    last = np.int64(2 ** 62)  # decisions that may be skipped
    reads = 0.0
    for p in range(bs):
        cross[p] = 0
    for i in range(n):
        r = batch[i]
        if ints[r, I_RECOMPUTE_LEFT] > 0:
            return t, dt
        last = min(last, ints[r, I_OUTPUT] - ints[r, I_GENERATED] - 1)
        reads += ints[r, I_KV_TOKENS]
        if grows:
            first = block_room_nb(srv, ints, r)
            if first <= bs:
                cross[first % bs] += 1
            else:
                last = min(last, first - 1)
    used = cnt[C_USED_BLOCKS]
    m = 0
    emitted_in_window = 0  # skipped decisions inside the window: each emits a token of every request
    while m < last:
        t_next = t + dt
        if t_next >= t_stop or t_next > srv[SV_HORIZON_S]:
            break
        grow = cross[(m + 1) % bs] if grows else 0
        if used + grow > cnt[C_CAPACITY_BLOCKS]:
            break
        m += 1
        used += grow
        cnt[C_USED_BLOCKS] = used
        t = t_next
        if srv[SV_WINDOW_START_S] <= t < srv[SV_WINDOW_END_S]:
            emitted_in_window += 1
        reads += n
        dt, compute_s, memory_s = step_time_terms_nb(step, n, reads + n, reads)
        account_nb(srv, ints, series, stats, waiting, batch, cnt, t, dt, compute_s, memory_s, 0, n, 0)
    stats[S_SKIPPED] += m
    if m == 0:
        return t, dt
    for i in range(n):
        r = batch[i]
        k = ints[r, I_CLASS]
        for _ in range(m):
            policy_charge_nb(policy, classes, k, 0, 1)
        if grows:
            first = block_room_nb(srv, ints, r)
            if first <= m:
                ints[r, I_BLOCKS] += 1 + (m - first) // bs
        ints[r, I_KV_TOKENS] += m
        ints[r, I_GENERATED] += m
        ints[r, I_DECODES] += m
        classes[k, K_WINDOW_TOKENS] += emitted_in_window
    return t, dt
