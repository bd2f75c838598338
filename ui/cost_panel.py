"""The rental offer picker and the cost cards of the simulated fleet (Lab and Hardware & Cost pages)."""

from __future__ import annotations

import streamlit as st

import engine
from engine.cost import (BILLING_MODES, CNY_PER_USD_DEFAULT, CNY_PER_USD_RANGE, COST_COLUMNS, CURRENCIES,
                         HOURS_PER_MONTH, DeploymentCost, cheapest_offer, deployment_cost, fleet_cards, idle_cards,
                         offer_hosting_problem, offers_for, unit_costs)
from engine.metric_table import COSTS, metric, money_range
from engine.summary import Summary
from ui import text, view


def cards_text(count: float) -> str:
    """ "1 card", "8 cards" """
    return f"{count:g} card" + ("" if count == 1 else "s")


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
    view.choice("cost_billing", BILLING_MODES, BILLING_MODES[0])
    view.number("cost_fx", *CNY_PER_USD_RANGE, CNY_PER_USD_DEFAULT)
    offer = cols[0].selectbox("Offer", list(offers.index), key="cost_offer", format_func=label,
                              help="The cheapest offer that hosts this fleet, until you choose another.")
    view.choice("cost_currency", CURRENCIES, offers.loc[offer, "currency"])  # the offer's own, until chosen
    billing = cols[1].selectbox("Billing", BILLING_MODES, key="cost_billing")
    currency = cols[2].selectbox("Currency", CURRENCIES, key="cost_currency")
    cny_per_usd = cols[3].number_input("CNY per USD", *CNY_PER_USD_RANGE, step=0.05, key="cost_fx", format="%g",
                                       help="Exchange rate: your setting, not a market quote.")
    cost = deployment_cost(offer, cards, billing, currency, cny_per_usd)
    row = offers.loc[offer]
    idle = idle_cards(offer, cards)
    idle_text = f" {idle} of the {cards + idle} rented cards stay idle." if idle else ""
    st.caption(f"{cards} x {gpu} rents {cost.units} x {offer} ({row['notes']}).{idle_text} Source: {row['source']} "
               f"({row['as_of']}).{' Estimate: the price is a range or marked as estimated.' if cost.estimate else ''}")
    problem = offer_hosting_problem(offer, tensor_parallel)
    if problem:
        st.warning(problem[0].upper() + problem[1:] + ".")
    return cost


def cost_view(scenario: engine.Scenario, summary: Summary) -> DeploymentCost | None:
    """Rental cost of the scenario's fleet and its unit costs at the simulated load; the chosen offer's
    cost (None when the scenario has no real GPU or no offer). Amounts carry the currency in their label, so
    each card holds a number or a range that fits it."""
    server = scenario.server
    if server.step_model != "roofline":
        st.caption("Choose the roofline step model (a real GPU) to price this fleet.")
        return None
    cards = fleet_cards(server.gpu, server.tensor_parallel, scenario.fleet.replicas)
    cost = pick_offer(server.gpu, cards, server.tensor_parallel)
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
    return cost
