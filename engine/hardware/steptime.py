"""Iteration time of the two step models, and the offered-load estimate built on it.

``fixed``: every iteration lasts ``step_time_s``. ``roofline``: an iteration is
bounded by compute or by memory traffic, whichever is slower, plus a fixed
overhead (coefficients from ``hardware.roofline_profile``). Near the ridge, where
both are about equal, real kernels reach neither peak: the two are combined by a
smooth maximum ``(compute_s^k + memory_s^k)^(1/k)`` whose sharpness k is fitted per
GPU family (k = 2: up to 41% above the hard maximum at the ridge; large k: the hard
maximum)::

    compute_s = matmul FLOPs/token x tokens / FLOP/s
                + attention FLOPs/context token x context_pairs / attention FLOP/s
                (attention runs at the 16-bit rate whatever the weight format)
    memory_s  = (weight bytes + KV bytes/token x (context_reads + tokens)) / bytes/s
                (for a mixture of experts, the weight bytes count the experts the tokens touch)
    comm_s    = min(comm_fixed_s + one_shot_s_per_token x tokens,
                    2 x comm_fixed_s + comm_s_per_token x tokens)     (tensor-parallel all-reduces)
                + all_to_all_fixed_s + all_to_all_s_per_token x tokens  (expert parallelism's dispatch and combine)
    step_s    = (compute_s^k + memory_s^k)^(1/k) + comm_s + overhead_s

The all-reduces take the faster of the two algorithms engines pick between by message size (vLLM's custom
all-reduce, TensorRT-LLM's ONESHOT/TWOSHOT): one-shot, where every card reads the others' whole message after
one synchronisation ((T-1) messages per card), and two-shot, a reduce-scatter and an all-gather (two
synchronisations, 2 (T-1)/T messages per card, as a ring moves).

where ``tokens`` = prefill tokens + decodes in the batch, ``context_pairs`` = sum
over batched tokens of the positions each attends to (a chunk of c tokens on top
of k cached ones attends to c*k + c(c+1)/2), ``context_reads`` = KV tokens
already cached for the batched sequences (each read once).

``TABLE`` (the roofline's step model where measured operator tables cover the hardware, ``kernel_tables``): the
roofline tuple followed by tables of measured kernel times in seconds, summed the way the operator-level estimate
composes one mixed iteration::

    step_s = dense(tokens)                                  GEMMs, MoE, collectives, norms (every token)
             + logits(decode sequences + 1 if a prompt runs)  the LM head, once per sequence that emits
             + prefill_attention(prefill tokens, mean context a prefill token attends to)
             + decode_attention(decode sequences, mean context a decode attends to)

each read by linear interpolation between grid points (powers of two, ``*_AXIS``), extrapolated linearly past
the last. The roofline's compute and memory terms are still computed (not timed) for the utilisation and the
diagnosis.
"""

import numpy as np
from numba import njit

from ..scenario.registry import STEP_MODEL_CODES

FIXED, ROOFLINE = STEP_MODEL_CODES.values()
TABLE = ROOFLINE + 1  # the roofline's hardware timed from measured operator tables (module docstring); not a choice

# The step tuple (a plain tuple indexed by these constants).
(ST_MODEL, ST_STEP_TIME_S, ST_MATMUL_FLOPS_PER_TOKEN, ST_ATTENTION_FLOPS_PER_CONTEXT_TOKEN, ST_WEIGHT_BYTES,
 ST_KV_BYTES_PER_TOKEN, ST_FLOPS_PER_S, ST_BYTES_PER_S, ST_OVERHEAD_S, ST_COMM_S_PER_TOKEN,
 ST_COMM_FIXED_S, ST_EXPERT_BYTES, ST_EXPERTS, ST_EXPERTS_PER_TOKEN, ST_SHARPNESS, ST_COMM_ONE_SHOT_S_PER_TOKEN,
 ST_ATTENTION_FLOPS_PER_S, ST_ALL_TO_ALL_FIXED_S, ST_ALL_TO_ALL_S_PER_TOKEN) = range(19)
ST_FIELDS = ST_ALL_TO_ALL_S_PER_TOKEN + 1
HARD_MAX = 0.0  # sharpness meaning max(compute_s, memory_s) itself

# The grids of a ``TABLE`` step (powers of two): tokens of one iteration; sequences (decodes, or those emitting a
# token); prefill tokens of one iteration; context tokens attended to per query token.
TOKENS_AXIS = 2.0 ** np.arange(0, 18)       # 1 ... 131,072 tokens
SEQUENCES_AXIS = 2.0 ** np.arange(0, 12)    # 1 ... 2,048 sequences
PREFILL_AXIS = 2.0 ** np.arange(4, 17)      # 16 ... 65,536 tokens
CONTEXT_AXIS = 2.0 ** np.arange(4, 19)      # 16 ... 262,144 tokens
# Where each table starts after the roofline fields, and the row's whole length.
T_DENSE = ST_FIELDS
T_LOGITS = T_DENSE + len(TOKENS_AXIS)
T_DECODE_ATTENTION = T_LOGITS + len(SEQUENCES_AXIS)
T_PREFILL_ATTENTION = T_DECODE_ATTENTION + len(SEQUENCES_AXIS) * len(CONTEXT_AXIS)
TABLE_FIELDS = T_PREFILL_ATTENTION + len(PREFILL_AXIS) * len(CONTEXT_AXIS)
ALL_PHASES, PREFILL_PHASE, DECODE_PHASE = range(3)  # the work ``request_work_s_nb`` counts


def step_params(model, step_time_s=0.0, matmul_flops_per_token=0.0, attention_flops_per_context_token=0.0,
                weight_bytes=0.0, kv_bytes_per_token=0.0, flops_per_s=1.0, bytes_per_s=1.0, overhead_s=0.0,
                comm_s_per_token=0.0, comm_fixed_s=0.0, expert_bytes=0.0, experts=0, experts_per_token=0,
                sharpness=HARD_MAX, comm_one_shot_s_per_token=0.0, attention_flops_per_s=0.0,
                all_to_all_fixed_s=0.0, all_to_all_s_per_token=0.0):
    """The step row of ``run_nb`` (one float array, the model code a float compared as one): ``FIXED`` uses
    ``step_time_s``, ``ROOFLINE`` the coefficients (``attention_flops_per_s`` 0: attention at ``flops_per_s``)."""
    return np.array((float(model), float(step_time_s), float(matmul_flops_per_token),
            float(attention_flops_per_context_token), float(weight_bytes), float(kv_bytes_per_token),
            float(flops_per_s), float(bytes_per_s), float(overhead_s), float(comm_s_per_token), float(comm_fixed_s),
            float(expert_bytes), float(experts), float(experts_per_token), float(sharpness),
            float(comm_one_shot_s_per_token), float(attention_flops_per_s or flops_per_s), float(all_to_all_fixed_s),
            float(all_to_all_s_per_token)))


def step_rows(steps: list) -> np.ndarray:
    """Step tuples (or ``TABLE`` rows) as the rows of one float array (the compiled loop's per-replica step times;
    the model code becomes a float, compared as one); shorter rows padded with zeros to the longest."""
    width = max([len(step) for step in steps] + [ST_FIELDS])
    rows = np.zeros((len(steps), width))
    for i, step in enumerate(steps):
        rows[i, :len(step)] = np.asarray(step, dtype=np.float64)
    return rows


@njit(cache=True, inline="always")
def _segment_nb(axis_log2_first, axis_len, x):
    """(i, w): ``x`` lies w of the way from grid point i to i + 1 of a powers-of-two axis starting at
    2^``axis_log2_first`` (w < 0 before the first point is clamped to 0; past the last, w > 1 extrapolates the
    last segment)."""
    first = 2.0 ** axis_log2_first
    if x <= first:
        return 0, 0.0
    i = min(int(np.floor(np.log2(x))) - axis_log2_first, axis_len - 2)
    lo = first * 2.0 ** i
    return i, (x - lo) / lo  # the next point is twice this one


@njit(cache=True, inline="always")
def table_1d_nb(step, start, axis_log2_first, axis_len, x):
    """The table at ``step[start:start + axis_len]`` read at ``x`` (``_segment_nb``)."""
    i, w = _segment_nb(axis_log2_first, axis_len, x)
    return step[start + i] + w * (step[start + i + 1] - step[start + i])


@njit(cache=True, inline="always")
def table_2d_nb(step, start, first_a, len_a, first_b, len_b, a, b):
    """The table at ``step[start:]`` (``len_a`` rows of ``len_b``, row-major) read at (``a``, ``b``) bilinearly."""
    i, u = _segment_nb(first_a, len_a, a)
    j, v = _segment_nb(first_b, len_b, b)
    k = start + i * len_b + j
    low = step[k] + v * (step[k + 1] - step[k])
    high = step[k + len_b] + v * (step[k + len_b + 1] - step[k + len_b])
    return low + u * (high - low)


@njit(cache=True, inline="always")
def table_step_s_nb(step, tokens, prefill_tokens, prefill_pairs, decode_sequences, decode_reads):
    """Seconds of one ``TABLE`` iteration (module docstring): ``prefill_pairs`` the context pairs of its prefill
    tokens, ``decode_reads`` the KV tokens its decodes read."""
    t = table_1d_nb(step, T_DENSE, 0, len(TOKENS_AXIS), tokens)
    t += table_1d_nb(step, T_LOGITS, 0, len(SEQUENCES_AXIS), decode_sequences + (prefill_tokens > 0))
    if prefill_tokens > 0:
        t += table_2d_nb(step, T_PREFILL_ATTENTION, 4, len(PREFILL_AXIS), 4, len(CONTEXT_AXIS), prefill_tokens,
                         prefill_pairs / prefill_tokens)
    if decode_sequences > 0:
        t += table_2d_nb(step, T_DECODE_ATTENTION, 0, len(SEQUENCES_AXIS), 4, len(CONTEXT_AXIS), decode_sequences,
                         decode_reads / decode_sequences + 1.0)
    return t


@njit(cache=True)
def smooth_max_nb(a, b, k):
    """(a^k + b^k)^(1/k): the larger of a and b when k is large, up to 2^(1/k) times it where they are equal
    (near the ridge, where neither compute nor memory runs at its peak); ``HARD_MAX`` gives max(a, b)."""
    top = max(a, b)
    if k == HARD_MAX or top == 0.0:
        return top
    return top * (1.0 + (min(a, b) / top) ** k) ** (1.0 / k)  # (top / top)^k is 1: one power fewer


@njit(cache=True, inline="always")
def step_terms_nb(step, tokens, context_pairs, context_reads):
    """(compute_s, memory_s, comm_s) of one roofline iteration: its FLOPs at the effective FLOP/s, its bytes moved
    at the effective bandwidth, and its collectives (formula in the module docstring). The
    diagnosis reads them to say which bound an iteration sits on."""
    compute_s = (step[ST_MATMUL_FLOPS_PER_TOKEN] * tokens / step[ST_FLOPS_PER_S]
                 + step[ST_ATTENTION_FLOPS_PER_CONTEXT_TOKEN] * context_pairs / step[ST_ATTENTION_FLOPS_PER_S])
    weight_bytes = step[ST_WEIGHT_BYTES]
    if step[ST_EXPERTS] > 0:  # experts this many tokens are expected to touch (mixture of experts)
        untouched = (1.0 - step[ST_EXPERTS_PER_TOKEN] / step[ST_EXPERTS]) ** tokens
        weight_bytes += step[ST_EXPERT_BYTES] * step[ST_EXPERTS] * (1.0 - untouched)
    bytes_moved = weight_bytes + step[ST_KV_BYTES_PER_TOKEN] * (context_reads + tokens)
    comm_s = (min(step[ST_COMM_FIXED_S] + step[ST_COMM_ONE_SHOT_S_PER_TOKEN] * tokens,
                  2.0 * step[ST_COMM_FIXED_S] + step[ST_COMM_S_PER_TOKEN] * tokens)
              + step[ST_ALL_TO_ALL_FIXED_S] + step[ST_ALL_TO_ALL_S_PER_TOKEN] * tokens)
    return compute_s, bytes_moved / step[ST_BYTES_PER_S], comm_s


@njit(cache=True, inline="always")
def step_time_terms_nb(step, tokens, context_pairs, context_reads):
    """(seconds, compute_s, memory_s) of one iteration: its duration (formula in the module docstring) and the
    two roofline terms it rests on (0 under the fixed model), which the loop sums for the utilisation while
    busy."""
    if step[ST_MODEL] == FIXED:
        return step[ST_STEP_TIME_S], 0.0, 0.0
    compute_s, memory_s, comm_s = step_terms_nb(step, tokens, context_pairs, context_reads)
    return smooth_max_nb(compute_s, memory_s, step[ST_SHARPNESS]) + comm_s + step[ST_OVERHEAD_S], compute_s, memory_s


@njit(cache=True, inline="always")
def mixed_step_terms_nb(step, tokens, context_pairs, context_reads, prefill_tokens, prefill_pairs, decode_sequences,
                        decode_reads):
    """``step_time_terms_nb`` of an iteration described whole (its totals, and its prefill and decode parts, which a
    ``TABLE`` step times separately; the roofline terms come from the totals under every model)."""
    dt, compute_s, memory_s = step_time_terms_nb(step, tokens, context_pairs, context_reads)
    if step[ST_MODEL] == TABLE:
        dt = table_step_s_nb(step, tokens, prefill_tokens, prefill_pairs, decode_sequences, decode_reads)
    return dt, compute_s, memory_s


@njit(cache=True, inline="always")
def decode_terms_nb(step, sequences, decode_tokens, context_reads):
    """``mixed_step_terms_nb`` of an iteration of decodes only: ``sequences`` reading ``context_reads`` KV tokens in
    all, ``decode_tokens`` of them (one each, or a speculative verification's k + 1)."""
    return mixed_step_terms_nb(step, decode_tokens, context_reads + decode_tokens, context_reads, 0, 0.0, sequences,
                               context_reads)


@njit(cache=True)
def step_time_s_nb(step, tokens, context_pairs, context_reads):
    """Seconds one iteration takes (formula in the module docstring)."""
    return step_time_terms_nb(step, tokens, context_pairs, context_reads)[0]


@njit(cache=True)
def decode_step_s_nb(step, batch, context_tokens):
    """One decode iteration of ``batch`` sequences holding ``context_tokens`` each."""
    reads = batch * context_tokens
    return mixed_step_terms_nb(step, batch, reads, reads, 0, 0.0, batch, reads)[0]


@njit(cache=True)
def prefill_step_s_nb(step, prompt_tokens, cached_tokens=0.0):
    """One iteration prefilling a single prompt: ``prompt_tokens`` computed on top of ``cached_tokens``."""
    pairs = prompt_tokens * cached_tokens + prompt_tokens * (prompt_tokens + 1) / 2.0
    return mixed_step_terms_nb(step, prompt_tokens, pairs, cached_tokens, prompt_tokens, pairs, 0, 0.0)[0]


@njit(cache=True)
def speculative_decode_step_s_nb(step, batch, context_tokens, draft_tokens, draft_cost):
    """One speculative decode iteration of ``batch`` sequences holding ``context_tokens`` each: ``draft_tokens``
    draft steps, each ``draft_cost`` times a plain decode iteration, then one verification of ``draft_tokens`` + 1
    tokens per sequence."""
    verified = draft_tokens + 1
    reads = batch * context_tokens
    verify_s = mixed_step_terms_nb(step, batch * verified,
                                   batch * (verified * context_tokens + verified * (verified + 1) / 2.0), reads, 0,
                                   0.0, batch, reads)[0]
    return verify_s + draft_tokens * draft_cost * decode_step_s_nb(step, batch, context_tokens)


@njit(cache=True, nogil=True)  # a third of a second on a million requests: other sessions keep the interpreter
def request_work_s_nb(step, prompt_tokens, output_tokens, max_batched_tokens, slots, mean_context_tokens,
                      draft_tokens=0, tokens_per_decode=1.0, draft_cost=0.0, cached_tokens=None, phase=ALL_PHASES):
    """Estimated GPU seconds per request when ``slots`` requests share each iteration (for the offered load).

    fixed: (prefill iterations + output - 1) x step / slots, exact for max_batch_size = 1.
    roofline: prefill compute time (FLOPs / FLOP/s) + (output - 1) x full-batch decode step / slots,
    the decode step taken at ``mean_context_tokens`` per sequence.
    With speculative decoding (``draft_tokens`` k > 0) the output after the first token takes (output - 1) /
    ``tokens_per_decode`` decode iterations, each with k draft steps of ``draft_cost`` times a plain one.
    ``cached_tokens``: per request, prompt tokens a prefix cache holds (only the rest is prefilled, attending to
    them); None: none. ``phase``: ``PREFILL_PHASE`` or ``DECODE_PHASE`` counts only that part of the work (the
    pools of a disaggregated fleet), ``ALL_PHASES`` both.
    """
    total = 0.0
    if draft_tokens > 0:
        decode_step_s = speculative_decode_step_s_nb(step, slots, mean_context_tokens, draft_tokens, draft_cost)
        fixed_decode_s = step[ST_STEP_TIME_S] * (1.0 + draft_tokens * draft_cost)
    else:
        decode_step_s = decode_step_s_nb(step, slots, mean_context_tokens)
        fixed_decode_s = step[ST_STEP_TIME_S]
    for r in range(len(prompt_tokens)):
        cached = 0 if cached_tokens is None else cached_tokens[r]
        p = prompt_tokens[r] - cached
        decodes = (output_tokens[r] - 1) / tokens_per_decode
        prefill = phase != DECODE_PHASE
        decode = phase != PREFILL_PHASE
        if step[ST_MODEL] == FIXED:
            if draft_tokens == 0:
                iterations = prefill * ((p + max_batched_tokens - 1) // max_batched_tokens) + \
                    decode * (output_tokens[r] - 1)
                total += iterations * step[ST_STEP_TIME_S] / slots
            else:
                prefills = (p + max_batched_tokens - 1) // max_batched_tokens
                total += (prefill * prefills * step[ST_STEP_TIME_S] + decode * decodes * fixed_decode_s) / slots
        elif step[ST_MODEL] == TABLE:  # the prompt alone in an iteration, the decodes sharing full batches
            total += prefill * prefill_step_s_nb(step, p, cached) + decode * decodes * decode_step_s / slots
        else:
            compute_s = (step[ST_MATMUL_FLOPS_PER_TOKEN] * p / step[ST_FLOPS_PER_S]
                         + step[ST_ATTENTION_FLOPS_PER_CONTEXT_TOKEN] * (p * cached + p * (p + 1) / 2.0)
                         / step[ST_ATTENTION_FLOPS_PER_S])
            total += prefill * compute_s + decode * decodes * decode_step_s / slots
    return total / max(len(prompt_tokens), 1)


def prefill_s(step, prompt_tokens: int) -> float:
    """One iteration prefilling a single prompt of ``prompt_tokens``."""
    return prefill_step_s_nb(step, float(prompt_tokens))
