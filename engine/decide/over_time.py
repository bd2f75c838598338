"""Buying traffic that moves: the planner's recommended fleet run over the whole curve (its day or week) or the whole
trace, bought the three ways of ``decide.bill`` (``STRATEGIES``), with the autoscaler's parameters searched.

The recommendation is sized for the traffic's busiest point (``planner.at_peak``): ``replicas`` of it, the fixed
fleet at the peak. Over the whole span the planner then runs, each once (seed of the scenario):

- that fixed fleet, for its SLA hour by hour (its bill is the recommendation's own), each request judged by the
  question's own latency limits (``targets.limits_of_targets``), not limits the scenario carried unseen;
- an autoscaler holding between a baseline of ``min_replicas`` and the peak fleet, on the utilisation signal, for
  each baseline of ``baselines`` and each target of ``AUTOSCALE_TARGETS`` (the scenario's own ``[fleet.autoscale]``
  gives the other settings, and is one more candidate, held to the peak fleet, when it has one), starting with the
  replicas the starting rate needs (``starting``). Each run is billed autoscaled on demand and as a reserved
  baseline with bursts (``bill.strategy_bills``); per strategy the cheapest run meeting every target over the span
  is kept, else the one meeting most of the SLA, flagged.

A day or a week is one run of up to ``requests_per_run`` requests (a busier one runs a share of the fleet at the
same share of the traffic: ``whole_span``); the runs go to the Dask cluster when one is
configured (``parallel.summaries``), else to this machine's cores. The span's bill is scaled to a month as in
``bill`` (each span of the month taken as this one).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable

from ..scenario.config import Autoscale, apply_overrides, load_scenario
from ..scenario.origin import Origin
from ..sim.parallel import summaries
from .bill import STRATEGIES, replicas_text, strategy_bills
from .cost import HOURS_PER_MONTH
from .targets import all_met, limits_of_targets

# every key of an autoscaler a scenario may leave out, with its default: the scenario's own, filled in
AUTOSCALE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Autoscale) if f.default is not dataclasses.MISSING}
AUTOSCALE_TARGETS = (0.3, 0.5, 0.7)  # utilisation targets searched: fuller fleets are cheaper, slower to absorb a rise
PERIOD_S = 3600.0  # windows shorter than an hour are merged into hours for the table by hour


def baselines(peak_replicas: int, mean_over_peak: float) -> list[int]:
    """The baselines (``min_replicas``) searched under a peak fleet of ``peak_replicas``: one replica, the share of
    the peak fleet the mean rate needs, and one under the peak; each below the peak (at the peak there is nothing
    to scale)."""
    middle = max(1, round(peak_replicas * mean_over_peak))
    return sorted({m for m in (1, middle, peak_replicas - 1) if 1 <= m < peak_replicas})


def fleet_share(peak_replicas: int, expected_requests: float, cap: int) -> int:
    """The smallest ``multiple`` dividing the peak fleet whose share of the traffic (1/``multiple``) one run can
    simulate under ``cap`` requests, with at least two replicas left to scale between; 0 when none does."""
    for multiple in range(1, peak_replicas // 2 + 1):
        if peak_replicas % multiple == 0 and expected_requests / multiple <= cap:
            return multiple
    return 0


def whole_span(data: dict, origin: Origin, peak_replicas: int = 1) -> tuple[dict, float, float, int] | str:
    """Scenario ``data`` bounded to its whole curve (its period, else up to its last point) or its whole trace, with
    the mean and the starting rate over the peak rate (NaN for a trace: read from its run) and the fleet's
    ``multiple``; or why it cannot be run whole ("" for a constant rate).

    A curve holding more requests than one run simulates is run as 1/``multiple`` of the peak fleet of
    ``peak_replicas`` (``fleet_share``) at 1/``multiple`` of the rate: every server sees the same load, a smaller
    fleet pools its traffic less (so its latencies are if anything pessimistic), and the autoscaler moves in steps
    of ``multiple`` replicas; the bills count each simulated replica ``multiple`` times."""
    scenario = load_scenario(data, origin=origin)
    workload = scenario.workload
    cap = origin.caps.requests_per_run
    if workload.trace is not None:
        whole = apply_overrides(data, {})
        for key in ("num_requests", "duration_s"):
            whole["workload"].pop(key, None)
        return whole, float("nan"), float("nan"), 1
    curve = workload.arrival.curve()
    if curve is None:
        return ""
    span_s = curve.span_s()
    if span_s <= 0:
        return "the rate curve has a single point: it does not move"
    expected = workload.arrival.rate_per_s * span_s
    multiple = fleet_share(peak_replicas, expected, cap) if expected > cap else 1
    if not multiple:
        return (f"its whole curve ({span_s / 3600:,.1f} h) holds about {expected:,.0f} requests, more than one run "
                f"simulates ({cap:,}, the limit requests_per_run) even for a share of the {peak_replicas} replicas "
                f"that keeps two of them; lower the rate, or raise the limit")
    # the whole curve from its start (hours by the curve's clock), bounded by time alone: a request cap would
    # size the run's memory for the cap, not for the requests that arrive
    bounded = apply_overrides(data, {"workload.duration_s": span_s, "workload.arrival.curve_start_s": 0.0,
                                     **({"fleet.replicas": peak_replicas // multiple,
                                         "workload.arrival.rate_per_s": workload.arrival.rate_per_s / multiple}
                                        if multiple > 1 else {})})
    bounded["workload"].pop("num_requests", None)
    peak = float(curve.rates_per_s.max())
    return bounded, workload.arrival.rate_per_s / peak, float(curve.rate_at(0.0)) / peak, multiple


def buy_over_time(data: dict, scaling: dict, plan: dict, question, origin: Origin = Origin(),
                  progress: Callable[[int, int], None] | None = None) -> dict | None:
    """The three ways to buy ``plan``'s fleet (the planner's recommendation; ``data``: the scenario on its fleet,
    fixed, at the scenario's own moving rate; ``scaling``: the scenario's own fleet keys of ``planner.SCALING_KEYS``)
    for the whole span; None when the rate does not move. A dict with ``note`` only when it cannot be priced over
    time, and why. ``progress(done, total)``: runs done."""
    started = time.perf_counter()
    targets, currency, cny_per_usd = question.targets, question.currency, question.cny_per_usd
    if data.get("fleet", {}).get("mode") == "disaggregated":
        return {"note": "autoscaled pools are not billed by use yet: the prefill and decode pools are priced fixed "
                        "at the peak only"}
    found = whole_span(data, origin, plan["replicas"])
    if found == "":
        return None
    if isinstance(found, str):
        return {"note": found}
    whole, mean_over_peak, start_over_peak, multiple = found
    # hour by hour, each request is judged by the question's own latency limits (``limits_of_targets``)
    whole = apply_overrides(whole, {"workload.classes": limits_of_targets(whole["workload"]["classes"], targets)})
    peak = plan["replicas"] // multiple  # the simulated share of the peak fleet
    tell = progress or (lambda done, total: None)
    tell(0, 1)  # the candidates are known after this run (a trace's busiest window)
    fixed_run = summaries([whole], origin)[0]  # ``data`` is the fixed fleet at the peak
    if math.isnan(mean_over_peak):  # a trace: its mean and first window's rate over its busiest window's
        mean_over_peak, start_over_peak = busy_share(fixed_run["windows"])
    own = {**AUTOSCALE_DEFAULTS, **scaling["autoscale"]} if scaling.get("autoscale") else {}
    spot = {f"fleet.{key}": value for key, value in scaling.items() if key != "autoscale"}
    bases = baselines(peak, mean_over_peak)
    candidates = [{**own, "signal": "utilisation", "target": target, "min_replicas": base, "max_replicas": peak}
                  for base in bases for target in AUTOSCALE_TARGETS]
    if own:  # the scenario's own autoscaler, held to the peak fleet
        mine = {**own, "max_replicas": peak, "min_replicas": min(max(1, own["min_replicas"] // multiple), peak)}
        candidates += [mine] if mine not in candidates else []
    datas = [apply_overrides(whole, {"fleet.autoscale": c, "fleet.replicas": starting(c, start_over_peak), **spot})
             for c in candidates]
    tell(1, 1 + len(datas))
    scaled_runs = summaries(datas, origin, lambda done, _: tell(1 + done, 1 + len(datas)))
    span_s = fixed_run["system"]["sim_time_s"]
    cost = plan["monthly_cost"]
    rows = [_strategy(STRATEGIES[0], f"{replicas_text(plan['replicas'])} all month", plan["offer"],
                      (cost["low"], cost["high"]), currency, cost["estimate"], plan["replicas"] * span_s / 3600.0,
                      fixed_run, targets, None, tuple(cost["low"] / HOURS_PER_MONTH for _ in fixed_run["windows"]))]
    scenarios = [load_scenario(d, origin=origin) for d in datas]
    billed = [strategy_bills(s, run, fixed_run, currency, cny_per_usd, question.offers, multiple)
              for s, run in zip(scenarios, scaled_runs)]
    for k, strategy in enumerate(STRATEGIES[1:], start=1):
        chosen = _choose([(bills[k], run) for bills, run in zip(billed, scaled_runs)], targets)
        if chosen is None:
            continue
        index, bill, run = chosen
        rows.append(_strategy(strategy, bill.fleet, bill.offers, bill.per_month, currency, bill.estimate,
                              bill.replica_hours, run, targets, scaled(candidates[index], multiple),
                              bill.cost_per_hour))
    return {"span_s": span_s, "requests": fixed_run["run"]["requests"], "fleet_multiple": multiple,
            "strategies": rows, "periods": periods(rows, fixed_run["windows"], multiple),
            "searched": {"baselines": [b * multiple for b in bases], "targets": list(AUTOSCALE_TARGETS),
                         "signal": "utilisation", "own": bool(own)},
            "runs": 1 + len(datas), "wall_s": time.perf_counter() - started}


def scaled(autoscale: dict, multiple: int) -> dict:
    """An autoscaler of the simulated share of the fleet as it reads for the whole fleet (its bounds ``multiple``
    times)."""
    return {**autoscale, "min_replicas": autoscale["min_replicas"] * multiple,
            "max_replicas": autoscale["max_replicas"] * multiple}


def starting(autoscale: dict, start_over_peak: float) -> int:
    """Replicas up when the run starts: the share of the peak fleet the starting rate needs, within the bounds (a
    day that repeats starts as the day before ended, not from its baseline)."""
    low, high = autoscale.get("min_replicas", 1), autoscale["max_replicas"]
    return min(max(math.ceil(high * start_over_peak - 1e-9), low), high)


def busy_share(windows: list[dict]) -> tuple[float, float]:
    """The mean arrival rate and the first window's over the busiest window's (the last window, cut short, is not
    a rate)."""
    rates = [w["arrived"] / (w["end_s"] - w["start_s"]) for w in windows[:-1]]
    if not rates or max(rates) <= 0:
        return 1.0, 1.0  # one window: no busiest one to compare with
    mean = sum(w["arrived"] for w in windows) / (windows[-1]["end_s"] - windows[0]["start_s"])
    return min(1.0, mean / max(rates)), rates[0] / max(rates)


def _choose(bills_and_runs: list[tuple], targets: tuple) -> tuple[int, object, dict] | None:
    """(index, bill, run) of the cheapest bill whose run meets every target; else of the run meeting most of the
    SLA (then the cheapest)."""
    if not bills_and_runs:
        return None
    meeting = [k for k, (_, run) in enumerate(bills_and_runs) if all_met(targets, run)]
    if meeting:
        k = min(meeting, key=lambda k: bills_and_runs[k][0].per_month)
    else:
        k = min(range(len(bills_and_runs)), key=lambda k: (-(bills_and_runs[k][1]["overall"]["sla_attainment"] or 0.0),
                                                           bills_and_runs[k][0].per_month))
    return k, *bills_and_runs[k]


def _strategy(strategy: str, fleet: str, offers: str, per_month: tuple, currency: str, estimate: bool,
              replica_hours: float, run: dict, targets: tuple, autoscale: dict | None, cost_per_hour: tuple) -> dict:
    """One strategy's row of the answer, with its run's windows kept aside for the table by hour."""
    return {"strategy": strategy, "fleet": fleet, "offers": offers,
            "monthly_cost": {"low": per_month[0], "high": per_month[1], "currency": currency,
                             "estimate": bool(estimate)},
            "replica_hours": replica_hours, "sla_attainment": run["overall"]["sla_attainment"],
            "meets_targets": all_met(targets, run),
            "targets": [{"target": t.describe(), "metric": t.key, "class": t.cls, "value": t.value(run),
                         "met": t.met(run)[0]} for t in targets],
            "autoscale": None if autoscale is None else {key: autoscale[key] for key in
                                                         ("min_replicas", "max_replicas", "signal", "target")},
            "_windows": run["windows"], "_cost_per_hour": cost_per_hour}


def periods(rows: list[dict], windows: list[dict], multiple: int = 1) -> dict:
    """Each strategy's replicas, cost per hour (low end) and SLA attainment by hour (windows shorter than an hour
    merged; longer ones kept as they are; each simulated replica counted ``multiple`` times, as the bills count
    it): ``{"length_s", "rows": [{"start_s", "end_s", "replicas": [...],
    "cost_per_hour": [...], "sla_attainment": [...]}]}``, one entry per strategy in ``rows``' order. Pops the
    windows the rows carried."""
    length = windows[1]["end_s"] - windows[1]["start_s"] if len(windows) > 1 else PERIOD_S
    group = int(PERIOD_S // length) if length < PERIOD_S and PERIOD_S % length == 0 else 1
    table = []
    for first in range(0, len(windows), group):
        span = slice(first, first + group)
        entry = {"start_s": windows[first]["start_s"], "end_s": windows[span][-1]["end_s"], "replicas": [],
                 "cost_per_hour": [], "sla_attainment": []}
        for row in rows:
            own = row["_windows"][span]
            entry["replicas"].append(multiple * sum(w["replicas"] for w in own) / len(own))
            entry["cost_per_hour"].append(sum(row["_cost_per_hour"][span]) / len(own))
            judged = sum(sum(w["sla_judged"].values()) for w in own)
            missed = sum(sum(w["sla_missed"].values()) for w in own)
            entry["sla_attainment"].append(1.0 - missed / judged if judged else None)
        table.append(entry)
    for row in rows:
        del row["_windows"], row["_cost_per_hour"]
    return {"length_s": group * length, "rows": table}

