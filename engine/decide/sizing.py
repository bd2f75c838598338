"""Fleet sizing on one workload: the same cards as every tensor-parallel x replica shape (the
data-parallel versus tensor-parallel trade, 8 x TP1 ... 1 x TP8), and the cheapest rental that meets a
latency target ("which rental is cheapest that meets a P99 of 1 s at 50 req/s?")."""

from __future__ import annotations

from typing import Callable, Optional

import pandas as pd

from ..calibrate.calibration import status
from ..hardware.calibration_store import with_gpu
from ..hardware.roofline import smallest_fitting_tensor_parallel
from ..hardware.tables import gpu_names, is_slice, link_domain_cards, load_table, tensor_parallel_degrees
from ..scenario.config import apply_overrides, load_scenario
from ..scenario.errors import ScenarioError
from ..scenario.metric_table import metric
from ..scenario.origin import Origin
from ..sim import stopping
from ..sim.parallel import run_all
from ..sim.simulate import run_summary
from .cost import DeploymentCost, deployment_cost, fleet_cards, offer_hosting_problem, unit_costs
from .targets import Target


SHAPE_METRICS = ("completed", "timed_out", "ttft_p50_ms", "ttft_p99_ms", "tpot_mean_ms", "e2e_p99_ms", "sla_attainment",
                 "output_tokens_per_s")


def shapes(cards: int, gpu: str) -> list[tuple[int, int]]:
    """(tensor_parallel, replicas) pairs of ``gpu`` that use exactly ``cards`` cards (within its link domain)."""
    return [(tp, cards // tp) for tp in tensor_parallel_degrees(gpu) if cards % tp == 0]


def fleet_shapes(data: dict, cards: int, rental: Optional[DeploymentCost] = None, origin: Origin = Origin(),
                 run: Callable[[dict], dict] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """One row per shape of ``cards`` cards: overall latency, throughput, utilisation and (with ``rental``,
    priced for ``cards`` cards at its low end) the cost per million output tokens. A shape whose model
    does not fit, or that the rental's machines cannot host, gets the reason in ``note``. ``run`` maps a
    scenario dict to its summary (default: a fresh simulation; the app passes its cached one)."""
    gpu = data.get("server", {}).get("gpu", "")
    if is_slice(gpu):
        raise ScenarioError(f"server.gpu = {gpu!r} is a slice: slices cannot be split over cards; compare "
                            f"fleet.replicas instead")
    run = run or (lambda d: run_summary(d, origin))
    rows = []
    pairs = shapes(cards, gpu)

    def attempt(pair: tuple[int, int]):
        try:
            return run(apply_overrides(data, {"server.tensor_parallel": pair[0], "fleet.replicas": pair[1]}))
        except ScenarioError as exc:
            return exc

    for (tp, replicas), summary in zip(pairs, run_all(attempt, pairs, progress)):
        label = f"{replicas} x TP{tp}"
        if isinstance(summary, ScenarioError):
            rows.append({"shape": label, "tensor_parallel": tp, "replicas": replicas, "note": str(summary)})
            continue
        o, system = summary["overall"], summary["system"]
        hosting = offer_hosting_problem(rental.offer, tp) if rental else None
        rows.append({
            "shape": label, "tensor_parallel": tp, "replicas": replicas,
            **{key: metric(key).value(o) for key in SHAPE_METRICS},
            **{key: metric(key).value(system) for key in ("gpu_busy_frac", "offered_load")},
            "cost_per_million_output_tokens": unit_costs(rental.per_hour[0], o)["per_million_output_tokens"]
            if rental and not hosting else None,
            "unstable": bool(system["unstable"]),
            "note": "; ".join(n for n in ("unstable" if system["unstable"] else "", hosting or "") if n),
        })
    return pd.DataFrame(rows)


def smallest_tensor_parallel(data: dict, origin: Origin = Origin()) -> int | None:
    """The smallest tensor-parallel degree at which the scenario's model fits its GPU (None if none does,
    or the GPU cannot run its weight format)."""
    try:
        return smallest_fitting_tensor_parallel(load_scenario(data, origin=origin).server)
    except ScenarioError:
        return None


def fewest_replicas(data: dict, target: Target, max_replicas: int, run: Callable[[dict], dict]) -> tuple:
    """The fewest replicas meeting ``target`` (doubling, then bisection; assumes more replicas never
    hurt) and that run's summary, or (None, None) when even ``max_replicas`` do not."""
    def attempt(replicas: int):
        summary = run(apply_overrides(data, {"fleet.replicas": replicas}))
        return target.met(summary)[0], summary

    low, high, best = 0, 1, None
    while True:
        ok, summary = attempt(high)
        if ok:
            best = (high, summary)
            break
        if high >= max_replicas:
            return None, None
        low, high = high, min(2 * high, max_replicas)
    while high - low > 1:
        middle = (low + high) // 2
        ok, summary = attempt(middle)
        if ok:
            high, best = middle, (middle, summary)
        else:
            low = middle
    return best


def cheapest_fleets(data: dict, target: Target, billing: str, currency: str, cny_per_usd: float,
                    max_replicas: int = 16, origin: Origin = Origin(), run: Callable[[dict], dict] | None = None,
                    progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Every rental offer priced for the smallest fleet of its GPU that meets ``target`` on the scenario's
    workload and policy: the model at its smallest fitting tensor-parallel degree, the fewest replicas
    that meet the target. One row per offer, cheapest first (low end of the monthly price); GPUs
    whose model does not fit or that miss the target with ``max_replicas`` say so in ``note``;
    ``target_value_ms`` is the target metric's value on the chosen fleet."""
    run = run or (lambda d: run_summary(d, origin))
    offers = load_table("offers")
    gpus = [g for g in dict.fromkeys(offers["gpu"]) if g in gpu_names()]

    def size(gpu: str) -> dict:
        variant = with_gpu(data, gpu)
        tp = smallest_tensor_parallel(variant, origin)
        if tp is None:
            return {"note": "the model does not fit on one slice (slices cannot be combined)"
                    if is_slice(gpu) else f"the model does not fit even at a tensor-parallel degree of "
                                          f"{link_domain_cards(gpu)}"}
        replicas, summary = fewest_replicas(apply_overrides(variant, {"server.tensor_parallel": tp}), target,
                                            max_replicas, run)
        return ({"note": f"misses the target with {max_replicas} replicas of TP{tp}"} if replicas is None
                else {"tensor_parallel": tp, "replicas": replicas, "summary": summary})

    fleets = dict(zip(gpus, run_all(size, gpus, progress)))  # one search per GPU, on all cores
    rows = []
    for offer, row in offers.iterrows():
        if row["gpu"] not in fleets:
            continue
        fleet = fleets[row["gpu"]] or {"note": stopped_note()}  # None: its search was stopped before its answer
        base = {"offer": offer, "vendor": row["vendor"], "gpu": row["gpu"], "step_times": status(row["gpu"])}
        if "summary" not in fleet:
            rows.append({**base, "note": fleet["note"]})
            continue
        problem = offer_hosting_problem(offer, fleet["tensor_parallel"])
        if problem:
            rows.append({**base, "note": problem})
            continue
        cards = fleet_cards(row["gpu"], fleet["tensor_parallel"], fleet["replicas"])
        cost = deployment_cost(offer, cards, billing, currency, cny_per_usd)
        summary = fleet["summary"]
        rows.append({**base, "shape": f"{fleet['replicas']} x TP{fleet['tensor_parallel']}", "cards": cards,
                     "per_month_low": cost.per_month[0], "per_month_high": cost.per_month[1],
                     "per_million_output_tokens_low": unit_costs(cost.per_hour[0],
                                                                 summary["overall"])["per_million_output_tokens"],
                     "target_value_ms": target.met(summary)[1],
                     "gpu_busy_frac": summary["system"]["gpu_busy_frac"],
                     "price_estimate": cost.estimate, "note": ""})
    frame = pd.DataFrame(rows)
    if "per_month_low" not in frame.columns:  # no offer could be priced
        return frame.reindex(columns=[c for c in CHEAPEST_COLUMNS if c in ("offer", "gpu", "vendor", "note")])
    frame = frame.sort_values("per_month_low", na_position="last", kind="stable", ignore_index=True)
    return frame[[c for c in CHEAPEST_COLUMNS if c in frame.columns]]


def stopped_note() -> str:
    """The note of a search stopped before its answer, when its time ran out (``stopping.cut_reason``)."""
    return f"not searched: {stopping.cut_reason() or 'its search was stopped'}"


# Decisive columns first: what to rent, how many, what it costs, whether it meets the target, how sure.
CHEAPEST_COLUMNS = ("offer", "gpu", "shape", "cards", "per_month_low", "per_month_high",
                    "per_million_output_tokens_low", "target_value_ms", "step_times", "price_estimate", "gpu_busy_frac",
                    "vendor", "note")

