"""The step: how long the scheduled iteration takes (fixed, or roofline from its tokens and the context they
attend to, plus a speculative draft's steps) and its effect when it ends: service charged, tokens emitted,
prompts computed (their prefixes cached), requests finished, timed out or (on a prefill replica) sent over the
link.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...hardware.steptime import decode_terms_nb, mixed_step_terms_nb
from ..layout import (COMPLETED, F_DEADLINE, F_FIRST_TOKEN, I_CHUNK, I_CLASS, I_DECODES, I_GENERATED, I_KV_TOKENS,
                      I_OUTPUT, I_PENDING, I_RECOMPUTE_LEFT, K_WINDOW_TOKENS, RUNNING, TIMED_OUT)
from ..policies import policy_charge_nb
from .batch import decoding_nb
from .handoff import start_transfer_nb
from .kv import leave_nb
from .prefix import insert_prefix_nb
from .queues import keep_state_nb
from .state import (C_BATCH, C_ROLE, C_RUNNING, PREFILL_ROLE, SV_DRAFT_COST, SV_DRAFT_TOKENS, SV_PREFIX_UNIT_TOKENS,
                    SV_TOKENS_PER_DECODE, SV_WINDOW_END_S, SV_WINDOW_START_S)


@njit(cache=True, inline="always")
def _emitted_nb(srv, ints, r, chunk):
    """Output tokens ``r``'s decode of ``chunk`` tokens emits: 1, or with speculative decoding its accepted draft
    tokens plus one. Its j-th decode iteration emits floor((j + 1) E) - floor(j E) (E: the expected tokens per
    verification, ``Speculative.tokens_per_decode``), so n iterations emit floor(n E), the expectation without
    its variance; never more than were verified."""
    if srv[SV_DRAFT_TOKENS] == 0:
        return np.int64(1)
    j = ints[r, I_DECODES]
    per = srv[SV_TOKENS_PER_DECODE]
    return min(np.int64(np.floor((j + 1) * per)) - np.int64(np.floor(j * per)), chunk)


@njit(cache=True, inline="always")
def step_s_nb(srv, step, ints, batch, cnt):
    """Duration of this iteration, its roofline (compute, memory) seconds, its (prefill, decode) token counts
    and its recomputed tokens. With speculative decoding the decode tokens are those verified (k + 1 per
    sequence), and the draft model's k steps over the decoding sequences are added, each ``draft_cost`` times a
    plain decode iteration of them."""
    prefill_tokens = 0
    decode_tokens = 0
    recomputed = 0
    context_pairs = 0.0   # sum over batched tokens of the context each attends to
    prefill_pairs = 0.0   # the part of it of the prefill chunks
    context_reads = 0.0   # KV tokens read (each sequence's cached context, once)
    decoding = 0          # sequences decoding, and the KV they read (the draft model's batch)
    decode_reads = 0.0
    for i in range(cnt[C_BATCH]):
        r = batch[i]
        chunk = ints[r, I_CHUNK]
        kv = ints[r, I_KV_TOKENS]
        if decoding_nb(ints, r):
            decode_tokens += chunk
            decoding += 1
            decode_reads += kv
        else:
            prefill_tokens += chunk
            prefill_pairs += chunk * kv + chunk * (chunk + 1) / 2.0
        redo = min(chunk, ints[r, I_RECOMPUTE_LEFT])
        ints[r, I_RECOMPUTE_LEFT] -= redo
        recomputed += redo
        context_pairs += chunk * kv + chunk * (chunk + 1) / 2.0
        context_reads += kv
    dt, compute_s, memory_s = mixed_step_terms_nb(step, prefill_tokens + decode_tokens, context_pairs, context_reads,
                                                  prefill_tokens, prefill_pairs, decoding, decode_reads)
    if srv[SV_DRAFT_TOKENS] > 0 and decoding > 0:
        draft_s, draft_compute_s, draft_memory_s = decode_terms_nb(step, decoding, decoding, decode_reads)
        steps = srv[SV_DRAFT_TOKENS] * srv[SV_DRAFT_COST]
        dt += steps * draft_s
        compute_s += steps * draft_compute_s
        memory_s += steps * draft_memory_s
    return dt, compute_s, memory_s, prefill_tokens, decode_tokens, recomputed


@njit(cache=True, inline="always")
def advance_nb(srv, policy, classes, ints, fl, ids, pc, running, batch, cnt, clock, handoff, t_end):
    """Apply the iteration's work at ``t_end``: charge service, emit tokens (counted per class when ``t_end`` is
    inside the steady-state window), finish or time out requests; on a prefill replica a request whose first token
    this was starts its KV transfer to the decode pool."""
    in_window = srv[SV_WINDOW_START_S] <= t_end < srv[SV_WINDOW_END_S]
    for i in range(cnt[C_BATCH]):
        r = batch[i]
        chunk = ints[r, I_CHUNK]
        ints[r, I_CHUNK] = 0
        if decoding_nb(ints, r):
            # a decode: the tokens it emits join the KV (rejected draft tokens are discarded), one stays pending
            emitted = _emitted_nb(srv, ints, r, chunk)
            ints[r, I_DECODES] += 1
            policy_charge_nb(policy, classes, ints[r, I_CLASS], 0, emitted)
            ints[r, I_KV_TOKENS] += emitted
        else:
            policy_charge_nb(policy, classes, ints[r, I_CLASS], chunk, 0)
            ints[r, I_KV_TOKENS] += chunk
            ints[r, I_PENDING] -= chunk
            if ints[r, I_PENDING] > 0:
                continue
            if srv[SV_PREFIX_UNIT_TOKENS] > 0:
                insert_prefix_nb(srv, ints, ids, pc, cnt, r)
            if ints[r, I_GENERATED] == 0:
                if t_end > fl[r, F_DEADLINE]:
                    leave_nb(ints, fl, classes, ids, pc, cnt, r, TIMED_OUT, fl[r, F_DEADLINE])
                    continue
                fl[r, F_FIRST_TOKEN] = t_end
            emitted = 1
        ints[r, I_GENERATED] += emitted
        if in_window:
            classes[ints[r, I_CLASS], K_WINDOW_TOKENS] += emitted
        if ints[r, I_GENERATED] == ints[r, I_OUTPUT]:
            leave_nb(ints, fl, classes, ids, pc, cnt, r, COMPLETED, t_end)
        else:
            ints[r, I_PENDING] = 1
            if cnt[C_ROLE] == PREFILL_ROLE:
                start_transfer_nb(srv, classes, ints, fl, clock, handoff, r, t_end)
    cnt[C_RUNNING] = keep_state_nb(ints, running, cnt[C_RUNNING], RUNNING)
    cnt[C_BATCH] = 0
