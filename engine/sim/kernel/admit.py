"""Ordering and admission: requests that timed out before a first token, the min-batch gate that may hold an
iteration back, the order of the running requests by the policy's key, and the admission of waiting requests
(in key order, while a slot, the token budget and memory remain; a preemptive policy may evict a worse running
request; with prefix caching a request starts from the longest cached prefix of its prompt).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..layout import (F_ARRIVAL, F_DEADLINE, F_FIRST_SCHEDULED, F_KEY, I_BLOCKS, I_CACHED_UNITS, I_CHUNK, I_GENERATED,
                      I_KV_TOKENS, I_PENDING, I_PREFIX_HIT, I_RECOMPUTE_LEFT, I_STATE, RUNNING, TIMED_OUT, WAITING)
from ..policies import LPM, P_CODE, P_MARGIN, P_MODE, P_PREEMPTIVE, policy_key_changes_nb, policy_key_nb
from .batch import chunk_nb, decoding_nb, schedule_nb
from .gates import seen_nb
from .kv import blocks_needed_nb, held_back_blocks_nb, leave_nb, preempt_nb, reclaim_paused_nb, resume_nb
from .prefix import evict_cached_nb, fresh_nb, prefix_hit_units_nb, take_prefix_nb, undo_take_nb
from .queues import before_nb, keep_state_nb, remove_nb
from .state import (C_BATCH, C_CAPACITY_BLOCKS, C_MAX_BATCH_SIZE, C_PREFIX_HIT_TOKENS, C_PREFIX_QUERY_TOKENS, C_RUNNING,
                    C_USED_BLOCKS, C_WAITING, SV_BLOCK_SIZE_TOKENS, SV_MIN_BATCH_SIZE, SV_PREFIX_UNIT_TOKENS,
                    SV_STATIC_BLOCKS, SV_WAIT_TIMEOUT_S)

# Which waiting requests one admission pass takes (``admit_waiting_nb``).
ADMIT_ANY, ADMIT_PROMPTS, ADMIT_DECODES = range(3)


@njit(cache=True, inline="always")
def drop_timeouts_nb(ints, fl, classes, ids, pc, items, n, cnt, t):
    """Time out requests of ``items[:n]`` with no first token by ``t``; returns the new length."""
    j = 0
    for i in range(n):
        r = items[i]
        if ints[r, I_GENERATED] == 0 and t >= fl[r, F_DEADLINE]:
            leave_nb(ints, fl, classes, ids, pc, cnt, r, TIMED_OUT, fl[r, F_DEADLINE])
        else:
            items[j] = r
            j += 1
    return j


@njit(cache=True, inline="always")
def gate_release_s_nb(srv, fl, waiting, running, cnt, t):
    """Time at which the min-batch gate opens (``t`` if it is open now)."""
    n_wait, n_run = cnt[C_WAITING], cnt[C_RUNNING]
    if n_wait + n_run >= srv[SV_MIN_BATCH_SIZE]:
        return t
    oldest = np.inf
    for i in range(n_wait):
        oldest = min(oldest, fl[waiting[i], F_ARRIVAL])
    for i in range(n_run):
        oldest = min(oldest, fl[running[i], F_ARRIVAL])
    return max(t, oldest + srv[SV_WAIT_TIMEOUT_S])


@njit(cache=True)
def next_event_s_nb(ints, fl, waiting, cnt, t_release):
    """Earliest of: gate release, next time-out of a waiting request (an arrival wakes the replica too)."""
    t_next = t_release
    for i in range(cnt[C_WAITING]):
        r = waiting[i]
        if ints[r, I_GENERATED] == 0:
            t_next = min(t_next, fl[r, F_DEADLINE])
    return t_next


@njit(cache=True, inline="always")
def order_running_nb(policy, classes, ints, fl, running, cnt, t):
    """Refresh keys (those that change over a request's life: all were computed at admission) and
    insertion-sort the running list (it is nearly sorted between iterations)."""
    n = cnt[C_RUNNING]
    if policy_key_changes_nb(policy):
        for i in range(n):
            r = running[i]
            fl[r, F_KEY] = policy_key_nb(policy, classes, ints, fl, r, t)
    for i in range(1, n):
        r = running[i]
        j = i - 1
        while j >= 0 and before_nb(fl, r, running[j]):
            running[j + 1] = running[j]
            j -= 1
        running[j + 1] = r


@njit(cache=True)
def _evict_worse_nb(srv, policy, ints, fl, ids, pc, waiting, running, batch, cnt, acc, candidate):
    """Policy preemption: evict the worst running request if ``candidate``'s key is lower by more than
    the policy's margin. Undoes the victim's place in this iteration's batch; returns the token budget
    it gave back, or -1 when no running request is worse enough.
    """
    victim = running[0]
    for i in range(1, cnt[C_RUNNING]):
        if before_nb(fl, victim, running[i]):
            victim = running[i]
    if not fl[candidate, F_KEY] + policy[P_MARGIN] < fl[victim, F_KEY]:
        return -1
    budget_back = ints[victim, I_CHUNK]
    if budget_back > 0:
        cnt[C_BATCH] = remove_nb(batch, cnt[C_BATCH], victim)
    cnt[C_RUNNING] = remove_nb(running, cnt[C_RUNNING], victim)
    if ints[victim, I_BLOCKS] > 0 and budget_back > 0:
        # Its blocks for this iteration's chunk were allocated already: give back the unused ones.
        bs = srv[SV_BLOCK_SIZE_TOKENS]
        shared = ints[victim, I_CACHED_UNITS] * srv[SV_PREFIX_UNIT_TOKENS] // bs
        keep_blocks = (ints[victim, I_KV_TOKENS] + bs - 1) // bs - shared if srv[SV_STATIC_BLOCKS] == 0 else \
            ints[victim, I_BLOCKS]
        cnt[C_USED_BLOCKS] -= ints[victim, I_BLOCKS] - keep_blocks
        ints[victim, I_BLOCKS] = keep_blocks
    preempt_nb(srv, ints, ids, pc, waiting, cnt, acc, victim, policy[P_MODE])
    return budget_back


@njit(cache=True, _nrt=False)
def admit_waiting_nb(srv, policy, classes, ints, fl, ids, pc, waiting, running, batch, cnt, acc, t, budget, kind,
                     seen_s):
    """Move waiting requests of ``kind`` that the scheduler has read (``gates.seen_nb``: arrived by ``seen_s``)
    into the batch in key order while slot, budget and memory allow.

    ``ADMIT_ANY``: every waiting request, a prompt in chunks of the budget left. ``ADMIT_PROMPTS``: requests
    with a prefill to do, each whole (no chunking); admission stops at the first that exceeds the budget left,
    unless the batch is empty (a prompt longer than the budget then runs alone). ``ADMIT_DECODES``: paused or
    swapped-out requests that resume decoding. With prefix caching a request holding no KV starts from the
    longest prefix of its prompt the cache holds (given back if it is not admitted after all), and cached units
    nobody holds are evicted before anything else when memory is short.
    """
    n_candidates = cnt[C_WAITING]
    lpm = policy[P_CODE] == LPM
    for i in range(n_candidates):
        r = waiting[i]
        if lpm:  # the tokens of its prompt it need not compute now
            ints[r, I_PREFIX_HIT] = prefix_hit_units_nb(srv, ints, ids, pc, r) * srv[SV_PREFIX_UNIT_TOKENS] \
                if fresh_nb(srv, ints, r) else ints[r, I_KV_TOKENS]
        fl[r, F_KEY] = policy_key_nb(policy, classes, ints, fl, r, t)
    while budget > 0:
        best = -1
        for i in range(n_candidates):
            r = waiting[i]
            if ints[r, I_STATE] == WAITING and (best < 0 or before_nb(fl, r, best)) and seen_nb(fl, r, seen_s):
                decoding = decoding_nb(ints, r)
                if kind == ADMIT_ANY or decoding == (kind == ADMIT_DECODES):
                    best = r
        if best < 0:
            break
        queried, took, left = 0, 0, ints[best, I_RECOMPUTE_LEFT]
        if fresh_nb(srv, ints, best):
            queried = ints[best, I_PENDING]
            took = prefix_hit_units_nb(srv, ints, ids, pc, best)
            take_prefix_nb(srv, ints, ids, pc, best, took)
        if kind == ADMIT_PROMPTS:
            chunk = ints[best, I_PENDING]
        else:
            chunk = chunk_nb(srv, ints, best, budget)
            if chunk == 0:  # a speculative decode that does not fit the budget left
                undo_take_nb(srv, ints, ids, pc, best, took, left)
                break
        if chunk > budget and cnt[C_BATCH] > 0:
            undo_take_nb(srv, ints, ids, pc, best, took, left)
            break
        need = blocks_needed_nb(srv, ints, cnt, best, chunk)
        room = need + held_back_blocks_nb(srv, ints, running, cnt, best)  # free blocks admission asks for
        if cnt[C_RUNNING] < cnt[C_MAX_BATCH_SIZE]:
            while room > cnt[C_CAPACITY_BLOCKS] - cnt[C_USED_BLOCKS] and evict_cached_nb(srv, pc, cnt):
                pass
        if cnt[C_RUNNING] < cnt[C_MAX_BATCH_SIZE] and room > cnt[C_CAPACITY_BLOCKS] - cnt[C_USED_BLOCKS] and \
                reclaim_paused_nb(ints, fl, ids, pc, waiting, cnt, best):
            undo_take_nb(srv, ints, ids, pc, best, took, left)
            continue
        if cnt[C_RUNNING] >= cnt[C_MAX_BATCH_SIZE] or room > cnt[C_CAPACITY_BLOCKS] - cnt[C_USED_BLOCKS]:
            undo_take_nb(srv, ints, ids, pc, best, took, left)
            if not policy[P_PREEMPTIVE] or cnt[C_RUNNING] == 0:
                break
            budget_back = _evict_worse_nb(srv, policy, ints, fl, ids, pc, waiting, running, batch, cnt, acc, best)
            if budget_back < 0:
                break
            budget += budget_back
            continue
        cnt[C_PREFIX_QUERY_TOKENS] += queried
        cnt[C_PREFIX_HIT_TOKENS] += took * srv[SV_PREFIX_UNIT_TOKENS]
        resume_nb(srv, policy, ints, acc, best)
        ints[best, I_STATE] = RUNNING
        if np.isnan(fl[best, F_FIRST_SCHEDULED]):
            fl[best, F_FIRST_SCHEDULED] = t
        running[cnt[C_RUNNING]] = best
        cnt[C_RUNNING] += 1
        schedule_nb(ints, batch, cnt, best, chunk, need)
        budget -= chunk
    cnt[C_WAITING] = keep_state_nb(ints, waiting, cnt[C_WAITING], WAITING)
