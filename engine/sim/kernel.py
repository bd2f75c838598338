"""The compiled iteration loop: a fleet of replicas with continuous batching, chunked prefill, paged KV
memory and preemption, fed by a router, on one clock.

One call of ``run_nb`` simulates R replicas (servers) from t = 0 until every
request has left, or a limit stops it; the replicas of a mixed fleet each have
their own step time and KV cache. Events are taken in time order: an arrival
(earliest first; at a tie, before a replica's decision) is sent by the router to
one replica -- round robin, least outstanding tokens (the tokens its requests
still have to process: pending prefill plus the predicted output not yet
generated) or join the shortest queue (fewest requests it holds), each replica's
turns or load weighed by its speed; ties go to the lowest replica index -- and
wakes it if it is idle. On a disaggregated fleet arrivals go to the prefill
replicas; the iteration that emits a request's first token there puts its KV on
that replica's link (first come first served), the request leaves the batch and
its blocks stay until the transfer ends (an event of its own, after arrivals and
before decisions at the same time); then the router sends it to a decode replica,
where it waits for a slot and memory (its KV, already sent, takes blocks only once
it is admitted: the decode pool's buffer for it is not modelled). A
replica's decision, at the end of its iteration or when it wakes, is:

1. apply the finished iteration; drop requests whose time-out passed before a first token;
2. if nothing is ready, go idle until the router sends a request; hold back while fewer than
   ``min_batch_size`` are ready, until the oldest has waited ``wait_timeout_s``;
3. order the running requests by the policy key and give each its next chunk
   (one token when decoding, up to the token budget when prefilling), growing its
   KV blocks; when memory runs out, drop the KV of paused requests, then preempt
   from the worst end;
4. admit waiting requests in key order while a slot, budget and memory remain
   (a preemptive policy may evict a worse running request); a request that was
   paused or swapped out pays its resume cost. With ``server.batching =
   prefill-first`` step 4 comes first and takes whole prompts only; when it admits
   any, the iteration is theirs alone (every decode waits), else step 3 runs a
   decode iteration. With ``server.admission = reserve-full`` a request's blocks
   for its whole prompt and output are taken at admission, so step 3 never runs
   out of memory;
5. compute the step time (fixed, or roofline), advance every scheduled request:
   a request whose pending tokens reach zero emits one output token (with
   ``server.speculative``, a decode verifies k draft tokens and one more, emits the
   accepted ones plus one, and the draft's k steps lengthen the iteration);
6. record counters and the (stride-decimated) time series.

Progress follows one rule for prefill, chunked prefill, decode and recompute:
``pending`` tokens must be processed before the next output token appears
(the prompt at first, 1 while decoding, prompt + generated after a recompute
preemption). A preempted request keeps its KV on the GPU (keep), moves it to host
memory (swap: transfer time each way) or drops it (recompute); the time this
wastes is accumulated per iteration.

State layout: the per-request arrays of ``layout.py`` (one int64 and one float64
2-D array with named columns); per replica (first axis) three index lists
(waiting, running, batch), a counter row, a clock row, its own policy class state,
time series and statistics. With one replica this is exactly the single-server
loop. Few array objects keep Numba's reference counting out of the hot
loops (reading an array out of a namedtuple inside a loop cost a reference-count round
trip each time: 3x slower on the default scenario).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..hardware.steptime import step_time_terms_nb
from ..scenario.registry import ADMISSION_CODES, BATCHING_CODES, POOL_ROLES, ROUTER_CODES
from .layout import (COMPLETED, F_ARRIVAL, F_DEADLINE, F_FINISH, F_FIRST_SCHEDULED, F_FIRST_TOKEN, F_HANDED_OFF, F_KEY,
                     I_BLOCKS, I_CACHED_UNITS, I_CHUNK, I_CLASS, I_DECODES, I_GENERATED, I_HOST_TOKENS, I_KV_TOKENS,
                     I_OUTPUT, I_PAUSED, I_PENDING, I_PREDICTED, I_PREEMPTIONS, I_PREFILL_REPLICA, I_PREFIX_BLOCKS,
                     I_PREFIX_HIT, I_PREFIX_START, I_PROMPT, I_RECOMPUTE_LEFT, I_REPLICA, I_STATE, K_ACTIVE,
                     K_WINDOW_TOKENS, RUNNING, TIMED_OUT, TRANSFERRING, WAITING)
from .monotonic import monotonic_ns_nb
from .policies import (KEEP, LPM, P_CODE, P_MARGIN, P_MODE, P_OVERHEAD_S, P_PREEMPTIVE, RECOMPUTE, SWAP,
                       policy_charge_nb, policy_key_changes_nb, policy_key_nb, policy_on_arrival_nb)

# Why a run stopped (PAUSED: ``run_nb`` reached its deadline for this call; call it again to go on).
DRAINED, QUEUE_BOUND, HORIZON, WALL_CLOCK, PAUSED = 0, 1, 2, 3, 4
# Events between two readings of the clock (one reading costs about as much as a cheap event).
CLOCK_EVERY_EVENTS = 16

# Routers.
ROUND_ROBIN, LEAST_TOKENS, SHORTEST_QUEUE, PREFIX_AFFINITY = ROUTER_CODES.values()

# Counter columns (one row per replica); the last four are the replica's own limits and role, set once (the replicas
# of a mixed or disaggregated fleet differ): its KV cache, batch limit, token budget per iteration, and role.
(C_WAITING, C_RUNNING, C_BATCH, C_USED_BLOCKS, C_PREEMPTIONS, C_PREFIX_QUERY_TOKENS, C_PREFIX_HIT_TOKENS,
 C_CAPACITY_BLOCKS, C_MAX_BATCH_SIZE, C_MAX_BATCHED_TOKENS, C_ROLE) = range(11)
N_COUNTERS = 11
# What a replica serves: whole requests, or (disaggregated) prompts only, handing each request's KV over the link
# after its first token, or decodes only, of requests whose KV came over the link.
COLOCATED, PREFILL_ROLE, DECODE_ROLE = range(len(POOL_ROLES))

# Router columns (one row per replica): its speed on the workload (the fastest replica's is 1) and its credit
# in the weighted round robin.
RT_SPEED, RT_CREDIT = range(2)
N_ROUTE = 2

# Prefix cache of one replica (``pc``, shape (4, units + 1)): per prefix unit (a block id of the run, made dense),
# the requests holding it, whether it is cached, and its neighbours in the list of cached units nobody holds
# (least recently released first; entry ``units`` is the list's head and tail).
PC_REF, PC_CACHED, PC_PREV, PC_NEXT = range(4)
N_PC_ROWS = 4

# Clock columns (one row per replica): time of its next decision (inf while idle), its mode, when its current wait
# began, and (a prefill replica) when its link to the decode pool is free again.
CK_NEXT_S, CK_MODE, CK_WAIT_START_S, CK_LINK_FREE_S = range(4)
N_CLOCK = 4
IDLE, WAITING_FOR_GATE, BUSY = 0, 1, 2

# Statistics columns (one row per replica, filled during the run). The roofline terms (compute and memory
# seconds of every iteration, at the effective rates) and the iteration seconds they came with are summed
# apart from the busy time, which a limit's stop trims (``settle_in_flight``): utilisation while busy is the
# ratio of the two. ``S_WINDOW_*``: the same over the part of each iteration inside the steady-state window.
(S_ITERATIONS, S_BUSY_S, S_BATCH_SUM, S_KV_BLOCK_SECONDS, S_KV_PEAK_BLOCKS, S_PREEMPTIONS,
 S_SERIES_ROWS, S_SERIES_STRIDE, S_WASTE_S, S_ROUTED, S_SKIPPED, S_COMPUTE_S, S_MEMORY_S, S_TERMS_S,
 S_WINDOW_BUSY_S, S_WINDOW_COMPUTE_S, S_WINDOW_MEMORY_S, S_WINDOW_TERMS_S, S_PREFIX_QUERY_TOKENS,
 S_PREFIX_HIT_TOKENS) = range(20)
N_STATS = 20
# The KV transfers under way (``handoff``, int64, one more entry than requests): how many, then their requests.
HO_COUNT = 0
# Outcome of the whole run, and where a paused run goes on: the next arrival to route.
O_END_S, O_STOP_REASON, O_NEXT_ARRIVAL = range(3)
N_OUTCOME = 3

# Seconds accumulated during one iteration: preemption transfers and pauses that lengthen it, and
# the part of them (plus recomputed prefill) that is wasted work.
A_EXTRA_S, A_WASTE_S = 0, 1

# Time-series columns; per-class batch and waiting counts follow the fixed columns.
(T_START_S, T_STEP_S, T_BATCH, T_PREFILL_TOKENS, T_DECODE_TOKENS, T_KV_USED_TOKENS,
 T_WAITING, T_RUNNING, T_PREEMPTIONS) = range(9)
SERIES_FIXED_COLUMNS = ("time_s", "step_s", "batch_size", "prefill_tokens", "decode_tokens",
                        "kv_used_tokens", "waiting", "running", "preemptions")
N_SERIES_FIXED = len(SERIES_FIXED_COLUMNS)
SERIES_MAX_ROWS = 65536  # time-series rows kept over all replicas; longer runs keep every 2^k-th iteration
SERIES_MIN_ROWS = 1024   # per replica, however many there are


def series_rows_per_replica(replicas: int) -> int:
    """Rows of each replica's time series (``SERIES_MAX_ROWS`` shared out, at least ``SERIES_MIN_ROWS``)."""
    return max(SERIES_MIN_ROWS, SERIES_MAX_ROWS // replicas)

# The server tuple of ``run_nb`` (a plain tuple indexed by these constants: Numba's on-disk
# cache stays valid across code changes only for built-in types).
(SV_MIN_BATCH_SIZE, SV_WAIT_TIMEOUT_S,
 SV_BLOCK_SIZE_TOKENS, SV_STATIC_BLOCKS, SV_MAX_WAITING_REQUESTS, SV_HORIZON_S, SV_N_CLASSES,
 SV_SWAP_S_PER_TOKEN, SV_BATCHING, SV_ADMISSION, SV_EVENT_SKIPPING, SV_WINDOW_START_S, SV_WINDOW_END_S,
 SV_DRAFT_TOKENS, SV_TOKENS_PER_DECODE, SV_DRAFT_COST, SV_PREFIX_UNIT_TOKENS, SV_PREFIX_ROUTE_SLACK_TOKENS,
 SV_KV_LINK_S_PER_TOKEN) = range(19)

# Batching and admission modes (``server.batching``, ``server.admission``).
MIXED, PREFILL_FIRST = BATCHING_CODES.values()
OPTIMISTIC, RESERVE_FULL = ADMISSION_CODES.values()
# Which waiting requests one admission pass takes (``_admit_waiting_nb``).
ADMIT_ANY, ADMIT_PROMPTS, ADMIT_DECODES = range(3)


def server_params(route_slack_tokens, min_batch_size, wait_timeout_s,
                  block_size_tokens, static_blocks, max_waiting_requests, horizon_s, n_classes, swap_s_per_token,
                  batching=MIXED, admission=OPTIMISTIC, event_skipping=True, window_s=(0.0, 0.0),
                  speculation=(0, 1.0, 0.0), prefix_unit_tokens=0, kv_link_s_per_token=0.0):
    """The server tuple of ``run_nb`` (integers as int64, times in seconds, modes as their codes), shared by every
    replica (each replica's KV cache, batch limit, token budget and role are its counters ``C_CAPACITY_BLOCKS`` ..
    ``C_ROLE``, its step time its row of ``steps``). ``route_slack_tokens``: how far above the least loaded replica
    prefix affinity may route (one iteration's token budget). ``kv_link_s_per_token``: seconds one prompt token's
    KV takes on a prefill replica's link to the decode pool.
    ``event_skipping``: run stretches of decode-only iterations in one step (``_skip_decodes_nb``); False
    decides every iteration in full (the same results, slower: the reference the tests compare with).
    ``window_s``: (start, end) of the steady-state window (``simulate.steady_window_s``), [start, end).
    ``speculation``: (draft tokens k, expected tokens emitted per verification, draft cost as a share of a plain
    decode iteration); k = 0 decodes one token per iteration. ``prefix_unit_tokens``: tokens of one prefix cache
    unit (a whole number of KV blocks; 0: no prefix caching)."""
    i = np.int64
    draft_tokens, tokens_per_decode, draft_cost = speculation
    return (i(min_batch_size), float(wait_timeout_s),
            i(block_size_tokens), i(static_blocks), i(max_waiting_requests), float(horizon_s), i(n_classes),
            float(swap_s_per_token), i(batching), i(admission), i(bool(event_skipping)), float(window_s[0]),
            float(window_s[1]), i(draft_tokens), float(tokens_per_decode), float(draft_cost), i(prefix_unit_tokens),
            i(route_slack_tokens), float(kv_link_s_per_token))


# --------------------------------------------------------------------------- small helpers


@njit(cache=True, inline="always")
def _before_nb(fl, a, b):
    """True when request ``a`` ranks before ``b``: lower key, then earlier arrival, then lower index."""
    if fl[a, F_KEY] != fl[b, F_KEY]:
        return fl[a, F_KEY] < fl[b, F_KEY]
    if fl[a, F_ARRIVAL] != fl[b, F_ARRIVAL]:
        return fl[a, F_ARRIVAL] < fl[b, F_ARRIVAL]
    return a < b


@njit(cache=True, inline="always")
def _free_blocks_nb(ints, cnt, r):
    """Return ``r``'s own KV blocks to the pool (its cached tokens are gone from the GPU)."""
    cnt[C_USED_BLOCKS] -= ints[r, I_BLOCKS]
    ints[r, I_BLOCKS] = 0


# --------------------------------------------------------------------------- prefix cache


@njit(cache=True, inline="always")
def _unlink_nb(pc, u):
    """Take unit ``u`` out of the list of cached units nobody holds."""
    before, after = pc[PC_PREV, u], pc[PC_NEXT, u]
    pc[PC_NEXT, before] = after
    pc[PC_PREV, after] = before


@njit(cache=True, inline="always")
def _link_last_nb(pc, u):
    """Put unit ``u`` at the end of that list (released last, evicted last)."""
    end = pc.shape[1] - 1
    last = pc[PC_PREV, end]
    pc[PC_NEXT, last] = u
    pc[PC_PREV, u] = last
    pc[PC_NEXT, u] = end
    pc[PC_PREV, end] = u


@njit(cache=True, inline="always")
def _prefix_units_usable_nb(srv, ints, r):
    """How many of ``r``'s prefix units a lookup may use: whole units of its prompt, all but its last token (the
    first output needs one computed token)."""
    return min(ints[r, I_PREFIX_BLOCKS], (ints[r, I_PROMPT] - 1) // srv[SV_PREFIX_UNIT_TOKENS])


@njit(cache=True)
def prefix_hit_units_nb(srv, ints, ids, pc, r):
    """Leading units of ``r``'s prompt this replica's cache holds (a unit counts only after all before it)."""
    if srv[SV_PREFIX_UNIT_TOKENS] == 0:
        return 0
    start = ints[r, I_PREFIX_START]
    usable = _prefix_units_usable_nb(srv, ints, r)
    hit = 0
    while hit < usable and pc[PC_CACHED, ids[start + hit]] == 1:
        hit += 1
    return hit


@njit(cache=True, inline="always")
def _fresh_nb(srv, ints, r):
    """True when ``r`` holds no KV at all (never prefilled, or dropped): its prompt may be looked up."""
    return srv[SV_PREFIX_UNIT_TOKENS] > 0 and ints[r, I_KV_TOKENS] == 0 and ints[r, I_HOST_TOKENS] == 0 \
        and ints[r, I_CACHED_UNITS] == 0 and ints[r, I_BLOCKS] == 0


@njit(cache=True)
def _take_prefix_nb(srv, ints, ids, pc, r, units):
    """``r`` starts from ``units`` cached units: it holds them, and their tokens are computed already."""
    start = ints[r, I_PREFIX_START]
    for j in range(units):
        u = ids[start + j]
        if pc[PC_REF, u] == 0:
            _unlink_nb(pc, u)
        pc[PC_REF, u] += 1
    tokens = units * srv[SV_PREFIX_UNIT_TOKENS]
    ints[r, I_CACHED_UNITS] = units
    ints[r, I_KV_TOKENS] = tokens
    ints[r, I_PENDING] -= tokens
    ints[r, I_RECOMPUTE_LEFT] = max(ints[r, I_RECOMPUTE_LEFT] - tokens, 0)


@njit(cache=True)
def _release_prefix_nb(ints, ids, pc, r):
    """``r`` lets go of its cached units; those nobody else holds stay cached, evictable, its last unit first
    (the tail of a prefix goes before its head)."""
    start = ints[r, I_PREFIX_START]
    for j in range(ints[r, I_CACHED_UNITS] - 1, -1, -1):
        u = ids[start + j]
        pc[PC_REF, u] -= 1
        if pc[PC_REF, u] == 0:
            _link_last_nb(pc, u)
    ints[r, I_CACHED_UNITS] = 0


@njit(cache=True)
def _undo_take_nb(srv, ints, ids, pc, r, units, recompute_left):
    """Undo ``_take_prefix_nb`` of a request that was not admitted after all."""
    if units == 0:
        return
    tokens = units * srv[SV_PREFIX_UNIT_TOKENS]
    _release_prefix_nb(ints, ids, pc, r)
    ints[r, I_KV_TOKENS] = 0
    ints[r, I_PENDING] += tokens
    ints[r, I_RECOMPUTE_LEFT] = recompute_left


@njit(cache=True)
def _insert_prefix_nb(srv, ints, ids, pc, cnt, r):
    """``r``'s prompt is computed: its whole prefix units join the cache, their blocks counted there once; a unit
    another request cached meanwhile is shared, and ``r``'s own copy of it freed."""
    start = ints[r, I_PREFIX_START]
    unit_blocks = srv[SV_PREFIX_UNIT_TOKENS] // srv[SV_BLOCK_SIZE_TOKENS]
    whole = min(ints[r, I_PREFIX_BLOCKS], ints[r, I_PROMPT] // srv[SV_PREFIX_UNIT_TOKENS])
    for j in range(ints[r, I_CACHED_UNITS], whole):
        u = ids[start + j]
        ints[r, I_BLOCKS] -= unit_blocks
        if pc[PC_CACHED, u] == 1:
            cnt[C_USED_BLOCKS] -= unit_blocks
            if pc[PC_REF, u] == 0:
                _unlink_nb(pc, u)
        else:
            pc[PC_CACHED, u] = 1
        pc[PC_REF, u] += 1
        ints[r, I_CACHED_UNITS] = j + 1


@njit(cache=True)
def _evict_cached_nb(srv, pc, cnt):
    """Free the least recently released cached unit nobody holds; False when there is none."""
    end = pc.shape[1] - 1
    u = pc[PC_NEXT, end]
    if u == end:
        return False
    _unlink_nb(pc, u)
    pc[PC_CACHED, u] = 0
    cnt[C_USED_BLOCKS] -= srv[SV_PREFIX_UNIT_TOKENS] // srv[SV_BLOCK_SIZE_TOKENS]
    return True


# --------------------------------------------------------------------------- requests


@njit(cache=True, inline="always")
def _drop_kv_nb(ints, ids, pc, cnt, r):
    """Drop ``r``'s KV: it must re-prefill prompt + generated tokens, the already computed ones wasted."""
    redo = ints[r, I_KV_TOKENS] + ints[r, I_RECOMPUTE_LEFT]
    _free_blocks_nb(ints, cnt, r)
    _release_prefix_nb(ints, ids, pc, r)
    ints[r, I_KV_TOKENS] = 0
    ints[r, I_HOST_TOKENS] = 0
    ints[r, I_PAUSED] = 0
    ints[r, I_PENDING] = ints[r, I_PROMPT] + ints[r, I_GENERATED]
    ints[r, I_RECOMPUTE_LEFT] = min(redo, ints[r, I_PENDING])


@njit(cache=True, inline="always")
def _leave_nb(ints, fl, classes, ids, pc, cnt, r, state, t):
    """``r`` leaves the system (completed or timed out) at ``t``."""
    _free_blocks_nb(ints, cnt, r)
    _release_prefix_nb(ints, ids, pc, r)
    ints[r, I_KV_TOKENS] = 0
    ints[r, I_STATE] = state
    fl[r, F_FINISH] = t
    classes[ints[r, I_CLASS], K_ACTIVE] -= 1


@njit(cache=True, inline="always")
def _append_waiting_nb(waiting, cnt, r):
    """Append ``r`` to the waiting list, whose length ``waiting_capacity`` bounds."""
    if cnt[C_WAITING] >= waiting.shape[0]:
        raise RuntimeError("internal error: a request list is full")
    waiting[cnt[C_WAITING]] = r
    cnt[C_WAITING] += 1


@njit(cache=True)
def _preempt_nb(srv, ints, ids, pc, waiting, cnt, acc, r, mode):
    """Take ``r`` out of the batch into the waiting queue.

    keep: its KV stays on the GPU (a pause/resume overhead is paid on resume); swap: its KV goes to
    host memory (transfer time now and again on resume); recompute: its KV is dropped.
    """
    if mode == KEEP:
        ints[r, I_PAUSED] = 1
    elif mode == SWAP:
        ints[r, I_HOST_TOKENS] = ints[r, I_KV_TOKENS]
        _free_blocks_nb(ints, cnt, r)
        _release_prefix_nb(ints, ids, pc, r)  # the host copy holds its whole KV: it comes back as its own
        transfer_s = ints[r, I_HOST_TOKENS] * srv[SV_SWAP_S_PER_TOKEN]
        acc[A_EXTRA_S] += transfer_s
        acc[A_WASTE_S] += transfer_s
    else:
        _drop_kv_nb(ints, ids, pc, cnt, r)
    ints[r, I_CHUNK] = 0
    ints[r, I_STATE] = WAITING
    ints[r, I_PREEMPTIONS] += 1
    cnt[C_PREEMPTIONS] += 1
    _append_waiting_nb(waiting, cnt, r)


@njit(cache=True)
def _reclaim_paused_nb(ints, fl, ids, pc, waiting, cnt, exclude):
    """Drop the KV of the worst-ranked paused waiting request (not ``exclude``); False if none holds any."""
    victim = -1
    for i in range(cnt[C_WAITING]):
        r = waiting[i]
        if r != exclude and ints[r, I_STATE] == WAITING and ints[r, I_BLOCKS] > 0 and \
                (victim < 0 or _before_nb(fl, victim, r)):
            victim = r
    if victim < 0:
        return False
    _drop_kv_nb(ints, ids, pc, cnt, victim)
    return True


@njit(cache=True, inline="always")
def _resume_nb(srv, policy, ints, acc, r):
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


@njit(cache=True, inline="always")
def _remove_nb(items, n, r):
    """Remove ``r`` from ``items[:n]`` keeping order; returns the new length."""
    j = 0
    for i in range(n):
        if items[i] != r:
            items[j] = items[i]
            j += 1
    return j


@njit(cache=True, inline="always")
def _keep_state_nb(ints, items, n, state):
    """Keep only the requests of ``items[:n]`` in ``state``, in order; returns the new length."""
    j = 0
    for i in range(n):
        r = items[i]
        if ints[r, I_STATE] == state:
            items[j] = r
            j += 1
    return j


@njit(cache=True, inline="always")
def _decoding_nb(ints, r):
    """True when ``r``'s prompt is processed and it decodes: one pending token before its next output."""
    return ints[r, I_GENERATED] > 0 and ints[r, I_PENDING] == 1


@njit(cache=True, inline="always")
def _chunk_nb(srv, ints, r, budget):
    """Tokens ``r`` processes in this iteration within ``budget`` (0: it does not fit). A decode processes one
    token, or with speculative decoding the k draft tokens and the one they are verified with (no more than
    the output left: the last ones need no draft), all or nothing; a prefill as much of its prompt as fits."""
    if _decoding_nb(ints, r):
        chunk = min(srv[SV_DRAFT_TOKENS] + 1, ints[r, I_OUTPUT] - ints[r, I_GENERATED])
        return chunk if chunk <= budget else 0
    return min(ints[r, I_PENDING], budget)


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
def _blocks_needed_nb(srv, ints, cnt, r, chunk):
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
    return max((tokens + bs - 1) // bs - shared - ints[r, I_BLOCKS], 0)


@njit(cache=True, inline="always")
def _schedule_nb(ints, batch, cnt, r, chunk, blocks):
    ints[r, I_BLOCKS] += blocks
    cnt[C_USED_BLOCKS] += blocks
    ints[r, I_CHUNK] = chunk
    batch[cnt[C_BATCH]] = r
    cnt[C_BATCH] += 1


# --------------------------------------------------------------------------- loop phases


@njit(cache=True, inline="always")
def _outstanding_tokens_nb(ints, items, n):
    """Tokens the requests of ``items[:n]`` still have to process, as a router can know them: pending
    tokens before the next output, then the predicted output not yet generated."""
    total = 0
    for i in range(n):
        r = items[i]
        total += ints[r, I_PENDING] + max(ints[r, I_PREDICTED] - ints[r, I_GENERATED] - 1, 0)
    return total


@njit(cache=True, inline="always")
def _replica_load_nb(router, route, ints, waiting, running, cnt, k):
    """Replica ``k``'s load as the router weighs it: its outstanding tokens (least-tokens, prefix-affinity) or the
    requests it holds (shortest-queue), over its speed (the time it needs to clear them, in the fastest replica's
    terms)."""
    if router == SHORTEST_QUEUE:
        held = cnt[k, C_WAITING] + cnt[k, C_RUNNING]
    else:
        held = _outstanding_tokens_nb(ints, waiting[k], cnt[k, C_WAITING]) + \
            _outstanding_tokens_nb(ints, running[k], cnt[k, C_RUNNING])
    return held / route[k, RT_SPEED]


@njit(cache=True, inline="always")
def _takes_nb(cnt, k, decodes):
    """True when replica ``k`` takes arrivals (``decodes`` False: colocated and prefill replicas) or requests handed
    over from the prefill pool (``decodes`` True: decode replicas)."""
    return (cnt[k, C_ROLE] == DECODE_ROLE) == decodes


@njit(cache=True, inline="always")
def _weighted_turn_nb(route, cnt, decodes):
    """Round robin in proportion to speed (smooth weighted round robin, as nginx) over the replicas that take the
    request (``_takes_nb``): each gains its speed in credit, the one with the most (ties: lowest index) is chosen
    and pays their total speed. With equal speeds it is the plain turn 0, 1, ..., R - 1, 0, ... (the credits are
    whole numbers: exact)."""
    total = 0.0
    chosen = -1
    for k in range(route.shape[0]):
        if not _takes_nb(cnt, k, decodes):
            continue
        route[k, RT_CREDIT] += route[k, RT_SPEED]
        total += route[k, RT_SPEED]
        if chosen < 0 or route[k, RT_CREDIT] > route[chosen, RT_CREDIT]:
            chosen = k
    route[chosen, RT_CREDIT] -= total
    return chosen


@njit(cache=True)
def _route_nb(srv, router, route, ints, ids, pc, waiting, running, cnt, r, decodes):
    """The replica request ``r`` goes to among those that take it (``_takes_nb``: an arrival, or with ``decodes`` a
    request handed over from the prefill pool; ties: lowest index), each replica's load weighed by its speed
    (``_replica_load_nb``). Prefix affinity: the replica whose cache holds the longest prefix of its prompt, among
    those whose weighed load is within one iteration's token budget of the least loaded (ties: the less
    loaded)."""
    replicas = cnt.shape[0]
    if replicas == 1:
        return 0
    if router == ROUND_ROBIN:
        return _weighted_turn_nb(route, cnt, decodes)
    best, best_load = -1, 0.0
    for k in range(replicas):
        if not _takes_nb(cnt, k, decodes):
            continue
        load = _replica_load_nb(router, route, ints, waiting, running, cnt, k)
        if best < 0 or load < best_load:
            best, best_load = k, load
    if router != PREFIX_AFFINITY or decodes:
        return best
    bound = best_load + srv[SV_PREFIX_ROUTE_SLACK_TOKENS]
    chosen, chosen_hit, chosen_load = best, prefix_hit_units_nb(srv, ints, ids, pc[best], r), best_load
    for k in range(replicas):
        if not _takes_nb(cnt, k, decodes):
            continue
        load = _replica_load_nb(router, route, ints, waiting, running, cnt, k)
        if load > bound:
            continue
        hit = prefix_hit_units_nb(srv, ints, ids, pc[k], r)
        if hit > chosen_hit or (hit == chosen_hit and load < chosen_load):
            chosen, chosen_hit, chosen_load = k, hit, load
    return chosen


@njit(cache=True, inline="always")
def _arrive_nb(ints, classes, waiting, cnt, r):
    """Request ``r`` joins this replica's waiting queue."""
    policy_on_arrival_nb(classes, ints[r, I_CLASS])
    ints[r, I_STATE] = WAITING
    _append_waiting_nb(waiting, cnt, r)


@njit(cache=True, inline="always")
def _drop_timeouts_nb(ints, fl, classes, ids, pc, items, n, cnt, t):
    """Time out requests of ``items[:n]`` with no first token by ``t``; returns the new length."""
    j = 0
    for i in range(n):
        r = items[i]
        if ints[r, I_GENERATED] == 0 and t >= fl[r, F_DEADLINE]:
            _leave_nb(ints, fl, classes, ids, pc, cnt, r, TIMED_OUT, fl[r, F_DEADLINE])
        else:
            items[j] = r
            j += 1
    return j


@njit(cache=True, inline="always")
def _gate_release_s_nb(srv, fl, waiting, running, cnt, t):
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
def _next_event_s_nb(ints, fl, waiting, cnt, t_release):
    """Earliest of: gate release, next time-out of a waiting request (an arrival wakes the replica too)."""
    t_next = t_release
    for i in range(cnt[C_WAITING]):
        r = waiting[i]
        if ints[r, I_GENERATED] == 0:
            t_next = min(t_next, fl[r, F_DEADLINE])
    return t_next


@njit(cache=True, inline="always")
def _order_running_nb(policy, classes, ints, fl, running, cnt, t):
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
        while j >= 0 and _before_nb(fl, r, running[j]):
            running[j + 1] = running[j]
            j -= 1
        running[j + 1] = r


@njit(cache=True, _nrt=False)
def _schedule_running_nb(srv, policy, ints, fl, ids, pc, waiting, running, batch, cnt, acc, budget):
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
        chunk = _chunk_nb(srv, ints, r, budget)
        if chunk == 0:
            i += 1
            continue
        need = _blocks_needed_nb(srv, ints, cnt, r, chunk)
        while need > cnt[C_CAPACITY_BLOCKS] - cnt[C_USED_BLOCKS]:
            if _evict_cached_nb(srv, pc, cnt) or _reclaim_paused_nb(ints, fl, ids, pc, waiting, cnt, -1):
                continue
            victim = running[cnt[C_RUNNING] - 1]
            cnt[C_RUNNING] -= 1
            _preempt_nb(srv, ints, ids, pc, waiting, cnt, acc, victim, mode)
            preempted = True
            if victim == r:
                break
        if ints[r, I_STATE] != RUNNING:
            break
        _schedule_nb(ints, batch, cnt, r, chunk, need)
        budget -= chunk
        i += 1
    return budget, preempted


@njit(cache=True)
def _evict_worse_nb(srv, policy, ints, fl, ids, pc, waiting, running, batch, cnt, acc, candidate):
    """Policy preemption: evict the worst running request if ``candidate``'s key is lower by more than
    the policy's margin. Undoes the victim's place in this iteration's batch; returns the token budget
    it gave back, or -1 when no running request is worse enough.
    """
    victim = running[0]
    for i in range(1, cnt[C_RUNNING]):
        if _before_nb(fl, victim, running[i]):
            victim = running[i]
    if not fl[candidate, F_KEY] + policy[P_MARGIN] < fl[victim, F_KEY]:
        return -1
    budget_back = ints[victim, I_CHUNK]
    if budget_back > 0:
        cnt[C_BATCH] = _remove_nb(batch, cnt[C_BATCH], victim)
    cnt[C_RUNNING] = _remove_nb(running, cnt[C_RUNNING], victim)
    if ints[victim, I_BLOCKS] > 0 and budget_back > 0:
        # Its blocks for this iteration's chunk were allocated already: give back the unused ones.
        bs = srv[SV_BLOCK_SIZE_TOKENS]
        shared = ints[victim, I_CACHED_UNITS] * srv[SV_PREFIX_UNIT_TOKENS] // bs
        keep_blocks = (ints[victim, I_KV_TOKENS] + bs - 1) // bs - shared if srv[SV_STATIC_BLOCKS] == 0 else \
            ints[victim, I_BLOCKS]
        cnt[C_USED_BLOCKS] -= ints[victim, I_BLOCKS] - keep_blocks
        ints[victim, I_BLOCKS] = keep_blocks
    _preempt_nb(srv, ints, ids, pc, waiting, cnt, acc, victim, policy[P_MODE])
    return budget_back


@njit(cache=True, _nrt=False)
def _admit_waiting_nb(srv, policy, classes, ints, fl, ids, pc, waiting, running, batch, cnt, acc, t, budget, kind):
    """Move waiting requests of ``kind`` into the batch in key order while slot, budget and memory allow.

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
                if _fresh_nb(srv, ints, r) else ints[r, I_KV_TOKENS]
        fl[r, F_KEY] = policy_key_nb(policy, classes, ints, fl, r, t)
    while budget > 0:
        best = -1
        for i in range(n_candidates):
            r = waiting[i]
            if ints[r, I_STATE] == WAITING and (best < 0 or _before_nb(fl, r, best)):
                decoding = _decoding_nb(ints, r)
                if kind == ADMIT_ANY or decoding == (kind == ADMIT_DECODES):
                    best = r
        if best < 0:
            break
        queried, took, left = 0, 0, ints[best, I_RECOMPUTE_LEFT]
        if _fresh_nb(srv, ints, best):
            queried = ints[best, I_PENDING]
            took = prefix_hit_units_nb(srv, ints, ids, pc, best)
            _take_prefix_nb(srv, ints, ids, pc, best, took)
        if kind == ADMIT_PROMPTS:
            chunk = ints[best, I_PENDING]
        else:
            chunk = _chunk_nb(srv, ints, best, budget)
            if chunk == 0:  # a speculative decode that does not fit the budget left
                _undo_take_nb(srv, ints, ids, pc, best, took, left)
                break
        if chunk > budget and cnt[C_BATCH] > 0:
            _undo_take_nb(srv, ints, ids, pc, best, took, left)
            break
        need = _blocks_needed_nb(srv, ints, cnt, best, chunk)
        if cnt[C_RUNNING] < cnt[C_MAX_BATCH_SIZE]:
            while need > cnt[C_CAPACITY_BLOCKS] - cnt[C_USED_BLOCKS] and _evict_cached_nb(srv, pc, cnt):
                pass
        if cnt[C_RUNNING] < cnt[C_MAX_BATCH_SIZE] and need > cnt[C_CAPACITY_BLOCKS] - cnt[C_USED_BLOCKS] and \
                _reclaim_paused_nb(ints, fl, ids, pc, waiting, cnt, best):
            _undo_take_nb(srv, ints, ids, pc, best, took, left)
            continue
        if cnt[C_RUNNING] >= cnt[C_MAX_BATCH_SIZE] or need > cnt[C_CAPACITY_BLOCKS] - cnt[C_USED_BLOCKS]:
            _undo_take_nb(srv, ints, ids, pc, best, took, left)
            if not policy[P_PREEMPTIVE] or cnt[C_RUNNING] == 0:
                break
            budget_back = _evict_worse_nb(srv, policy, ints, fl, ids, pc, waiting, running, batch, cnt, acc, best)
            if budget_back < 0:
                break
            budget += budget_back
            continue
        cnt[C_PREFIX_QUERY_TOKENS] += queried
        cnt[C_PREFIX_HIT_TOKENS] += took * srv[SV_PREFIX_UNIT_TOKENS]
        _resume_nb(srv, policy, ints, acc, best)
        ints[best, I_STATE] = RUNNING
        if np.isnan(fl[best, F_FIRST_SCHEDULED]):
            fl[best, F_FIRST_SCHEDULED] = t
        running[cnt[C_RUNNING]] = best
        cnt[C_RUNNING] += 1
        _schedule_nb(ints, batch, cnt, best, chunk, need)
        budget -= chunk
    cnt[C_WAITING] = _keep_state_nb(ints, waiting, cnt[C_WAITING], WAITING)


@njit(cache=True, inline="always")
def _step_s_nb(srv, step, ints, batch, cnt):
    """Duration of this iteration, its roofline (compute, memory) seconds, its (prefill, decode) token counts
    and its recomputed tokens. With speculative decoding the decode tokens are those verified (k + 1 per
    sequence), and the draft model's k steps over the decoding sequences are added, each ``draft_cost`` times a
    plain decode iteration of them."""
    prefill_tokens = 0
    decode_tokens = 0
    recomputed = 0
    context_pairs = 0.0   # sum over batched tokens of the context each attends to
    context_reads = 0.0   # KV tokens read (each sequence's cached context, once)
    decoding = 0          # sequences decoding, and the KV they read (the draft model's batch)
    decode_reads = 0.0
    for i in range(cnt[C_BATCH]):
        r = batch[i]
        chunk = ints[r, I_CHUNK]
        kv = ints[r, I_KV_TOKENS]
        if _decoding_nb(ints, r):
            decode_tokens += chunk
            decoding += 1
            decode_reads += kv
        else:
            prefill_tokens += chunk
        redo = min(chunk, ints[r, I_RECOMPUTE_LEFT])
        ints[r, I_RECOMPUTE_LEFT] -= redo
        recomputed += redo
        context_pairs += chunk * kv + chunk * (chunk + 1) / 2.0
        context_reads += kv
    dt, compute_s, memory_s = step_time_terms_nb(step, prefill_tokens + decode_tokens, context_pairs, context_reads)
    if srv[SV_DRAFT_TOKENS] > 0 and decoding > 0:
        draft_s, draft_compute_s, draft_memory_s = step_time_terms_nb(step, decoding, decode_reads + decoding,
                                                                      decode_reads)
        steps = srv[SV_DRAFT_TOKENS] * srv[SV_DRAFT_COST]
        dt += steps * draft_s
        compute_s += steps * draft_compute_s
        memory_s += steps * draft_memory_s
    return dt, compute_s, memory_s, prefill_tokens, decode_tokens, recomputed


@njit(cache=True, inline="always")
def _start_transfer_nb(srv, classes, ints, fl, clock, handoff, r, t):
    """``r``'s prompt is computed on a prefill replica at ``t``: its KV goes over the replica's link (after the
    transfers before it: the link is first come, first served), its blocks held here until it has arrived. It
    leaves this replica's batch and class state and joins the fleet's list of transfers (``handoff``)."""
    start_s = max(t, clock[CK_LINK_FREE_S])
    end_s = start_s + ints[r, I_KV_TOKENS] * srv[SV_KV_LINK_S_PER_TOKEN]
    clock[CK_LINK_FREE_S] = end_s
    fl[r, F_HANDED_OFF] = end_s
    ints[r, I_STATE] = TRANSFERRING
    ints[r, I_PREFILL_REPLICA] = ints[r, I_REPLICA]
    classes[ints[r, I_CLASS], K_ACTIVE] -= 1
    count = handoff[HO_COUNT]
    if count + 1 >= handoff.shape[0]:
        raise RuntimeError("internal error: the list of KV transfers is full")
    handoff[1 + count] = r
    handoff[HO_COUNT] = count + 1


@njit(cache=True, inline="always")
def _advance_nb(srv, policy, classes, ints, fl, ids, pc, running, batch, cnt, clock, handoff, t_end):
    """Apply the iteration's work at ``t_end``: charge service, emit tokens (counted per class when ``t_end`` is
    inside the steady-state window), finish or time out requests; on a prefill replica a request whose first token
    this was starts its KV transfer to the decode pool."""
    in_window = srv[SV_WINDOW_START_S] <= t_end < srv[SV_WINDOW_END_S]
    for i in range(cnt[C_BATCH]):
        r = batch[i]
        chunk = ints[r, I_CHUNK]
        ints[r, I_CHUNK] = 0
        if _decoding_nb(ints, r):
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
                _insert_prefix_nb(srv, ints, ids, pc, cnt, r)
            if ints[r, I_GENERATED] == 0:
                if t_end > fl[r, F_DEADLINE]:
                    _leave_nb(ints, fl, classes, ids, pc, cnt, r, TIMED_OUT, fl[r, F_DEADLINE])
                    continue
                fl[r, F_FIRST_TOKEN] = t_end
            emitted = 1
        ints[r, I_GENERATED] += emitted
        if in_window:
            classes[ints[r, I_CLASS], K_WINDOW_TOKENS] += emitted
        if ints[r, I_GENERATED] == ints[r, I_OUTPUT]:
            _leave_nb(ints, fl, classes, ids, pc, cnt, r, COMPLETED, t_end)
        else:
            ints[r, I_PENDING] = 1
            if cnt[C_ROLE] == PREFILL_ROLE:
                _start_transfer_nb(srv, classes, ints, fl, clock, handoff, r, t_end)
    cnt[C_RUNNING] = _keep_state_nb(ints, running, cnt[C_RUNNING], RUNNING)
    cnt[C_BATCH] = 0


@njit(cache=True, _nrt=False)
def _record_nb(srv, ints, waiting, batch, cnt, series, row, t, dt, prefill, decode, preemptions):
    series[row, T_START_S] = t
    series[row, T_STEP_S] = dt
    series[row, T_BATCH] = cnt[C_BATCH]
    series[row, T_PREFILL_TOKENS] = prefill
    series[row, T_DECODE_TOKENS] = decode
    series[row, T_KV_USED_TOKENS] = cnt[C_USED_BLOCKS] * srv[SV_BLOCK_SIZE_TOKENS]
    series[row, T_WAITING] = cnt[C_WAITING]
    series[row, T_RUNNING] = cnt[C_RUNNING]
    series[row, T_PREEMPTIONS] = preemptions
    base = N_SERIES_FIXED
    for k in range(2 * srv[SV_N_CLASSES]):
        series[row, base + k] = 0.0
    for i in range(cnt[C_BATCH]):
        series[row, base + ints[batch[i], I_CLASS]] += 1.0
    for i in range(cnt[C_WAITING]):
        series[row, base + srv[SV_N_CLASSES] + ints[waiting[i], I_CLASS]] += 1.0


@njit(cache=True)
def _halve_series_nb(series):
    """Keep every other row (the time series doubles its stride when full)."""
    half = series.shape[0] // 2
    for k in range(half):
        for c in range(series.shape[1]):
            series[k, c] = series[2 * k, c]
    return half


# --------------------------------------------------------------------------- the loop


def waiting_capacity(n_requests: int, max_waiting_requests: int, max_batch_size: int) -> int:
    """Length of one replica's waiting list. The fleet stops once more than ``max_waiting_requests`` wait
    (checked at every arrival and decision), and one decision moves at most ``max_batch_size`` running
    requests back to waiting, so no list ever holds more than their sum plus the arrival being checked."""
    return min(n_requests, max_waiting_requests + max_batch_size + 1)


def work_arrays(n_requests: int, max_waiting_requests: int, limits: np.ndarray, block_size_tokens: int) -> tuple:
    """Scratch arrays of ``run_nb``, one row per replica (``limits``: per replica, its KV cache in blocks, batch
    limit, token budget and role, the counters ``C_CAPACITY_BLOCKS`` .. ``C_ROLE``): waiting, running and batch
    lists, counters, clock, per-iteration sums, block crossings of a skip, the KV transfer list; set to the state
    before the first event."""
    replicas = len(limits)
    counters = np.zeros((replicas, N_COUNTERS), np.int64)
    counters[:, C_CAPACITY_BLOCKS:C_ROLE + 1] = limits
    max_batch_size = int(counters[:, C_MAX_BATCH_SIZE].max())
    waiting = np.empty((replicas, waiting_capacity(n_requests, max_waiting_requests, max_batch_size)), np.int64)
    clock = np.zeros((replicas, N_CLOCK))
    clock[:, CK_NEXT_S] = np.inf
    clock[:, CK_MODE] = IDLE
    return (waiting, np.empty((replicas, max_batch_size), np.int64), np.empty((replicas, max_batch_size), np.int64),
            counters, clock, np.zeros((replicas, 2)),
            np.zeros((replicas, block_size_tokens), np.int64), np.zeros(n_requests + 1, np.int64))


def route_rows(speeds: np.ndarray) -> np.ndarray:
    """The router rows of ``run_nb`` (``RT_*``) for replicas of these relative ``speeds``, credits at zero."""
    route = np.zeros((len(speeds), N_ROUTE))
    route[:, RT_SPEED] = speeds
    return route


def prefix_caches(replicas: int, units: int) -> np.ndarray:
    """Empty prefix caches of ``units`` units (``PC_*`` rows), one per replica; ``units`` 0 without prefix
    caching."""
    pc = np.zeros((replicas, N_PC_ROWS, units + 1), np.int64)
    pc[:, PC_PREV, units] = units
    pc[:, PC_NEXT, units] = units
    return pc


def settle_in_flight(stats: np.ndarray, cnt: np.ndarray, clock: np.ndarray, end_s: float,
                     window_s: tuple[float, float] = (0.0, 0.0)) -> None:
    """A run stopped by a limit ends while iterations are under way, whose whole duration the statistics
    already hold: keep only the part before ``end_s`` (busy time, in the run and in the steady-state window
    ``window_s``, and KV block-seconds; a replica's blocks do not change during its iteration). A drained run
    has none in flight. The blocks of a replica waiting or idle at the end count until ``end_s``."""
    busy = clock[:, CK_MODE] == BUSY
    next_s = clock[:, CK_NEXT_S]
    ahead_s = np.where(busy, np.maximum(next_s - end_s, 0.0), 0.0)
    stats[:, S_BUSY_S] -= ahead_s
    stats[:, S_KV_BLOCK_SECONDS] -= cnt[:, C_USED_BLOCKS] * ahead_s
    # a replica waiting or idle at the end holds its blocks (cached prefixes, KV on the link) until then
    held_s = np.where(busy, 0.0, np.maximum(end_s - clock[:, CK_WAIT_START_S], 0.0))
    stats[:, S_KV_BLOCK_SECONDS] += cnt[:, C_USED_BLOCKS] * held_s
    start_s, stop_s = window_s
    stats[:, S_WINDOW_BUSY_S] -= np.where(busy, np.maximum(np.minimum(next_s, stop_s) - max(end_s, start_s), 0.0), 0.0)


def start_outputs(replicas: int) -> tuple[np.ndarray, np.ndarray]:
    """The statistics rows and the outcome of ``run_nb`` before the first event."""
    stats = np.zeros((replicas, N_STATS))
    stats[:, S_SERIES_STRIDE] = 1.0
    return stats, np.zeros(N_OUTCOME)


@njit(cache=True, inline="always")
def _account_nb(srv, ints, series, stats, waiting, batch, cnt, t, dt, compute_s, memory_s, prefill, decode,
                preemptions):
    """Count the iteration that starts at ``t`` and lasts ``dt`` (``compute_s`` and ``memory_s`` of it are its
    roofline terms) in the statistics and the time series."""
    iterations = np.int64(stats[S_ITERATIONS])
    stride = np.int64(stats[S_SERIES_STRIDE])
    if iterations % stride == 0:
        rows = np.int64(stats[S_SERIES_ROWS])
        if rows == series.shape[0]:
            rows = _halve_series_nb(series)
            stride *= 2
            stats[S_SERIES_STRIDE] = stride
        if iterations % stride == 0:
            _record_nb(srv, ints, waiting, batch, cnt, series, rows, t, dt, prefill, decode, preemptions)
            rows += 1
        stats[S_SERIES_ROWS] = rows
    stats[S_ITERATIONS] = iterations + 1
    stats[S_BUSY_S] += dt
    stats[S_BATCH_SUM] += cnt[C_BATCH]
    stats[S_KV_BLOCK_SECONDS] += cnt[C_USED_BLOCKS] * dt
    stats[S_KV_PEAK_BLOCKS] = max(stats[S_KV_PEAK_BLOCKS], cnt[C_USED_BLOCKS])
    stats[S_PREEMPTIONS] = cnt[C_PREEMPTIONS]
    stats[S_PREFIX_QUERY_TOKENS] = cnt[C_PREFIX_QUERY_TOKENS]
    stats[S_PREFIX_HIT_TOKENS] = cnt[C_PREFIX_HIT_TOKENS]
    stats[S_COMPUTE_S] += compute_s
    stats[S_MEMORY_S] += memory_s
    stats[S_TERMS_S] += dt
    overlap_s = min(t + dt, srv[SV_WINDOW_END_S]) - max(t, srv[SV_WINDOW_START_S])
    if overlap_s > 0.0:
        share = overlap_s / dt
        stats[S_WINDOW_BUSY_S] += overlap_s
        stats[S_WINDOW_TERMS_S] += overlap_s
        stats[S_WINDOW_COMPUTE_S] += compute_s * share
        stats[S_WINDOW_MEMORY_S] += memory_s * share


@njit(cache=True, inline="always")
def _block_room_nb(srv, ints, r):
    """Tokens ``r``'s blocks (its own and the prefix units it holds) have room for beyond its cached tokens."""
    held = ints[r, I_BLOCKS] + ints[r, I_CACHED_UNITS] * srv[SV_PREFIX_UNIT_TOKENS] // srv[SV_BLOCK_SIZE_TOKENS]
    return held * srv[SV_BLOCK_SIZE_TOKENS] - ints[r, I_KV_TOKENS]


@njit(cache=True, _nrt=False)
def _skip_decodes_nb(srv, step, policy, classes, ints, series, stats, waiting, batch, cnt, cross, t, dt, t_stop):
    """Event skipping: the iteration just scheduled at ``t`` (lasting ``dt``) decodes every running request and
    nothing waits. Until the next event, each following decision would do the same (every request emits a
    token and decodes again), so run those decisions here without the full decision: no request completes
    (bounded by the output left), no time-out (all are past their first token), no admission (nothing waits
    and the router sends nothing before ``t_stop``: the next arrival, end of a KV transfer or decision of a
    prefill replica, which may start one), no memory preemption (the blocks the
    requests grow into are free), the min-batch gate stays open (same requests, later), the horizon is not
    passed. Each skipped iteration gets the step time the full decision computes, from the same integer
    context sums (batch B, KV read = sum of cached tokens, attention pairs = that + B), and the same
    statistics and series rows, in the same order; so the results are the same, bit for bit (the caller
    ensures no other replica's queue can reach the bound before ``t_stop``). Request state is brought up to
    date at the end: every request generated ``m`` more tokens (those emitted inside the steady-state window
    counted for its class), was charged ``m`` decodes, holds the blocks it crossed into. Returns the start and
    duration of the iteration now in flight.

    ``cross[p]``: requests whose KV needs one more block at the skipped decisions j = p (mod block size);
    a request's first such decision is ``blocks x block size - cached tokens`` (``_block_room_nb``; at most one
    block ahead,
    except under reserve-full admission, whose blocks already hold the whole output).
    """
    if t + dt >= t_stop:
        return t, dt  # the next decision comes after an arrival: nothing to skip
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
        last = min(last, ints[r, I_OUTPUT] - ints[r, I_GENERATED] - 1)
        reads += ints[r, I_KV_TOKENS]
        if grows:
            first = _block_room_nb(srv, ints, r)
            if first <= bs:
                cross[first % bs] += 1
            else:
                last = min(last, first - 1)
    used = cnt[C_USED_BLOCKS]
    m = 0
    emitted_in_window = 0  # skipped decisions inside the window: each emits a token of every request
    while m < last:
        t_next = t + dt
        if t_next >= t_stop or t_next > srv[SV_HORIZON_S]:
            break
        grow = cross[(m + 1) % bs] if grows else 0
        if used + grow > cnt[C_CAPACITY_BLOCKS]:
            break
        m += 1
        used += grow
        cnt[C_USED_BLOCKS] = used
        t = t_next
        if srv[SV_WINDOW_START_S] <= t < srv[SV_WINDOW_END_S]:
            emitted_in_window += 1
        reads += n
        dt, compute_s, memory_s = step_time_terms_nb(step, n, reads + n, reads)
        _account_nb(srv, ints, series, stats, waiting, batch, cnt, t, dt, compute_s, memory_s, 0, n, 0)
    stats[S_SKIPPED] += m
    if m == 0:
        return t, dt
    for i in range(n):
        r = batch[i]
        k = ints[r, I_CLASS]
        for _ in range(m):
            policy_charge_nb(policy, classes, k, 0, 1)
        if grows:
            first = _block_room_nb(srv, ints, r)
            if first <= m:
                ints[r, I_BLOCKS] += 1 + (m - first) // bs
        ints[r, I_KV_TOKENS] += m
        ints[r, I_GENERATED] += m
        ints[r, I_DECODES] += m
        classes[k, K_WINDOW_TOKENS] += emitted_in_window
    return t, dt


@njit(cache=True, inline="always")
def _decide_nb(srv, step, policy, classes, ints, fl, ids, pc, series, stats, waiting, running, batch, cnt, clock,
               acc, cross, handoff, t, queued_elsewhere, t_stop, may_skip):
    """One replica's decision at ``t``: finish its iteration, then start the next one, wait or go idle.

    ``queued_elsewhere``: requests waiting at the other replicas (for the queue bound, on the fleet).
    ``t_stop``, ``may_skip``: the next arrival, and whether the queue bound cannot be reached before it
    (for event skipping). Returns the stop reason (``DRAINED`` = carry on).
    """
    if clock[CK_MODE] == BUSY:
        _advance_nb(srv, policy, classes, ints, fl, ids, pc, running, batch, cnt, clock, handoff, t)
    else:  # waiting or idle since CK_WAIT_START_S, its blocks held (cached prefixes, KV on the link)
        stats[S_KV_BLOCK_SECONDS] += cnt[C_USED_BLOCKS] * (t - clock[CK_WAIT_START_S])
    cnt[C_WAITING] = _drop_timeouts_nb(ints, fl, classes, ids, pc, waiting, cnt[C_WAITING], cnt, t)
    cnt[C_RUNNING] = _drop_timeouts_nb(ints, fl, classes, ids, pc, running, cnt[C_RUNNING], cnt, t)
    if cnt[C_WAITING] + cnt[C_RUNNING] == 0:
        clock[CK_MODE] = IDLE
        clock[CK_NEXT_S] = np.inf
        clock[CK_WAIT_START_S] = t
        return DRAINED
    if queued_elsewhere + cnt[C_WAITING] > srv[SV_MAX_WAITING_REQUESTS]:
        return QUEUE_BOUND
    if t > srv[SV_HORIZON_S]:
        return HORIZON
    t_release = _gate_release_s_nb(srv, fl, waiting, running, cnt, t)
    if t_release > t:
        clock[CK_MODE] = WAITING_FOR_GATE
        clock[CK_WAIT_START_S] = t
        clock[CK_NEXT_S] = _next_event_s_nb(ints, fl, waiting, cnt, t_release)
        return DRAINED

    preemptions_before = cnt[C_PREEMPTIONS]
    _order_running_nb(policy, classes, ints, fl, running, cnt, t)
    may_admit = cnt[C_RUNNING] < cnt[C_MAX_BATCH_SIZE] or policy[P_PREEMPTIVE]
    prefill_first = srv[SV_BATCHING] == PREFILL_FIRST
    if prefill_first and may_admit and cnt[C_WAITING] > 0:
        # Whole prompts whenever one can be admitted: the iteration is theirs, every decode waits.
        _admit_waiting_nb(srv, policy, classes, ints, fl, ids, pc, waiting, running, batch, cnt, acc, t,
                          cnt[C_MAX_BATCHED_TOKENS], ADMIT_PROMPTS)
    if cnt[C_BATCH] == 0:
        budget, memory_preempted = _schedule_running_nb(srv, policy, ints, fl, ids, pc, waiting, running, batch, cnt,
                                                        acc, cnt[C_MAX_BATCHED_TOKENS])
        if not memory_preempted and may_admit:
            _admit_waiting_nb(srv, policy, classes, ints, fl, ids, pc, waiting, running, batch, cnt, acc, t, budget,
                              ADMIT_DECODES if prefill_first else ADMIT_ANY)
    if cnt[C_BATCH] == 0 and cnt[C_ROLE] == PREFILL_ROLE and cnt[C_RUNNING] == 0 and cnt[C_USED_BLOCKS] > 0:
        # its memory is held by KV on the link: wait for a transfer to end (``_hand_over_nb`` wakes it), or for the
        # next time-out of a waiting request
        clock[CK_MODE] = WAITING_FOR_GATE
        clock[CK_WAIT_START_S] = t
        clock[CK_NEXT_S] = _next_event_s_nb(ints, fl, waiting, cnt, np.inf)
        return DRAINED
    if cnt[C_BATCH] == 0:
        raise RuntimeError("internal error: requests are ready but none could be scheduled")

    dt, compute_s, memory_s, prefill, decode, recomputed = _step_s_nb(srv, step, ints, batch, cnt)
    stats[S_WASTE_S] += dt * recomputed / max(prefill + decode, 1) + acc[A_WASTE_S]
    dt += acc[A_EXTRA_S]
    acc[A_EXTRA_S] = 0.0
    acc[A_WASTE_S] = 0.0
    _account_nb(srv, ints, series, stats, waiting, batch, cnt, t, dt, compute_s, memory_s, prefill, decode,
                cnt[C_PREEMPTIONS] - preemptions_before)
    if srv[SV_EVENT_SKIPPING] and srv[SV_DRAFT_TOKENS] == 0 and may_skip and prefill == 0 and recomputed == 0 \
            and cnt[C_WAITING] == 0 and cnt[C_BATCH] == cnt[C_RUNNING]:
        t, dt = _skip_decodes_nb(srv, step, policy, classes, ints, series, stats, waiting, batch, cnt, cross, t, dt,
                                 t_stop)
    clock[CK_MODE] = BUSY
    clock[CK_NEXT_S] = t + dt
    return DRAINED


@njit(cache=True, _nrt=False)
def _next_handoff_nb(fl, handoff):
    """(position in ``handoff``, time) of the transfer that ends first (ties: the one started first); (-1, inf)
    when none is under way."""
    first, first_s = -1, np.inf
    for i in range(handoff[HO_COUNT]):
        end_s = fl[handoff[1 + i], F_HANDED_OFF]
        if end_s < first_s:
            first, first_s = i, end_s
    return first, first_s


@njit(cache=True, _nrt=False)
def _hand_over_nb(srv, router, route, classes, ints, fl, ids, pc, stats, waiting, running, cnt, clock, handoff, i,
                  t):
    """Transfer ``i`` of the list ends at ``t``: the prefill replica frees its blocks (and wakes, should it wait for
    memory), the router sends the request to a decode replica, where it waits for a slot and memory to decode."""
    r = handoff[1 + i]
    count = handoff[HO_COUNT]
    for j in range(i, count - 1):
        handoff[1 + j] = handoff[2 + j]
    handoff[HO_COUNT] = count - 1
    p = ints[r, I_PREFILL_REPLICA]
    freed = ints[r, I_BLOCKS]
    if clock[p, CK_MODE] == BUSY:  # its iteration counted these blocks to its end: only until now
        stats[p, S_KV_BLOCK_SECONDS] -= freed * max(clock[p, CK_NEXT_S] - t, 0.0)
    else:  # a wait or an idle spell counts the blocks left at its end: these until now
        stats[p, S_KV_BLOCK_SECONDS] += freed * (t - clock[p, CK_WAIT_START_S])
        if clock[p, CK_MODE] == WAITING_FOR_GATE:
            clock[p, CK_NEXT_S] = min(clock[p, CK_NEXT_S], t)
    _free_blocks_nb(ints, cnt[p], r)
    _release_prefix_nb(ints, ids, pc[p], r)
    j = _route_nb(srv, router, route, ints, ids, pc, waiting, running, cnt, r, True)
    ints[r, I_REPLICA] = j
    stats[j, S_ROUTED] += 1.0
    _arrive_nb(ints, classes[j], waiting[j], cnt[j], r)
    if clock[j, CK_MODE] != BUSY:
        clock[j, CK_NEXT_S] = min(clock[j, CK_NEXT_S], t)


# Compiled without reference counting (``_nrt=False``): the loop allocates nothing (its scratch arrays
# come from ``work_arrays``), and every array it touches outlives the call, so the counting Numba would
# otherwise do around each inlined helper is pure overhead (about a third of the run time). The largest
# helpers (admission, scheduling, skipping, recording) are compiled the same way but not inlined: as fast,
# and the loop compiles in about two thirds of the time. ``nogil``:
# while one run is in the loop, other threads (other sessions of the app) keep the interpreter.
@njit(cache=True, _nrt=False, nogil=True)
def run_nb(srv, steps, policy, router, route, classes, ints, fl, ids, pc, series, stats, outcome, waiting, running,
           batch, cnt, clock, acc, cross, handoff, deadline_ns):
    """Simulate the fleet from where ``outcome`` says the last call stopped until the run ends or the
    monotonic clock (``time.monotonic_ns``) passes ``deadline_ns``; fills ``ints``/``fl``, and per replica
    (first axis of ``classes``, ``series``, ``stats`` and the scratch arrays) its time series (decimated)
    and statistics. The clock is read every ``CLOCK_EVERY_EVENTS`` events (arrivals and replica
    decisions, ends of KV transfers), so a call overruns its deadline by at most that many events, and always makes
    progress.

    ``outcome[O_STOP_REASON]`` is ``PAUSED`` when the deadline came first (call again to go on), else why
    the run ended. Start from ``work_arrays`` and ``start_outputs``. ``ids``: the run's prefix unit ids (dense);
    ``pc``: each replica's prefix cache (``PC_*``); ``steps``: each replica's step-time row (``steptime.ST_*``);
    ``route``: each replica's router row (``RT_*``, ``route_rows``); ``handoff``: the KV transfers under way
    (``HO_COUNT`` of them, from position 1), from prefill to decode replicas. Events at the same time: arrivals,
    then transfers ending, then decisions.
    """
    n = ints.shape[0]
    replicas = cnt.shape[0]
    next_arrival = np.int64(outcome[O_NEXT_ARRIVAL])
    t = outcome[O_END_S]
    stop = PAUSED
    events = 0
    while True:
        if events % CLOCK_EVERY_EVENTS == 0 and events > 0 and monotonic_ns_nb() >= deadline_ns:
            break  # every call makes progress: the first reading comes after CLOCK_EVERY_EVENTS events
        events += 1
        k = -1
        t_decide = np.inf
        for j in range(replicas):
            if clock[j, CK_NEXT_S] < t_decide:
                t_decide = clock[j, CK_NEXT_S]
                k = j
        h, t_hand = _next_handoff_nb(fl, handoff)
        if next_arrival < n and fl[next_arrival, F_ARRIVAL] <= min(t_decide, t_hand):
            r = next_arrival
            next_arrival += 1
            j = _route_nb(srv, router, route, ints, ids, pc, waiting, running, cnt, r, False)
            ints[r, I_REPLICA] = j
            stats[j, S_ROUTED] += 1.0
            _arrive_nb(ints, classes[j], waiting[j], cnt[j], r)
            if clock[j, CK_MODE] != BUSY:
                clock[j, CK_NEXT_S] = min(clock[j, CK_NEXT_S], fl[r, F_ARRIVAL])
            queued = 0
            for i in range(replicas):
                queued += cnt[i, C_WAITING]
            if queued > srv[SV_MAX_WAITING_REQUESTS]:
                t = max(t, fl[r, F_ARRIVAL])
                stop = QUEUE_BOUND
                break
            continue
        if h >= 0 and t_hand <= t_decide:
            t = max(t, t_hand)
            _hand_over_nb(srv, router, route, classes, ints, fl, ids, pc, stats, waiting, running, cnt, clock,
                          handoff, h, t_hand)
            queued = 0
            for i in range(replicas):
                queued += cnt[i, C_WAITING]
            if queued > srv[SV_MAX_WAITING_REQUESTS]:
                stop = QUEUE_BOUND
                break
            continue
        if k < 0:
            stop = DRAINED
            break
        t = t_decide
        queued_elsewhere = 0
        held = handoff[HO_COUNT]  # requests in the fleet: more can never wait before the next arrival
        # A decode replica's queue grows only by transfers: those under way, and those a prefill replica may start
        # at its next decision (each ends after it), so skipping stops at the earliest of these too.
        t_stop = min(fl[next_arrival, F_ARRIVAL] if next_arrival < n else np.inf, t_hand)
        for j in range(replicas):
            held += cnt[j, C_WAITING] + cnt[j, C_RUNNING]
            if j != k:
                queued_elsewhere += cnt[j, C_WAITING]
                if cnt[j, C_ROLE] == PREFILL_ROLE:
                    t_stop = min(t_stop, clock[j, CK_NEXT_S])
        reason = _decide_nb(srv, steps[k], policy, classes[k], ints, fl, ids, pc[k], series[k], stats[k], waiting[k],
                            running[k], batch[k], cnt[k], clock[k], acc[k], cross[k], handoff, t, queued_elsewhere,
                            t_stop,
                            held <= srv[SV_MAX_WAITING_REQUESTS])
        if reason != DRAINED:
            stop = reason
            break
    outcome[O_END_S] = t
    outcome[O_STOP_REASON] = stop
    outcome[O_NEXT_ARRIVAL] = next_arrival
