"""One replica's decision, at the end of its iteration or when it wakes: the numbered steps of the package's
docstring, in order, each a call into the module that holds it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..policies import P_PREEMPTIVE
from .admit import (ADMIT_ANY, ADMIT_DECODES, ADMIT_PROMPTS, admit_waiting_nb, drop_timeouts_nb, gate_release_s_nb,
                    next_event_s_nb, order_running_nb)
from .batch import schedule_running_nb
from .gates import (adp_after_skip_nb, adp_hold_nb, delay_after_skip_nb, delay_hold_nb, held_requests_nb,
                    note_prefill_nb, receive_after_skip_nb, receive_nb)
from .kv import update_new_token_ratio_nb
from .record import account_nb
from .skip import skip_decodes_nb
from .state import (A_EXTRA_S, A_WASTE_S, BUSY, CK_BATCH_HOLD, CK_MODE, CK_NEXT_S, CK_RECEIVED_S, CK_WAIT_START_S,
                    C_BATCH, C_MAX_BATCHED_TOKENS, C_MAX_BATCH_SIZE, C_NEW_TOKEN_RATIO_PPM, C_PREEMPTIONS, C_ROLE,
                    C_RUNNING, C_USED_BLOCKS, C_WAITING, DRAINED, HORIZON, IDLE, NEW_TOKEN_RATIO_INIT_PPM,
                    PREFILL_FIRST, PREFILL_ROLE, QUEUE_BOUND, SV_BATCHING, SV_DRAFT_TOKENS, SV_EVENT_SKIPPING,
                    SV_HORIZON_S, SV_MAX_WAITING_REQUESTS, S_BATCH_HOLD_S, S_ITERATIONS, S_KV_BLOCK_SECONDS,
                    S_GATE_HELD_S, S_SKIPPED, S_WASTE_S, WAITING_FOR_GATE)
from .step import advance_nb, step_s_nb


@njit(cache=True, inline="always")
def decide_nb(srv, step, policy, classes, ints, fl, ids, pc, series, stats, waiting, running, batch, cnt, clock,
              acc, cross, handoff, t, queued_elsewhere, t_stop, may_skip):
    """One replica's decision at ``t``: finish its iteration, then start the next one, wait or go idle.

    ``queued_elsewhere``: requests waiting at the other replicas (for the queue bound, on the fleet).
    ``t_stop``, ``may_skip``: the next arrival, and whether the queue bound cannot be reached before it
    (for event skipping). Returns the stop reason (``DRAINED`` = carry on).
    """
    was_busy = clock[CK_MODE] == BUSY
    if was_busy:
        advance_nb(srv, policy, classes, ints, fl, ids, pc, running, batch, cnt, clock, handoff, t)
    else:  # waiting or idle since CK_WAIT_START_S, its blocks held (cached prefixes, KV on the link)
        stats[S_KV_BLOCK_SECONDS] += cnt[C_USED_BLOCKS] * (t - clock[CK_WAIT_START_S])
        if clock[CK_BATCH_HOLD] > 0:  # the min-batch gate held it back since then
            stats[S_BATCH_HOLD_S] += t - clock[CK_WAIT_START_S]
            clock[CK_BATCH_HOLD] = 0.0
    cnt[C_WAITING] = drop_timeouts_nb(ints, fl, classes, ids, pc, waiting, cnt[C_WAITING], cnt, t)
    cnt[C_RUNNING] = drop_timeouts_nb(ints, fl, classes, ids, pc, running, cnt[C_RUNNING], cnt, t)
    if cnt[C_WAITING] + cnt[C_RUNNING] == 0:
        cnt[C_NEW_TOKEN_RATIO_PPM] = NEW_TOKEN_RATIO_INIT_PPM  # an idle server starts its estimate afresh
        clock[CK_MODE] = IDLE
        clock[CK_NEXT_S] = np.inf
        clock[CK_WAIT_START_S] = t
        return DRAINED
    if queued_elsewhere + cnt[C_WAITING] > srv[SV_MAX_WAITING_REQUESTS]:
        return QUEUE_BOUND
    if t > srv[SV_HORIZON_S]:
        return HORIZON
    t_release = gate_release_s_nb(srv, fl, waiting, running, cnt, t)
    if t_release > t:
        clock[CK_BATCH_HOLD] = 1.0
        clock[CK_MODE] = WAITING_FOR_GATE
        clock[CK_WAIT_START_S] = t
        clock[CK_NEXT_S] = next_event_s_nb(ints, fl, waiting, cnt, t_release)
        return DRAINED

    receive_nb(srv, cnt, clock, t, was_busy)
    seen_s = clock[CK_RECEIVED_S]
    preemptions_before = cnt[C_PREEMPTIONS]
    iterations_before = np.int64(stats[S_ITERATIONS])
    skipped_before = np.int64(stats[S_SKIPPED])
    order_running_nb(policy, classes, ints, fl, running, cnt, t)
    balance_holds = adp_hold_nb(srv, ints, fl, waiting, cnt, seen_s)  # each counts every turn: both are asked
    hold_prompts = delay_hold_nb(srv, ints, fl, waiting, cnt, seen_s) or balance_holds
    may_admit = cnt[C_RUNNING] < cnt[C_MAX_BATCH_SIZE] or policy[P_PREEMPTIVE]
    prefill_first = srv[SV_BATCHING] == PREFILL_FIRST
    if prefill_first and may_admit and cnt[C_WAITING] > 0 and not hold_prompts:
        # Whole prompts whenever one can be admitted: the iteration is theirs, every decode waits.
        admit_waiting_nb(srv, policy, classes, ints, fl, ids, pc, waiting, running, batch, cnt, acc, t,
                         cnt[C_MAX_BATCHED_TOKENS], ADMIT_PROMPTS, seen_s)
    memory_preempted = False
    if cnt[C_BATCH] == 0:
        budget, memory_preempted = schedule_running_nb(srv, policy, ints, fl, ids, pc, waiting, running, batch, cnt,
                                                       acc, cnt[C_MAX_BATCHED_TOKENS])
        if not memory_preempted and may_admit and cnt[C_WAITING] > 0:
            admit_waiting_nb(srv, policy, classes, ints, fl, ids, pc, waiting, running, batch, cnt, acc, t, budget,
                             ADMIT_DECODES if prefill_first or hold_prompts else ADMIT_ANY, seen_s)
    if cnt[C_BATCH] == 0 and cnt[C_ROLE] == PREFILL_ROLE and cnt[C_RUNNING] == 0 and cnt[C_USED_BLOCKS] > 0:
        # its memory is held by KV on the link: wait for a transfer to end (``hand_over_nb`` wakes it), or for the
        # next time-out of a waiting request
        clock[CK_MODE] = WAITING_FOR_GATE
        clock[CK_WAIT_START_S] = t
        clock[CK_NEXT_S] = next_event_s_nb(ints, fl, waiting, cnt, np.inf)
        return DRAINED
    if cnt[C_BATCH] == 0:
        raise RuntimeError("internal error: requests are ready but none could be scheduled")

    dt, compute_s, memory_s, prefill, decode, recomputed = step_s_nb(srv, step, ints, batch, cnt)
    note_prefill_nb(cnt, prefill)
    stats[S_WASTE_S] += dt * recomputed / max(prefill + decode, 1) + acc[A_WASTE_S]
    dt += acc[A_EXTRA_S]
    acc[A_EXTRA_S] = 0.0
    stats[S_GATE_HELD_S] += held_requests_nb(srv, fl, waiting, cnt, seen_s, hold_prompts) * dt
    acc[A_WASTE_S] = 0.0
    account_nb(srv, ints, series, stats, waiting, batch, cnt, t, dt, compute_s, memory_s, prefill, decode,
               cnt[C_PREEMPTIONS] - preemptions_before)
    if srv[SV_EVENT_SKIPPING] and srv[SV_DRAFT_TOKENS] == 0 and may_skip and recomputed == 0 \
            and cnt[C_BATCH] == cnt[C_RUNNING] and (cnt[C_WAITING] == 0 or (
                cnt[C_RUNNING] >= cnt[C_MAX_BATCH_SIZE] and not policy[P_PREEMPTIVE])):
        # nothing waits, or those waiting cannot be admitted (every slot taken, no eviction) until a request
        # completes: skipping stops before the first of them times out
        t_until = next_event_s_nb(ints, fl, waiting, cnt, t_stop) if cnt[C_WAITING] > 0 else t_stop
        if t + dt < t_until:  # else the next decision comes after an event: nothing to skip
            t, dt = skip_decodes_nb(srv, step, policy, classes, ints, fl, series, stats, waiting, batch, cnt, cross,
                                    t, dt, t_until)
            skipped = np.int64(stats[S_SKIPPED]) - skipped_before
            if skipped > 0:  # the skipped decisions' reads and gate counts; the iteration in flight decodes
                receive_after_skip_nb(srv, cnt, clock, t, skipped, prefill > 0)
                adp_after_skip_nb(srv, cnt, skipped)
                delay_after_skip_nb(srv, cnt, skipped)
                note_prefill_nb(cnt, 0)
    # iterations that decoded: this one if it did, then every skipped one
    update_new_token_ratio_nb(srv, ints, running, cnt, memory_preempted,
                              np.int64(stats[S_ITERATIONS]) - iterations_before - (0 if decode > 0 else 1))
    clock[CK_MODE] = BUSY
    clock[CK_NEXT_S] = t + dt
    return DRAINED
