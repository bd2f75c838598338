"""A fleet's rent as the pages show it (engine.decide.pricing): hand-counted units, idle cards and hosting problems,
a mixed fleet's parts added up, and the fleets that have no price."""

import pytest

import engine
from engine.decide.cost import deployment_cost
from engine.decide.pricing import fleet_size, group_rent, offer_rent, price_problem

RATE = 7.0


EXAMPLE = "data/scenarios/example.toml"


def scenario(*overrides):
    return engine.load_scenario(EXAMPLE, overrides=["server.step_model=roofline", "server.gpu=H100-80G", *overrides])


def test_a_whole_server_offer_rents_whole_units_and_counts_the_idle_cards():
    rent = offer_rent("H100-80G", 10, 2, "ref-8x-h100-server", "pay as you go", "CNY", RATE)
    assert rent.cost.units == 2 and rent.rentals[0].idle_cards == 6 and rent.hosting_problem is None
    assert rent.cost == deployment_cost("ref-8x-h100-server", 10, "pay as you go", "CNY", RATE)


def test_an_offer_of_single_cards_cannot_host_a_tensor_parallel_group():
    rent = offer_rent("A100-40G", 2, 2, "ref-a100-40g-single", "pay as you go", "CNY", RATE)
    assert rent.rentals[0].idle_cards == 0
    assert "at most 1 card(s)" in rent.hosting_problem


def test_unit_costs_at_both_ends_of_the_rent():
    rent = offer_rent("H100-80G", 8, 8, "ref-8x-h100-server", "pay as you go", "CNY", RATE)
    overall = {"output_tokens_per_s": 1000.0, "prompt_tokens_per_s": 3000.0, "sla_met_per_s": 2.0}
    low, high = rent.unit_costs(overall)
    per_s = rent.cost.per_hour[0] / 3600
    assert low["per_million_output_tokens"] == pytest.approx(per_s / 1000 * 1e6)
    assert low["per_million_total_tokens"] == pytest.approx(per_s / 4000 * 1e6)
    assert high["per_thousand_sla_met_requests"] == pytest.approx(rent.cost.per_hour[1] / 3600 / 2 * 1e3)


def test_a_single_fleet_is_sized_by_its_cards():
    assert fleet_size(scenario("server.tensor_parallel=2", "fleet.replicas=3")) == ("H100-80G", 6, 2)


def test_a_mixed_fleet_adds_its_groups_cheapest_rents():
    data = engine.scenario_to_dict(scenario())
    data["fleet"] = {"groups": [{"gpu": "H100-80G", "replicas": 1, "tensor_parallel": 8},
                                {"gpu": "A100-40G", "replicas": 2}]}
    rent = group_rent(engine.load_scenario(data), "pay as you go", "USD", RATE)
    assert [r.gpu for r in rent.rentals] == ["H100-80G", "A100-40G"] and [r.cards for r in rent.rentals] == [8, 2]
    assert rent.cost.per_hour == tuple(sum(r.cost.per_hour[i] for r in rent.rentals) for i in range(2))
    assert rent.cost.offer == " + ".join(r.cost.offer for r in rent.rentals)


def test_a_group_no_offer_rents_leaves_the_mixed_fleet_unpriced():
    data = engine.scenario_to_dict(scenario())
    data["fleet"] = {"groups": [{"gpu": "H100-80G", "replicas": 1}, {"gpu": "A10", "replicas": 1}]}
    answer = group_rent(engine.load_scenario(data), "pay as you go", "USD", RATE)
    assert answer == "No rental offer for A10 in data/hardware/offers.csv: this mixed fleet cannot be priced."


def test_only_a_real_gpu_has_a_price():
    assert price_problem(scenario()) is None
    fixed = engine.load_scenario(EXAMPLE, overrides=["server.step_model=fixed"])
    assert "roofline step model" in price_problem(fixed)
