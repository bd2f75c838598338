"""Rental cost of a deployment and its unit costs at the simulated load.

Offers live in ``data/hardware/offers.csv`` (one row per offer, with source, date, currency, the
period the price is quoted for, its terms (``TERMS``), an annual-prepay discount and a low-high range where the
price is an estimate). A price is firm (``firm_offer``) when one number is quoted, read from the provider (not an
estimate) for capacity that is not taken back (on-demand or reserved): the only kind a service bound by latency
targets should be sized on. A deployment of N cards rents ceil(N / cards per unit) units of an offer. Hours per month
and the default exchange rate between CNY and USD (and the electricity price of ``energy``) live in
``data/hardware/pricing_conventions.csv`` with their sources; the exchange rate is a setting of the user's.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from dataclasses import dataclass
from datetime import date
from typing import Iterator

import pandas as pd

from ..hardware.tables import is_slice, load_table
from ..scenario.config import OVERALL
from ..scenario.errors import ScenarioError, excerpt
from ..scenario.summary import ClassMetrics

_CONVENTIONS = load_table("pricing_conventions")["value"]
HOURS_PER_MONTH = float(_CONVENTIONS["hours_per_month"])
BILLING_MODES = ("pay as you go", "annual prepay")
CURRENCIES = ("CNY", "USD")
DEFAULT_CURRENCY = "USD"  # every page's and command's currency until the user picks one (then the pages keep theirs)
CNY_PER_USD_DEFAULT = float(_CONVENTIONS["cny_per_usd_default"])
ELECTRICITY_USD_PER_KWH = float(_CONVENTIONS["electricity_usd_per_kwh"])  # what an owned card's energy costs
CNY_PER_USD_RANGE = (1.0, 20.0)  # the exchange rates the app and the command line accept
TERMS = ("on-demand", "reserved", "spot", "spot to on-demand", "unstated")  # offers.csv ``terms``
FIRM_TERMS = ("on-demand", "reserved")  # capacity the provider does not take back
INTERRUPTIBLE_TERMS = ("spot", "spot to on-demand")  # the provider may take the cards back at any time
OFFER_COLUMNS = ("offer", "vendor", "gpu", "gpus_per_unit", "max_cards_per_machine", "price_low", "price_high",
                 "currency", "period", "terms", "annual_discount", "estimate", "notes", "source", "as_of")  # offers.csv
PRICE_RULES = ("firm", "any")  # which offers a plan may rent through: firm prices only, or every offer
STALE_PRICE_DAYS = 183  # a price quoted more than six months before the plan is flagged as old


def offers_for(gpu: str) -> pd.DataFrame:
    """The offers that rent ``gpu``: whole cards of a card profile, or slices of a slice profile."""
    offers = offers_table()
    return offers[offers["gpu"] == gpu]


_USER_OFFERS: contextvars.ContextVar[pd.DataFrame | None] = contextvars.ContextVar("user_offers", default=None)


def offers_table() -> pd.DataFrame:
    """The offers a plan rents through: a user's price list while one is in force (``priced_by``), else
    ``offers.csv``."""
    user = _USER_OFFERS.get()
    return load_table("offers") if user is None else user


@functools.lru_cache(maxsize=8)
def _frame(rows: tuple[tuple, ...]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(OFFER_COLUMNS)).set_index("offer")


@contextlib.contextmanager
def priced_by(rows: tuple[tuple, ...]) -> Iterator[None]:
    """Within it, the offers are ``rows`` (a user's price list, ``price_list.read_price_list``) instead of offers.csv;
    with no rows, offers.csv as always."""
    if not rows:
        yield
        return
    token = _USER_OFFERS.set(_frame(rows))
    try:
        yield
    finally:
        _USER_OFFERS.reset(token)


def firm_offer(offer: str) -> bool:
    """True when ``offer``'s price is firm: one number, not an estimate, on terms that keep the capacity."""
    row = offers_table().loc[offer]
    return bool(row["terms"] in FIRM_TERMS and not row["estimate"] and row["price_low"] == row["price_high"])


COMMITTED_TERMS = ("reserved",)  # offers.csv terms that bind the renter to a term: not pay as you go


def offers_under(rule: str, asked: tuple[str, ...] = (), billing: str = "") -> pd.DataFrame:
    """The offers a plan may rent through under price rule ``rule`` (``PRICE_RULES``): those ``asked`` for (every
    offer when none is), firm ones only under "firm"; and billed pay as you go, none that binds the renter to a term
    (``COMMITTED_TERMS``) unless the customer asked for it by name or it is on their own price list (their own
    contract)."""
    if rule not in PRICE_RULES:
        raise ScenarioError(f"prices {excerpt(rule)} is not one of {', '.join(PRICE_RULES)}")
    offers = offers_table()
    offers = offers[offers.index.isin(asked)] if asked else offers
    if billing == BILLING_MODES[0] and not asked and _USER_OFFERS.get() is None:
        offers = offers[~offers["terms"].isin(COMMITTED_TERMS)]
    return offers if rule == "any" else offers[[firm_offer(o) for o in offers.index]]


def billing_modes(offer: str) -> tuple[str, ...]:
    """The billing modes ``offer`` is sold under: pay as you go, and annual prepay only where the provider publishes
    a discount for it (otherwise it would repeat the same price under a term nobody quoted)."""
    return BILLING_MODES if float(offers_table().loc[offer, "annual_discount"]) > 0 else BILLING_MODES[:1]


def billing_for(offer: str, billing: str) -> str:
    """``billing`` when ``offer`` is sold under it, else pay as you go (the offer's own price)."""
    return billing if billing in billing_modes(offer) else BILLING_MODES[0]


def price_age_days(offer: str, today: date) -> int:
    """Days between the date ``offer``'s price was quoted and ``today``."""
    return (today - date.fromisoformat(str(offers_table().loc[offer, "as_of"]))).days


def fleet_cards(gpu: str, tensor_parallel: int, replicas: int) -> int:
    """Cards (or slices, for a slice profile) a fleet of ``replicas`` x ``tensor_parallel`` occupies."""
    return replicas * (1 if is_slice(gpu) else tensor_parallel)


def offer_hosting_problem(offer: str, tensor_parallel: int) -> str | None:
    """Why ``offer`` cannot host replicas of ``tensor_parallel`` linked cards, or None when it can."""
    most = int(offers_table().loc[offer, "max_cards_per_machine"])
    if tensor_parallel <= most:
        return None
    return (f"offer {offer} rents machines of at most {most} card(s): a tensor-parallel group of "
            f"{tensor_parallel} needs its cards linked in one machine; choose an offer with bigger machines")


def convert(amount: float, currency: str, to_currency: str, cny_per_usd: float) -> float:
    if currency == to_currency:
        return amount
    if {currency, to_currency} != set(CURRENCIES):
        raise ScenarioError(f"no exchange from {currency} to {to_currency}; currencies are {', '.join(CURRENCIES)}")
    return amount * cny_per_usd if to_currency == "CNY" else amount / cny_per_usd


@dataclass(frozen=True)
class DeploymentCost:
    """What renting ``cards`` cards through one offer costs (low and high end of the offer's range)."""

    offer: str
    units: int
    currency: str
    per_hour: tuple[float, float]
    per_month: tuple[float, float]
    estimate: bool


def deployment_cost(offer: str, cards: int, billing: str, currency: str, cny_per_usd: float) -> DeploymentCost:
    """Cost of ``cards`` cards rented through ``offer`` under ``billing``, in ``currency``."""
    offers = offers_table()
    if offer not in offers.index:
        raise ScenarioError(f"offer {excerpt(offer)} is not in data/hardware/offers.csv")
    if billing not in BILLING_MODES:
        raise ScenarioError(f"billing {billing!r} is not one of {', '.join(BILLING_MODES)}")
    low, high = CNY_PER_USD_RANGE
    if not low <= cny_per_usd <= high:  # also refuses NaN
        raise ScenarioError(f"exchange rate cny_per_usd = {cny_per_usd!r} must be a number from {low:g} to {high:g}")
    row = offers.loc[offer]
    units = math.ceil(cards / float(row["gpus_per_unit"]) - 1e-9)
    hours = HOURS_PER_MONTH if row["period"] == "month" else 1.0
    discount = float(row["annual_discount"]) if billing == "annual prepay" else 0.0
    per_hour = tuple(convert(units * float(row[col]) / hours * (1 - discount), row["currency"], currency,
                             cny_per_usd) for col in ("price_low", "price_high"))
    return DeploymentCost(offer, units, currency, per_hour, tuple(p * HOURS_PER_MONTH for p in per_hour),
                          bool(row["estimate"]) or row["price_low"] != row["price_high"])


def cheapest_offer(gpu: str, cards: int, tensor_parallel: int, among: tuple[str, ...] = ()) -> str | None:
    """The offer renting ``cards`` cards of ``gpu`` for the least per hour (low end, pay as you go, compared at the
    default exchange rate) among those whose machines host the tensor-parallel group, firm prices first (an
    estimate, a range or spot capacity only where no firm price hosts it); None without offers. ``among``: only
    these offers (empty: every one)."""
    renting = [o for o in offers_for(gpu).index if not among or o in among]
    hosting = [o for o in renting if offer_hosting_problem(o, tensor_parallel) is None]
    offers = [o for o in hosting if firm_offer(o)] or hosting or renting
    if not offers:
        return None
    return min(offers, key=lambda o: deployment_cost(o, cards, BILLING_MODES[0], DEFAULT_CURRENCY,
                                                     CNY_PER_USD_DEFAULT).per_hour[0])


def combined_cost(parts: list[DeploymentCost]) -> DeploymentCost:
    """Several rentals (one per group of a mixed fleet, in one currency) as one: offers joined by " + ", units
    and prices added, an estimate when any part is."""
    if len({p.currency for p in parts}) != 1:
        raise ScenarioError("the parts of a mixed fleet's rent are priced in different currencies")
    add = lambda pick: tuple(sum(pick(p)[i] for p in parts) for i in range(2))  # noqa: E731
    return DeploymentCost(" + ".join(p.offer for p in parts), sum(p.units for p in parts), parts[0].currency,
                          add(lambda p: p.per_hour), add(lambda p: p.per_month), any(p.estimate for p in parts))


def group_rentals(groups: list[tuple[str, int, int]], billing: str, currency: str, cny_per_usd: float
                  ) -> list[tuple[str, int, DeploymentCost | None]]:
    """Each group of a mixed fleet, given as (gpu, tensor_parallel, replicas), rented through its cheapest offer
    (``cheapest_offer``): (gpu, cards, cost), cost None when nothing rents that GPU."""
    rentals = []
    for gpu, tensor_parallel, replicas in groups:
        cards = fleet_cards(gpu, tensor_parallel, replicas)
        offer = cheapest_offer(gpu, cards, tensor_parallel)
        rentals.append((gpu, cards, None if offer is None else
                        deployment_cost(offer, cards, billing, currency, cny_per_usd)))
    return rentals


def idle_cards(offer: str, cards: int) -> int:
    """Cards rented through ``offer`` beyond the ``cards`` the fleet uses (an offer rents whole units)."""
    per_unit = float(offers_table().loc[offer, "gpus_per_unit"])
    return int(round(math.ceil(cards / per_unit - 1e-9) * per_unit - cards))


def unit_costs(per_hour: float, overall: ClassMetrics) -> dict[str, float | None]:
    """Cost per million output tokens, per million total (prompt + output) tokens and per 1,000 SLA-met requests.

    ``overall`` is the summary's overall metric block: its rates are of the steady state, so the warm-up and
    the drain do not dilute the price of a token.
    """
    per_s = per_hour / 3600.0
    output_per_s = overall["output_tokens_per_s"]
    total_per_s = output_per_s + overall["prompt_tokens_per_s"]
    met_per_s = overall["sla_met_per_s"]
    return {
        "per_million_output_tokens": per_s / output_per_s * 1e6 if output_per_s else None,
        "per_million_total_tokens": per_s / total_per_s * 1e6 if total_per_s else None,
        "per_thousand_sla_met_requests": per_s / met_per_s * 1e3 if met_per_s else None,
    }


COST_COLUMNS = {"per_million_output_tokens": "cost_per_million_output_tokens",
                "per_million_total_tokens": "cost_per_million_total_tokens",
                "per_thousand_sla_met_requests": "cost_per_thousand_sla_met_requests"}  # keys of metric_table.COSTS


def cost_columns(frame: pd.DataFrame, per_hour: float) -> pd.DataFrame:
    """``frame`` (flat metrics, e.g. one row per policy and class) with the unit costs of a fleet rented at
    ``per_hour`` on its ``overall`` rows; a class's rows get none (the fleet is rented for all classes at
    once: charging one class the whole rent would overstate its cost)."""
    blank = dict.fromkeys(COST_COLUMNS)
    costs = pd.DataFrame([unit_costs(per_hour, row) if row["class"] == OVERALL else blank
                          for _, row in frame.iterrows()], index=frame.index, columns=list(COST_COLUMNS))
    return frame.assign(**{COST_COLUMNS[k]: costs[k].astype(float) for k in COST_COLUMNS})
