"""``simulate(scenario) -> Result``: draw the workload, check it can be served, run the compiled loop.

This module is the only bridge between typed configuration and the arrays of
the compiled loop; it also checks impossible set-ups before running (a request
longer than the whole KV cache would never be served) and estimates the
offered load so that overloaded runs are reported as such.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ..hardware.roofline import (RooflineProfile, kv_capacity_tokens, peak_profile, roofline_profile,
                                 roofline_step_params)
from ..hardware.kernel_tables import coverage, table_step
from ..hardware.steptime import (ALL_PHASES, DECODE_PHASE, FIXED, PREFILL_PHASE, request_work_s_nb, step_params,
                                 step_rows)
from ..hardware.tables import Efficiency
from ..scenario.caps import Caps
from ..scenario.config import Autoscale, Fleet, Scenario, Server, fleet_pools, load_scenario
from ..scenario.errors import ScenarioError
from ..scenario.labels import format_label, parallel_label
from ..scenario.metric_table import WARMUP_SHARE
from ..scenario.origin import Origin
from ..scenario.schedulers import loop_gates
from ..scenario.registry import ADMISSION_CODES, BATCHING_CODES, POOL_ROLES, ROUTER_CODES
from ..scenario.summary import SteadyState, Summary, SystemMetrics
from ..scenario.table_names import DATA_ROOT
from . import kernel, stopping
from .layout import K_SLA_TTFT_S, K_WINDOW_TOKENS, pack_requests
from .memory import check_run_memory
from .metrics import add_service_shares, request_records, summarize
from .policies import policy_inputs, predicted_tokens
from .steady import steady_state
from .windows import Cut, windows
from .autoscale import UP, Autoscaler, provision_s
from .workload import RequestArrays, build_requests

UNLIMITED_BLOCKS = 2 ** 62
STOP_REASONS = {kernel.DRAINED: "drained", kernel.QUEUE_BOUND: "queue_bound", kernel.HORIZON: "horizon",
                kernel.WALL_CLOCK: "wall_clock"}
SIMULTANEOUS_RATE_PER_S = 1e9  # "all at once": arrivals about a nanosecond apart
SECONDS_PER_HOUR = 3600.0
SPOT_STREAM = 1  # the spot interruptions' generator: seeded with (seed, this), apart from the workload's draws
SLICE_S = 0.05            # wall time of one call of the compiled loop, between checks of the budget


@dataclass(frozen=True)
class Result:
    """Everything one run produced: the JSON-ready summary and two DataFrames for plots."""

    scenario: Scenario
    summary: Summary
    requests: pd.DataFrame
    timeseries: pd.DataFrame


def _step_params(server: Server, profile: RooflineProfile) -> tuple[np.ndarray, int]:
    """The step row (``steptime``: fixed, roofline, or roofline timed by measured operator tables) and the KV
    capacity in tokens (0 = unlimited) of ``server``."""
    if server.step_model == "fixed":
        step = step_params(FIXED, step_time_s=server.step_time_ms / 1000.0)
        return step, server.kv_capacity_tokens
    step = roofline_step_params(profile)
    covered = coverage(server)
    if covered.key is not None:
        step = table_step(step, covered.key, server.engine)
    return step, kv_capacity_tokens(server, profile)


def server_step(server: Server) -> np.ndarray:
    """The step row the compiled loop times ``server``'s iterations with (fixed, roofline, or measured operator
    tables where they cover it): for pages and the command line that draw or print iteration times."""
    return _step_params(server, roofline_profile(server))[0]


def _check_fits(server: Server, requests: RequestArrays, capacity_tokens: int, where: str = "",
                prompt_only: bool = False) -> None:
    """Every request must fit alone on every replica, or the loop could never serve it (``where``: the group the
    capacity belongs to, named in the message; ``prompt_only``: a prefill pool's replica, which holds a prompt's KV
    only)."""
    seq_tokens = requests.prompt_tokens + (1 if prompt_only else requests.output_tokens)
    if server.max_seq_len > 0 and len(seq_tokens) and seq_tokens.max() > server.max_seq_len:
        r = int(np.argmax(seq_tokens))
        raise ScenarioError(f"server.max_seq_len = {server.max_seq_len} is below request {r}'s prompt + output = "
                            f"{seq_tokens[r]} tokens; raise max_seq_len or cap the token distributions' max")
    if capacity_tokens == 0:
        return
    bs = server.block_size_tokens
    capacity_blocks = capacity_tokens // bs
    if server.kv_allocation == "static":
        need_blocks = math.ceil(server.max_seq_len / bs)
        if need_blocks > capacity_blocks:
            raise ScenarioError(f"server.max_seq_len = {server.max_seq_len} reserves {need_blocks * bs} KV tokens per "
                                f"request but the cache holds {capacity_blocks * bs}; lower max_seq_len or use paged")
        return
    peak_blocks = -(-(seq_tokens - 1) // bs)
    if len(peak_blocks) and peak_blocks.max() > capacity_blocks:
        r = int(np.argmax(peak_blocks))
        raise ScenarioError(
            f"request {r} needs {peak_blocks[r] * bs} KV tokens (prompt {requests.prompt_tokens[r]}"
            f"{'' if prompt_only else f' + output {requests.output_tokens[r]}'}) but the KV cache{where} holds "
            f"{capacity_blocks * bs} "
            f"(server.kv_capacity_tokens or GPU memory); enlarge the cache or cap prompt/output max")


def speculative_params(server: Server, profile: RooflineProfile) -> tuple[int, float, float]:
    """(draft tokens k, expected tokens per decode iteration, draft step cost as a share of a plain decode
    iteration) of ``server.speculative``, the cost from its draft model's weights (``profile.draft_cost``) unless
    given; (0, 1, 0) without speculative decoding."""
    spec = server.speculative
    if spec is None:
        return 0, 1.0, 0.0
    cost = spec.draft_cost if spec.draft_cost is not None else profile.draft_cost
    return spec.draft_tokens, spec.tokens_per_decode, cost


def prefix_units_of(server: Server, requests: RequestArrays) -> tuple[int, np.ndarray, int]:
    """(tokens per prefix unit, the run's prefix ids made dense, how many distinct) with
    ``server.prefix_caching``; (0, no ids, 0) without. A unit is a whole number of KV blocks."""
    if not server.prefix_caching:
        return 0, np.zeros(0, np.int64), 0
    if requests.prefix_ids is None:
        return server.block_size_tokens, np.zeros(0, np.int64), 0
    unit = requests.prefix_block_tokens
    if unit % server.block_size_tokens:
        raise ScenarioError(f"server.block_size_tokens = {server.block_size_tokens} does not divide the prefix "
                            f"blocks of {unit} tokens; choose a block size that does (16 divides 512)")
    distinct, dense = np.unique(requests.prefix_ids, return_inverse=True)
    return unit, dense.astype(np.int64), len(distinct)


def cached_prompt_tokens(requests: RequestArrays, unit_tokens: int) -> np.ndarray | None:
    """Per request, the prompt tokens an unlimited prefix cache shared by the whole fleet would hold at its
    arrival: its leading units (all but its last prompt token at most) that an earlier request's prompt had. An
    upper bound on what the simulation finds (its caches are per replica, bounded, and filled only once a prefill
    ends), so the offered load built on it errs low. None without prefix caching."""
    if not unit_tokens or requests.prefix_ids is None:
        return None
    offsets, ids = requests.prefix_offsets, requests.prefix_ids
    counts = np.diff(offsets)
    owner = np.repeat(np.arange(len(counts)), counts)  # the request each unit belongs to
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    seen = owner[first][inverse] < owner  # an earlier request had this unit
    position = np.arange(len(ids)) - np.repeat(offsets[:-1], counts)
    missing = np.where(seen, np.iinfo(np.int64).max, position)  # the first unseen unit ends the leading run
    leading = counts.copy()
    has = counts > 0
    if has.any():
        firsts = np.minimum.reduceat(missing, offsets[:-1][has])
        leading[has] = np.minimum(firsts, counts[has])
    usable = np.minimum(leading, (requests.prompt_tokens - 1) // unit_tokens)
    return np.maximum(usable, 0) * unit_tokens


def group_work_s(group: "GroupInputs", requests: RequestArrays, cached_tokens: np.ndarray | None = None) -> float:
    """Estimated GPU seconds one replica of ``group`` spends per request of the workload
    (``steptime.request_work_s_nb``), with slots = min(max_batch_size, its KV cache / mean KV per request): on its
    part of the request, for a pool of a disaggregated fleet."""
    server = group.server
    mean_context_tokens = float(np.mean(requests.prompt_tokens + requests.output_tokens / 2.0))
    slots = float(server.total_batch_size)
    if group.capacity_tokens > 0:
        slots = max(1.0, min(slots, group.capacity_tokens / mean_context_tokens))
    phase = {"prefill": PREFILL_PHASE, "decode": DECODE_PHASE}.get(group.role, ALL_PHASES)
    return request_work_s_nb(group.step, requests.prompt_tokens, requests.output_tokens, server.total_batched_tokens,
                             slots, mean_context_tokens, *group.speculation, cached_tokens, phase)


def offered_load(prepared: "Prepared") -> float:
    """Estimated utilisation rho = arrival rate / the fleet's service rate, the sum over its groups of replicas /
    GPU seconds per request (``Prepared.work_s``): arrival rate x seconds per request / replicas for identical
    replicas. A disaggregated fleet is as loaded as its busiest stage (``stage_loads``): the prefill pool, the
    decode pool, or the prefill servers' links (mean transfer seconds per request / prefill replicas).

    Exact for the fixed model with max_batch_size = 1 on one replica (rho = lambda E[S] of M/G/1); an
    estimate otherwise (with prefix caching it counts ``cached_prompt_tokens`` as cached).
    """
    return max(stage_loads(prepared).values())


LINK_STAGE = "link"  # the prefill servers' links to the decode pool, as a stage of ``stage_loads``


def stage_loads(prepared: "Prepared", part: tuple[RequestArrays, np.ndarray | None, float] | None = None
                ) -> dict[str, float]:
    """The estimated utilisation of each stage of the fleet (``offered_load``'s terms): the replicas of each role
    (``POOL_ROLES``), and on a disaggregated fleet the prefill servers' links (``LINK_STAGE``); all 0 when the
    requests arrive at once (no rate to speak of). ``part``: (some of the run's requests, their cached prompt
    tokens, their arrival rate), whose own work and rate replace the run's: the load of one window
    (``window_loads``)."""
    groups = prepared.groups
    if part is None:
        requests, work_s = prepared.requests, prepared.work_s
        n = len(requests)
        span_s = requests.arrival_s[-1] - requests.arrival_s[0] if n > 1 else 0.0
        rate_per_s = (n - 1) / span_s if span_s > 0 else 0.0
    else:
        requests, cached, rate_per_s = part
        work_s = tuple(group_work_s(g, requests, cached) for g in groups)
    loads = {}
    for role in dict.fromkeys(g.role for g in groups):
        pool = [(g, w) for g, w in zip(groups, work_s) if g.role == role]
        idle = rate_per_s == 0.0 or any(w == 0.0 for _, w in pool)  # nothing to do (a decode pool, one-token outputs)
        loads[role] = 0.0 if idle else rate_per_s / sum(g.replicas / w for g, w in pool)
        if role == POOL_ROLES[1]:  # the prefill servers' links carry every prompt's KV
            link_s = float(np.mean(requests.prompt_tokens)) * kv_link_s_per_token(prepared.scenario, groups)
            loads[LINK_STAGE] = rate_per_s * link_s / sum(g.replicas for g, _ in pool)
    return loads


def window_loads(prepared: "Prepared", cut: Cut, factors: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """The offered load of each window of ``cut``: its arrival rate and its own requests' work (``stage_loads``,
    the busiest stage; each stage's times its factor in the window when given, ``serving_factors``); 0 for a
    window without arrivals."""
    requests = prepared.requests
    loads = np.zeros(cut.count)
    order = np.argsort(cut.slot, kind="stable")
    bounds = np.searchsorted(cut.slot[order], np.arange(cut.count + 1))
    for w in range(cut.count):
        rows = order[bounds[w]:bounds[w + 1]]
        if len(rows):
            part = RequestArrays(requests.arrival_s[rows], requests.prompt_tokens[rows], requests.output_tokens[rows],
                                 requests.class_id[rows], requests.unrelated_output_tokens[rows])
            cached = None if prepared.cached_tokens is None else prepared.cached_tokens[rows]
            stages = stage_loads(prepared, (part, cached, len(rows) / cut.widths_s[w]))
            loads[w] = max(v * (1.0 if factors is None else factors[stage][w]) for stage, v in stages.items())
    return loads


def serving_factors(prepared: "Prepared", scalers: tuple, edges_s: np.ndarray,
                    sim_time_s: float) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Per stage of ``stage_loads`` (a role, or the prefill servers' links), its pool's slots over the replicas of
    it taking requests, in each window between ``edges_s`` and over the run: an autoscaled pool's load is its
    work over the servers it had, not over every slot (1 where none took requests, and for a pool no autoscaler
    holds)."""
    per_window, overall, first = {}, {}, 0
    by_offset = {s.offset: s for s in scalers}
    # the share of each window the run lasted: a fixed slot's presence, against which serving ones are counted
    lasted = np.clip((np.minimum(edges_s[1:], sim_time_s) - edges_s[:-1]) / np.diff(edges_s), 0.0, 1.0)
    for group in prepared.groups:
        scaler = by_offset.get(first)
        if scaler is None:
            window, run = np.ones(len(edges_s) - 1), 1.0
        else:
            serving = scaler.replicas_over(edges_s, serving=True)
            window = np.where(serving > 0, group.replicas * lasted / np.maximum(serving, 1e-9), 1.0)
            serving_s = scaler.serving_s()
            run = group.replicas * sim_time_s / serving_s if serving_s > 0 else 1.0
        stages = (group.role, LINK_STAGE) if group.role == POOL_ROLES[1] else (group.role,)
        for stage in stages:
            per_window[stage], overall[stage] = window, run
        first += group.replicas
    return per_window, overall


def kv_link_s_per_token(scenario: Scenario, groups: tuple) -> float:
    """Seconds one prompt token's KV takes on a prefill server's link to the decode pool (0 when colocated)."""
    if scenario.fleet.mode != "disaggregated":
        return 0.0
    return groups[0].kv_bytes_per_token / (scenario.fleet.kv_link_gb_s * 1e9)


def estimated_stage_loads(scenario: Scenario) -> dict[str, float]:
    """``stage_loads`` of the scenario's workload, without simulating it (the planner splits a disaggregated
    fleet's servers between its pools by them)."""
    return stage_loads(prepare(scenario))


def estimated_offered_load(scenario: Scenario) -> float:
    """``offered_load`` of the scenario's workload, without simulating it (the planner prunes fleets with it:
    replicas whose estimate is 1 or more are unstable by definition)."""
    return offered_load(prepare(scenario))


def steady_window_s(arrival_s: np.ndarray) -> tuple[float, float]:
    """(start, end) of the steady-state window of requests arriving at ``arrival_s`` (sorted): from the first
    arrival plus ``WARMUP_SHARE`` of the arrival span to the last arrival; the whole run, (0, inf), when all
    arrive at once (there is no steady state to measure). Rates and utilisation are reported over it by default,
    whole-run ones beside them (keys ending in ``_run``)."""
    first_s, last_s = float(arrival_s[0]), float(arrival_s[-1])
    if last_s <= first_s:
        return 0.0, math.inf
    return first_s + WARMUP_SHARE * (last_s - first_s), last_s


def _deadlines_s(scenario: Scenario, requests: RequestArrays) -> np.ndarray:
    timeout_s = np.array([c.timeout_ms / 1000.0 if c.timeout_ms else np.inf for c in scenario.workload.classes])
    return requests.arrival_s + timeout_s[requests.class_id]


def _utilisation(stats: np.ndarray, term: int, seconds: int, rate_ratios: np.ndarray | None) -> float | None:
    """Utilisation while busy of the compute or memory term (``term``): its seconds at the effective rate, each
    replica's times its effective rate's share of the datasheet peak (``rate_ratios``), over the iteration seconds
    they came with (``seconds``); None under the fixed step model (``rate_ratios`` None) or without an
    iteration."""
    busy_s = stats[:, seconds].sum()
    if rate_ratios is None or busy_s <= 0:
        return None
    return float((stats[:, term] * rate_ratios).sum() / busy_s)


def _system_stats(stats: np.ndarray, sim_time_s: float, capacity_tokens: np.ndarray, block_size_tokens: int,
                  window: tuple[float, float] | None, peak_ratios: np.ndarray | None,
                  replicas_up: float | None = None) -> dict:
    """Fleet-wide counters from the per-replica statistics rows: sums, except the peak KV share (the
    fullest replica's); busy and KV shares are of all replicas' time (the KV share of all their blocks). Busy share
    and utilisation while busy are of the steady-state ``window`` (clipped to the run; None: the whole run's), with
    whole-run ones beside them (``_run``). ``capacity_tokens``: each replica's KV cache (0: unlimited);
    ``peak_ratios``: per replica, the effective FLOP/s and bandwidth over the datasheet peaks (None: fixed step
    model); ``replicas_up``: an autoscaled fleet's mean replicas billed over the run (shares are of the time paid
    for, not of every slot's; None: every replica up all the time)."""
    replicas = stats.shape[0] if replicas_up is None else replicas_up
    replica_s = sim_time_s * replicas
    iterations = int(stats[:, kernel.S_ITERATIONS].sum())
    capacity_blocks = capacity_tokens // block_size_tokens
    limited = bool(capacity_blocks.all())
    compute_ratios, memory_ratios = (None, None) if peak_ratios is None else peak_ratios.T
    query_tokens = stats[:, kernel.S_PREFIX_QUERY_TOKENS].sum()
    hit_tokens = stats[:, kernel.S_PREFIX_HIT_TOKENS].sum()
    run = {"gpu_busy_frac_run": float(stats[:, kernel.S_BUSY_S].sum() / replica_s) if replica_s > 0 else 0.0,
           "compute_util_frac_run": _utilisation(stats, kernel.S_COMPUTE_S, kernel.S_TERMS_S, compute_ratios),
           "bandwidth_util_frac_run": _utilisation(stats, kernel.S_MEMORY_S, kernel.S_TERMS_S, memory_ratios)}
    if window is None:
        steady = {key.removesuffix("_run"): value for key, value in run.items()}
    else:
        window_replica_s = (window[1] - window[0]) * replicas
        # at most 1: the overlaps of back-to-back iterations add up to the window's length, give or take rounding
        steady = {"gpu_busy_frac": min(1.0, float(stats[:, kernel.S_WINDOW_BUSY_S].sum() / window_replica_s)),
                  "compute_util_frac": _utilisation(stats, kernel.S_WINDOW_COMPUTE_S, kernel.S_WINDOW_TERMS_S,
                                                    compute_ratios),
                  "bandwidth_util_frac": _utilisation(stats, kernel.S_WINDOW_MEMORY_S, kernel.S_WINDOW_TERMS_S,
                                                      memory_ratios)}
    return {
        "sim_time_s": sim_time_s,
        "window_s": list(window) if window else None,
        "iterations": iterations,
        "mean_batch_size": float(stats[:, kernel.S_BATCH_SUM].sum() / iterations) if iterations else 0.0,
        **steady,
        **run,
        "kv_mean_frac": float(stats[:, kernel.S_KV_BLOCK_SECONDS].sum() / sim_time_s
                              / (capacity_blocks.sum() * replicas / stats.shape[0]))
        if limited and replica_s > 0 else None,
        "kv_peak_frac": float((stats[:, kernel.S_KV_PEAK_BLOCKS] / capacity_blocks).max()) if limited else None,
        "preemptions": int(stats[:, kernel.S_PREEMPTIONS].sum()),
        "preemption_waste_s": float(stats[:, kernel.S_WASTE_S].sum()),
        "preemption_waste_frac": float(stats[:, kernel.S_WASTE_S].sum() / replica_s) if replica_s > 0 else 0.0,
        "kv_capacity_tokens": int(capacity_blocks.min() * block_size_tokens) if limited else None,
        "timeseries_stride": int(stats[:, kernel.S_SERIES_STRIDE].max()),
        "skipped_iterations": int(stats[:, kernel.S_SKIPPED].sum()),
        "batch_hold_s": float(stats[:, kernel.S_BATCH_HOLD_S].sum()),
        "scheduler_hold_s": float(stats[:, kernel.S_GATE_HELD_S].sum()),
        "prefix_hit_frac": float(hit_tokens / query_tokens) if query_tokens else None,
        "prefill_saved_tokens": int(hit_tokens),
    }


def _replica_stats(frame: pd.DataFrame, stats: np.ndarray, sim_time_s: float, prepared: "Prepared") -> list[dict]:
    """Per replica: its hardware, speed and KV cache, requests routed to it, completed there, output tokens it
    generated, its busy share."""
    replicas = len(prepared.speeds)
    done = frame[frame["state"] == "completed"]
    completed = np.bincount(done["replica"], minlength=replicas)
    tokens = np.bincount(done["replica"], weights=done["output_tokens"], minlength=replicas)
    hardware = [hardware_label(g.server) for g in prepared.groups for _ in range(g.replicas)]
    roles = [g.role for g in prepared.groups for _ in range(g.replicas)]
    bs = prepared.scenario.server.block_size_tokens
    capacity = prepared.capacity_tokens // bs * bs  # whole blocks, as the run uses them
    return [{"replica": k, "role": roles[k], "hardware": hardware[k], "speed": float(prepared.speeds[k]),
             "kv_capacity_tokens": int(capacity[k]) if capacity[k] else None,
             "routed": int(stats[k, kernel.S_ROUTED]), "completed": int(completed[k]),
             "output_tokens": int(tokens[k]),
             "busy_frac": float(stats[k, kernel.S_BUSY_S] / sim_time_s) if sim_time_s > 0 else 0.0,
             "mean_batch_size": float(stats[k, kernel.S_BATCH_SUM] / stats[k, kernel.S_ITERATIONS])
             if stats[k, kernel.S_ITERATIONS] else 0.0}
            for k in range(replicas)]


def batch_column(class_name: str) -> str:
    """The time-series column of a class's requests in the batch (brackets: no fixed column has them)."""
    return f"batch[{class_name}]"


def waiting_column(class_name: str) -> str:
    """The time-series column of a class's waiting requests."""
    return f"waiting[{class_name}]"


def load_text(load: float) -> str:
    """An offered load as text: two decimals, or three significant digits when it is huge."""
    return f"{load:.2f}" if load < 1e4 else f"{load:.3g}"


def stop_explanation(system: SystemMetrics, caps: Caps) -> str:
    """One line on why a run's results describe an unstable or incomplete run (``system`` of the summary)."""
    reason = system["stop_reason"]
    if reason == "wall_clock":
        return (f"Cut: the run reached its wall-clock limit of {caps.wall_clock_s:g} s (wall_clock_s) at "
                f"{system['sim_time_s']:,.1f} s of simulated time; the results cover the requests until then")
    why = {"queue_bound": "more requests waited than limits.max_waiting_requests and the run stopped early",
           "horizon": "limits.max_drain_s passed after the last arrival and the run stopped early"}.get(
        reason, f"offered load {load_text(system['offered_load'])} (an estimate) is 1 or more: the queue grows for as "
                f"long as requests keep arriving")
    return f"Unstable: {why}; latencies describe a growing backlog"


def _run_sliced(args: tuple, outcome: np.ndarray, n_requests: int, budget_s: float,
                progress: Callable[[float], None] | None) -> None:
    """Call the compiled loop in slices of ``SLICE_S`` of wall time (it reads the clock itself) until the
    run ends or has used ``budget_s`` (then its stop reason is ``WALL_CLOCK``). Between slices the current job is
    checked (``stopping.Stopped`` when it must stop: the run is abandoned) and ``progress`` hears the share of
    requests that have arrived; the loop releases the interpreter, so other threads run meanwhile."""
    budget_end_ns = time.monotonic_ns() + int(budget_s * 1e9)
    while True:
        stopping.check()
        kernel.run_nb(*args, min(time.monotonic_ns() + int(SLICE_S * 1e9), budget_end_ns))
        if outcome[kernel.O_STOP_REASON] != kernel.PAUSED:
            return
        if time.monotonic_ns() >= budget_end_ns:
            outcome[kernel.O_STOP_REASON] = kernel.WALL_CLOCK
            return
        if progress is not None:
            progress(outcome[kernel.O_NEXT_ARRIVAL] / n_requests)


def _run_autoscaled(args: tuple, outcome: np.ndarray, n_requests: int, budget_s: float,
                    progress: Callable[[float], None] | None, scalers: tuple[Autoscaler, ...],
                    window_s: tuple[float, float]) -> None:
    """``_run_sliced`` with autoscalers: the loop stops at the first time one must act (``Autoscaler.next_s``),
    where each acts on what is due for it, until the run ends or its wall-clock budget is used."""
    srv, _, _, router, route, classes, ints, floats, ids, pc, _, stats, _, waiting, running, _, cnt, clock = args[:18]

    def take_away(j: int, t: float) -> int:
        kernel.settle_in_flight(stats[j:j + 1], cnt[j:j + 1], clock[j:j + 1], t, window_s)
        return int(kernel.take_away_nb(srv, router, route, classes, ints, ids, pc, stats, waiting, running, cnt,
                                       clock, j, t))

    arrays = {"counters": cnt, "clock": clock, "stats": stats, "take_away": take_away, "waiting": waiting,
              "ints": ints, "floats": floats, "sla_ttft_s": classes[0, :, K_SLA_TTFT_S]}
    for scaler in scalers:  # replicas outside every autoscaler's slots take requests throughout
        cnt[scaler.offset:scaler.offset + len(scaler.state), kernel.C_ACCEPTS] = scaler.state == UP
    budget_end_s = time.monotonic() + budget_s
    while True:
        outcome[kernel.O_PAUSE_AT_S] = min(scaler.next_s() for scaler in scalers)
        _run_sliced(args, outcome, n_requests, max(budget_end_s - time.monotonic(), 0.0), progress)
        if outcome[kernel.O_STOP_REASON] != kernel.AT_PAUSE_TIME:
            break
        for scaler in scalers:
            scaler.act(float(outcome[kernel.O_PAUSE_AT_S]), arrays)
    for scaler in scalers:
        scaler.finish(float(outcome[kernel.O_END_S]))


@dataclass(frozen=True)
class GroupInputs:
    """One group of identical replicas (the whole fleet, unless it is mixed or disaggregated): its server, how many,
    its step tuple, KV capacity in tokens (0: unlimited), speculative decoding parameters (``speculative_params``)
    and effective FLOP/s and bandwidth as shares of the datasheet peaks (None under the fixed step model)."""

    server: Server
    replicas: int
    step: tuple
    capacity_tokens: int
    speculation: tuple[int, float, float]
    peak_ratios: tuple[float, float] | None
    kv_bytes_per_token: float  # on all its cards together
    role: str = POOL_ROLES[0]  # what its replicas serve (``registry.POOL_ROLES``)


def hardware_label(server: Server) -> str:
    """The cards of one replica as words: "TP2 H100-80G FP8" (a fixed step time: "fixed 20 ms iterations")."""
    if server.step_model == "fixed":
        return f"fixed {server.step_time_ms:g} ms iterations"
    shape = parallel_label(server.tensor_parallel, server.expert_parallel, server.attention_data_parallel)
    return f"{shape} {server.gpu} {format_label(server.quant)}"


def group_inputs(server: Server, replicas: int, efficiency: Efficiency | None = None,
                 role: str = POOL_ROLES[0]) -> GroupInputs:
    """``GroupInputs`` of ``replicas`` x ``server`` serving as ``role`` (``efficiency`` as in ``simulate``)."""
    profile = roofline_profile(server, efficiency=efficiency)  # also sizes swapped KV (fixed model)
    step, capacity_tokens = _step_params(server, profile)
    peak_ratios = None
    if server.step_model != "fixed":
        peak = peak_profile(server, server.tensor_parallel)
        peak_ratios = (profile.effective_flops_per_s / peak.effective_flops_per_s,
                       profile.effective_bytes_per_s / peak.effective_bytes_per_s)
    return GroupInputs(server, replicas, step, capacity_tokens, speculative_params(server, profile), peak_ratios,
                       profile.kv_bytes_per_token, role)


GROUP_HARDWARE_KEYS = ("gpu", "quant", "tensor_parallel", "calibration")  # a group's own keys (``config.FleetGroup``)


def fleet_inputs(scenario: Scenario, efficiency: Efficiency | None = None) -> tuple[GroupInputs, ...]:
    """``GroupInputs`` of every group or pool of the fleet, an error about its hardware naming its key."""
    groups = []
    paths = [where for where, _ in scenario.fleet.tables()]
    for i, (server, replicas, role) in enumerate(fleet_pools(scenario)):
        try:
            groups.append(group_inputs(server, replicas, efficiency, role))
        except ScenarioError as exc:
            text = str(exc)
            key = next((k for k in GROUP_HARDWARE_KEYS if text.startswith(f"server.{k}")), None)
            if not paths or key is None:
                raise
            raise ScenarioError(f"{paths[i]}.{text.removeprefix('server.')}") from None
    costs = {g.speculation[2] for g in groups}
    if len(costs) > 1:
        raise ScenarioError("server.speculative.draft_model costs a different share of a decode iteration on the "
                            "groups' weight formats; give server.speculative.draft_cost instead")
    return tuple(groups)


def replica_speeds(groups: tuple[GroupInputs, ...], work_s: tuple[float, ...]) -> np.ndarray:
    """Each replica's speed on the workload: the fewest GPU seconds per request (``work_s``, per group) of any group
    of its role over its own, so the fastest replica of each role's is 1 and identical replicas' are all exactly 1
    (a disaggregated fleet's pools are one group each)."""
    roles = [g.role for g in groups]
    if len(set(roles)) == len(roles):
        return np.ones(sum(g.replicas for g in groups))
    work_s = np.array(work_s)
    fastest = np.array([min(w for w, other in zip(work_s, roles) if other == role) for role in roles])
    speeds = np.divide(fastest, work_s, out=np.ones_like(work_s), where=work_s > 0)  # no work: any speed will do
    return np.repeat(speeds, [g.replicas for g in groups])


@dataclass(frozen=True)
class Prepared:
    """A scenario turned into the compiled loop's inputs, before any run: the drawn requests (packed, pristine),
    the fleet's groups (``GroupInputs``) with each replica's step row, KV capacity and speed, the server and policy
    tuples, the steady-state window, the prefix units (``prefix_units_of``). Runs copy what they change."""

    scenario: Scenario
    requests: RequestArrays
    groups: tuple[GroupInputs, ...]
    steps: np.ndarray            # per replica, its group's step tuple (``steptime.step_rows``)
    capacity_tokens: np.ndarray  # per replica, its KV cache (0: unlimited)
    batch_limits: np.ndarray     # per replica, its batch limit, token budget and role (index in ``POOL_ROLES``)
    speeds: np.ndarray           # per replica (``replica_speeds``)
    work_s: tuple[float, ...]    # per group, its estimated GPU seconds per request (``group_work_s``, counting
    #                              what an unlimited shared prefix cache would hold: ``cached_prompt_tokens``)
    srv: tuple
    ints: np.ndarray
    floats: np.ndarray
    policy: tuple
    class_params: np.ndarray
    window_s: tuple[float, float]
    prefix_ids: np.ndarray     # the run's prefix unit ids, dense (0 .. prefix_units - 1); empty without caching
    prefix_units: int
    cached_tokens: np.ndarray | None  # per request, ``cached_prompt_tokens`` (None without prefix caching)
    # per autoscaler (``Fleet.scaled``): key path, first replica, its table, replicas up at the start, its server
    scaling: tuple[tuple[str, int, Autoscale, int, Server], ...]

    @property
    def peak_ratios(self) -> np.ndarray | None:
        """Per replica, (effective FLOP/s, effective bandwidth) over the datasheet peaks; None under the fixed
        step model."""
        if self.groups[0].peak_ratios is None:
            return None
        return np.repeat(np.array([g.peak_ratios for g in self.groups]), [g.replicas for g in self.groups], axis=0)


@dataclass(frozen=True)
class Run:
    """The state the compiled loop leaves: per-request arrays, per-replica statistics and time series."""

    ints: np.ndarray
    floats: np.ndarray
    stats: np.ndarray
    series: np.ndarray
    replica_classes: np.ndarray
    sim_time_s: float
    stop_reason: str
    counters: np.ndarray       # per replica, as the run left them (``kernel.C_*``)
    prefix_caches: np.ndarray  # per replica (``kernel.PC_*``)
    scalers: tuple[Autoscaler, ...] = ()  # each autoscaler's decisions and bills (``Prepared.scaling``)


def draw_requests(scenario: Scenario) -> RequestArrays:
    """The scenario's requests, drawn (or read) once its run's memory estimate is within the limit
    (``memory.check_run_memory``): every caller that draws a whole workload goes through here."""
    check_run_memory(scenario)
    return build_requests(scenario)


def with_slots(fleet: Fleet) -> Fleet:
    """``fleet`` holding every replica its autoscalers may have (``Fleet.slots``), each pool as many as its own."""
    if fleet.mode == "disaggregated":
        fleet = dataclasses.replace(fleet, prefill=dataclasses.replace(fleet.prefill, replicas=fleet.prefill.slots),
                                    decode=dataclasses.replace(fleet.decode, replicas=fleet.decode.slots))
    return dataclasses.replace(fleet, replicas=fleet.slots)


def prepare(scenario: Scenario, efficiency: Efficiency | None = None,
            requests: RequestArrays | None = None, event_skipping: bool = True) -> Prepared:
    """Draw the workload (or take ``requests``), check it can be served and build the loop's inputs
    (``efficiency`` and ``event_skipping`` as in ``simulate``)."""
    stopping.check()
    scaling = tuple((where, first, scale, start, scenario.server if where == "fleet.autoscale" else
                     getattr(scenario.fleet, where.split(".")[1]).server(scenario.server))
                    for where, first, scale, start in scenario.fleet.scaled())
    if scaling:  # every replica the autoscalers may have, from the start
        scenario = dataclasses.replace(scenario, fleet=with_slots(scenario.fleet))
    requests = draw_requests(scenario) if requests is None else requests
    if len(requests) == 0:
        raise ScenarioError("workload: no request arrives (duration_s too short or the trace is cut to nothing)")
    scenario.origin.caps.check("replicas", "fleet.groups (their replicas in all)", scenario.fleet.replicas,
                               " servers")
    groups = fleet_inputs(scenario, efficiency)
    paths = [where for where, _ in scenario.fleet.tables()]
    for i, g in enumerate(groups):
        _check_fits(g.server, requests, g.capacity_tokens, f" of {paths[i]}" if paths else "",
                    prompt_only=g.role == POOL_ROLES[1])
    scale = scenario.fleet.autoscale
    if scale is not None and scale.signal == "kv" and groups[0].capacity_tokens == 0:
        raise ScenarioError("fleet.autoscale.signal = 'kv' reads the share of the KV cache in use, and this "
                            "server's cache is unlimited; set server.kv_capacity_tokens (or a GPU) or choose "
                            "another signal")
    server, n_classes = scenario.server, len(scenario.workload.classes)
    bs = server.block_size_tokens
    window_s = steady_window_s(requests.arrival_s)
    unit_tokens, prefix_ids, prefix_units = prefix_units_of(server, requests)
    cached_tokens = cached_prompt_tokens(requests, unit_tokens)
    srv = kernel.server_params(
        server.max_batched_tokens, server.min_batch_size, server.wait_timeout_ms / 1000.0, bs,
        math.ceil(server.max_seq_len / bs) if server.kv_allocation == "static" else 0,
        scenario.limits.max_waiting_requests, requests.arrival_s[-1] + scenario.limits.max_drain_s, n_classes,
        # a swapped token's transfer: the first group's KV bytes per token (a mixed fleet serves one model)
        groups[0].kv_bytes_per_token / (server.host_link_gb_s * 1e9),
        BATCHING_CODES[server.batching], ADMISSION_CODES[server.admission], event_skipping, window_s,
        groups[0].speculation, unit_tokens, kv_link_s_per_token(scenario, groups), **loop_gates(server))
    predicted = predicted_tokens(requests.output_tokens, requests.unrelated_output_tokens,
                                 scenario.policy.predictor_error)
    ints, floats = pack_requests(requests.arrival_s, requests.prompt_tokens, requests.output_tokens,
                                 requests.class_id, _deadlines_s(scenario, requests), predicted,
                                 requests.prefix_offsets if prefix_units else None)
    policy, class_params = policy_inputs(scenario)
    counts = [g.replicas for g in groups]
    work_s = tuple(group_work_s(g, requests, cached_tokens) for g in groups)
    limits = [(g.server.total_batch_size, g.server.total_batched_tokens, POOL_ROLES.index(g.role)) for g in groups]
    return Prepared(scenario, requests, groups, np.repeat(step_rows([g.step for g in groups]), counts, axis=0),
                    np.repeat([g.capacity_tokens for g in groups], counts).astype(np.int64),
                    np.repeat(np.array(limits, np.int64), counts, axis=0),
                    replica_speeds(groups, work_s), work_s, srv, ints, floats, policy, class_params, window_s,
                    prefix_ids, prefix_units, cached_tokens, scaling)


def execute(prepared: Prepared, step: tuple | None = None, progress: Callable[[float], None] | None = None) -> Run:
    """Run the compiled loop on a copy of ``prepared``'s requests, with ``step`` in place of every replica's step
    tuple when given (the calibration fit tries step tuples this way)."""
    scenario = prepared.scenario
    replicas = scenario.fleet.replicas
    n = len(prepared.requests)
    columns = kernel.N_SERIES_FIXED + 2 * len(scenario.workload.classes)  # fixed, then batch and waiting per class
    series = np.zeros((replicas, kernel.series_rows_per_replica(replicas), columns))
    stats, outcome = kernel.start_outputs(replicas)
    replica_classes = np.repeat(prepared.class_params[np.newaxis], replicas, axis=0)
    ints, floats = prepared.ints.copy(), prepared.floats.copy()
    bs = scenario.server.block_size_tokens
    capacity_blocks = np.where(prepared.capacity_tokens > 0, prepared.capacity_tokens // bs, UNLIMITED_BLOCKS)
    waiting, running, batch, counters, clock, acc, cross, handoff = kernel.work_arrays(
        n, scenario.limits.max_waiting_requests, np.column_stack([capacity_blocks, prepared.batch_limits]), bs)
    caches = kernel.prefix_caches(replicas, prepared.prefix_units)
    steps = prepared.steps if step is None else np.repeat(step_rows([step]), replicas, axis=0)
    args = (prepared.srv, steps, prepared.policy, ROUTER_CODES[scenario.fleet.router],
            kernel.route_rows(prepared.speeds), replica_classes, ints, floats, prepared.prefix_ids, caches,
            series, stats, outcome, waiting, running, batch, counters, clock, acc, cross, handoff)
    fleet = scenario.fleet
    # spot replicas are a colocated fleet's (its autoscaler's own random stream); a pool's autoscaler has none
    scalers = tuple(Autoscaler(scale, start, provision_s(scale, server),
                               fleet.spot_interruptions_per_hour if where == "fleet.autoscale" else 0.0,
                               fleet.spot_notice_s, np.random.default_rng([scenario.seed, SPOT_STREAM, *(
                                   () if where == "fleet.autoscale" else (first,))]), first)
                    for where, first, scale, start, server in prepared.scaling)
    if scalers:
        _run_autoscaled(args, outcome, n, scenario.origin.caps.wall_clock_s, progress, scalers, prepared.window_s)
    else:
        _run_sliced(args, outcome, n, scenario.origin.caps.wall_clock_s, progress)
    sim_time_s = float(outcome[kernel.O_END_S])
    kernel.settle_in_flight(stats, counters, clock, sim_time_s, prepared.window_s)
    return Run(ints, floats, stats, series, replica_classes, sim_time_s,
               STOP_REASONS[int(outcome[kernel.O_STOP_REASON])], counters, caches, scalers)


def simulate(scenario: Scenario, efficiency: Efficiency | None = None,
             progress: Callable[[float], None] | None = None, event_skipping: bool = True) -> Result:
    """Run one scenario; same scenario and seed give the same result, bit for bit, unless the run reaches
    the wall-clock limit (``scenario.origin.caps.wall_clock_s``): then it stops there and its stop reason
    is ``wall_clock``. ``efficiency`` replaces the GPU family's calibrated one; ``progress`` is called now and
    then with the share of requests arrived so far. ``event_skipping = False`` decides every iteration in
    full: the same result, bit for bit, only slower (the reference that proves skipping exact)."""
    started = time.perf_counter()
    prepared = prepare(scenario, efficiency, event_skipping=event_skipping)
    requests = prepared.requests
    columns = list(kernel.SERIES_FIXED_COLUMNS) + [batch_column(c.name) for c in scenario.workload.classes] \
        + [waiting_column(c.name) for c in scenario.workload.classes]
    run = execute(prepared, progress=progress)
    stats, sim_time_s, replicas = run.stats, run.sim_time_s, prepared.scenario.fleet.replicas
    bs = scenario.server.block_size_tokens
    frame = request_records(scenario, run.ints, run.floats)
    window: tuple[float, float] | None = prepared.window_s
    if sim_time_s <= window[0]:
        window = None  # cut before the warm-up ended: whole-run figures only
    served = run.replica_classes.sum(axis=0)
    classes, overall = summarize(scenario, frame, sim_time_s, window, served[:, K_WINDOW_TOKENS])
    window = window and (window[0], min(window[1], sim_time_s))  # the part of it the run reached
    add_service_shares(classes, served, scenario.policy.prefill_token_weight)
    steady = constant_rate_steady_state(scenario, frame, sim_time_s, window, served)
    cut = Cut.of(requests.arrival_s)
    load, billed, replica_hours, replicas_up = offered_load(prepared), np.full(cut.count, float(replicas)), \
        replicas * sim_time_s / SECONDS_PER_HOUR, None
    factors = None
    if run.scalers:  # loads of the replicas taking requests, not of every slot
        factors, run_factors = serving_factors(prepared, run.scalers, cut.edges_s, sim_time_s)
        load = max(v * run_factors[stage] for stage, v in stage_loads(prepared).items())
        fixed = replicas - sum(len(s.state) for s in run.scalers)  # slots no autoscaler holds: up throughout
        billed = sum(s.replicas_over(cut.edges_s) for s in run.scalers) + fixed
        replica_hours = sum(s.replica_hours() for s in run.scalers) + fixed * sim_time_s / SECONDS_PER_HOUR
        replicas_up = replica_hours * SECONDS_PER_HOUR / sim_time_s if sim_time_s > 0 else None
    loads = window_loads(prepared, cut, factors)
    system = {**_system_stats(stats, sim_time_s, prepared.capacity_tokens, bs, window, prepared.peak_ratios,
                              replicas_up),
              "offered_load": load,
              "replica_hours": replica_hours,
              "stop_reason": run.stop_reason,
              "unstable": bool(run.stop_reason != "drained" or load >= 1.0),
              "replicas": _replica_stats(frame, stats, sim_time_s, prepared)}
    for (where, *_), scaler in zip(prepared.scaling, run.scalers):
        if where == "fleet.autoscale":
            system["autoscale"] = scaler.report()
        else:  # "fleet.prefill.autoscale": the pool's
            system.setdefault("pool_autoscale", {})[where.split(".")[1]] = scaler.report()
    wall_s = time.perf_counter() - started
    summary: Summary = {"classes": classes, "overall": overall, "system": system,
                        "run": {"wall_s": wall_s, "requests": len(requests), "seed": scenario.seed,
                                "scenario": scenario.name},
                        "windows": windows(scenario, frame, cut, loads, billed), "steady": steady}
    timeseries = pd.concat(
        [pd.DataFrame(run.series[k, : int(stats[k, kernel.S_SERIES_ROWS])], columns=columns).assign(replica=k)
         for k in range(replicas)], ignore_index=True)
    return Result(scenario, summary, frame, timeseries)


def constant_rate_steady_state(scenario: Scenario, frame: pd.DataFrame, sim_time_s: float,
                               window: tuple[float, float] | None, served: np.ndarray) -> SteadyState | None:
    """The run's steady state (``steady.steady_state``) with the metrics of the requests arriving after its
    warm-up, under a constant arrival rate; None where the rate moves (a curve or a trace) or there is none."""
    if scenario.workload.trace is not None or scenario.workload.arrival.curve() is not None:
        return None
    steady = steady_state(frame["arrival_s"].to_numpy(), frame["first_scheduled_s"].to_numpy(),
                          frame["finish_s"].to_numpy())
    if steady is None:
        return None
    after = frame[frame["arrival_s"].to_numpy() >= steady["warmup_s"]]
    steady["classes"], steady["overall"] = summarize(scenario, after, sim_time_s, window, served[:, K_WINDOW_TOKENS])
    add_service_shares(steady["classes"], served, scenario.policy.prefill_token_weight)
    return steady


def run_summary(data: dict, origin: Origin = Origin()) -> Summary:
    """The summary of scenario ``data`` (plain data, as ``load_scenario`` takes it): the unit of work that the
    sweeps, the planner and the tuner send to a core or to a Dask worker (a module-level function of picklable
    arguments)."""
    return simulate(load_scenario(data, origin=origin)).summary


PRESET_DIR = DATA_ROOT / "scenarios"  # the shipped scenarios (presets)
# Every preset states its estimated offered load in a header line (a test keeps it equal to the estimate), so a
# reader of the file and the preset picker see at once whether its policies will differ.
PRESET_LOAD_LINE = re.compile(r"^# Offered load (\d+\.\d\d) \(an estimate", re.MULTILINE)


def stated_load(path: Path) -> float | None:
    """The offered load a preset's header states, or None when it states none."""
    found = PRESET_LOAD_LINE.search(path.read_text(encoding="utf-8"))
    return float(found.group(1)) if found else None


def warm_up(requests: int = 50) -> int:
    """Simulate ``requests`` requests of every preset in ``data/scenarios``, so that everything they need is
    compiled (and cached on disk for later processes); returns how many presets ran."""
    presets = sorted(PRESET_DIR.glob("*.toml"))
    for path in presets:
        simulate(load_scenario(path, overrides=[f"workload.num_requests={requests}"]))
    return len(presets)
