"""Rental cost arithmetic, checked by hand."""

from datetime import date

import pandas as pd
import pytest

import engine
from engine.decide import cost as cost_module
from engine.decide.cost import (HOURS_PER_MONTH, TERMS, billing_for, billing_modes, cost_columns, deployment_cost,
                                firm_offer, offers_for, offers_under, price_age_days, unit_costs)
from engine.scenario.table_names import DATA_DIR


def test_offers_table_is_sourced_and_consistent():
    offers = pd.read_csv(DATA_DIR / "offers.csv")
    assert offers["offer"].is_unique
    assert offers["source"].str.len().min() > 10 and offers["as_of"].notna().all()
    assert (offers["price_low"] > 0).all() and (offers["price_high"] >= offers["price_low"]).all()
    assert set(offers["currency"]) <= {"CNY", "USD"} and set(offers["period"]) <= {"hour", "month"}
    assert offers["annual_discount"].between(0, 0.5).all()
    # Ranges are estimates.
    assert offers.loc[offers["price_low"] != offers["price_high"], "estimate"].all()


def test_monthly_offer_with_annual_discount_and_exchange():
    """2,800 CNY a month, 20% off when prepaid yearly; 7 CNY per USD."""
    cost = deployment_cost("ref-a100-40g-single", 1, "annual prepay", "USD", 7.0)
    assert cost.units == 1
    assert cost.per_month[0] == pytest.approx(2800 * 0.8 / 7)
    assert cost.per_hour[0] == pytest.approx(2800 * 0.8 / 7 / HOURS_PER_MONTH)
    assert not cost.estimate


def test_cards_round_up_to_whole_units_and_ranges_stay_ranges():
    """Four H100s from an 8-card server offer rent the whole server: 80,000-120,000 CNY a month."""
    cost = deployment_cost("ref-8x-h100-server", 4, "pay as you go", "CNY", 7.0)
    assert cost.units == 1 and cost.per_month == pytest.approx((80000, 120000)) and cost.estimate
    hourly = deployment_cost("runpod-h100-sxm-secure", 4, "pay as you go", "USD", 7.0)
    assert hourly.units == 4 and hourly.per_hour == pytest.approx((4 * 2.69, 4 * 2.69))
    assert hourly.per_month[0] == pytest.approx(4 * 2.69 * HOURS_PER_MONTH)


def test_unit_costs_by_hand():
    overall = {"output_tokens_per_s": 1000.0, "prompt_tokens_per_s": 3000.0, "sla_met_per_s": 2.0}
    costs = unit_costs(3.6, overall)  # 0.001 per second
    assert costs["per_million_output_tokens"] == pytest.approx(1.0)
    assert costs["per_million_total_tokens"] == pytest.approx(0.25)
    assert costs["per_thousand_sla_met_requests"] == pytest.approx(0.5)


def test_offers_are_matched_to_the_simulated_gpu_and_bad_names_are_errors():
    assert set(offers_for("H100-80G").index) >= {"ref-8x-h100-server", "runpod-h100-sxm-secure"}
    assert "ref-h100-mig-1of7" not in offers_for("H100-80G").index
    assert list(offers_for("H100-80G-MIG-1g.10gb").index) == ["ref-h100-mig-1of7"]  # slices rent as slices
    with pytest.raises(engine.ScenarioError, match="offer 'nope' is not in"):
        deployment_cost("nope", 1, "pay as you go", "USD", 7.0)
    with pytest.raises(engine.ScenarioError, match="billing"):
        deployment_cost("ref-t4-card", 1, "weekly", "USD", 7.0)


def test_only_the_whole_fleet_is_priced_in_a_comparison():
    """The fleet is rented for every class at once: class rows get no cost, the overall row the fleet's."""
    frame = pd.DataFrame({"class": ["chat", "overall"], "output_tokens_per_s": [500.0, 1000.0],
                          "prompt_tokens_per_s": [1000.0, 3000.0], "sla_met_per_s": [1.0, 2.0]})
    priced = cost_columns(frame, 3.6)
    assert priced["cost_per_million_output_tokens"].isna().tolist() == [True, False]
    assert priced.loc[1, "cost_per_million_output_tokens"] == pytest.approx(1.0)
    assert priced.loc[1, "cost_per_thousand_sla_met_requests"] == pytest.approx(0.5)


def test_the_default_offer_is_the_cheapest_firm_one_that_hosts_the_fleet_and_idle_cards_are_counted():
    one = cost_module.cheapest_offer("H100-80G", 1, 1)
    per_hour = {o: deployment_cost(o, 1, "pay as you go", "CNY", 7.077).per_hour[0]
                for o in offers_for("H100-80G").index}
    assert firm_offer(one) and per_hour[one] == min(v for o, v in per_hour.items() if firm_offer(o))
    assert min(per_hour.values()) < per_hour[one], "a cheaper spot or estimated price exists, and is not the default"
    assert not firm_offer(cost_module.cheapest_offer("GB200", 4, 4)), "no firm GB200 price: the cheapest estimate"
    eight = cost_module.cheapest_offer("H100-80G", 8, 8)
    assert cost_module.offer_hosting_problem(eight, 8) is None
    assert cost_module.idle_cards("ref-a100-40g-single", 3) == 0
    eight_card_units = [o for o, row in offers_for("H100-80G").iterrows() if row["gpus_per_unit"] == 8]
    assert eight_card_units and cost_module.idle_cards(eight_card_units[0], 1) == 7


def test_every_offer_states_its_terms_and_firm_means_one_quoted_number_on_kept_capacity():
    offers = pd.read_csv(DATA_DIR / "offers.csv").set_index("offer")
    assert set(offers["terms"]) <= set(TERMS)
    assert firm_offer("hyperstack-h100-sxm-on-demand") and firm_offer("ref-a100-40g-single")  # on-demand; a term
    assert not firm_offer("runpod-h100-sxm-secure"), "one number, but read from a third party's page"
    assert not firm_offer("vast-h100-spot"), "spot capacity can be taken back"
    assert not firm_offer("runpod-a100-sxm"), "a range from spot to on-demand"
    assert not firm_offer("coreweave-8x-h100-on-demand"), "on-demand, but an estimate read from a third party"
    assert not firm_offer("tensorwave-mi300x"), "terms the source does not state"
    firm = offers_under("firm")
    assert set(firm.index) == {o for o in offers.index if firm_offer(o)} and "vast-h100-spot" not in firm.index
    assert len(offers_under("any")) == len(offers)
    assert list(offers_under("any", ("vast-h100-spot",)).index) == ["vast-h100-spot"]
    assert offers_under("firm", ("vast-h100-spot",)).empty
    with pytest.raises(engine.ScenarioError, match="prices 'cheap' is not one of firm, any"):
        offers_under("cheap")


def test_a_price_ages_from_the_date_it_was_quoted():
    assert price_age_days("aws-p5-capacity-block", date(2025, 12, 31)) == 365
    assert price_age_days("runpod-h100-sxm-secure", date(2026, 5, 22)) == 0


def test_annual_prepay_applies_only_where_the_offer_quotes_a_discount():
    assert billing_modes("ref-a100-40g-single") == ("pay as you go", "annual prepay")
    assert billing_modes("runpod-h100-sxm-secure") == ("pay as you go",)
    assert billing_for("ref-a100-40g-single", "annual prepay") == "annual prepay"
    assert billing_for("runpod-h100-sxm-secure", "annual prepay") == "pay as you go", "no term quoted: none sold"
