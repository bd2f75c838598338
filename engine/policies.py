"""Scheduling policies: one registry entry plus one branch of the compiled key function each.

A policy decides two things only, both through one number per request, its
*key* (lower = more urgent): the order in which waiting and running requests
get the batch, and the preemption victim (the running request with the highest
key). Ties break by arrival time, then request index. The mechanism (token
budget, KV blocks, time) lives in ``kernel.py`` and is shared by all policies.

When ``preemptive`` is set, a waiting request that finds the batch or memory
full may evict the worst running request if its key is *strictly* lower; ties
never preempt, so equal-level requests stay FIFO without thrashing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from .config import Scenario
from .layout import F_ARRIVAL, I_CLASS

FIFO = 0
PRIORITY = 1


@dataclass(frozen=True)
class PolicySpec:
    """What the UI and docs need to show a policy; ``code`` selects its branch in ``policy_key_nb``."""

    code: int
    label: str
    key: str
    use_when: str


POLICIES = {
    "fifo": PolicySpec(FIFO, "First come, first served", "arrival time",
                       "one class of traffic, or as the baseline every other policy is compared with"),
    "priority": PolicySpec(PRIORITY, "Strict priority levels", "class priority level (FIFO within a level)",
                           "interactive traffic must never wait behind offline work and the low levels can starve"),
}

@dataclass(frozen=True)
class PolicyParam:
    """A ``[policy]`` key as the UI shows it; type, unit, default and help come from ``config.Policy``."""

    key: str
    label: str
    policies: tuple[str, ...]   # the policies that read this key


POLICY_PARAMS = (
    PolicyParam("preemptive", "Preemptive", ("priority",)),
)


def params_of(policy: str) -> list[PolicyParam]:
    """The parameters ``policy`` reads, in display order."""
    return [p for p in POLICY_PARAMS if policy in p.policies]


# The policy tuple (code, switches) is indexed by P_*; per-class parameters go in a float array
# with the K_* columns.
P_CODE, P_PREEMPTIVE = 0, 1
K_LEVEL = 0
N_CLASS_FIELDS = 1


def policy_inputs(scenario: Scenario) -> tuple[tuple, np.ndarray]:
    """Pack ``scenario.policy`` and per-class parameters for the compiled loop."""
    classes = np.zeros((len(scenario.workload.classes), N_CLASS_FIELDS))
    classes[:, K_LEVEL] = [c.priority for c in scenario.workload.classes]
    policy = (np.int64(POLICIES[scenario.policy.name].code), bool(scenario.policy.preemptive))
    return policy, classes


@njit(cache=True, inline="always")
def policy_key_nb(policy, classes, ints, fl, r, t):
    """Key of request ``r`` at time ``t`` (lower runs first; the highest running key is the victim).

    ``ints``/``fl`` are the per-request state arrays described in ``layout.py``.
    """
    if policy[P_CODE] == PRIORITY:
        return classes[ints[r, I_CLASS], K_LEVEL]
    return fl[r, F_ARRIVAL]
