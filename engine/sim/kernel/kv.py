"""Paged KV memory of one replica and what happens to a request's KV: the blocks a chunk needs (paged, static
or reserve-full), freeing them when it leaves, and preemption (keep: KV stays; swap: to host memory and back;
recompute: dropped, the prompt and output so far computed again) with its costs on resume.

The mechanism only: which request to preempt is the caller's choice (``batch`` and ``admit``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..layout import (F_FINISH, I_BLOCKS, I_CACHED_UNITS, I_CHUNK, I_CLASS, I_GENERATED, I_HOST_TOKENS, I_KV_TOKENS,
                      I_OUTPUT, I_PAUSED, I_PENDING, I_PREEMPTIONS, I_PROMPT, I_RECOMPUTE_LEFT, I_STATE, K_ACTIVE,
                      WAITING)
from ..policies import KEEP, P_OVERHEAD_S, SWAP
from .prefix import release_prefix_nb
from .queues import append_waiting_nb, before_nb
from .state import (A_EXTRA_S, A_WASTE_S, C_NEW_TOKEN_RATIO_PPM, C_PREEMPTIONS, C_ROLE, C_RUNNING, C_USED_BLOCKS,
                    C_WAITING, NEW_TOKEN_RATIO, NEW_TOKEN_RATIO_CLIP_TOKENS, NEW_TOKEN_RATIO_DECAY_STEPS,
                    NEW_TOKEN_RATIO_INIT_PPM, NEW_TOKEN_RATIO_MIN_FACTOR, NEW_TOKEN_RATIO_RETRACT_STEPS, PREFILL_ROLE,
                    RESERVE_FULL, SV_ADMISSION, SV_BLOCK_SIZE_TOKENS, SV_PREFIX_UNIT_TOKENS, SV_STATIC_BLOCKS,
                    SV_SWAP_S_PER_TOKEN)

NEW_TOKEN_RATIO_MIN_PPM = np.int64(NEW_TOKEN_RATIO_INIT_PPM * NEW_TOKEN_RATIO_MIN_FACTOR)
NEW_TOKEN_RATIO_DECAY_PPM = (NEW_TOKEN_RATIO_INIT_PPM - NEW_TOKEN_RATIO_MIN_PPM) / NEW_TOKEN_RATIO_DECAY_STEPS


@njit(cache=True, inline="always")
def free_blocks_nb(ints, cnt, r):
    """Return ``r``'s own KV blocks to the pool (its cached tokens are gone from the GPU)."""
    cnt[C_USED_BLOCKS] -= ints[r, I_BLOCKS]
    ints[r, I_BLOCKS] = 0


@njit(cache=True, inline="always")
def blocks_needed_nb(srv, ints, cnt, r, chunk):
    """Extra KV blocks ``r`` needs to hold ``chunk`` more tokens; under reserve-full admission, enough for its
    longest KV on this replica (prompt + output - 1 tokens: the last token is never cached; a prefill replica
    holds the prompt only), so it never needs more."""
    if srv[SV_STATIC_BLOCKS] > 0:
        return srv[SV_STATIC_BLOCKS] - ints[r, I_BLOCKS]
    bs = srv[SV_BLOCK_SIZE_TOKENS]
    tokens = ints[r, I_KV_TOKENS] + chunk
    if srv[SV_ADMISSION] == RESERVE_FULL:
        longest = ints[r, I_PROMPT] if cnt[C_ROLE] == PREFILL_ROLE else ints[r, I_PROMPT] + ints[r, I_OUTPUT] - 1
        tokens = max(tokens, longest)
    shared = ints[r, I_CACHED_UNITS] * srv[SV_PREFIX_UNIT_TOKENS] // bs if ints[r, I_CACHED_UNITS] else 0
    if tokens <= (shared + ints[r, I_BLOCKS]) * bs:
        return 0  # its blocks hold them (most decodes): no division
    return (tokens + bs - 1) // bs - shared - ints[r, I_BLOCKS]


@njit(cache=True, inline="always")
def _tokens_left_nb(ints, r):
    """Output tokens ``r`` may still add (its output stands for max_new_tokens), at most the estimate's clip."""
    return min(max(ints[r, I_OUTPUT] - ints[r, I_GENERATED], 0), NEW_TOKEN_RATIO_CLIP_TOKENS)


@njit(cache=True)
def held_back_blocks_nb(srv, ints, running, cnt, r):
    """Blocks the new-token-ratio admission keeps free besides what ``r`` needs now: the current ratio times the
    tokens the running requests and ``r`` may still add (0 under the other admissions, and on a prefill replica,
    whose requests leave after their first token)."""
    if srv[SV_ADMISSION] != NEW_TOKEN_RATIO or cnt[C_ROLE] == PREFILL_ROLE:
        return 0
    left = _tokens_left_nb(ints, r)
    for i in range(cnt[C_RUNNING]):
        left += _tokens_left_nb(ints, running[i])
    tokens = left * cnt[C_NEW_TOKEN_RATIO_PPM] / 1e6
    return np.int64(np.ceil(tokens / srv[SV_BLOCK_SIZE_TOKENS]))


@njit(cache=True)
def update_new_token_ratio_nb(srv, ints, running, cnt, retracted, decode_iterations):
    """The new-token-ratio admission's ratio after an iteration: after a retraction, (tokens decoded + 20 per
    request) / max_new_tokens of the requests still running (at most 1); else it falls by one decay step per
    iteration that decoded, down to its floor."""
    if srv[SV_ADMISSION] != NEW_TOKEN_RATIO:
        return
    if retracted:
        decoded, wanted = 0, 0
        for i in range(cnt[C_RUNNING]):
            decoded += ints[running[i], I_GENERATED] + NEW_TOKEN_RATIO_RETRACT_STEPS
            wanted += ints[running[i], I_OUTPUT]
        cnt[C_NEW_TOKEN_RATIO_PPM] = np.int64(1e6 * min(decoded / wanted, 1.0)) if wanted > 0 else \
            NEW_TOKEN_RATIO_INIT_PPM
    elif decode_iterations > 0:
        lowered = cnt[C_NEW_TOKEN_RATIO_PPM] - np.int64(NEW_TOKEN_RATIO_DECAY_PPM) * decode_iterations  # as one by one
        cnt[C_NEW_TOKEN_RATIO_PPM] = max(lowered, NEW_TOKEN_RATIO_MIN_PPM)


@njit(cache=True, inline="always")
def block_room_nb(srv, ints, r):
    """Tokens ``r``'s blocks (its own and the prefix units it holds) have room for beyond its cached tokens."""
    held = ints[r, I_BLOCKS] + ints[r, I_CACHED_UNITS] * srv[SV_PREFIX_UNIT_TOKENS] // srv[SV_BLOCK_SIZE_TOKENS]
    return held * srv[SV_BLOCK_SIZE_TOKENS] - ints[r, I_KV_TOKENS]


@njit(cache=True, inline="always")
def drop_kv_nb(ints, ids, pc, cnt, r):
    """Drop ``r``'s KV: it must re-prefill prompt + generated tokens, the already computed ones wasted."""
    redo = ints[r, I_KV_TOKENS] + ints[r, I_RECOMPUTE_LEFT]
    free_blocks_nb(ints, cnt, r)
    release_prefix_nb(ints, ids, pc, r)
    ints[r, I_KV_TOKENS] = 0
    ints[r, I_HOST_TOKENS] = 0
    ints[r, I_PAUSED] = 0
    ints[r, I_PENDING] = ints[r, I_PROMPT] + ints[r, I_GENERATED]
    ints[r, I_RECOMPUTE_LEFT] = min(redo, ints[r, I_PENDING])


@njit(cache=True, inline="always")
def leave_nb(ints, fl, classes, ids, pc, cnt, r, state, t):
    """``r`` leaves the system (completed or timed out) at ``t``."""
    free_blocks_nb(ints, cnt, r)
    release_prefix_nb(ints, ids, pc, r)
    ints[r, I_KV_TOKENS] = 0
    ints[r, I_STATE] = state
    fl[r, F_FINISH] = t
    classes[ints[r, I_CLASS], K_ACTIVE] -= 1


@njit(cache=True)
def preempt_nb(srv, ints, ids, pc, waiting, cnt, acc, r, mode):
    """Take ``r`` out of the batch into the waiting queue.

    keep: its KV stays on the GPU (a pause/resume overhead is paid on resume); swap: its KV goes to
    host memory (transfer time now and again on resume); recompute: its KV is dropped.
    """
    if mode == KEEP:
        ints[r, I_PAUSED] = 1
    elif mode == SWAP:
        ints[r, I_HOST_TOKENS] = ints[r, I_KV_TOKENS]
        free_blocks_nb(ints, cnt, r)
        release_prefix_nb(ints, ids, pc, r)  # the host copy holds its whole KV: it comes back as its own
        transfer_s = ints[r, I_HOST_TOKENS] * srv[SV_SWAP_S_PER_TOKEN]
        acc[A_EXTRA_S] += transfer_s
        acc[A_WASTE_S] += transfer_s
    else:
        drop_kv_nb(ints, ids, pc, cnt, r)
    ints[r, I_CHUNK] = 0
    ints[r, I_STATE] = WAITING
    ints[r, I_PREEMPTIONS] += 1
    cnt[C_PREEMPTIONS] += 1
    append_waiting_nb(waiting, cnt, r)


@njit(cache=True)
def reclaim_paused_nb(ints, fl, ids, pc, waiting, cnt, exclude):
    """Drop the KV of the worst-ranked paused waiting request (not ``exclude``); False if none holds any."""
    victim = -1
    for i in range(cnt[C_WAITING]):
        r = waiting[i]
        if r != exclude and ints[r, I_STATE] == WAITING and ints[r, I_BLOCKS] > 0 and \
                (victim < 0 or before_nb(fl, victim, r)):
            victim = r
    if victim < 0:
        return False
    drop_kv_nb(ints, ids, pc, cnt, victim)
    return True


@njit(cache=True, inline="always")
def resume_nb(srv, policy, ints, acc, r):
    """Costs of bringing a paused or swapped request back into the batch."""
    if ints[r, I_PAUSED] == 1:
        ints[r, I_PAUSED] = 0
        acc[A_EXTRA_S] += policy[P_OVERHEAD_S]
        acc[A_WASTE_S] += policy[P_OVERHEAD_S]
    if ints[r, I_HOST_TOKENS] > 0:
        transfer_s = ints[r, I_HOST_TOKENS] * srv[SV_SWAP_S_PER_TOKEN]
        ints[r, I_HOST_TOKENS] = 0
        acc[A_EXTRA_S] += transfer_s
        acc[A_WASTE_S] += transfer_s
