"""The planner's mixed fleet: the recommended plan's GPU with some replicas of another GPU's in place of its own,
proposed when it meets every target for less than the recommendation.

Why a mix can be cheaper: a fleet comes in whole servers, so the cheapest single-GPU plan often rents most of a
server it does not need (2.3 servers' worth of load takes 3). Replacing one of them by a smaller or cheaper
server of another GPU (the fleet's service rates add, ``simulate.offered_load``) can meet the targets for less.

Search: the recommended plan (base) and the cheapest plan on another GPU (partner) fix each group's GPU, weight
format and tensor-parallel degree; the base's policy, router and decoding run the mix. For a = base replicas - 1
down to 1, partner replicas b = 1, 2, ... are tried while the mix costs less than the base plan (priced before
it is simulated: no run is spent on a mix that could not win) and its estimated offered load is under 1; the
first b that meets every target on every seed is that a's mix. The cheapest such mix is proposed; at most
``MAX_MIX_FLEETS`` fleets are simulated.

``search`` is the planner's ``Search``, passed in (this module sits below the planner, which calls it): its runs
are shared, so a fleet is never simulated twice.
"""

from __future__ import annotations

from typing import Optional

from ..hardware.calibration_store import with_gpu
from ..scenario.config import apply_overrides, load_scenario
from ..scenario.labels import counted
from ..sim.simulate import estimated_offered_load
from .cost import (DeploymentCost, billing_for, combined_cost, deployment_cost, fleet_cards, offer_hosting_problem,
                   offers_under)

MAX_MIX_FLEETS = 12  # mixed fleets simulated at most (each on every seed)


def group_of(plan: dict) -> dict:
    """The hardware of a priced plan as a ``[[fleet.groups]]`` table (its replicas left to the caller)."""
    return {"gpu": plan["gpu"], "quant": plan["quant"], "tensor_parallel": plan["tensor_parallel"]}


def cheapest_rental(question, gpu: str, tensor_parallel: int, replicas: int) -> Optional[DeploymentCost]:
    """The offer (among those asked for, under the question's price rule) renting ``replicas`` x ``tensor_parallel``
    cards of ``gpu`` for the least per month (low end) in the question's billing and currency; None when none hosts
    them."""
    cards = fleet_cards(gpu, tensor_parallel, replicas)
    offers = offers_under(question.price_rule, question.offers, question.billing)
    costs = [deployment_cost(o, cards, billing_for(o, question.billing), question.currency, question.cny_per_usd)
             for o in offers[offers["gpu"] == gpu].index if offer_hosting_problem(o, tensor_parallel) is None]
    return min(costs, key=lambda c: c.per_month[0], default=None)


def mix_scenario(search, base: dict, groups: list[dict], seed_offset: int) -> dict:
    """The search's scenario for ``base``'s configuration on the mixed fleet ``groups`` (each group's saved
    calibration, if its GPU has one)."""
    data = search.plan_scenario(base, seed_offset)
    tables = [{**g, **({"calibration": c} if (c := with_gpu(search.data, g["gpu"])["server"].get("calibration"))
                       else {})} for g in groups]
    return apply_overrides(data, {"fleet.groups": tables})


def cheaper_mix(search, plans: list[dict]) -> tuple[Optional[dict], str]:
    """(the mixed fleet proposed, or None; a sentence on what was tried) for the priced single-GPU ``plans``: the
    recommendation first (the base a mix replaces and saves against), then the others cheapest first."""
    if not plans:
        return None, ""
    if search.disaggregated():
        return None, "No mixed fleet tried: the fleet is disaggregated (each pool is one kind of server)."
    base = plans[0]
    partner = next((p for p in plans if p["gpu"] != base["gpu"]), None)
    if partner is None:
        return None, f"No mixed fleet tried: only {base['gpu']} meets the targets."
    if base["replicas"] < 2:
        return None, f"No mixed fleet tried: the cheapest plan is one {base['gpu']} server."
    q, best, simulated = search.question, None, 0
    errors = {m: max(e for e in (base["step_errors_pct"].get(m), partner["step_errors_pct"].get(m)) if e is not None)
              for m in {*base["step_errors_pct"], *partner["step_errors_pct"]}}  # the larger of both checks
    limit = base["monthly_cost"]["low"]
    for a in range(base["replicas"] - 1, 0, -1):
        for b in range(1, partner["replicas"] + 1):
            rentals = [cheapest_rental(q, base["gpu"], base["tensor_parallel"], a),
                       cheapest_rental(q, partner["gpu"], partner["tensor_parallel"], b)]
            if None in rentals:
                break
            cost = combined_cost(rentals)
            if cost.per_month[0] >= limit or simulated >= MAX_MIX_FLEETS:
                break
            groups = [{**group_of(base), "replicas": a}, {**group_of(partner), "replicas": b}]
            if estimated_offered_load(load_scenario(mix_scenario(search, base, groups, 0),
                                                    origin=search.origin)) >= 1.0:
                continue
            simulated += 1
            evidence = search.runs_of(("mix", a, b), lambda k: mix_scenario(search, base, groups, k), errors,
                                      search.plan_config(base))
            if evidence.met:
                best = (cost, groups, rentals, evidence)
                limit = cost.per_month[0]
                break
    tried = f"{counted(simulated, 'mixed fleet')} of {base['gpu']} and {partner['gpu']} simulated"
    if best is None:
        return None, f"No mix of {base['gpu']} and {partner['gpu']} meets the targets for less ({tried})."
    cost, groups, rentals, evidence = best
    entries = [{**g, "cards": fleet_cards(g["gpu"], g["tensor_parallel"], g["replicas"]), "offer": r.offer,
                "calibrated": p["calibrated"], "step_times": p["step_times"]}
               for g, r, p in zip(groups, rentals, (base, partner))]
    mix = {"groups": entries, "cards": sum(e["cards"] for e in entries), "offer": cost.offer,
           "router": base["router"], "policy": base["policy"], "decoding": base["decoding"],
           "calibrated": all(e["calibrated"] for e in entries),
           "monthly_cost": {"low": cost.per_month[0], "high": cost.per_month[1], "currency": q.currency,
                            "billing": " + ".join(dict.fromkeys(billing_for(r.offer, q.billing) for r in rentals)),
                            "estimate": bool(cost.estimate)},
           "saving_per_month": base["monthly_cost"]["low"] - cost.per_month[0],
           "instead_of": {"gpu": base["gpu"], "tensor_parallel": base["tensor_parallel"],
                          "replicas": base["replicas"], "offer": base["offer"]},
           "targets": search.target_entries(evidence, errors)}
    return mix, f"Cheaper as a mixed fleet ({tried})."
