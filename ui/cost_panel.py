"""The rental offer picker and the cost cards of the simulated fleet (Lab and Hardware & Cost pages)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import engine
from engine.decide.cost import (BILLING_MODES, CNY_PER_USD_DEFAULT, CNY_PER_USD_RANGE, COST_COLUMNS, CURRENCIES,
                                DEFAULT_CURRENCY, HOURS_PER_MONTH, DeploymentCost, cheapest_offer, offers_for,
                                priced_by, unit_costs)
from engine.decide.bill import HOURLY_INCREMENT_S, HOURLY_MINIMUM_S, fixed_overrides, strategy_bills
from engine.decide.energy import energy_entry, fleet_parts
from engine.decide.plan_text import energy_words
from engine.decide.pricing import fleet_size, group_rent, offer_rent, price_problem
from engine.scenario.config import apply_overrides
from engine.hardware.tables import load_table
from engine.scenario.labels import cards_text, words
from engine.scenario.metric_table import COSTS, metric, money_range
from engine.scenario.summary import Summary
from ui import text, view


def billing_picker(col) -> str:
    """The billing mode, picked in words in ``col`` (every page shares its key, so the choice follows the user)."""
    return col.selectbox("Billing", BILLING_MODES, key="cost_billing", format_func=lambda mode: words("billing", mode))


def pick_offer(gpu: str, cards: int, tensor_parallel: int) -> DeploymentCost | None:
    """Offer, billing, currency and exchange-rate pickers (shared by the pages through their keys)."""
    offers = offers_for(gpu)
    if offers.empty:
        st.info(f"No rental offer for {gpu} in data/hardware/offers.csv.")
        return None

    def label(o: str) -> str:
        price = money_range((offers.loc[o, "price_low"], offers.loc[o, "price_high"]), offers.loc[o, "currency"])
        count = offers.loc[o, "gpus_per_unit"]
        return (f"{offers.loc[o, 'vendor']}: {price} {'an' if offers.loc[o, 'period'] == 'hour' else 'a'} "
                f"{offers.loc[o, 'period']} per {'card' if count == 1 else cards_text(count)}")

    cols = st.columns([3, 1, 1, 1])
    view.choice("cost_offer", list(offers.index), cheapest_offer(gpu, cards, tensor_parallel))
    offer = cols[0].selectbox("Offer", list(offers.index), key="cost_offer", format_func=label,
                              help="The cheapest offer that hosts this fleet, until you choose another.")
    billing, currency, cny_per_usd = pricing_inputs(cols[1:])
    rent = offer_rent(gpu, cards, tensor_parallel, offer, billing, currency, cny_per_usd)
    rental, row = rent.rentals[0], offers.loc[offer]
    idle = rental.idle_cards
    idle_text = f" {idle} of the {cards + idle} rented cards stay idle." if idle else ""
    st.caption(f"{cards} x {gpu} rents {rent.cost.units} x {offer} ({row['notes']}).{idle_text} "
               f"Source: {row['source']} ({row['as_of']})."
               f"{' Estimate: the price is a range or marked as estimated.' if rent.cost.estimate else ''}")
    if rent.hosting_problem:
        st.warning(rent.hosting_problem[0].upper() + rent.hosting_problem[1:] + ".")
    return rent.cost


def exchange_rate() -> float:
    """The CNY per USD every page prices with: the visitor's (this page's control or another's, or the link's) when it
    is one ``CNY_PER_USD_RANGE`` allows, else ``CNY_PER_USD_DEFAULT`` (a link's 1e308 is not an error to show)."""
    return view.current_number("cost_fx", *CNY_PER_USD_RANGE, CNY_PER_USD_DEFAULT)


def chosen_currency() -> str:
    """The currency every page prices in: the visitor's when it is one of ``CURRENCIES``, else ``DEFAULT_CURRENCY``."""
    return view.current_choice("cost_currency", CURRENCIES, DEFAULT_CURRENCY)


def pricing_inputs(cols: list) -> tuple[str, str, float]:
    """Billing, currency (``DEFAULT_CURRENCY`` until chosen) and exchange-rate pickers in three columns, under the
    keys every page shares: (billing, currency, CNY per USD)."""
    view.choice("cost_billing", BILLING_MODES, BILLING_MODES[0])
    view.number("cost_fx", *CNY_PER_USD_RANGE, CNY_PER_USD_DEFAULT)
    view.choice("cost_currency", CURRENCIES, DEFAULT_CURRENCY)
    billing = billing_picker(cols[0])
    currency = cols[1].selectbox("Currency", CURRENCIES, key="cost_currency")
    cny_per_usd = cols[2].number_input("CNY per USD", *CNY_PER_USD_RANGE, step=0.05, key="cost_fx", format="%g",
                                       help="Exchange rate: your setting, not a market quote.")
    return billing, currency, cny_per_usd


def pick_group_offers(scenario: engine.Scenario) -> DeploymentCost | None:
    """A mixed fleet's rent: each group through its cheapest offer, in the billing, currency and exchange rate
    chosen here (the pages' shared keys); None when some group's GPU has no offer."""
    cols = st.columns([3, 1, 1, 1])
    cols[0].markdown("**Offers:** each group's cheapest")
    rent = group_rent(scenario, *pricing_inputs(cols[1:]))
    if isinstance(rent, str):
        st.info(rent)
        return None
    offers = load_table("offers")
    st.caption(" ".join(f"{cards_text(r.cards)} of {r.gpu} rent {r.cost.units} x {r.cost.offer} (source: "
                        f"{offers.loc[r.cost.offer, 'source']}, {offers.loc[r.cost.offer, 'as_of']})."
                        for r in rent.rentals))
    if rent.cost.estimate:
        st.caption("Estimate: at least one price is a range or marked as estimated.")
    return rent.cost


PLAN_PRICE_LIST = "lab_price_list"  # (rows, how it is named) of the price list a plan opened in the Lab was priced on


def cost_view(scenario: engine.Scenario, summary: Summary) -> DeploymentCost | None:
    """Rental cost of the scenario's fleet and its unit costs at the simulated load; the chosen offer's
    cost (a mixed fleet: its groups' cheapest offers together; None when the scenario has no real GPU or no
    offer). Amounts carry the currency in their label, so each card holds a number or a range that fits it.
    A plan opened from the Planner on the customer's own price list is priced on that list while it rents the
    scenario's GPU (``PLAN_PRICE_LIST``), and says so."""
    rows, named = st.session_state.get(PLAN_PRICE_LIST) or ((), "")
    with priced_by(rows):
        own = bool(rows) and not offers_for(scenario.server.gpu).empty
    if own:
        st.caption(f"Priced with the plan's own price list ({named or 'uploaded on the Planner page'}).")
    with priced_by(rows if own else ()):
        return _cost_view(scenario, summary)


def _cost_view(scenario: engine.Scenario, summary: Summary) -> DeploymentCost | None:
    problem = price_problem(scenario)
    if problem:
        st.caption(problem)
        return None
    cost = pick_group_offers(scenario) if scenario.fleet.groups else pick_offer(*fleet_size(scenario))
    if cost is None:
        return None
    per_unit = [unit_costs(p, summary["overall"]) for p in cost.per_hour]
    cards_row = st.columns(3)
    cards_row[0].metric(f"Per hour ({cost.currency})", money_range(cost.per_hour))
    cards_row[1].metric(f"Per month ({cost.currency})", money_range(cost.per_month),
                        help=f"{HOURS_PER_MONTH:g} hours a month.")
    cards_row[2].metric("GPU busy", metric("gpu_busy_frac").text(summary["system"]["gpu_busy_frac"]),
                        help=text.sentence(metric("gpu_busy_frac").help))
    cards_row = st.columns(3)
    unit_cost_key = {column: key for key, column in COST_COLUMNS.items()}
    for col, m in zip(cards_row, COSTS):
        key = unit_cost_key[m.key]
        col.metric(m.title(cost.currency), money_range((per_unit[0][key], per_unit[1][key])),
                   help=f"{m.help[0].upper()}{m.help[1:]}, at the simulated load: the GPUs are rented whether "
                        f"busy or not.")
    parts = fleet_parts(scenario)
    energy = energy_words(energy_entry(parts, [summary["overall"]["output_tokens_per_s"]], cost.currency,
                                       exchange_rate()), sum(cards for _, cards in parts), cost.currency)
    if energy:
        st.caption(text.plain(energy + "."))
    return cost


def bill_view(data: dict, scenario: engine.Scenario, summary: Summary) -> None:
    """An autoscaled fleet's bill three ways (``decide.bill``): a table, the cost per hour over the run, and what the
    month assumes. The fixed fleet at the peak is simulated here (cached like every run)."""
    from ui import charts, runner, tables  # the charts and the runner import this module's neighbours

    problem = price_problem(scenario)
    if problem:
        st.caption(problem)
        return
    cols = st.columns([3, 1, 1, 1])
    cols[0].markdown("**Offers:** the cheapest firm ones (spot for spot bursts)")
    _, currency, cny_per_usd = pricing_inputs(cols[1:])
    peak = summary["system"]["autoscale"]["peak_replicas"]
    with st.spinner(f"Simulating the fixed fleet of {peak} replicas..."):
        fixed = runner.summary(runner.canonical(apply_overrides(data, fixed_overrides(peak))))
    try:
        bills = strategy_bills(scenario, summary, fixed, currency, cny_per_usd)
    except engine.ScenarioError as exc:
        st.info(text.plain(str(exc)))
        return
    rows = [{"strategy": b.strategy,
             "per_month": money_range(b.per_month, currency) + (" (estimate)" if b.estimate else ""),
             "sla_attainment": b.sla_attainment, "replica_hours": round(b.replica_hours, 1), "fleet": b.fleet,
             "offers": b.offers}
            for b in sorted(bills, key=lambda b: b.per_month[0])]
    tables.show(pd.DataFrame(rows), ["strategy", "per_month", "sla_attainment", "replica_hours", "fleet", "offers"],
                currency)
    st.plotly_chart(charts.cost_over_time(summary["windows"], bills, currency), width="stretch", key="bill_chart")
    span_h = summary["system"]["sim_time_s"] / 3600
    st.caption(text.plain(
        f"The month is {HOURS_PER_MONTH:g} hours of traffic like these {span_h:,.1f} h. Replicas billed by use pay "
        f"per {HOURLY_INCREMENT_S:g} s with a {HOURLY_MINIMUM_S:g}-s minimum (AWS's rule, applied to every hourly "
        f"offer); reserved and monthly offers pay the whole month. The fixed fleet's SLA comes from its own run."))
