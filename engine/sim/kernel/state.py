"""The state of a run, as the compiled loop sees it: what every row and column of its arrays holds, the server
tuple and the codes it carries, why a run stopped, and the arrays a run starts from.

Plain Python, no compiled code: every stage module reads its columns from here, so a column is named once. The
per-request columns live one level up, in ``layout.py`` (the planner's memory estimate and the result tables
read them too).
"""

from __future__ import annotations

import numpy as np

from ...scenario.registry import ADMISSION_CODES, BATCHING_CODES, POOL_ROLES

# Why a run stopped (PAUSED: ``run_nb`` reached its deadline for this call; call it again to go on).
DRAINED, QUEUE_BOUND, HORIZON, WALL_CLOCK, PAUSED = 0, 1, 2, 3, 4
AT_PAUSE_TIME = 5  # the next event comes after ``O_PAUSE_AT_S``: the autoscaler acts, then the run goes on

# Counter columns (one row per replica); the last four are the replica's own limits and role, set once (the replicas
# of a mixed or disaggregated fleet differ): its KV cache, batch limit, token budget per iteration, and role.
(C_WAITING, C_RUNNING, C_BATCH, C_USED_BLOCKS, C_PREEMPTIONS, C_PREFIX_QUERY_TOKENS, C_PREFIX_HIT_TOKENS,
 C_CAPACITY_BLOCKS, C_MAX_BATCH_SIZE, C_MAX_BATCHED_TOKENS, C_ROLE, C_NEW_TOKEN_RATIO_PPM, C_ACCEPTS,
 C_RECV_COUNT, C_LAST_PREFILL, C_ADP_WAIT_ITERS, C_ADP_BATCH_ITERS, C_DELAY_HOLD_TICKS, C_DELAY_STALL,
 C_DELAY_PREV_PENDING) = range(20)
N_COUNTERS = 20  # C_NEW_TOKEN_RATIO_PPM: the new-token-ratio admission's current ratio, in millionths; C_ACCEPTS: 1
# while the router may send the replica requests (0: an autoscaler's replica provisioning, draining or gone);
# C_RECV_COUNT: the receive skipper's counter (``gates.receive_nb``); C_LAST_PREFILL: 1 when the iteration in flight
# computes prompt tokens; C_ADP_WAIT_ITERS, C_ADP_BATCH_ITERS: the attention-DP balance gate's two iteration
# counters (``gates.adp_hold_nb``); C_DELAY_*: ATOM's prefill delayer's turns held, turns its pending tokens did not
# grow, and those tokens at the last turn (-1: none yet; ``gates.delay_hold_nb``)
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
# began, (a prefill replica) when its link to the decode pool is free again, and 1 while the wait is the min-batch
# gate's (``WAITING_FOR_GATE`` also covers a prefill replica waiting for its link), and when it last received new
# requests (``gates.receive_nb``: every waiting request that arrived by then is seen).
CK_NEXT_S, CK_MODE, CK_WAIT_START_S, CK_LINK_FREE_S, CK_BATCH_HOLD, CK_RECEIVED_S = range(6)
N_CLOCK = 6
IDLE, WAITING_FOR_GATE, BUSY = 0, 1, 2

# Statistics columns (one row per replica, filled during the run). The roofline terms (compute and memory
# seconds of every iteration, at the effective rates) and the iteration seconds they came with are summed
# apart from the busy time, which a limit's stop trims (``settle_in_flight``): utilisation while busy is the
# ratio of the two. ``S_WINDOW_*``: the same over the part of each iteration inside the steady-state window.
# ``S_BATCH_HOLD_S``: seconds the min-batch gate held the replica's next iteration back (``gate_release_s_nb``), each
# hold counted when the replica decides again. ``S_GATE_HELD_S``: request-seconds the engine's scheduler kept waiting
# requests out (unread, or held by its gate: ``gates.held_requests_nb``), each iteration's requests times its length.
(S_ITERATIONS, S_BUSY_S, S_BATCH_SUM, S_KV_BLOCK_SECONDS, S_KV_PEAK_BLOCKS, S_PREEMPTIONS,
 S_SERIES_ROWS, S_SERIES_STRIDE, S_WASTE_S, S_ROUTED, S_SKIPPED, S_COMPUTE_S, S_MEMORY_S, S_TERMS_S,
 S_WINDOW_BUSY_S, S_WINDOW_COMPUTE_S, S_WINDOW_MEMORY_S, S_WINDOW_TERMS_S, S_PREFIX_QUERY_TOKENS,
 S_PREFIX_HIT_TOKENS, S_BATCH_HOLD_S, S_GATE_HELD_S) = range(22)
N_STATS = 22
# The KV transfers under way (``handoff``, int64, one more entry than requests): how many, then their requests.
HO_COUNT = 0
# Outcome of the whole run, and where a paused run goes on: the next arrival to route; and the simulated time at
# which the loop stops before any later event (``AT_PAUSE_TIME``; infinite unless an autoscaler runs the fleet).
O_END_S, O_STOP_REASON, O_NEXT_ARRIVAL, O_PAUSE_AT_S = range(4)
N_OUTCOME = 4

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

# The server tuple of ``run_nb`` (a plain tuple indexed by these constants: Numba's on-disk
# cache stays valid across code changes only for built-in types).
(SV_MIN_BATCH_SIZE, SV_WAIT_TIMEOUT_S,
 SV_BLOCK_SIZE_TOKENS, SV_STATIC_BLOCKS, SV_MAX_WAITING_REQUESTS, SV_HORIZON_S, SV_N_CLASSES,
 SV_SWAP_S_PER_TOKEN, SV_BATCHING, SV_ADMISSION, SV_EVENT_SKIPPING, SV_WINDOW_START_S, SV_WINDOW_END_S,
 SV_DRAFT_TOKENS, SV_TOKENS_PER_DECODE, SV_DRAFT_COST, SV_PREFIX_UNIT_TOKENS, SV_PREFIX_ROUTE_SLACK_TOKENS,
 SV_KV_LINK_S_PER_TOKEN, SV_RECV_INTERVAL, SV_ADP_RANKS, SV_ADP_BATCHING_WAIT_ITERS, SV_ADP_TIMEOUT_ITERS,
 SV_DELAY_RANKS, SV_DELAY_TARGET_FILL, SV_DELAY_MAX_TICKS, SV_DELAY_STALL_TICKS, SV_DELAY_KV_HIGH) = range(28)

# Batching and admission modes (``server.batching``, ``server.admission``).
MIXED, PREFILL_FIRST = BATCHING_CODES.values()
OPTIMISTIC, RESERVE_FULL, NEW_TOKEN_RATIO = ADMISSION_CODES.values()
# SGLang's estimate of the tokens its running requests will still add (srt/environ.py defaults): a share of each
# one's remaining max_new_tokens (at most CLIP tokens each), starting at INIT, falling linearly to INIT x MIN_FACTOR
# over DECAY_STEPS decode iterations without a retraction, reset to INIT when the server goes idle, and set after a
# retraction to (tokens decoded + RETRACT_STEPS per request) / their max_new_tokens (srt/managers/schedule_batch.py)
NEW_TOKEN_RATIO_INIT_PPM, NEW_TOKEN_RATIO_MIN_FACTOR, NEW_TOKEN_RATIO_DECAY_STEPS = 700_000, 0.14, 600
NEW_TOKEN_RATIO_CLIP_TOKENS, NEW_TOKEN_RATIO_RETRACT_STEPS = 4096, 20
# SGLang's receive skipper (sglang 0.5.14 srt/managers/scheduler_recv_skipper.py, weights srt/environ.py:294-297):
# after each iteration its counter grows by 1 for a decode (or an idle turn of the loop) and by 1000 for any other
# iteration (a prefill or a mixed one); new requests are read only once it reaches the interval, then it restarts at 0
RECV_WEIGHT_DECODE, RECV_WEIGHT_OTHER = 1, 1000


def series_rows_per_replica(replicas: int) -> int:
    """Rows of each replica's time series (``SERIES_MAX_ROWS`` shared out, at least ``SERIES_MIN_ROWS``)."""
    return max(SERIES_MIN_ROWS, SERIES_MAX_ROWS // replicas)


def server_params(route_slack_tokens, min_batch_size, wait_timeout_s,
                  block_size_tokens, static_blocks, max_waiting_requests, horizon_s, n_classes, swap_s_per_token,
                  batching=MIXED, admission=OPTIMISTIC, event_skipping=True, window_s=(0.0, 0.0),
                  speculation=(0, 1.0, 0.0), prefix_unit_tokens=0, kv_link_s_per_token=0.0, recv_interval=1,
                  adp_balance=(0, 0, 0), prefill_delay=(0, 0.0, 0, 0, 0.0)):
    """The server tuple of ``run_nb`` (integers as int64, times in seconds, modes as their codes), shared by every
    replica (each replica's KV cache, batch limit, token budget and role are its counters ``C_CAPACITY_BLOCKS`` ..
    ``C_ROLE``, its step time its row of ``steps``). ``route_slack_tokens``: how far above the least loaded replica
    prefix affinity may route (one iteration's token budget). ``kv_link_s_per_token``: seconds one prompt token's
    KV takes on a prefill replica's link to the decode pool.
    ``event_skipping``: run stretches of decode-only iterations in one step (``skip_decodes_nb``); False
    decides every iteration in full (the same results, slower: the reference the tests compare with).
    ``window_s``: (start, end) of the steady-state window (``simulate.steady_window_s``), [start, end).
    ``speculation``: (draft tokens k, expected tokens emitted per verification, draft cost as a share of a plain
    decode iteration); k = 0 decodes one token per iteration. ``prefix_unit_tokens``: tokens of one prefix cache
    unit (a whole number of KV blocks; 0: no prefix caching). ``recv_interval``: SGLang's scheduler receive interval
    (1: new requests are seen at every decision; ``gates.receive_nb``). ``adp_balance``: (attention data-parallel
    ranks, batching wait iterations, time-out iterations) of TensorRT-LLM's attention-DP balance gate (ranks 0: no
    gate; ``gates.adp_hold_nb``). ``prefill_delay``: (ranks, target fill, most turns held, stall turns, KV
    watermark) of ATOM's prefill delayer (ranks 0: none; ``gates.delay_hold_nb``)."""
    i = np.int64
    draft_tokens, tokens_per_decode, draft_cost = speculation
    return (i(min_batch_size), float(wait_timeout_s),
            i(block_size_tokens), i(static_blocks), i(max_waiting_requests), float(horizon_s), i(n_classes),
            float(swap_s_per_token), i(batching), i(admission), i(bool(event_skipping)), float(window_s[0]),
            float(window_s[1]), i(draft_tokens), float(tokens_per_decode), float(draft_cost), i(prefix_unit_tokens),
            i(route_slack_tokens), float(kv_link_s_per_token), i(recv_interval), i(adp_balance[0]), i(adp_balance[1]),
            i(adp_balance[2]), i(prefill_delay[0]), float(prefill_delay[1]), i(prefill_delay[2]), i(prefill_delay[3]),
            float(prefill_delay[4]))


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
    counters[:, C_NEW_TOKEN_RATIO_PPM] = NEW_TOKEN_RATIO_INIT_PPM
    counters[:, C_ACCEPTS] = 1
    counters[:, C_DELAY_PREV_PENDING] = -1
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


def start_outputs(replicas: int) -> tuple[np.ndarray, np.ndarray]:
    """The statistics rows and the outcome of ``run_nb`` before the first event."""
    stats = np.zeros((replicas, N_STATS))
    stats[:, S_SERIES_STRIDE] = 1.0
    outcome = np.zeros(N_OUTCOME)
    outcome[O_PAUSE_AT_S] = np.inf
    return stats, outcome
