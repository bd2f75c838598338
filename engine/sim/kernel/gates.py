"""What holds a new request back before any budget or memory does: when an engine's scheduler reads new requests
(SGLang's receive interval), and whether it lets the prompts it has read into this iteration (TensorRT-LLM's
attention-DP balance gate, ATOM's prefill delayer). Each is the engine's own rule, read from its source
(``engine/scenario/schedulers`` says which release); the decision (``decision.decide_nb``) asks them in its order,
and event skipping brings their counters up to date over the decisions it runs in one go (``*_after_skip_nb``), so
skipping changes no result.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..layout import F_ARRIVAL, F_FIRST_SCHEDULED, I_GENERATED, I_PENDING, I_STATE, WAITING
from .state import (C_ADP_BATCH_ITERS, C_ADP_WAIT_ITERS, C_CAPACITY_BLOCKS, C_DELAY_HOLD_TICKS, C_DELAY_PREV_PENDING,
                    C_DELAY_STALL, C_LAST_PREFILL, C_MAX_BATCH_SIZE, C_MAX_BATCHED_TOKENS, C_RECV_COUNT, C_RUNNING,
                    C_USED_BLOCKS, C_WAITING, CK_RECEIVED_S, RECV_WEIGHT_DECODE, RECV_WEIGHT_OTHER,
                    SV_ADP_BATCHING_WAIT_ITERS, SV_ADP_RANKS, SV_ADP_TIMEOUT_ITERS, SV_DELAY_KV_HIGH,
                    SV_DELAY_MAX_TICKS, SV_DELAY_RANKS, SV_DELAY_STALL_TICKS, SV_DELAY_TARGET_FILL, SV_RECV_INTERVAL)


@njit(cache=True, inline="always")
def seen_nb(fl, r, seen_s):
    """True when the replica's scheduler has read request ``r``: it arrived by its last receive (``seen_s``), or
    it was scheduled before (preempted, handed over or moved: read long ago)."""
    return fl[r, F_ARRIVAL] <= seen_s or not np.isnan(fl[r, F_FIRST_SCHEDULED])


@njit(cache=True, inline="always")
def receive_nb(srv, cnt, clock, t, was_busy):
    """SGLang's receive skipper at a decision at ``t`` (sglang 0.5.14 srt/managers/scheduler_recv_skipper.py,
    called first in each turn of the scheduler's loop, srt/managers/scheduler_components/request_receiver.py:80):
    the counter grows by the weight of the iteration just ended (``RECV_WEIGHT_OTHER`` when it computed prompt
    tokens, else ``RECV_WEIGHT_DECODE``) and new requests are read once it reaches the interval. A replica that
    ran no iteration (idle, or held by the min-batch gate) or has nothing running turns its loop idly, a few
    microseconds a turn, so it reads them at once. With an interval of 1 every decision reads."""
    interval = srv[SV_RECV_INTERVAL]
    if interval > 1 and was_busy and cnt[C_RUNNING] > 0:
        cnt[C_RECV_COUNT] += RECV_WEIGHT_OTHER if cnt[C_LAST_PREFILL] else RECV_WEIGHT_DECODE
        if cnt[C_RECV_COUNT] < interval:
            return
    cnt[C_RECV_COUNT] = 0
    clock[CK_RECEIVED_S] = t


@njit(cache=True, inline="always")
def receive_after_skip_nb(srv, cnt, clock, t, skipped, first_prefill):
    """The receive skipper after ``skipped`` decisions run in one go, the last at ``t``: the first follows the
    iteration the decision scheduled (``first_prefill``: it computed prompt tokens), the others decodes. Nothing
    arrives during a skip, so a read anywhere in it sees what a read at ``t`` sees."""
    interval = srv[SV_RECV_INTERVAL]
    if interval <= 1:
        clock[CK_RECEIVED_S] = t
        return
    count = cnt[C_RECV_COUNT] + (RECV_WEIGHT_OTHER if first_prefill else RECV_WEIGHT_DECODE)
    received = count >= interval
    if received:
        count = 0
    more = skipped - 1  # decode weights of 1: the counter wraps at the interval
    if count + more >= interval:
        received = True
    cnt[C_RECV_COUNT] = (count + more) % interval
    if received:
        clock[CK_RECEIVED_S] = t


@njit(cache=True, inline="always")
def adp_hold_nb(srv, ints, fl, waiting, cnt, seen_s):
    """TensorRT-LLM's attention-DP balance gate at one iteration (``attention_dp_config.enable_balance``;
    PyExecutor._balance_adp_requests, tensorrt_llm/_torch/pyexecutor/py_executor.py): True when the prompts read
    must wait this iteration. The ranks share their counts each iteration; when every rank has a context request
    (and a free slot), contexts go at once, unless every rank also has generation requests: then they wait
    ``batching_wait_iters`` iterations to gather more, and go. When some rank has none, they wait until
    ``timeout_iters`` iterations have passed or some rank has no generation request.

    The ranks are pooled here (one queue, one batch): a rank is taken to have a context when at least as many
    prompts wait, read and within the free slots, as there are ranks, and generation requests when at least as
    many requests run; the engine spreads requests over its ranks by load, which makes that close, not exact."""
    ranks = srv[SV_ADP_RANKS]
    if ranks == 0:
        return False
    contexts = 0
    for i in range(cnt[C_WAITING]):
        r = waiting[i]
        if ints[r, I_STATE] == WAITING and ints[r, I_GENERATED] == 0 and seen_nb(fl, r, seen_s):
            contexts += 1
    free_slots = cnt[C_MAX_BATCH_SIZE] - cnt[C_RUNNING]
    every_rank_generates = cnt[C_RUNNING] >= ranks
    if free_slots > 0 and min(contexts, free_slots) >= ranks:
        cnt[C_ADP_WAIT_ITERS] = 0
        if every_rank_generates:
            if cnt[C_ADP_BATCH_ITERS] < srv[SV_ADP_BATCHING_WAIT_ITERS]:
                cnt[C_ADP_BATCH_ITERS] += 1
                return True
            cnt[C_ADP_BATCH_ITERS] = 0
        return False
    cnt[C_ADP_WAIT_ITERS] += 1
    if cnt[C_ADP_WAIT_ITERS] >= srv[SV_ADP_TIMEOUT_ITERS] or not every_rank_generates:
        cnt[C_ADP_WAIT_ITERS] = 0
        return False
    return True


@njit(cache=True, inline="always")
def adp_after_skip_nb(srv, cnt, skipped):
    """The balance gate's counters after ``skipped`` decisions run in one go: at each, no context could be
    scheduled (nothing waits, or every slot is taken) and the same requests run, so its waiting count grows by one
    and restarts at the time-out, or stays at 0 when fewer requests run than there are ranks."""
    ranks = srv[SV_ADP_RANKS]
    if ranks == 0:
        return
    if cnt[C_RUNNING] >= ranks:
        cnt[C_ADP_WAIT_ITERS] = (cnt[C_ADP_WAIT_ITERS] + skipped) % srv[SV_ADP_TIMEOUT_ITERS]
    else:
        cnt[C_ADP_WAIT_ITERS] = 0


@njit(cache=True, inline="always")
def note_prefill_nb(cnt, prefill_tokens):
    """Remember whether the iteration now in flight computes prompt tokens (the receive skipper's next weight)."""
    cnt[C_LAST_PREFILL] = 1 if prefill_tokens > 0 else 0


@njit(cache=True, inline="always")
def _delay_reset_nb(cnt):
    cnt[C_DELAY_HOLD_TICKS] = 0
    cnt[C_DELAY_STALL] = 0
    cnt[C_DELAY_PREV_PENDING] = -1


@njit(cache=True, inline="always")
def delay_hold_nb(srv, ints, fl, waiting, cnt, seen_s):
    """ATOM's prefill delayer at one turn (atom/model_engine/prefill_delayer.py should_allow_prefill, ATOM ffdf3bb):
    True when the prompts read must wait this turn. The ranks share whether each has a prompt it can admit, their
    pending prompt tokens (each rank's capped at its token budget) and decodes; prompts go when none can be admitted
    (the hold restarts), nothing decodes, the KV cache is in use up to the watermark, or they have been held the
    most turns; else, while some rank has none, they wait; then they go once they fill the target share of the
    budgets of the ranks that have one, or their tokens have not grown for the stall turns.

    The ranks are pooled here as for the balance gate (``adp_hold_nb``): as many ranks have a prompt as prompts
    wait (read, within the free slots), up to the ranks; their tokens are capped at that many ranks' budgets."""
    ranks = srv[SV_DELAY_RANKS]
    if ranks == 0:
        return False
    prompts = 0
    pending = 0
    for i in range(cnt[C_WAITING]):
        r = waiting[i]
        if ints[r, I_STATE] == WAITING and ints[r, I_GENERATED] == 0 and seen_nb(fl, r, seen_s):
            prompts += 1
            pending += ints[r, I_PENDING]
    prefillable = min(prompts, cnt[C_MAX_BATCH_SIZE] - cnt[C_RUNNING], ranks)
    if prefillable <= 0:
        _delay_reset_nb(cnt)
        return False
    rank_budget = cnt[C_MAX_BATCHED_TOKENS] // ranks
    pending = min(pending, prefillable * rank_budget)
    kv_high = cnt[C_CAPACITY_BLOCKS] > 0 and \
        cnt[C_USED_BLOCKS] >= srv[SV_DELAY_KV_HIGH] * cnt[C_CAPACITY_BLOCKS]
    if cnt[C_RUNNING] == 0 or kv_high or cnt[C_DELAY_HOLD_TICKS] >= srv[SV_DELAY_MAX_TICKS]:
        _delay_reset_nb(cnt)
        return False
    if prefillable < ranks:
        cnt[C_DELAY_HOLD_TICKS] += 1
        return True
    if pending >= srv[SV_DELAY_TARGET_FILL] * prefillable * rank_budget:
        _delay_reset_nb(cnt)
        return False
    if pending <= cnt[C_DELAY_PREV_PENDING]:
        cnt[C_DELAY_STALL] += 1
    else:
        cnt[C_DELAY_STALL] = 0
    cnt[C_DELAY_PREV_PENDING] = pending
    if cnt[C_DELAY_STALL] >= srv[SV_DELAY_STALL_TICKS]:
        _delay_reset_nb(cnt)
        return False
    cnt[C_DELAY_HOLD_TICKS] += 1
    return True


@njit(cache=True, inline="always")
def delay_after_skip_nb(srv, cnt, skipped):
    """The delayer's state after decisions run in one go: at each, no prompt could be admitted (nothing waits, or
    every slot is taken), so the hold restarts."""
    if srv[SV_DELAY_RANKS] > 0 and skipped > 0:
        _delay_reset_nb(cnt)


@njit(cache=True, inline="always")
def held_requests_nb(srv, fl, waiting, cnt, seen_s, hold_prompts):
    """How many requests still waiting after admission the engine's scheduler kept out this iteration: those it has
    not read (the receive interval), and, while its gate holds prompts, those it has read and never scheduled; 0
    when every slot is taken (nothing could have been admitted) or the engine has no such rule."""
    if srv[SV_RECV_INTERVAL] <= 1 and srv[SV_ADP_RANKS] == 0 and srv[SV_DELAY_RANKS] == 0:
        return 0
    if cnt[C_RUNNING] >= cnt[C_MAX_BATCH_SIZE]:
        return 0
    held = 0
    for i in range(cnt[C_WAITING]):
        r = waiting[i]
        if np.isnan(fl[r, F_FIRST_SCHEDULED]) and (hold_prompts or fl[r, F_ARRIVAL] > seen_s):
            held += 1
    return held
