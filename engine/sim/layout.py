"""Memory layout of the per-request state shared by the compiled loop, the policies and the metrics.

Per-request integers live in one ``(n, N_INT_FIELDS)`` int64 array and floats in
one ``(n, N_FLOAT_FIELDS)`` float64 array, addressed by the named columns below
(struct of arrays would mean a dozen array objects in every compiled call).
"""

import numpy as np

# Request states.
NOT_ARRIVED, WAITING, RUNNING, COMPLETED, TIMED_OUT, TRANSFERRING = 0, 1, 2, 3, 4, 5  # transferring: its KV is
# on the link from the prefill pool to the decode pool (a disaggregated fleet)
# Per-request integer columns. I_PREDICTED: the output length a predictor would announce;
# I_RECOMPUTE_LEFT: tokens of the next re-prefill that had been computed before (wasted work);
# I_HOST_TOKENS: KV tokens swapped out to host memory; I_PAUSED: 1 while paused with its KV kept;
# I_REPLICA: the replica the router sent it to; I_DECODES: decode iterations it took part in (with speculative
# decoding, the j-th emits ``kernel.step._emitted_nb(j)`` tokens). Prefix caching: its prompt's prefix blocks are
# ``prefix ids[I_PREFIX_START : I_PREFIX_START + I_PREFIX_BLOCKS]``; I_CACHED_UNITS of them it holds in its
# replica's prefix cache (shared, counted there, not in I_BLOCKS); I_PREFIX_HIT: tokens of its prompt the cache held
# when last looked up (for the lpm policy). I_PREFILL_REPLICA: on a disaggregated fleet, the prefill replica that
# computed its prompt (I_REPLICA is then the decode replica); -1 otherwise.
(I_PROMPT, I_OUTPUT, I_CLASS, I_STATE, I_KV_TOKENS, I_PENDING, I_GENERATED, I_BLOCKS, I_CHUNK,
 I_PREEMPTIONS, I_PREDICTED, I_RECOMPUTE_LEFT, I_HOST_TOKENS, I_PAUSED, I_REPLICA, I_DECODES, I_PREFIX_START,
 I_PREFIX_BLOCKS, I_CACHED_UNITS, I_PREFIX_HIT, I_PREFILL_REPLICA) = range(21)
N_INT_FIELDS = 21
# Per-request float columns (seconds, except the policy key). F_HANDED_OFF: when its KV reached the decode pool.
F_ARRIVAL, F_DEADLINE, F_KEY, F_FIRST_SCHEDULED, F_FIRST_TOKEN, F_FINISH, F_HANDED_OFF = range(7)
N_FLOAT_FIELDS = 7


# Per-class columns of the float ``classes`` array: parameters set before the run, then state the
# loop updates (requests in the system, service received, the fair-queuing virtual time, output tokens
# emitted inside the steady-state window).
(K_LEVEL, K_TIER, K_WEIGHT, K_SLA_TTFT_S, K_SLA_E2E_S, K_ACTIVE, K_PREFILL_SERVED, K_DECODE_SERVED,
 K_VTIME, K_WINDOW_TOKENS) = range(10)
N_CLASS_FIELDS = 10


def pack_requests(arrival_s, prompt_tokens, output_tokens, class_id, deadline_s, predicted_tokens,
                  prefix_offsets=None):
    """The (int, float) state arrays of fresh requests: nothing computed, all before arrival (``prefix_offsets``:
    where each request's prefix blocks start and end in the run's prefix ids; None: none has any)."""
    n = len(arrival_s)
    ints = np.zeros((n, N_INT_FIELDS), np.int64)
    if prefix_offsets is not None:
        ints[:, I_PREFIX_START] = prefix_offsets[:-1]
        ints[:, I_PREFIX_BLOCKS] = np.diff(prefix_offsets)
    ints[:, I_PROMPT] = prompt_tokens
    ints[:, I_OUTPUT] = output_tokens
    ints[:, I_CLASS] = class_id
    ints[:, I_PREDICTED] = predicted_tokens
    ints[:, I_PENDING] = prompt_tokens
    ints[:, I_REPLICA] = -1
    ints[:, I_PREFILL_REPLICA] = -1
    floats = np.full((n, N_FLOAT_FIELDS), np.nan)
    floats[:, F_ARRIVAL] = arrival_s
    floats[:, F_DEADLINE] = deadline_s
    return ints, floats
