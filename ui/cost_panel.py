"""The rental offer picker and the cost cards of the simulated fleet (Lab and Hardware & Cost pages)."""

from __future__ import annotations

import streamlit as st

from engine.config import Fleet, Server
from engine.cost import (BILLING_MODES, CNY_PER_USD_DEFAULT, CNY_PER_USD_RANGE, CURRENCIES, DeploymentCost,
                         deployment_cost, fleet_cards, format_range, offer_hosting_problem, offers_for, unit_costs)


def money(values: tuple[float, float] | list, currency: str) -> str:
    text = format_range(values, 2 if values[0] is not None and values[1] < 100 else 0)
    return text if text == "-" else f"{text} {currency}"


def pick_offer(gpu: str, cards: int, tensor_parallel: int) -> DeploymentCost | None:
    """Offer, billing, currency and exchange-rate pickers (shared by the pages through their keys)."""
    offers = offers_for(gpu)
    if offers.empty:
        st.info(f"No rental offer for {gpu} in data/hardware/offers.csv.")
        return None

    def label(o: str) -> str:
        price = money((offers.loc[o, "price_low"], offers.loc[o, "price_high"]), offers.loc[o, "currency"])
        return f"{offers.loc[o, 'vendor']}: {price}/{offers.loc[o, 'period']} per {offers.loc[o, 'gpus_per_unit']:g} " \
               f"card(s)"

    cols = st.columns([3, 1, 1, 1])
    if st.session_state.get("cost_offer") not in offers.index:
        st.session_state.pop("cost_offer", None)
    offer = cols[0].selectbox("Offer", list(offers.index), key="cost_offer", format_func=label)
    billing = cols[1].selectbox("Billing", BILLING_MODES, key="cost_billing")
    currency = cols[2].selectbox("Currency", CURRENCIES, key="cost_currency")
    cny_per_usd = cols[3].number_input("CNY per USD", *CNY_PER_USD_RANGE, CNY_PER_USD_DEFAULT, 0.05, key="cost_fx",
                                       help="exchange rate: your setting, not a market quote")
    cost = deployment_cost(offer, cards, billing, currency, cny_per_usd)
    row = offers.loc[offer]
    st.caption(f"{cards} x {gpu} rents {cost.units} unit(s) of {offer}: {row['notes']}. Source: {row['source']} "
               f"({row['as_of']}).{' Estimate: the price is a range or marked as estimated.' if cost.estimate else ''}")
    problem = offer_hosting_problem(offer, tensor_parallel)
    if problem:
        st.warning(problem[0].upper() + problem[1:] + ".")
    return cost


def cost_view(scenario: dict, summary: dict) -> DeploymentCost | None:
    """Rental cost of the scenario's fleet and its unit costs at the simulated load; the chosen offer's
    cost (None when the scenario has no real GPU or no offer)."""
    server, fleet = scenario.get("server", {}), scenario.get("fleet", {})
    if server.get("step_model", "fixed") != "roofline":
        st.caption("Choose the roofline step model (a real GPU) to price this fleet.")
        return None
    gpu = server.get("gpu", Server.gpu)
    cards = fleet_cards(gpu, int(server.get("tensor_parallel", 1)), int(fleet.get("replicas", Fleet.replicas)))
    cost = pick_offer(gpu, cards, int(server.get("tensor_parallel", 1)))
    if cost is None:
        return None
    per_unit = [unit_costs(p, summary["overall"]) for p in cost.per_hour]
    cols = st.columns(6)
    cols[0].metric("Per hour", money(cost.per_hour, cost.currency))
    cols[1].metric("Per month", money(cost.per_month, cost.currency))
    for col, (label, key) in zip(cols[2:5], (("Per 1M output tokens", "per_million_output_tokens"),
                                             ("Per 1M total tokens", "per_million_total_tokens"),
                                             ("Per SLA-met request", "per_sla_met_request"))):
        col.metric(label, money((per_unit[0][key], per_unit[1][key]), cost.currency),
                   help="at the simulated load; the GPU is rented whether busy or not")
    cols[5].metric("GPU utilisation", f"{summary['system']['gpu_busy_frac']:.0%}",
                   help="share of the run the fleet's GPUs spent in iterations")
    return cost
