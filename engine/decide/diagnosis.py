"""What limits a fleet at its load, in words, with the numbers behind each sentence and what would relieve it.

Each finding reads one run's summary (and the scenario it ran): overload or queueing near saturation, a full
KV cache (preemptions and the GPU time their recomputation wasted) or preemptions the policy chose, the
batch-size limit, the router's imbalance, a class starving, a class timing out, the engine's own scheduler holding
new requests back (its receive interval, attention-DP balance or prefill delayer). The thresholds are named
below with their reason; a run that hits none is said to have room. On a GPU (the roofline step model) two
more sentences say what an iteration is bound by: decode at the run's mean batch and context, memory-bandwidth-
or compute-bound, with the batch at which it would turn; and prefill's share of the busy time when it is large
(``steptime.step_terms_nb``, the terms of the step time itself). Not diagnosed: the token budget per iteration
(a summary's mean tokens per iteration is diluted by the decode-only iterations; it needs a count of the
iterations the budget filled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..hardware.roofline import roofline_profile, roofline_step_params
from ..hardware.steptime import step_terms_nb
from ..hardware.tables import load_table
from ..scenario.config import Policy, Scenario, field_label
from ..scenario.labels import key_words, words
from ..scenario.metric_table import metric
from ..scenario.schedulers import hold_words
from ..scenario.summary import Summary
from ..sim.policies import POLICY_LABELS
from ..sim.simulate import load_text, stop_explanation

NEAR_SATURATION_LOAD = 0.8  # from here waiting grows steeply: an M/M/1 queue waits rho / (1 - rho) = 4 services
FULL_KV_PEAK = 0.95  # a peak KV use this close to the capacity means admissions waited for memory
WASTE_WORTH_SAYING = 0.01  # recomputation wasting 1% of GPU time or more is worth a sentence
FULL_BATCH = 0.9  # a mean batch at 90% of max_batch_size: the limit binds most iterations
IMBALANCE_BUSY = 0.2  # replicas' busy shares this far apart (absolute) on a busy fleet: the router splits badly
BUSY_FLEET = 0.5  # ... and the busiest replica at least this busy (an idle fleet's imbalance costs nothing)
ARRIVING_SHARE = 0.8  # ... over a run that spent at least 80% of its time receiving requests: in a long drain one
# replica finishing the last long request is busy alone, which says nothing about the router
STARVING_WAIT_MS = 10_000.0  # a class whose longest wait passes 10 s ...
STARVING_RATIO = 10.0  # ... and 10x the other classes' longest wait is starving
TIMEOUT_SHARE = 0.05  # 5% of a class's arrivals timing out is worth a sentence
PREFILL_HEAVY = 0.3  # prefill taking 30% of the busy GPU time or more is worth a sentence
RIDGE_SEARCH_MAX = 1 << 16  # the largest batch the ridge search looks at
BURST_OVER_AVERAGE = 1.25  # a window offering this x the run's average load and near saturation or more is a burst
SCHEDULER_HOLD_MS = 1.0  # below this a request's average hold by the engine's own scheduler is not worth a sentence
BACKLOG_FACTOR = 2.0  # after such windows the backlog lasts while the mean queue stays above this x the run's median


@dataclass(frozen=True)
class Finding:
    """One sentence: ``kind`` names the limit (a stable id for tests and tables), ``text`` says it with numbers
    and what would relieve it."""

    kind: str
    text: str


def diagnose(scenario: Scenario, summary: Summary) -> list[Finding]:
    """The limits of this run, most fundamental first (overload explains the rest); one finding saying there is
    room when none applies."""
    system, fleet = summary["system"], scenario.fleet
    findings = []
    load = system["offered_load"]
    if system["unstable"]:
        needed = max(fleet.replicas + 1, math.floor(fleet.replicas * load) + 1)
        findings.append(Finding("overload", f"{key_words(stop_explanation(system, scenario.origin.caps))}. Relieve "
                                            f"it with "
                                            f"at least {needed} replicas (the load estimate falls under 1), a faster "
                                            f"GPU, or less traffic."))
    elif load >= NEAR_SATURATION_LOAD:
        wait = load / (1.0 - load)
        one_more = load * fleet.replicas / (fleet.replicas + 1)
        findings.append(Finding("near_saturation", f"Queueing near saturation: offered load {load_text(load)} (an "
                                                   f"estimate); in an M/M/1 queue a request waits {wait:.1f}x its "
                                                   f"service time on average at this load, and that grows without "
                                                   f"bound towards 1. One more replica brings the load to "
                                                   f"{load_text(one_more)}."))
    findings += bursts(summary)
    findings += _memory(scenario, system) + _batch(scenario, system) + _router(scenario, summary)
    findings += _classes(scenario, summary) + _scheduler(scenario, summary)
    if not findings:
        findings.append(Finding("room", f"Nothing here limits this fleet at this load: offered load "
                                        f"{load_text(load)} (an estimate, under {NEAR_SATURATION_LOAD:g}), no "
                                        f"preemption, batches of {system['mean_batch_size']:.1f} sequences on average "
                                        f"of at most {scenario.server.total_batch_size}."))
    return findings + _iterations(scenario, summary)


def clock_text(seconds: float) -> str:
    """Seconds into the run as a clock: '1:05:00', or '5:30' under an hour."""
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def window_words(seconds: float) -> str:
    """A window's length as words: '30-second', '1-minute', '15-minute', '1-hour'."""
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}-{unit}"
    return f"{seconds:g}-second"


def burst_episodes(windows: list, threshold: float) -> list[tuple[int, int, int]]:
    """Runs of windows offering ``threshold`` or more: (first, last at the threshold, last of the backlog after
    it: while the mean queue stays above ``BACKLOG_FACTOR`` x the run's median, at least 1)."""
    queue_bar = BACKLOG_FACTOR * max(1.0, sorted(w["mean_waiting"] for w in windows)[len(windows) // 2])
    episodes, w = [], 0
    while w < len(windows):
        if windows[w]["offered_load"] < threshold:
            w += 1
            continue
        first = w
        while w + 1 < len(windows) and windows[w + 1]["offered_load"] >= threshold:
            w += 1
        last = end = w
        while end + 1 < len(windows) and windows[end + 1]["offered_load"] < threshold \
                and windows[end + 1]["mean_waiting"] > queue_bar:
            end += 1
        episodes.append((first, last, end))
        w = end + 1
    return episodes


def bursts(summary: Summary) -> list[Finding]:
    """Windows whose arrivals offer a load near saturation or beyond (``NEAR_SATURATION_LOAD``) and well above
    the run's average (``BURST_OVER_AVERAGE``): the worst named, with the share of each class's SLA misses that
    fall in such windows and the backlog after them."""
    windows = summary.get("windows") or []
    average = summary["system"]["offered_load"]
    if summary["system"]["unstable"] or not windows:
        return []
    episodes = burst_episodes(windows, max(NEAR_SATURATION_LOAD, BURST_OVER_AVERAGE * average))
    if not episodes:
        return []
    worst = max(episodes, key=lambda e: max(windows[w]["offered_load"] for w in range(e[0], e[1] + 1)))
    peak = max(windows[w]["offered_load"] for w in range(worst[0], worst[1] + 1))
    reach = f"{peak:.1f}x the fleet's capacity" if peak >= 1.0 else f"an offered load of {load_text(peak)}"
    span = (f"from {clock_text(windows[worst[0]]['start_s'])} to {clock_text(windows[worst[1]]['end_s'])} into the "
            f"run arrivals reach {reach}")
    others = f" ({len(episodes) - 1} more such stretch{'es' if len(episodes) > 2 else ''})" if len(episodes) > 1 else ""
    inside = {w for e in episodes for w in range(e[0], e[2] + 1)}
    shares = []
    for name in windows[0]["sla_missed"]:
        missed = sum(w["sla_missed"][name] for w in windows)
        there = sum(windows[w]["sla_missed"][name] for w in inside)
        if missed:
            shares.append(f"{there / missed:.0%} of {name}'s SLA misses ({there:,} of {missed:,})")
    length = windows[0]["end_s"] - windows[0]["start_s"]
    misses = (f"; {' and '.join(shares)} fall in these stretches and the backlog after them" if shares else "")
    return [Finding("bursts", f"Bursts: {span}{others}, though the run's average offered load is "
                              f"{load_text(average)} (estimates per "
                              f"{window_words(length)} window){misses}. A fleet sized for the average misses there: "
                              f"size for the peak window, let a policy protect the urgent class, or scale out "
                              f"before the burst.")]


def _mean_lengths(summary: Summary) -> tuple[float, float] | None:
    """Mean prompt and output tokens per request over the run (its rates times its length, per completed
    request); None when nothing completed."""
    overall, sim_s = summary["overall"], summary["system"]["sim_time_s"]
    if not overall["completed"] or not sim_s:
        return None
    return (overall["prompt_tokens_per_s_run"] * sim_s / overall["completed"],
            overall["output_tokens_per_s_run"] * sim_s / overall["completed"])


def ridge_batch(step: tuple, context_tokens: float) -> int | None:
    """The smallest decode batch (a power of two) at which compute time reaches memory time at this context, or
    None when memory stays ahead up to ``RIDGE_SEARCH_MAX`` (the KV reads grow with the batch as fast as the
    FLOPs)."""
    batch = 1
    while batch <= RIDGE_SEARCH_MAX:
        compute_s, memory_s, _ = step_terms_nb(step, batch, batch * context_tokens, batch * context_tokens)
        if compute_s >= memory_s:
            return batch
        batch *= 2
    return None


def smaller_formats(server) -> list[str]:
    """The 8-bit formats a memory-bound decode could move to, of those ``server`` does not use yet: "FP8 weights"
    where its weights take more than a byte each, "FP8 KV" where its cache does (none where both are 8-bit or less:
    naming a format a plan already has is no advice)."""
    weights = float(load_table("quant").loc[server.quant, "weight_bytes_per_param"])
    kv = float(load_table("kv_quant").loc[server.kv_quant, "bytes_per_value"])
    return [words for words, wide in (("FP8 weights", weights > 1.0), ("FP8 KV", kv > 1.0)) if wide]


def _iterations(scenario: Scenario, summary: Summary) -> list[Finding]:
    """What an iteration is bound by on this GPU: decode at the run's mean batch and context, and prefill's share
    of the busy time when large."""
    lengths = _mean_lengths(summary)
    if scenario.server.step_model != "roofline" or lengths is None:
        return []
    system, (prompt, output) = summary["system"], lengths
    step = roofline_step_params(roofline_profile(scenario.server))
    batch, context = max(system["mean_batch_size"], 1.0), prompt + output / 2.0
    compute_s, memory_s, _ = step_terms_nb(step, batch, batch * context, batch * context)
    at = (f"at {batch:.0f} sequences of ~{context:,.0f} tokens, weight and KV traffic takes {memory_s * 1e3:.2f} ms "
          f"against {compute_s * 1e3:.2f} ms of compute")
    if memory_s >= compute_s:
        ridge = ridge_batch(step, context)
        turn = f"compute catches up at ~{ridge:,} sequences" if ridge else "at any batch: KV reads grow with it"
        relief = " or ".join(["more bandwidth", *smaller_formats(scenario.server)])
        findings = [Finding("decode_memory_bound", f"Decode is memory-bound: {at} ({turn}). Fuller batches cost "
                                                   f"little per token; {relief} speeds every iteration.")]
    else:
        findings = [Finding("decode_compute_bound", f"Decode is compute-bound: {at}. Bigger batches no longer come "
                                                    f"free; more FLOP/s (a faster GPU, more tensor parallelism) or "
                                                    f"more replicas relieve it.")]
    prefill_compute_s, prefill_memory_s, _ = step_terms_nb(step, prompt, prompt * (prompt + 1) / 2.0, 0.0)
    busy_s = system["gpu_busy_frac_run"] * system["sim_time_s"] * scenario.fleet.replicas
    share = summary["overall"]["completed"] * max(prefill_compute_s, prefill_memory_s) / busy_s if busy_s else 0.0
    if share >= PREFILL_HEAVY:
        bound = "compute-bound" if prefill_compute_s >= prefill_memory_s else "memory-bound"
        need = (f"{max(prefill_compute_s, prefill_memory_s) * 1e3:.1f} ms ({bound}: {prefill_compute_s * 1e3:.1f} ms "
                f"of compute, {prefill_memory_s * 1e3:.1f} ms of memory traffic)")
        findings.append(Finding("prefill_heavy", f"Prefill takes ~{min(share, 1.0):.0%} of the GPUs' busy time: "
                                                 f"a prompt of {prompt:,.0f} tokens needs {need}. Shorter prompts, "
                                                 f"cached prefixes or more FLOP/s relieve it."))
    return findings


def _memory(scenario: Scenario, system: dict) -> list[Finding]:
    """A KV cache at its peak (with the preemptions it forced), or preemptions the policy chose on its own."""
    preemptions, waste, peak = system["preemptions"], system["preemption_waste_frac"], system["kv_peak_frac"]
    wasted = f", and recomputing their prompts wasted {waste:.1%} of GPU time" if waste >= WASTE_WORTH_SAYING else ""
    if peak is not None and peak >= FULL_KV_PEAK:
        relief = ("more KV memory (a GPU with more memory, KV in FP8, a larger GPU memory share, a higher "
                  "tensor-parallel degree) or more replicas")
        capacity = f"peak use {peak:.0%} of {system['kv_capacity_tokens']:,} tokens"
        if preemptions:
            return [Finding("kv_full", f"KV cache full: {preemptions:,} running requests were preempted to make room"
                                       f"{wasted}; {capacity}. Relieve it with {relief}.")]
        return [Finding("kv_full", f"KV cache nearly full: {capacity}, so admissions waited for memory. Relieve it "
                                   f"with {relief}.")]
    if preemptions:
        return [Finding("preemptions", f"{preemptions:,} running requests were preempted for requests the policy "
                                       f"ranks higher (the policy is preemptive){wasted}. Preemption mode Keep or "
                                       f"Swap stops the recomputation; turning Preemptive off stops the evictions.")]
    return []


def _batch(scenario: Scenario, system: dict) -> list[Finding]:
    limit = scenario.server.total_batch_size
    if system["mean_batch_size"] >= FULL_BATCH * limit:
        return [Finding("batch_limit", f"Batch-size limit: iterations held {system['mean_batch_size']:.1f} sequences "
                                       f"on average of at most {limit} (the batch limit). Raise it if the KV "
                                       f"cache holds more, or add replicas.")]
    return []


def _scheduler(scenario: Scenario, summary: Summary) -> list[Finding]:
    """The engine's own scheduler holding new requests back (``schedulers.hold_words``), when it held each arrived
    request ``SCHEDULER_HOLD_MS`` or more on average."""
    rule = hold_words(scenario.server)
    arrived = summary["overall"]["arrived"]
    held_ms = summary["system"]["scheduler_hold_s"] / arrived * 1000.0 if arrived else 0.0
    if not rule or held_ms < SCHEDULER_HOLD_MS:
        return []
    return [Finding("engine_scheduler", f"The engine's scheduler held each request back {held_ms:,.1f} ms on average "
                                        f"before it could be scheduled: {rule}.")]


def _router(scenario: Scenario, summary: Summary) -> list[Finding]:
    system, replicas, arrival = summary["system"], summary["system"]["replicas"], scenario.workload.arrival
    if len(replicas) < 2 or scenario.workload.trace is not None or not system["sim_time_s"] or \
            scenario.fleet.autoscale is not None:  # replicas up for part of the run: busy shares differ by design
        return []
    if summary["run"]["requests"] / arrival.rate_per_s < ARRIVING_SHARE * system["sim_time_s"]:
        return []  # mostly drain: busy shares reflect who got the last long requests
    busy = [r["busy_frac"] for r in replicas]
    high, low = max(busy), min(busy)
    if high >= BUSY_FLEET and high - low >= IMBALANCE_BUSY:
        hot, cold = busy.index(high), busy.index(low)
        better = "" if scenario.fleet.router != "round-robin" else \
            f" A load-aware router ({words('router', 'least-tokens')}) evens it out."
        return [Finding("router_imbalance", f"Router imbalance ({words('router', scenario.fleet.router)}): replica "
                                            f"{hot} was busy "
                                            f"{high:.0%} of the time, replica {cold} {low:.0%}.{better}")]
    return []


def _classes(scenario: Scenario, summary: Summary) -> list[Finding]:
    findings = []
    waits = {name: block["longest_wait_ms"] for name, block in summary["classes"].items()
             if block.get("longest_wait_ms") is not None}
    for name, wait in waits.items():
        others = [w for n, w in waits.items() if n != name]
        if others and wait >= STARVING_WAIT_MS and wait >= STARVING_RATIO * max(max(others), 1.0):
            findings.append(Finding("starving", f"Class {name} starves: its longest wait was "
                                                f"{metric('longest_wait_ms').text(wait)}, against at most "
                                                f"{metric('longest_wait_ms').text(max(others))} for the others. "
                                                f"{_starving_relief(scenario)}"))
    for name, block in summary["classes"].items():
        arrived, timed_out = block["arrived"], block["timed_out"]
        if arrived and timed_out / arrived >= TIMEOUT_SHARE:
            findings.append(Finding("timeouts", f"Class {name}: {timed_out:,} of {arrived:,} requests "
                                                f"({timed_out / arrived:.0%}) timed out before their first token."))
    return findings


def _starving_relief(scenario: Scenario) -> str:
    policy = scenario.policy
    if policy.name == "priority":
        return (f"Let waiting count: {field_label(Policy, 'aging_per_s')} or "
                f"{field_label(Policy, 'max_wait_ms').lower()}.")
    if policy.name == "dynamic":
        return (f"Its waiting counts against the {field_label(Policy, 'default_sla_ms')} "
                f"({policy.default_sla_ms:,.0f} ms): lower that, or raise alpha.")
    return f"Guarantee it a share: {POLICY_LABELS['wfq'].lower()} with weights."
