"""Scheduling policies: one registry entry plus one branch of the compiled key function each.

A policy decides two things only, both through one number per request, its
*key* (lower = more urgent): the order in which waiting and running requests
get the batch, and the preemption victim (the running request with the highest
key). Ties break by arrival time, then request index. The mechanism (token
budget, KV blocks, time, how a preempted request is paused) lives in
the compiled loop (``kernel``) and is shared by all policies.

A preemptive policy lets a waiting request that finds the batch or memory full
evict the worst running request when its key is lower by more than the margin
(0 except for ``dynamic``); equal keys never preempt, so equal levels stay FIFO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
from numba import njit

from ..scenario.config import Scenario
from ..scenario.registry import POLICY_CODES, PREEMPT_MODE_CODES
from .layout import (F_ARRIVAL, I_CLASS, I_GENERATED, I_KV_TOKENS, I_PREDICTED, I_PREFIX_HIT, I_PROMPT, K_ACTIVE,
                     K_DECODE_SERVED, K_LEVEL, K_PREFILL_SERVED, K_SLA_E2E_S, K_SLA_TTFT_S, K_TIER, K_VTIME, K_WEIGHT,
                     N_CLASS_FIELDS)

FIFO, PRIORITY, WFQ, DYNAMIC, SJF, SRPT, EDF, VLLM_FCFS, VLLM_PRIORITY, LPM = POLICY_CODES.values()
KEEP, SWAP, RECOMPUTE = PREEMPT_MODE_CODES.values()


@dataclass(frozen=True)
class PolicySpec:
    """What the UI and docs show of a policy; ``code`` selects its branch in ``policy_key_nb``.

    ``preemption``: "param" (the ``preemptive`` key decides), "always" or "never";
    ``forced_mode``: a preemption mode the policy always uses (the vLLM presets recompute).
    """

    code: int
    label: str
    key: str
    formula: str
    use_when: str  # a sentence: when to choose this policy
    preemption: str = "param"
    forced_mode: Optional[str] = None


POLICIES = {
    "fifo": PolicySpec(FIFO, "First come, first served", "arrival time", r"key = t_{arrival}",
                       "Use it for one class of traffic, or as the baseline every other policy is compared with.",
                       preemption="never"),
    "priority": PolicySpec(
        PRIORITY, "Strict priority levels", "priority level, improved by aging (FIFO within a level)",
        r"key = level - aging \cdot waited,\ 0 \text{ once } waited \ge max\_wait",
        "Use it when interactive traffic must never wait behind offline work; add aging or a max wait so that "
        "offline work is not starved."),
    "wfq": PolicySpec(
        WFQ, "Weighted fair queuing", "class virtual time: service received / class weight",
        r"key = V_{class},\ V_{class} \mathrel{+}= (decode + w_{prefill} \cdot prefill) / weight_{class}",
        "Use it when tenants or tiers must each get a guaranteed share of the GPU; a share left idle goes to the "
        "others."),
    "dynamic": PolicySpec(
        DYNAMIC, "Dynamic cost with preemption", "cost of waiting, progress and tier (highest first)",
        r"cost = \alpha \frac{waited}{SLA} + \beta \frac{consumed}{expected} + \gamma \cdot tier",
        "Use it for mixed SLAs where neither strict priority nor fairness fits and you can tune alpha, beta and "
        "gamma.", preemption="always"),
    "sjf": PolicySpec(SJF, "Shortest job first", "predicted output length",
                      r"key = \widehat{output}", "Use it when short requests dominate and lengths are "
                      "predictable; long ones may starve.", preemption="never"),
    "srpt": PolicySpec(SRPT, "Shortest remaining processing time", "predicted output tokens still to come",
                       r"key = \max(\widehat{output} - generated, 1)",
                       "Use it when mean latency matters most and preemption is cheap.", preemption="always"),
    "edf": PolicySpec(EDF, "Earliest deadline first", "SLA deadline (TTFT before the first token, then "
                      "end-to-end)", r"key = t_{arrival} + SLA",
                      "Use it when every class has a latency target and meeting targets matters more than raw speed."),
    "vllm-fcfs": PolicySpec(VLLM_FCFS, "vLLM first come, first served", "arrival time; victim on memory "
                            "exhaustion: latest arrival; recompute", r"key = t_{arrival}",
                            "Use it to see what vLLM does by default.", preemption="never", forced_mode="recompute"),
    "vllm-priority": PolicySpec(
        VLLM_PRIORITY, "vLLM priority", "priority level then arrival; victim: lowest priority then latest "
        "arrival; recompute", r"key = (level, t_{arrival})",
        "Use it to see vLLM's --scheduling-policy priority.", preemption="always", forced_mode="recompute"),
    "lpm": PolicySpec(
        LPM, "Longest prefix match", "prompt tokens its replica's prefix cache holds, most first (then arrival)",
        r"key = -cached\_prefix\_tokens",
        "Use it with prefix caching on chat traffic that repeats long prefixes (SGLang's default): requests that "
        "share a cached prefix run together before it is evicted; without prefix caching it is FIFO.",
        preemption="never"),
}

POLICY_LABELS = {name: spec.label for name, spec in POLICIES.items()}


@dataclass(frozen=True)
class PolicyParam:
    """A ``[policy]`` key as the UI shows it; label, type, unit, default and help come from ``config.Policy``.

    ``slider``: (low, high, step) when the UI should offer a slider instead of a number box.
    """

    key: str
    policies: tuple[str, ...]   # the policies that read this key
    slider: Optional[tuple[float, float, float]] = None


PREEMPTIVE_BY_PARAM = tuple(name for name, spec in POLICIES.items() if spec.preemption == "param")
PREEMPTING = ("priority", "wfq", "dynamic", "srpt", "edf")
POLICY_PARAMS = (
    PolicyParam("preemptive", PREEMPTIVE_BY_PARAM),
    PolicyParam("aging_per_s", ("priority",), (0.0, 5.0, 0.05)),
    PolicyParam("max_wait_ms", ("priority",)),
    PolicyParam("weights", ("wfq",)),
    PolicyParam("alpha", ("dynamic",), (0.0, 10.0, 0.1)),
    PolicyParam("beta", ("dynamic",), (0.0, 10.0, 0.1)),
    PolicyParam("gamma", ("dynamic",), (0.0, 10.0, 0.1)),
    PolicyParam("margin", ("dynamic",), (0.0, 5.0, 0.05)),
    PolicyParam("default_sla_ms", ("dynamic",)),
    PolicyParam("prefill_token_weight", ("wfq", "dynamic"), (0.0, 2.0, 0.05)),
    PolicyParam("predictor_error", ("sjf", "srpt", "dynamic"), (0.0, 1.0, 0.05)),
    PolicyParam("preempt_mode", PREEMPTING),
    PolicyParam("preempt_overhead_ms", PREEMPTING, (0.5, 2.0, 0.1)),
)


def params_of(policy: str) -> list[PolicyParam]:
    """The parameters ``policy`` reads, in display order."""
    return [p for p in POLICY_PARAMS if policy in p.policies]


# Keys a run's figures read under every policy: the GPU service share counts a prefill token at this weight.
READ_BY_EVERY_POLICY = ("prefill_token_weight",)


def unread_params(policy: str) -> list[str]:
    """The ``[policy]`` keys that cannot change a run under ``policy``: other policies' parameters that no figure
    reads either (a test runs every policy with each of them changed and gets the same summary, bit for bit).
    A result cached for one value of them is the result for every value."""
    return [p.key for p in POLICY_PARAMS if policy not in p.policies and p.key not in READ_BY_EVERY_POLICY]


# The policy tuple of the compiled loop, indexed by P_* (a plain tuple: see kernel.server_params).
(P_CODE, P_PREEMPTIVE, P_AGING_PER_S, P_MAX_WAIT_S, P_PREFILL_WEIGHT, P_ALPHA, P_BETA, P_GAMMA, P_MARGIN,
 P_DEFAULT_SLA_S, P_MODE, P_OVERHEAD_S) = range(12)


def policy_inputs(scenario: Scenario) -> tuple[tuple, np.ndarray]:
    """Pack ``scenario.policy`` (with its preset's fixed choices) and per-class parameters for the loop."""
    policy, classes = scenario.policy, scenario.workload.classes
    spec = POLICIES[policy.name]
    preemptive = {"always": True, "never": False}.get(spec.preemption, policy.preemptive)
    table = np.zeros((len(classes), N_CLASS_FIELDS))
    table[:, K_LEVEL] = [c.priority for c in classes]
    table[:, K_TIER] = [c.tier_weight for c in classes]
    table[:, K_WEIGHT] = [policy.weights[c.name] if policy.weights else 1.0 for c in classes]
    table[:, K_SLA_TTFT_S] = [c.sla_ttft_ms / 1000.0 if c.sla_ttft_ms else math.inf for c in classes]
    table[:, K_SLA_E2E_S] = [c.sla_e2e_ms / 1000.0 if c.sla_e2e_ms else math.inf for c in classes]
    packed = (np.int64(spec.code), bool(preemptive), float(policy.aging_per_s),
              policy.max_wait_ms / 1000.0 if policy.max_wait_ms else math.inf, float(policy.prefill_token_weight),
              float(policy.alpha), float(policy.beta), float(policy.gamma),
              float(policy.margin) if spec.code == DYNAMIC else 0.0, policy.default_sla_ms / 1000.0,
              np.int64(PREEMPT_MODE_CODES[spec.forced_mode or policy.preempt_mode]),
              policy.preempt_overhead_ms / 1000.0)
    return packed, table


def predicted_tokens(output_tokens: np.ndarray, unrelated_draw: np.ndarray, error: float) -> np.ndarray:
    """Output lengths as an imperfect predictor announces them: true^(1-e) x unrelated^e, rounded, >= 1.

    ``unrelated_draw`` holds, per request, an independent output length from the same class, so
    error 0 is the exact length and error 1 a guess that carries no information about this request.
    """
    if error == 0:
        return output_tokens.copy()
    guess = np.exp((1 - error) * np.log(output_tokens) + error * np.log(unrelated_draw))
    return np.maximum(np.rint(guess), 1).astype(np.int64)


@njit(cache=True, inline="always")
def _sla_s_nb(classes, k, first_token_pending, fallback_s):
    """The SLA target that applies now: TTFT before the first token, then end-to-end (else the other)."""
    first, done = classes[k, K_SLA_TTFT_S], classes[k, K_SLA_E2E_S]
    target = first if first_token_pending else done
    if not np.isfinite(target):
        target = done if first_token_pending else first
    return target if np.isfinite(target) else fallback_s


@njit(cache=True, inline="always")
def policy_key_nb(policy, classes, ints, fl, r, t):
    """Key of request ``r`` at time ``t`` (lower runs first; the highest running key is the victim)."""
    code = policy[P_CODE]
    k = ints[r, I_CLASS]
    if code == PRIORITY or code == VLLM_PRIORITY:
        level = classes[k, K_LEVEL]
        if code == PRIORITY:
            waited = t - fl[r, F_ARRIVAL]
            level -= policy[P_AGING_PER_S] * waited
            if waited >= policy[P_MAX_WAIT_S]:
                level = min(level, 0.0)
        return level
    if code == WFQ:
        return classes[k, K_VTIME]
    if code == SJF:
        return float(ints[r, I_PREDICTED])
    if code == SRPT:
        return float(max(ints[r, I_PREDICTED] - ints[r, I_GENERATED], 1))
    if code == EDF:
        return fl[r, F_ARRIVAL] + _sla_s_nb(classes, k, ints[r, I_GENERATED] == 0, np.inf)
    if code == DYNAMIC:
        pending_first = ints[r, I_GENERATED] == 0
        waited = t - fl[r, F_ARRIVAL]
        sla_s = _sla_s_nb(classes, k, pending_first, policy[P_DEFAULT_SLA_S])
        w = policy[P_PREFILL_WEIGHT]
        prompt = ints[r, I_PROMPT]
        prompt_done = min(ints[r, I_KV_TOKENS], prompt) if pending_first else prompt
        consumed = w * prompt_done + ints[r, I_GENERATED]
        expected = w * prompt + max(ints[r, I_PREDICTED], ints[r, I_GENERATED] + 1)
        cost = (policy[P_ALPHA] * waited / sla_s + policy[P_BETA] * consumed / expected
                + policy[P_GAMMA] * classes[k, K_TIER])
        return -cost
    if code == LPM:
        return -float(ints[r, I_PREFIX_HIT])
    return fl[r, F_ARRIVAL]


@njit(cache=True, inline="always")
def policy_key_changes_nb(policy):
    """False for the policies whose key is fixed for a request's whole life (arrival time, predicted length,
    level): the loop need not compute it again."""
    code = policy[P_CODE]
    return not (code == FIFO or code == VLLM_FCFS or code == SJF or code == VLLM_PRIORITY)


@njit(cache=True, inline="always")
def policy_on_arrival_nb(classes, k):
    """Class ``k`` gains a request; a class that was idle resumes at the least-served active class's
    virtual time (fair queuing gives no credit for idle time)."""
    if classes[k, K_ACTIVE] == 0:
        floor = np.inf
        for j in range(classes.shape[0]):
            if classes[j, K_ACTIVE] > 0:
                floor = min(floor, classes[j, K_VTIME])
        if np.isfinite(floor):
            classes[k, K_VTIME] = max(classes[k, K_VTIME], floor)
    classes[k, K_ACTIVE] += 1


@njit(cache=True, inline="always")
def policy_charge_nb(policy, classes, k, prefill_tokens, decode_tokens):
    """Record service given to class ``k`` in one iteration and advance its virtual time (read by fair queuing
    only, so kept by it only)."""
    classes[k, K_PREFILL_SERVED] += prefill_tokens
    classes[k, K_DECODE_SERVED] += decode_tokens
    if policy[P_CODE] == WFQ:
        classes[k, K_VTIME] += (policy[P_PREFILL_WEIGHT] * prefill_tokens + decode_tokens) / classes[k, K_WEIGHT]


@njit(cache=True, inline="always")
def policy_charge_decodes_nb(policy, classes, k, m):
    """As ``m`` calls of ``policy_charge_nb(policy, classes, k, 0, 1)``, in one: the service counts are whole
    numbers (one addition gives the same float); fair queuing's virtual time gets its ``m`` additions."""
    classes[k, K_DECODE_SERVED] += m
    if policy[P_CODE] == WFQ:
        for _ in range(m):
            classes[k, K_VTIME] += (policy[P_PREFILL_WEIGHT] * 0 + 1) / classes[k, K_WEIGHT]
