"""Queueing-theory checks of the simulator on the fixed step model.

With ``max_batch_size = 1``, a prompt that fits one iteration and ``step_time_ms``
per iteration, a request with N output tokens holds the server for exactly
N iterations, so the server is an M/G/1 queue with service time S = N x step:

- FIFO: Pollaczek-Khinchine mean wait  W = lambda E[S^2] / (2 (1 - rho));
- non-preemptive priority (Cobham): class k waits
  W_k = R / ((1 - sigma_{k-1}) (1 - sigma_k)),  R = sum_i lambda_i E[S_i^2] / 2,
  sigma_k = load of classes with priority level <= k;
- non-preemptive shortest job first with exact sizes: Cobham with one class per job size
  (smaller first), averaged over sizes;
- preemptive-resume priority: class k spends
  T_k = E[S_k] / (1 - sigma_{k-1}) + R_k / ((1 - sigma_{k-1}) (1 - sigma_k)),  R_k = sum_{i<=k} lambda_i E[S_i^2] / 2
  in the system (the simulator preempts at iteration boundaries, so a step of delay is allowed).

``theory_checks`` runs these set-ups over several seeds, cuts a warm-up, and
compares the simulated mean queue delay (arrival to first scheduled) with the
formula. The confidence interval comes from batch means: each run's post-warm-up
requests are split into consecutive batches whose means are nearly independent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..scenario.config import Scenario, TokenDist, load_scenario
from ..sim.simulate import simulate

STEP_S = 0.01
BATCHES_PER_RUN = 10
WARMUP_FRACTION = 0.1


def token_moments(dist: TokenDist) -> tuple[float, float]:
    """E[N] and E[N^2] of a token-count distribution without ``max`` (constant, uniform or geometric)."""
    if dist.max is not None:
        raise ValueError("moments are only available without a max cap")
    if dist.dist == "constant":
        return float(dist.value), float(dist.value) ** 2
    if dist.dist == "uniform":
        values = np.arange(dist.low, dist.high + 1, dtype=np.float64)
        return float(values.mean()), float((values ** 2).mean())
    if dist.dist == "geometric":
        p = 1.0 / dist.mean
        return dist.mean, (2.0 - p) / p ** 2
    raise ValueError(f"no closed-form moments for dist {dist.dist!r}")


def service_moments_s(scenario: Scenario) -> list[tuple[float, float]]:
    """Per class (E[S], E[S^2]) in seconds for the fixed model with one slot: S = output tokens x step."""
    step_s = scenario.server.step_time_ms / 1000.0
    out = []
    for cls in scenario.workload.classes:
        m1, m2 = token_moments(cls.output_tokens)
        out.append((m1 * step_s, m2 * step_s ** 2))
    return out


def pollaczek_khinchine_wait_s(rate_per_s: float, es_s: float, es2_s2: float) -> float:
    rho = rate_per_s * es_s
    if rho >= 1:
        raise ValueError(f"unstable queue: rho = {rho:.3f}")
    return rate_per_s * es2_s2 / (2.0 * (1.0 - rho))


def cobham_waits_s(rates_per_s: list[float], levels: list[int], moments: list[tuple[float, float]]) -> list[float]:
    """Mean wait of each class under non-preemptive priority (lower level first)."""
    residual = sum(lam * m2 for lam, (_, m2) in zip(rates_per_s, moments)) / 2.0
    waits = []
    for level in levels:
        sigma_before = sum(lam * m1 for lam, lv, (m1, _) in zip(rates_per_s, levels, moments) if lv < level)
        sigma_with = sum(lam * m1 for lam, lv, (m1, _) in zip(rates_per_s, levels, moments) if lv <= level)
        waits.append(residual / ((1.0 - sigma_before) * (1.0 - sigma_with)))
    return waits


@dataclass(frozen=True)
class TheoryCheck:
    """One simulated mean against its formula (milliseconds)."""

    name: str
    cls: str
    theory_ms: float
    simulated_ms: float
    std_error_ms: float
    allowance_ms: float = 0.0  # systematic delay the model allows (preemption waits for the iteration to end)

    @property
    def rel_error(self) -> float:
        return (self.simulated_ms - self.theory_ms) / self.theory_ms


def preemptive_priority_times_s(rates_per_s: list[float], levels: list[int],
                                moments: list[tuple[float, float]]) -> list[float]:
    """Mean time in system of each class under preemptive-resume priority (lower level first)."""
    times = []
    for level, (m1, _) in zip(levels, moments):
        above = [(lam, mm) for lam, lv, mm in zip(rates_per_s, levels, moments) if lv < level]
        upto = [(lam, mm) for lam, lv, mm in zip(rates_per_s, levels, moments) if lv <= level]
        sigma_before = sum(lam * mm[0] for lam, mm in above)
        sigma_with = sum(lam * mm[0] for lam, mm in upto)
        residual = sum(lam * mm[1] for lam, mm in upto) / 2.0
        times.append(m1 / (1.0 - sigma_before) + residual / ((1.0 - sigma_before) * (1.0 - sigma_with)))
    return times


def sjf_mean_wait_s(rate_per_s: float, sizes: np.ndarray, probabilities: np.ndarray, step_s: float) -> float:
    """Mean wait of non-preemptive SJF with exact sizes (tokens): Cobham with one class per size."""
    moments = [(n * step_s, (n * step_s) ** 2) for n in sizes]
    waits = cobham_waits_s(list(rate_per_s * probabilities), list(range(len(sizes))), moments)
    return float(np.dot(probabilities, waits))


def _one_slot_scenario(name: str, rate_per_s: float, classes: list[dict], policy: dict, num_requests: int,
                       step_ms: float = STEP_S * 1000) -> dict:
    return {
        "name": name,
        "workload": {"num_requests": num_requests, "arrival": {"process": "poisson", "rate_per_s": rate_per_s},
                     "classes": [{**c, "prompt_tokens": {"dist": "constant", "value": 1}} for c in classes]},
        "server": {"step_model": "fixed", "step_time_ms": step_ms, "max_batch_size": 1},
        "policy": policy,
    }


def _batch_means_ms(scenario_data: dict, seeds: list[int], column: str) -> dict[str, np.ndarray]:
    """Per class (and "overall"), the batch means of ``column`` (ms) over all seeds, after the warm-up cut."""
    means: dict[str, list[float]] = {}
    for seed in seeds:
        result = simulate(load_scenario({**scenario_data, "seed": seed}))
        frame = result.requests
        frame = frame[frame["arrival_s"] >= frame["arrival_s"].iloc[-1] * WARMUP_FRACTION]
        groups = [("overall", frame)] + [(str(c), g) for c, g in frame.groupby("class", observed=True)]
        for cls, group in groups:
            for chunk in np.array_split(group[column].to_numpy(), BATCHES_PER_RUN):
                means.setdefault(cls, []).append(float(chunk.mean()))
    return {cls: np.array(v) for cls, v in means.items()}


def _checks(name: str, data: dict, theory_s: dict[str, float], seeds: list[int],
            column: str = "queue_ms", allowance_ms: float = 0.0) -> list[TheoryCheck]:
    batch_means = _batch_means_ms(data, seeds, column)
    return [TheoryCheck(name, cls, theory_s[cls] * 1000.0, float(batch_means[cls].mean()),
                        float(batch_means[cls].std(ddof=1) / np.sqrt(len(batch_means[cls]))), allowance_ms)
            for cls in theory_s]


def theory_checks(seeds: list[int] = (0, 1, 2, 3, 4), num_requests: int = 20000) -> list[TheoryCheck]:
    """Run every M/G/1 set-up over ``seeds`` and return simulated versus predicted mean queue delays."""
    seeds = list(seeds)
    checks: list[TheoryCheck] = []
    for dist, rate in (({"dist": "constant", "value": 10}, 7.0), ({"dist": "geometric", "mean": 10}, 6.0)):
        data = _one_slot_scenario(f"M/G/1 FIFO, {dist['dist']} output", rate,
                                  [{"name": "all", "share": 1.0, "output_tokens": dist}], {"name": "fifo"},
                                  num_requests)
        (es, es2), = service_moments_s(load_scenario(data))
        checks += _checks(data["name"], data, {"all": pollaczek_khinchine_wait_s(rate, es, es2)}, seeds)
    classes = [{"name": "urgent", "share": 0.4, "priority": 0, "output_tokens": {"dist": "constant", "value": 5}},
               {"name": "batch", "share": 0.6, "priority": 1, "output_tokens": {"dist": "geometric", "mean": 15}}]
    rate = 5.0
    data = _one_slot_scenario("M/G/1 non-preemptive priority", rate, classes, {"name": "priority"}, num_requests)
    scenario = load_scenario(data)
    rates = [rate * c.share for c in scenario.workload.classes]
    levels = [c.priority for c in scenario.workload.classes]
    waits = cobham_waits_s(rates, levels, service_moments_s(scenario))
    checks += _checks(data["name"], data, {c["name"]: w for c, w in zip(classes, waits)}, seeds)

    # Preemptive-resume: 1 ms iterations keep the boundary delay small; keep mode pauses for free.
    step_ms = 1.0
    data = _one_slot_scenario("M/G/1 preemptive-resume priority", rate, [
        {**classes[0], "output_tokens": {"dist": "constant", "value": 50}},
        {**classes[1], "output_tokens": {"dist": "geometric", "mean": 150}}],
        {"name": "priority", "preemptive": True, "preempt_mode": "keep", "preempt_overhead_ms": 0.0},
        num_requests, step_ms)
    scenario = load_scenario(data)
    times = preemptive_priority_times_s(rates, levels, service_moments_s(scenario))
    checks += _checks(data["name"], data, {c["name"]: w for c, w in zip(classes, times)}, seeds, "e2e_ms",
                      allowance_ms=step_ms)

    sizes = np.arange(2, 21)
    data = _one_slot_scenario("M/G/1 shortest job first", 7.0, [
        {"name": "all", "share": 1.0, "output_tokens": {"dist": "uniform", "low": 2, "high": 20}}],
        {"name": "sjf"}, num_requests)
    wait = sjf_mean_wait_s(7.0, sizes, np.full(len(sizes), 1 / len(sizes)), STEP_S)
    checks += _checks(data["name"], data, {"overall": wait}, seeds)
    return checks
