"""Batching: the chunk each running request processes in this iteration (a decode's one token, or k + 1 with
speculative decoding; a prefill as much of its prompt as the token budget leaves) and the KV blocks it grows
into; when memory runs out, cached prefixes nobody holds are evicted, paused requests' KV dropped, then the
worst-ranked running requests preempted.
"""

from __future__ import annotations

from numba import njit

from ..layout import I_BLOCKS, I_CHUNK, I_GENERATED, I_OUTPUT, I_PENDING, I_STATE, RUNNING
from ..policies import KEEP, P_MODE, RECOMPUTE
from .kv import blocks_needed_nb, preempt_nb, reclaim_paused_nb
from .prefix import evict_cached_nb
from .state import C_BATCH, C_CAPACITY_BLOCKS, C_RUNNING, C_USED_BLOCKS, SV_DRAFT_TOKENS


@njit(cache=True, inline="always")
def decoding_nb(ints, r):
    """True when ``r``'s prompt is processed and it decodes: one pending token before its next output."""
    return ints[r, I_GENERATED] > 0 and ints[r, I_PENDING] == 1


@njit(cache=True, inline="always")
def chunk_nb(srv, ints, r, budget):
    """Tokens ``r`` processes in this iteration within ``budget`` (0: it does not fit). A decode processes one
    token, or with speculative decoding the k draft tokens and the one they are verified with (no more than
    the output left: the last ones need no draft), all or nothing; a prefill as much of its prompt as fits."""
    if decoding_nb(ints, r):
        chunk = min(srv[SV_DRAFT_TOKENS] + 1, ints[r, I_OUTPUT] - ints[r, I_GENERATED])
        return chunk if chunk <= budget else 0
    return min(ints[r, I_PENDING], budget)


@njit(cache=True, inline="always")
def schedule_nb(ints, batch, cnt, r, chunk, blocks):
    ints[r, I_BLOCKS] += blocks
    cnt[C_USED_BLOCKS] += blocks
    ints[r, I_CHUNK] = chunk
    batch[cnt[C_BATCH]] = r
    cnt[C_BATCH] += 1


@njit(cache=True, _nrt=False)
def schedule_running_nb(srv, policy, ints, fl, ids, pc, waiting, running, batch, cnt, acc, budget):
    """Give each running request its next chunk, best key first. When memory is short, first evict cached prefix
    units nobody holds, then drop the KV of paused requests, then preempt from the tail (keeping KV frees nothing,
    so keep mode recomputes).

    Returns (token budget left, whether a memory preemption happened).
    """
    mode = RECOMPUTE if policy[P_MODE] == KEEP else policy[P_MODE]
    preempted = False
    i = 0
    while i < cnt[C_RUNNING]:
        r = running[i]
        chunk = chunk_nb(srv, ints, r, budget)
        if chunk == 0:
            i += 1
            continue
        need = blocks_needed_nb(srv, ints, cnt, r, chunk)
        while need > cnt[C_CAPACITY_BLOCKS] - cnt[C_USED_BLOCKS]:
            if evict_cached_nb(srv, pc, cnt) or reclaim_paused_nb(ints, fl, ids, pc, waiting, cnt, -1):
                continue
            victim = running[cnt[C_RUNNING] - 1]
            cnt[C_RUNNING] -= 1
            preempt_nb(srv, ints, ids, pc, waiting, cnt, acc, victim, mode)
            preempted = True
            if victim == r:
                break
        if ints[r, I_STATE] != RUNNING:
            break
        schedule_nb(ints, batch, cnt, r, chunk, need)
        budget -= chunk
        i += 1
    return budget, preempted
