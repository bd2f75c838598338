"""The shape of one run's summary (``Result.summary``, the command line's JSON), typed.

The summary stays plain data (it is written as JSON and cached by the pages), so its types are
``TypedDict``s: every module that reads it names the fields it reads, and a type checker or a reader sees
what a block holds. Metric labels, units and formats are in ``metric_table``.
"""

from __future__ import annotations

from typing import Optional, TypedDict


class LatencyStats(TypedDict):
    """Of completed requests, in ms; None when none completed."""

    mean: Optional[float]
    p50: Optional[float]
    p90: Optional[float]
    p99: Optional[float]


class ClassMetrics(TypedDict, total=False):
    """One class, or ``overall``: counts, latencies, SLA attainment and rates (``metrics.group_metrics``);
    per class also the GPU service received (``service_tokens``, ``service_share``)."""

    arrived: int
    completed: int
    timed_out: int
    unfinished: int
    ttft_ms: LatencyStats
    tpot_ms: LatencyStats
    e2e_ms: LatencyStats
    queue_ms: LatencyStats
    sla_attainment: Optional[float]
    output_tokens_per_s: float  # rates: over the steady-state window (``metrics``)
    prompt_tokens_per_s: float
    sla_met_per_s: float
    output_tokens_per_s_run: float  # and over the whole run
    prompt_tokens_per_s_run: float
    sla_met_per_s_run: float
    longest_wait_ms: Optional[float]
    service_tokens: float
    service_share: Optional[float]


class ReplicaStats(TypedDict):
    replica: int
    role: str  # what it serves: colocated, prefill or decode (``registry.POOL_ROLES``)
    hardware: str  # its group's cards, e.g. "TP2 H100-80G FP8" (``simulate.hardware_label``)
    speed: float  # its speed on the workload, the fastest replica's 1 (the routers weigh by it)
    kv_capacity_tokens: Optional[int]
    routed: int
    completed: int
    output_tokens: int
    busy_frac: float
    mean_batch_size: float


class WindowRow(TypedDict):
    """One window of the run (``windows.windows``): [start, end) in seconds from the start, the requests that
    arrived in it, the load they offered (an estimate), the mean number waiting for their first iteration, and per
    class the SLA attainment of its arrivals (None: none judged), how many were judged and their SLA misses."""

    start_s: float
    end_s: float
    arrived: int
    offered_load: float
    mean_waiting: float
    replicas: float  # mean replicas billed (up, provisioning or draining) over the window
    sla_attainment: dict[str, Optional[float]]
    sla_judged: dict[str, int]  # arrivals that finished or timed out with an SLA target
    sla_missed: dict[str, int]


class SystemMetrics(TypedDict):
    """The fleet over the run (``simulate``)."""

    sim_time_s: float
    window_s: Optional[list[float]]  # the steady-state window [start, end), None when there is none
    iterations: int
    mean_batch_size: float
    gpu_busy_frac: float  # busy share and utilisation while busy: in the window, then over the whole run
    compute_util_frac: Optional[float]  # None under the fixed step model
    bandwidth_util_frac: Optional[float]
    gpu_busy_frac_run: float
    compute_util_frac_run: Optional[float]
    bandwidth_util_frac_run: Optional[float]
    kv_mean_frac: Optional[float]
    kv_peak_frac: Optional[float]
    kv_capacity_tokens: Optional[int]  # the smallest replica's (a mixed fleet's replicas differ)
    preemptions: int
    preemption_waste_s: float
    preemption_waste_frac: float  # of all replicas' time over the run
    timeseries_stride: int
    skipped_iterations: int  # iterations run by event skipping (kernel.skip.skip_decodes_nb), not decided one by one
    batch_hold_s: float  # replica-seconds held back by the min-batch gate (min_batch_size, wait_timeout_ms)
    scheduler_hold_s: float  # request-seconds the engine's scheduler kept waiting requests out (sim/kernel/gates)
    prefix_hit_frac: Optional[float]  # prompt tokens the prefix cache held, of those looked up; None: no caching
    prefill_saved_tokens: int  # prompt tokens served from the prefix cache instead of computed
    offered_load: float
    replica_hours: float  # replicas up, integrated over the run (servers x hours)
    stop_reason: str
    unstable: bool
    replicas: list[ReplicaStats]


class RunInfo(TypedDict):
    wall_s: float
    requests: int
    seed: int
    scenario: str


class SteadyState(TypedDict):
    """A constant-rate run's steady state (``sim.steady``): from when, whether it settled, for how long."""

    warmup_s: float  # arrival time from which requests are judged (MSER-5)
    settled: bool  # the population in flight stopped growing after the warm-up
    mean_in_flight: float  # time-average requests in flight after the warm-up (L of Little's law)
    growth_frac: float  # the last half's mean in flight over the first half's, minus 1 (after the warm-up)
    steady_requests: int  # requests arriving after the warm-up
    flights: float  # requests / mean_in_flight: how many mean times in the system the run lasts (Little's law)
    classes: dict[str, ClassMetrics]  # the metrics of the requests arriving after the warm-up
    overall: ClassMetrics


class Summary(TypedDict):
    classes: dict[str, ClassMetrics]
    overall: ClassMetrics
    system: SystemMetrics
    run: RunInfo
    windows: list[WindowRow]
    steady: Optional[SteadyState]  # None: the rate moves (a curve, a trace), or all arrive at once
