"""Memory layout of the per-request state shared by the compiled loop, the policies and the metrics.

Per-request integers live in one ``(n, N_INT_FIELDS)`` int64 array and floats in
one ``(n, N_FLOAT_FIELDS)`` float64 array, addressed by the named columns below
(struct of arrays would mean a dozen array objects in every compiled call).
"""

import numpy as np

# Request states.
NOT_ARRIVED, WAITING, RUNNING, COMPLETED, TIMED_OUT = 0, 1, 2, 3, 4
# Per-request integer columns.
(I_PROMPT, I_OUTPUT, I_CLASS, I_STATE, I_KV_TOKENS, I_PENDING, I_GENERATED, I_BLOCKS, I_CHUNK,
 I_PREEMPTIONS) = range(10)
N_INT_FIELDS = 10
# Per-request float columns (seconds, except the policy key).
F_ARRIVAL, F_DEADLINE, F_KEY, F_FIRST_SCHEDULED, F_FIRST_TOKEN, F_FINISH = range(6)
N_FLOAT_FIELDS = 6


def pack_requests(arrival_s, prompt_tokens, output_tokens, class_id, deadline_s):
    """The (int, float) state arrays of fresh requests: nothing computed, all before arrival."""
    n = len(arrival_s)
    ints = np.zeros((n, N_INT_FIELDS), np.int64)
    ints[:, I_PROMPT] = prompt_tokens
    ints[:, I_OUTPUT] = output_tokens
    ints[:, I_CLASS] = class_id
    ints[:, I_PENDING] = prompt_tokens
    floats = np.full((n, N_FLOAT_FIELDS), np.nan)
    floats[:, F_ARRIVAL] = arrival_s
    floats[:, F_DEADLINE] = deadline_s
    return ints, floats
