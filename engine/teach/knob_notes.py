"""Why a knob changes nothing, in words a workshop reads beside it.

A minimum batch with a wait above 0 holds a replica's next iteration back while fewer requests are waiting or
running (``engine/sim/kernel``, the min-batch gate); at a load where a replica almost always has that many, it
holds nothing back, and the run's held time (``batch_hold_s``) says so (``batch_hold_note``).

Fair queuing's weights decide who is served first while classes wait together; the GPU service share of a run
counts all its service, drain included, so when every request is served in the end the shares equal each class's
demand whatever the weights (``wfq_share_note``).

The dynamic policy runs first the request of highest cost ``alpha * waited / SLA + beta * consumed / expected +
gamma * tier`` (``engine.sim.policies.policy_key_nb``). Two facts follow from the formula alone:

- Only the ratios of alpha, beta and gamma order requests: multiplying all three by one number changes no
  comparison. With one of them above 0, its size changes nothing.
- A request of a lower tier overtakes one of a higher tier that has just arrived (neither started: nothing consumed)
  only once ``alpha * waited / SLA > gamma * (tier_high - tier_low)``, that is after waiting ``gamma * (tier_high -
  tier_low) * SLA / alpha``. When no request of a lower tier waits that long, the queue is ordered by tier, as strict
  priority orders it by level, and on the same arrivals the two give the same results.
"""

from __future__ import annotations

import pandas as pd

from ..scenario.config import Policy, RequestClass, Scenario, Server, field_label
from ..scenario.summary import Summary
from ..scenario.metric_table import metric

HOLD_SHARE_MAX = 0.001  # held back for less than this share of the servers' time: the gate changed nothing to show
SAME_AS = "priority"  # the policy whose results the dynamic one repeats when tiers decide every comparison
DYNAMIC = "dynamic"
DYNAMIC_WEIGHTS = ("alpha", "beta", "gamma")  # the cost's weights, in the order of its formula
ORDERED_BY = {"alpha": "waited / SLA", "beta": "progress", "gamma": "tier"}  # what each weight scores


def scale_only_note(alpha: float, beta: float, gamma: float) -> str | None:
    """Beside the weights: why their size changes nothing when only one is above 0 (None otherwise)."""
    weights = dict(zip(DYNAMIC_WEIGHTS, (alpha, beta, gamma)))
    used = [name for name, value in weights.items() if value > 0]
    if len(used) != 1:
        return None
    label = field_label(Policy, used[0])
    return (f"{label} is the only weight above 0, so its size changes nothing: the cost orders requests by "
            f"{ORDERED_BY[used[0]]} alone, and only the "
            f"ratios of alpha, beta and gamma change the order. Set a second weight above 0 to trade them off.")


def duration_text(seconds: float) -> str:
    """A duration as the app writes one ("1.20 s", "240 s", "85.3 ms")."""
    return metric("longest_wait_ms").text(seconds * 1000.0)


def class_sla_s(cls: RequestClass, policy: Policy) -> tuple[str, float]:
    """The SLA a waiting request of ``cls`` is scored against (its TTFT target, else end-to-end, else the
    policy's default), with its words: the rule of the compiled ``policies._sla_s_nb`` for a request before its
    first token (a test keeps the two the same)."""
    if cls.sla_ttft_ms:
        return "TTFT target", cls.sla_ttft_ms / 1000.0
    if cls.sla_e2e_ms:
        return "end-to-end target", cls.sla_e2e_ms / 1000.0
    return field_label(Policy, "default_sla_ms").lower(), policy.default_sla_ms / 1000.0


def same_rows(comparison: pd.DataFrame, first: str, second: str) -> bool:
    """Whether two policies of a policy comparison (rows per policy and class) gave the same figures."""
    rows = [comparison[comparison["policy"] == name].drop(columns=["policy"]).reset_index(drop=True)
            for name in (first, second)]
    return not rows[0].empty and rows[0].equals(rows[1])


def dynamic_as_priority_note(scenario: Scenario, comparison: pd.DataFrame) -> str | None:
    """Under a policy comparison whose dynamic row repeats strict priority's figure for figure: why (the wait at
    which a lower tier would overtake, against the longest wait of the run), and what would change it."""
    if not same_rows(comparison, DYNAMIC, SAME_AS):
        return None
    policy, classes = scenario.policy, scenario.workload.classes
    top = max(classes, key=lambda c: c.tier_weight)
    lower = [c for c in classes if c.tier_weight < top.tier_weight]
    if policy.alpha == 0 or not lower or policy.gamma == 0:
        why = ("with alpha 0 waiting adds nothing to the cost" if policy.alpha == 0 else
               "the classes' tiers and SLA targets order the queue the same way at every wait")
        return (f"Dynamic cost gave exactly strict priority's figures on these arrivals: {why}. Change alpha, "
                f"gamma or the classes' tiers to see it differ.")
    low = min(lower, key=lambda c: c.tier_weight)
    words, sla_s = class_sla_s(low, policy)
    overtake_s = policy.gamma * (top.tier_weight - low.tier_weight) * sla_s / policy.alpha
    waits = comparison[(comparison["policy"] == DYNAMIC) & (comparison["class"] == low.name)]["longest_wait_ms"]
    longest_s = float(waits.iloc[0]) / 1000.0 if len(waits) and pd.notna(waits.iloc[0]) else None
    threshold = (f"a {low.name} request (tier {low.tier_weight:g}) overtakes a {top.name} request that has just "
                 f"arrived (tier {top.tier_weight:g}) only after waiting gamma x {top.tier_weight - low.tier_weight:g} "
                 f"x its {words} of {duration_text(sla_s)} / alpha = {duration_text(overtake_s)}")
    if longest_s is not None and longest_s < overtake_s:
        why = f"{threshold}, and no {low.name} request waited longer than {duration_text(longest_s)}"
    else:
        why = (f"at the waits of this run the tiers and SLA targets ranked every waiting pair as strict priority's "
               f"levels do ({threshold})")
    return (f"Dynamic cost gave exactly strict priority's figures on these arrivals: {why}. Raise alpha or lower "
            f"gamma (or raise the load) to let waiting reorder the queue.")


SHARE_GAP = 0.10  # achieved shares this far (or further) from the weights' are said


def wfq_share_note(scenario: Scenario, summary: Summary) -> str | None:
    """Under fair queuing with weights: when the GPU service shares achieved differ from the weights' shares by
    ``SHARE_GAP`` or more, the two side by side and why (None otherwise, or for another policy)."""
    policy = scenario.policy
    if policy.name != "wfq" or not policy.weights:
        return None
    names = [c.name for c in scenario.workload.classes]
    total = sum(policy.weights[n] for n in names)
    wished = {n: policy.weights[n] / total for n in names}
    got = {n: summary["classes"][n].get("service_share") for n in names}
    if any(v is None for v in got.values()) or max(abs(got[n] - wished[n]) for n in names) < SHARE_GAP:
        return None
    shares = " / ".join(f"{got[n]:.0%}" for n in names)
    weights = " / ".join(f"{wished[n]:.0%}" for n in names)
    return (f"GPU service shares achieved {shares} ({', '.join(names)}) against {weights} from the weights: the "
            f"weights decide who is served first only while classes wait together, and the shares count the whole "
            f"run, its drain included, so once every request is served they equal what each class asked for, "
            f"whatever the weights. Read the weights' effect in each class's TTFT and queueing time (try other "
            f"weights, or the policy comparison).")


def batch_hold_note(scenario: Scenario, summary: Summary) -> str | None:
    """Beside the minimum batch and its wait: why they changed nothing in this run, when the gate held the servers
    back for less than ``HOLD_SHARE_MAX`` of their time (None otherwise, and when they cannot hold anything back:
    a minimum of 1 or no wait, which the page says before any run)."""
    server, system = scenario.server, summary["system"]
    server_s = system["replica_hours"] * 3600.0
    if not server.holds_batches or server_s <= 0:
        return None
    share = system["batch_hold_s"] / server_s
    if share >= HOLD_SHARE_MAX:
        return None
    share_text = f"{share:.2%}" if share >= 0.0001 else "under 0.01%"
    low = server.min_batch_size
    return (f"{field_label(Server, 'min_batch_size')} {low} with a wait of {server.wait_timeout_ms:g} ms held "
            f"iterations back for {system['batch_hold_s']:,.2f} s in all ({share_text} of the servers' time): a "
            f"replica nearly always had {low} or more requests (mean batch {system['mean_batch_size']:,.1f}), so at "
            f"this load they change almost nothing. Lower the rate to see them batch.")
