"""How much memory one run will take, estimated from the scenario before anything is drawn, and the limit on it.

A run's arrays grow with a few quantities, each one term here (bytes at the run's peak):

- ``requests``: per request, the drawn arrays, the packed state the compiled loop reads and writes (the pristine
  copy and the run's), the KV transfer list, the per-request records and the summary's temporaries
  (``REQUEST_BYTES``);
- ``prefix blocks``: with ``server.prefix_caching``, the ids of every prompt's prefix blocks (a class's
  ``shared_prefix_tokens``, conversations' growing prompts, a trace's ``hash_ids``), with the sorting and counting
  done on them before the run (``PREFIX_ID_BYTES`` per id);
- ``prefix caches``: each replica's cache of prefix units (four int64 rows per distinct unit);
- ``replica lists``: each replica's waiting, running and batch lists, its block scratch (``server.block_size_tokens``
  int64 entries) and its counters, clock, route and statistics (``REPLICA_FIXED_WORDS``);
- ``time series``: each replica's rows of the iteration series (``kernel.series_rows_per_replica``) with its columns
  per class, and the frames of the rows filled (all of them, in a long run): each replica's, and their
  concatenation;
- ``trace``: a replayed trace's rows and block ids as read (the read is cached, so it is held during the run).

Counts come from the scenario: ``num_requests`` (or ``duration_s`` x the rate), each class's share and its token
distributions' means (an upper bound on the mean of what is drawn: draws are clipped), and for a trace the rows and
ids of its cut (the read itself is bounded by the trace limits). ``check_run_memory`` refuses, with one line naming
the largest term, a run whose estimate is above ``caps.run_memory_mib``; ``simulate.prepare`` calls it before it
draws anything. ``KEY_TERMS`` says, for every scenario key, which terms it moves: a key added without an entry
fails a test, so a new feature that adds an array adds its term.

The estimate is checked against the peak that ``tracemalloc`` measures (``tests/test_memory_estimate.py``): within
``ESTIMATE_FACTOR`` of it: never below it (it refuses, so it must not err low), at most that many times above, on
drawn scenarios. Large runs come within 10-50% of their peak; small ones are far above it, as the time series' arrays
are counted whole (a run's length in iterations is not known before it runs).
"""

from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass

from ..scenario.caps import MIB
from ..scenario.config import ModelConfig, Scenario, TokenDist, fleet_pools
from ..scenario.errors import ScenarioError
from .kernel.state import (N_CLOCK, N_COUNTERS, N_PC_ROWS, N_ROUTE, N_SERIES_FIXED, N_STATS, series_rows_per_replica,
                           waiting_capacity)
from .layout import N_FLOAT_FIELDS, N_INT_FIELDS
from .traces import read_trace
from .workload import conversation_slots

WORD_BYTES = 8  # int64 and float64
DRAWN_ARRAYS = 8  # per request: gaps and arrivals, class ids, prompt and output lengths, the predictor's lengths
RECORD_COLUMNS = 24  # per request: the records frame's columns and the summary's per-class copies of them
REQUEST_BYTES = WORD_BYTES * (DRAWN_ARRAYS + 2 * (N_INT_FIELDS + N_FLOAT_FIELDS) + 1 + RECORD_COLUMNS)
PREFIX_ID_BYTES = 8 * WORD_BYTES  # per prefix block id: the ids, their owners, positions, sort and unique passes
SERIES_COPIES = 3  # the series array, each replica's frame of the rows it filled, their concatenation
# per replica, whatever the load: its counters, clock, two running totals, route and statistics (``kernel.state``)
REPLICA_FIXED_WORDS = N_COUNTERS + N_CLOCK + 2 + N_ROUTE + N_STATS
BASE_BYTES = 2 * MIB  # what any run holds besides: small tables, the summary, pandas' working memory
ESTIMATE_FACTOR = 4.0  # the estimate is at least the measured peak and at most this many times it (tested)

TERM_WORDS = {"requests": "the requests' state and records", "prefix blocks": "the prompts' prefix block ids",
              "prefix caches": "the replicas' prefix caches", "replica lists": "the replicas' lists and block scratch",
              "time series": "the iteration time series", "trace": "the replayed trace"}
TERMS = tuple(TERM_WORDS)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes each term of one run takes at its peak (``TERMS``), and the counts behind them."""

    terms: dict[str, float]
    requests: int
    prefix_ids: int

    @property
    def total_bytes(self) -> float:
        return BASE_BYTES + sum(self.terms.values())

    def largest(self) -> tuple[str, float]:
        """The term that takes the most, and its bytes."""
        return max(self.terms.items(), key=lambda item: item[1])


def mean_tokens(dist: TokenDist, limit_tokens: int) -> float:
    """The mean of a token distribution as drawn, from above (``TokenDist.mean_bound``), at most the limit (every
    draw is clipped to it)."""
    return min(dist.mean_bound(), limit_tokens)


def _std_tokens(dist: TokenDist, mean: float) -> float:
    """The standard deviation of a token distribution's law (of mean ``mean``)."""
    if dist.dist == "uniform":
        return (dist.high - dist.low) / math.sqrt(12)
    if dist.dist == "geometric":
        return math.sqrt(max(mean * (mean - 1.0), 0.0))
    if dist.dist == "lognormal":
        return dist.cv * mean
    return 0.0  # constant


def longest_tokens(dist: TokenDist, draws: float, limit_tokens: int) -> float:
    """The longest of ``draws`` draws of a token distribution, from above in expectation: at most its largest value
    and the limit, and E[max] <= mean + std x sqrt(n - 1) (the Hartley-David bound)."""
    mean = dist.mean_bound()
    return min(dist.upper_bound(), limit_tokens, mean + _std_tokens(dist, mean) * math.sqrt(max(draws - 1.0, 0.0)))


def synthetic_requests(scenario: Scenario) -> int:
    """Requests a synthetic workload draws: ``num_requests``, else ``duration_s`` x the rate (plus the last chunk of
    gaps drawn past it), at most the limit per run."""
    workload, caps = scenario.workload, scenario.origin.caps
    if workload.num_requests is not None:
        return workload.num_requests
    expected = workload.duration_s * workload.arrival.rate_per_s
    return int(min(expected + 3 * math.sqrt(expected) + 4096, caps.requests_per_run + 4096))


def turn_counts(requests: int, slots: int, turns: int) -> list[int]:
    """How many of a class's ``requests`` are each turn of a conversation (``workload.conversations``: arrivals dealt
    in turn to ``slots`` conversations in flight, ``turns`` turns each): first turns first."""
    cycle = slots * turns
    whole, rest = divmod(requests, cycle)
    return [whole * slots + min(max(rest - t * slots, 0), slots) for t in range(turns)]


def conversation_tokens(counts: list[int], prompt_mean: float, output_mean: float, first_fresh: float,
                        limit_tokens: int) -> tuple[float, float]:
    """(prompt tokens of all the turns, tokens new to each turn in all) of conversations with ``counts`` requests at
    each turn, from above: turn t carries the t - 1 turns before it (each its prompt and output) and its own new
    tokens, at most the limit; a first turn's own tokens beyond the class's shared prefix are ``first_fresh``."""
    carried = [min(t * prompt_mean + (t - 1) * output_mean, limit_tokens) for t in range(1, len(counts) + 1)]
    fresh = [first_fresh, *(b - a for a, b in zip(carried, carried[1:]))]
    return sum(c * p for c, p in zip(counts, carried)), sum(c * f for c, f in zip(counts, fresh))


def synthetic_prefix_ids(scenario: Scenario, requests: int) -> tuple[float, float]:
    """(prefix block ids, distinct units) of a synthetic workload with prefix caching: per class, its requests x
    the whole blocks of min(prompt, shared prefix) (a conversation: of its whole prompt, which grows with each
    turn); distinct units: each class's shared blocks (as many as its longest prompt reaches: ``longest_tokens``),
    plus the tokens new to each conversation's turn (a first turn's: none if no prompt outgrows the shared prefix,
    else at most the mean prompt)."""
    caps, block, workload = scenario.origin.caps, scenario.server.block_size_tokens, scenario.workload
    ids = units = 0.0
    for k, cls in enumerate(workload.classes):
        n = math.ceil(requests * cls.share)
        prompt = mean_tokens(cls.prompt_tokens, caps.tokens_per_request)
        longest = longest_tokens(cls.prompt_tokens, n, caps.tokens_per_request)
        units += min(longest, cls.shared_prefix_tokens) / block
        if cls.conversation_turns > 1:
            counts = turn_counts(n, conversation_slots(workload, k), cls.conversation_turns)
            output = mean_tokens(cls.output_tokens, caps.tokens_per_request)
            first_fresh = prompt if longest > cls.shared_prefix_tokens else 0.0
            carried, fresh = conversation_tokens(counts, prompt, output, first_fresh, caps.tokens_per_request)
            ids += carried / block
            units += fresh / block
        else:
            ids += n * min(prompt, cls.shared_prefix_tokens) / block
    return ids, units


def _trace_counts(scenario: Scenario) -> tuple[int, int, float]:
    """(requests, prefix block ids, bytes held) of a replayed trace's cut, from its read (cached: the run reads it
    again for free)."""
    trace, origin, workload = scenario.workload.trace, scenario.origin, scenario.workload
    rows = read_trace(origin.trace_file(trace.path), trace.format, workload.num_requests, origin.caps,
                      name=trace.path)
    arrays = [rows.arrival_s, rows.prompt_tokens, rows.output_tokens, rows.class_names, rows.block_offsets,
              rows.block_ids]
    held = sum(a.nbytes for a in arrays if a is not None)
    ids = int(rows.block_offsets[-1]) if rows.block_offsets is not None else 0
    return len(rows.arrival_s), ids, float(held)


def estimate_run_bytes(scenario: Scenario) -> MemoryEstimate:
    """The bytes one run of ``scenario`` takes at its peak, term by term (``TERMS``), from the scenario alone (and,
    for a trace, the bounded read of its cut)."""
    server, fleet = scenario.server, scenario.fleet
    trace_bytes = 0.0
    if scenario.workload.trace is not None:
        requests, ids, trace_bytes = _trace_counts(scenario)
        units = float(ids)
    else:
        requests = synthetic_requests(scenario)
        ids, units = synthetic_prefix_ids(scenario, requests)
    if not server.prefix_caching:
        ids, units = 0, 0.0
    replicas = fleet.slots
    max_batch = max(s.total_batch_size for s, _, _ in fleet_pools(scenario))
    waiting = waiting_capacity(requests, scenario.limits.max_waiting_requests, max_batch)
    series_rows = replicas * series_rows_per_replica(replicas)
    columns = N_SERIES_FIXED + 2 * len(scenario.workload.classes)
    terms = {
        "requests": float(requests) * REQUEST_BYTES,
        "prefix blocks": float(ids) * PREFIX_ID_BYTES,
        "prefix caches": float(replicas) * N_PC_ROWS * (units + 1) * WORD_BYTES,
        "replica lists": float(replicas) * (waiting + 2 * max_batch + server.block_size_tokens
                                            + REPLICA_FIXED_WORDS) * WORD_BYTES,
        "time series": float(series_rows) * columns * WORD_BYTES * SERIES_COPIES,
        "trace": trace_bytes,
    }
    return MemoryEstimate(terms, requests, int(ids))


def check_run_memory(scenario: Scenario) -> MemoryEstimate:
    """The estimate (``estimate_run_bytes``), or ``ScenarioError`` naming its largest term and the limit
    ``run_memory_mib`` when the run would take more."""
    estimate = estimate_run_bytes(scenario)
    caps = scenario.origin.caps
    limit_bytes = caps.run_memory_mib * MIB
    if estimate.total_bytes > limit_bytes:
        term, size = estimate.largest()
        raise ScenarioError(
            f"this run would take about {estimate.total_bytes / MIB:,.0f} MiB of memory, more than the limit of "
            f"{caps.run_memory_mib:,} MiB (run_memory_mib), most of it {TERM_WORDS[term]} ({size / MIB:,.0f} MiB"
            f"{_term_detail(term, estimate, scenario)}); {TERM_FIX[term]}{caps.raise_hint('run_memory_mib')}")
    return estimate


def _term_detail(term: str, estimate: MemoryEstimate, scenario: Scenario) -> str:
    """The count behind a term, in words."""
    if term == "requests":
        return f" for {estimate.requests:,} requests"
    if term == "prefix blocks":
        return f": {estimate.prefix_ids:,} block ids of {scenario.server.block_size_tokens} tokens"
    if term in ("prefix caches", "replica lists", "time series"):
        return f" over {scenario.fleet.slots} replicas"
    return ""


TERM_FIX = {
    "requests": "simulate fewer requests (workload.num_requests or duration_s)",
    "prefix blocks": "share a shorter prefix (workload.classes[].shared_prefix_tokens), use fewer turns or shorter "
                     "prompts, a larger server.block_size_tokens, or turn server.prefix_caching off",
    "prefix caches": "use fewer replicas or a larger server.block_size_tokens with prefix caching",
    "replica lists": "use fewer replicas, a smaller server.block_size_tokens or limits.max_waiting_requests",
    "time series": "use fewer replicas or classes",
    "trace": "replay fewer rows of the trace (workload.num_requests)",
}

# Every scenario key (``config.keys_reference``) and the terms it moves; () for a key that changes no array's size.
# A key missing here fails ``tests/test_memory_estimate.py``: a new key is placed here the day it is added.
_NONE: tuple[str, ...] = ()
_REQUESTS = ("requests", "prefix blocks", "prefix caches", "replica lists")
_PROMPTS = ("prefix blocks", "prefix caches")
KEY_TERMS: dict[str, tuple[str, ...]] = {
    **{f"workload.classes[].{key}": _NONE for key in (
        "name", "priority", "tier_weight", "sla_ttft_ms", "sla_e2e_ms", "timeout_ms")},
    "workload.classes[].share": _PROMPTS,
    **{f"workload.classes[].{which}.{key}": _PROMPTS
       for which in ("prompt_tokens", "output_tokens") for key in ("dist", "value", "low", "high", "mean", "max")},
    "workload.classes[].prompt_tokens.cv": _NONE, "workload.classes[].output_tokens.cv": _NONE,
    "workload.classes[].shared_prefix_tokens": _PROMPTS,
    "workload.classes[].conversation_turns": _PROMPTS,
    "workload.classes[].turn_gap_s": _NONE,
    "workload.num_requests": _REQUESTS, "workload.duration_s": _REQUESTS,
    "workload.arrival.process": _NONE, "workload.arrival.rate_per_s": _REQUESTS, "workload.arrival.cv": _NONE,
    "workload.arrival.rate_curve": _REQUESTS, "workload.arrival.shape": _REQUESTS,
    "workload.arrival.curve_period_s": _REQUESTS, "workload.arrival.curve_start_s": _NONE,
    "workload.trace.path": ("requests", "prefix blocks", "prefix caches", "trace"),
    "workload.trace.format": ("requests", "prefix blocks", "prefix caches", "trace"),
    "workload.trace.rate_scale": _NONE, "workload.trace.jitter_ms": _NONE,
    "name": _NONE, "seed": _NONE,
    **{f"server.{key}": _NONE for key in (
        "step_model", "step_time_ms", "max_batched_tokens", "min_batch_size", "wait_timeout_ms",
        "kv_capacity_tokens", "kv_allocation", "max_seq_len", "batching", "admission", "gpu", "model", "quant",
        "kv_quant", "tensor_parallel", "engine", "engine_version", "kernel_tables", "calibration",
        "gpu_memory_utilization", "activation_reserve_gib",
        "host_link_gb_s", "expert_parallel", "attention_data_parallel", "expert_imbalance",
        "scheduler_recv_interval", "attention_dp_balance", "attention_dp_batching_wait_iters",
        "attention_dp_timeout_iters", "prefill_delayer", "prefill_delayer_target_fill", "prefill_delayer_max_ticks",
        "prefill_delayer_stall_ticks", "prefill_delayer_kv_high", "request_fixed_ms")},
    **{f"server.model_config.{f.name}": _NONE for f in dataclasses.fields(ModelConfig)},
    "server.max_batch_size": ("replica lists",),
    "server.block_size_tokens": ("prefix blocks", "prefix caches", "replica lists"),
    "server.prefix_caching": _PROMPTS,
    **{f"server.speculative.{key}": _NONE for key in ("draft_tokens", "acceptance", "draft_model", "draft_cost")},
    **{f"policy.{key}": _NONE for key in (
        "name", "preemptive", "aging_per_s", "max_wait_ms", "weights", "prefill_token_weight", "alpha", "beta",
        "gamma", "margin", "default_sla_ms", "preempt_mode", "preempt_overhead_ms", "predictor_error")},
    "fleet.replicas": ("prefix caches", "replica lists", "time series"),
    "fleet.router": _NONE, "fleet.mode": _NONE, "fleet.kv_link_gb_s": _NONE,
    "fleet.autoscale.max_replicas": ("prefix caches", "replica lists", "time series"),
    **{f"fleet.autoscale.{key}": _NONE for key in (
        "min_replicas", "signal", "target", "interval_s", "provision_s", "scale_up_delay_s", "scale_down_delay_s",
        "cooldown_s")},
    "fleet.spot_interruptions_per_hour": _NONE, "fleet.spot_notice_s": _NONE,
    **{f"fleet.{pool}.autoscale.max_replicas": ("prefix caches", "replica lists", "time series")
       for pool in ("groups[]", "prefill", "decode")},  # a group's is refused (config.Fleet._check_scaling)
    **{f"fleet.{pool}.autoscale.{key}": _NONE for pool in ("groups[]", "prefill", "decode") for key in (
        "min_replicas", "signal", "target", "interval_s", "provision_s", "scale_up_delay_s", "scale_down_delay_s",
        "cooldown_s")},
    **{f"fleet.{table}.{key}": _NONE for table in ("groups[]", "prefill", "decode") for key in (
        "gpu", "quant", "tensor_parallel", "calibration", "step_time_ms", "kv_capacity_tokens",
        "max_batched_tokens")},
    **{f"fleet.{table}.{key}": ("prefix caches", "replica lists", "time series") if key == "replicas" else
       ("replica lists",) for table in ("groups[]", "prefill", "decode") for key in ("replicas", "max_batch_size")},
    "limits.max_waiting_requests": ("replica lists",), "limits.max_drain_s": _NONE,
}
