"""Event skipping: while a replica only decodes and nothing can reach it, the decisions that follow are all
alike, so a stretch of them runs here in one go, with the same step times, statistics and series rows as
deciding each in full (``tests/test_event_skipping.py`` holds it to that, bit for bit).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...hardware.steptime import decode_terms_nb
from ..layout import (F_DEADLINE, F_FIRST_TOKEN, I_BLOCKS, I_CHUNK, I_CLASS, I_DECODES, I_GENERATED, I_KV_TOKENS,
                      I_OUTPUT, I_PENDING, I_RECOMPUTE_LEFT, K_WINDOW_TOKENS)
from ..policies import P_CODE, WFQ, policy_charge_decodes_nb, policy_charge_nb
from .batch import decoding_nb
from .kv import block_room_nb
from .record import account_nb
from .state import (C_BATCH, C_CAPACITY_BLOCKS, C_ROLE, C_USED_BLOCKS, PREFILL_ROLE, SV_BLOCK_SIZE_TOKENS, SV_HORIZON_S,
                    SV_PREFIX_UNIT_TOKENS, SV_STATIC_BLOCKS, SV_WINDOW_END_S, SV_WINDOW_START_S, S_SKIPPED)


@njit(cache=True, inline="always")
def _first_token_next_nb(srv, policy, ints, fl, cnt, r, t_end):
    """True when prefill ``r`` scheduled in the iteration ending at ``t_end`` is its whole prompt and gives its
    first token then, and decodes from the next decision on as every running request does (unless that token is
    its last: the output left bounds the stretch): no time-out (its deadline not passed), on a replica that keeps
    it (not a prefill replica), with no prefix cache to fill and no fair-queuing virtual time (whose additions
    follow the batch's order)."""
    return ints[r, I_GENERATED] == 0 and ints[r, I_CHUNK] == ints[r, I_PENDING] and t_end <= fl[r, F_DEADLINE] \
        and cnt[C_ROLE] != PREFILL_ROLE and srv[SV_PREFIX_UNIT_TOKENS] == 0 and policy[P_CODE] != WFQ


@njit(cache=True, _nrt=False)
def skip_decodes_nb(srv, step, policy, classes, ints, fl, series, stats, waiting, batch, cnt, cross, t, dt, t_stop):
    """Event skipping: the iteration just scheduled at ``t`` (lasting ``dt``) holds every running request, each
    decoding or computing the whole rest of its prompt (``_first_token_next_nb``). Until the next event, each
    following decision would do the same (every request emits a token and decodes again), so run those decisions
    here without the full decision: no request completes (bounded by the output left), no time-out (those
    decoding are past their first token, a prompt's ends by its deadline; the caller stops ``t_stop`` at the
    first time-out of a waiting request), no admission (nothing waits, or nothing may be admitted, and the
    router sends nothing before ``t_stop``: the next arrival, end of a KV transfer or decision of a prefill
    replica, which may start one), no memory preemption (the blocks the requests grow into are free), the
    min-batch gate stays open (same requests, later), the horizon is not passed. Each skipped iteration gets the
    step time the full decision computes, from the same integer context sums (batch B, KV read = sum of cached
    tokens, attention pairs = that + B), and the same statistics and series rows, in the same order; so the
    results are the same, bit for bit (the caller ensures no other replica's queue can reach the bound before
    ``t_stop``). Request state is brought up to date at the end: every request generated ``m`` more tokens
    (those emitted inside the steady-state window counted for its class; a prompt's first one at the first
    skipped decision), was charged its prompt and decodes, holds the blocks it crossed into. Returns the start
    and duration of the iteration now in flight.

    ``cross[p]``: requests whose KV needs one more block at the skipped decisions j = p (mod block size);
    a request's first such decision is ``blocks x block size - cached tokens - chunk + 1`` (its room once this
    iteration's chunk is cached, plus one; ``block_room_nb``; at most one block ahead, except under reserve-full
    admission, whose blocks already hold the whole output).
    """
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
        chunk = ints[r, I_CHUNK]
        if not decoding_nb(ints, r) and not _first_token_next_nb(srv, policy, ints, fl, cnt, r, t + dt):
            return t, dt
        last = min(last, ints[r, I_OUTPUT] - ints[r, I_GENERATED] - 1)
        reads += ints[r, I_KV_TOKENS] + chunk - 1  # its KV once this iteration ends, less the one token each adds
        if grows:
            first = block_room_nb(srv, ints, r) - chunk + 1
            if first <= bs:
                cross[first % bs] += 1
            else:
                last = min(last, first - 1)
    used = cnt[C_USED_BLOCKS]
    capacity = cnt[C_CAPACITY_BLOCKS]
    horizon_s = srv[SV_HORIZON_S]
    m = 0
    t_first_token = t
    phase = 1 % bs  # (m + 1) mod the block size: which requests cross into a new block at the next decision
    emitted_in_window = 0  # skipped decisions inside the window: each emits a token of every request
    while m < last:
        t_next = t + dt
        if t_next >= t_stop or t_next > horizon_s:
            break
        grow = cross[phase] if grows else 0
        if used + grow > capacity:
            break
        m += 1
        if m == 1:
            t_first_token = t_next  # the prompts the decision's iteration computes give their first token now
        phase = phase + 1 if phase + 1 < bs else 0
        used += grow
        cnt[C_USED_BLOCKS] = used
        t = t_next
        if srv[SV_WINDOW_START_S] <= t < srv[SV_WINDOW_END_S]:
            emitted_in_window += 1
        reads += n
        dt, compute_s, memory_s = decode_terms_nb(step, n, n, reads)
        account_nb(srv, ints, series, stats, waiting, batch, cnt, t, dt, compute_s, memory_s, 0, n, 0)
    stats[S_SKIPPED] += m
    if m == 0:
        return t, dt
    for i in range(n):
        r = batch[i]
        k = ints[r, I_CLASS]
        chunk = ints[r, I_CHUNK]
        decodes = m
        if not decoding_nb(ints, r):  # its prompt ended at the first skipped decision: its first token, then decodes
            policy_charge_nb(policy, classes, k, chunk, 0)
            fl[r, F_FIRST_TOKEN] = t_first_token
            ints[r, I_PENDING] = 1
            ints[r, I_CHUNK] = 1
            decodes = m - 1
        policy_charge_decodes_nb(policy, classes, k, decodes)
        if grows:
            first = block_room_nb(srv, ints, r) - chunk + 1
            if first <= m:
                ints[r, I_BLOCKS] += 1 + (m - first) // bs
        ints[r, I_KV_TOKENS] += chunk - 1 + m
        ints[r, I_GENERATED] += m
        ints[r, I_DECODES] += decodes
        classes[k, K_WINDOW_TOKENS] += emitted_in_window
    return t, dt
