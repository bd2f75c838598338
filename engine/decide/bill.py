"""The bill of traffic that moves: what an autoscaled run's replicas cost as they come and go, against the two other
ways to buy the same service, each from a run of its own fleet.

- **fixed at the peak**: the autoscaled run's peak of replicas, up all month, through the cheapest firm offer that
  hosts them (``cost.cheapest_offer``), simulated as a fixed fleet for its own SLA figures;
- **autoscaled, on demand**: every replica-interval of the autoscaled run billed through the cheapest firm offer quoted
  per hour on demand, per ``hourly_billing_increment_s`` with a minimum of ``hourly_billing_minimum_s``
  (``data/hardware/pricing_conventions.csv``);
- **reserved baseline + bursts**: the autoscaler's ``min_replicas`` all month through the cheapest firm offer (as the
  fixed fleet), the replicas above them billed by use as in the autoscaled row (through the cheapest spot offer
  instead when the scenario's bursts are spot replicas: an estimate, and capacity that is taken back).

A run covers a span (a day, a week); its bill is scaled to a month of ``HOURS_PER_MONTH`` by the span's length: the
span is taken as typical of the month, which the page and the command line say.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..hardware.tables import load_table
from ..scenario.config import Scenario
from ..scenario.errors import ScenarioError
from ..scenario.metric_table import money_range
from .cost import (BILLING_MODES, CNY_PER_USD_DEFAULT, DEFAULT_CURRENCY, HOURS_PER_MONTH, INTERRUPTIBLE_TERMS,
                   cheapest_offer, deployment_cost, fleet_cards,
                   firm_offer, offer_hosting_problem, offers_for)

_CONVENTIONS = load_table("pricing_conventions")["value"]
HOURLY_INCREMENT_S = float(_CONVENTIONS["hourly_billing_increment_s"])
HOURLY_MINIMUM_S = float(_CONVENTIONS["hourly_billing_minimum_s"])
STRATEGIES = ("fixed at the peak", "autoscaled, on demand", "reserved baseline + bursts")
STRATEGY_SHORT = dict(zip(STRATEGIES, ("fixed", "autoscaled", "reserved + bursts")))  # column headings
STRATEGY_COLORS = dict(zip(STRATEGIES, ("#7F7F7F", "#1F77B4", "#2CA02C")))  # one colour each on every chart
STRATEGY_DASHES = dict(zip(STRATEGIES, ("solid", "solid", "dot")))  # the reserved baseline's often runs over the other


@dataclass(frozen=True)
class StrategyBill:
    """One way to buy the fleet: its replicas in words, the offers, the bill per month (low and high end of the
    offers' ranges, in ``currency``), replica-hours billed over the run, the run's SLA attainment, and the cost per
    hour in each of the run's windows (low end)."""

    strategy: str
    fleet: str
    offers: str
    per_month: tuple[float, float]
    currency: str
    estimate: bool
    replica_hours: float
    sla_attainment: float | None
    cost_per_hour: tuple[float, ...]


def replicas_text(count: int) -> str:
    return f"{count} replica{'' if count == 1 else 's'}"


def billed_s(duration_s: float) -> float:
    """Seconds billed for one replica up ``duration_s`` on an hourly offer: whole increments, at least the minimum."""
    return max(math.ceil(duration_s / HOURLY_INCREMENT_S - 1e-9) * HOURLY_INCREMENT_S, HOURLY_MINIMUM_S)


def fixed_overrides(replicas: int) -> dict:
    """The overrides (``config.apply_overrides``) that hold a scenario's fleet at ``replicas``, without its
    autoscaler nor spot replicas: the fixed fleet at the peak."""
    return {"fleet.replicas": replicas, "fleet.autoscale": None, "fleet.spot_interruptions_per_hour": 0.0}


def _by_use_offer(gpu: str, tensor_parallel: int, spot: bool, among: tuple[str, ...] = ()) -> str | None:
    """The cheapest offer quoted per hour that bills by use: firm on-demand ones (``spot``: spot ones); ``among``:
    only these offers (empty: every one)."""
    offers = offers_for(gpu)
    offers = offers[[not among or o in among for o in offers.index]]
    wanted = offers[(offers["period"] == "hour") & (offers["terms"].isin(INTERRUPTIBLE_TERMS) if spot else
                                                    offers["terms"] == "on-demand")]
    usable = [o for o in wanted.index if offer_hosting_problem(o, tensor_parallel) is None
              and (spot or firm_offer(o))]
    if not usable:
        return None
    return min(usable, key=lambda o: deployment_cost(o, tensor_parallel, BILLING_MODES[0], DEFAULT_CURRENCY,
                                                     CNY_PER_USD_DEFAULT).per_hour[0])


def strategy_bills(scenario: Scenario, autoscaled: dict, fixed: dict, currency: str,
                   cny_per_usd: float, among: tuple[str, ...] = (), multiple: int = 1) -> list[StrategyBill]:
    """The three ways to buy the service (``STRATEGIES``) of ``scenario`` (autoscaled, on a real GPU), from the
    summaries of its run (``autoscaled``) and of the fixed fleet at its peak (``fixed``, ``fixed_overrides``),
    renting through ``among`` only when given (the offers a customer accepts). ``multiple``: the runs simulated
    1/``multiple`` of the fleet at 1/``multiple`` of the traffic (``over_time.whole_span``), so every replica they
    count stands for ``multiple`` of the fleet billed."""
    server, scale = scenario.server, scenario.fleet.autoscale
    if scale is None or server.step_model != "roofline":
        raise ScenarioError("the bill over time needs an autoscaled fleet ([fleet.autoscale]) of a real GPU "
                            "(server.step_model = roofline)")
    gpu, tp = server.gpu, server.tensor_parallel
    report, system = autoscaled["system"]["autoscale"], autoscaled["system"]
    span_s = system["sim_time_s"]
    month = HOURS_PER_MONTH * 3600.0 / span_s
    spot = scenario.fleet.spot_interruptions_per_hour > 0
    windows = [{**w, "replicas": w["replicas"] * multiple} for w in autoscaled["windows"]]
    peak = report["peak_replicas"] * multiple

    def monthly(replicas: int) -> tuple[str, tuple[float, float], tuple[float, float], bool]:
        cards = fleet_cards(gpu, tp, replicas)
        offer = cheapest_offer(gpu, cards, tp, among)
        if offer is None:
            raise ScenarioError(f"no offer in data/hardware/offers.csv rents {gpu}")
        cost = deployment_cost(offer, cards, BILLING_MODES[0], currency, cny_per_usd)
        return offer, cost.per_month, cost.per_hour, cost.estimate

    def by_use(spot_bursts: bool) -> tuple[str, tuple[float, float], bool]:
        offer = _by_use_offer(gpu, tp, spot_bursts, among)
        if offer is None:
            kind = "spot" if spot_bursts else "firm on-demand"
            raise ScenarioError(f"no {kind} offer quoted per hour rents {gpu} (data/hardware/offers.csv): replicas "
                                f"that come and go cannot be billed by use")
        cost = deployment_cost(offer, fleet_cards(gpu, tp, 1), BILLING_MODES[0], currency, cny_per_usd)
        return offer, cost.per_hour, cost.estimate

    fixed_offer, fixed_month, fixed_hour, fixed_estimate = monthly(peak)
    bills = [StrategyBill(STRATEGIES[0], f"{replicas_text(peak)} all month", fixed_offer, fixed_month, currency,
                          fixed_estimate, peak * span_s / 3600.0, fixed["overall"]["sla_attainment"],
                          tuple(fixed_hour[0] for _ in windows))]
    attainment = autoscaled["overall"]["sla_attainment"]
    base = scale.min_replicas * multiple
    base_s = multiple * sum(billed_s(d) for d, j in zip(report["billed_s"], report["billed_slots"])
                            if j < scale.min_replicas)
    burst_s = multiple * sum(billed_s(d) for d, j in zip(report["billed_s"], report["billed_slots"])
                             if j >= scale.min_replicas)
    offer, rate, estimate = by_use(spot)
    base_by_use, base_rate, base_by_use_estimate = by_use(False) if spot else (offer, rate, estimate)
    bills.append(StrategyBill(
        STRATEGIES[1], (f"{base} to {peak} replicas" if peak > base else f"{replicas_text(base)} (no burst in this "
                                                                          f"run)") + ", billed by use",
        base_by_use if base_by_use == offer else f"{base_by_use} + {offer}",
        tuple((b * base_s + r * burst_s) / 3600.0 * month for b, r in zip(base_rate, rate)), currency,
        estimate or base_by_use_estimate, system["replica_hours"] * multiple, attainment,
        tuple(base_rate[0] * min(w["replicas"], base) + rate[0] * max(w["replicas"] - base, 0.0) for w in windows)))
    base_offer, base_month, base_hour, base_estimate = monthly(base)
    bills.append(StrategyBill(
        STRATEGIES[2], f"{base} reserved all month" + (f" + up to {peak - base} {'spot' if spot else 'on demand'}"
                                                        if peak > base else " (no burst in this run)"),
        f"{base_offer} + {offer}", tuple(b + r * burst_s / 3600.0 * month for b, r in zip(base_month, rate)),
        currency, base_estimate or estimate, system["replica_hours"] * multiple, attainment,
        tuple(base_hour[0] + rate[0] * max(w["replicas"] - base, 0.0) for w in windows)))
    return bills


def format_bills(bills: list[StrategyBill], span_s: float) -> str:
    """The strategies as a table for the command line, cheapest first, with what the month assumes."""
    lines = [f"the bill of {span_s / 3600:,.1f} h of traffic, scaled to a month of {HOURS_PER_MONTH:g} h (each "
             f"span of the month taken as this one):",
             f"{'strategy':<28}{'per month':>22}{'SLA met':>9}{'replica-hours':>15}  fleet; offers"]
    for bill in sorted(bills, key=lambda b: b.per_month[0]):
        met = "-" if bill.sla_attainment is None else f"{100 * bill.sla_attainment:.1f}%"
        price = money_range(bill.per_month, bill.currency) + ("*" if bill.estimate else "")
        lines.append(f"{bill.strategy:<28}{price:>22}"
                     f"{met:>9}{bill.replica_hours:>15,.1f}  {bill.fleet}; {bill.offers}")
    if any(b.estimate for b in bills):
        lines.append("* an estimate: a price range, an estimated price, or spot capacity the provider takes back")
    return "\n".join(lines)
