"""A plan's energy (engine.decide.energy): every card at its board power limit for as long as the fleet produces
its steady-state tokens, an upper bound worked out by hand here, priced at the conventional electricity price in the
plan's currency, and said in words where the plan's cost is."""

import tomllib

import pytest

from conftest import REPO
from engine.decide.cost import ELECTRICITY_USD_PER_KWH
from engine.decide.energy import board_power_w, energy_entry, fleet_parts, kwh_per_million_tokens
from engine.decide.plan_text import ENERGY_COLUMN, alternatives_frame, energy_text, energy_words
from engine.hardware.tables import load_table
from engine.scenario.metric_table import money_text
from engine.scenario.config import load_scenario


def test_eight_cards_at_700_w_making_1000_tokens_a_second_draw_at_most_1_56_kwh_per_million():
    # 8 x 700 W = 5,600 J a second; a million tokens take 1,000 s: 5.6 MJ = 5.6 / 3.6 kWh
    assert kwh_per_million_tokens(8 * 700.0, 1000.0) == pytest.approx(5.6 / 3.6, rel=1e-12)
    assert kwh_per_million_tokens(8 * 700.0, 0.0) is None


def test_a_card_draws_its_board_power_and_a_slice_its_share_by_compute():
    assert board_power_w("H100-80G") == 700.0 and board_power_w("B200") == 1000.0
    cut = load_table("gpu_slices").loc["H100-80G-MIG-3g.40gb"]
    assert board_power_w("H100-80G-MIG-3g.40gb") == pytest.approx(700.0 * cut["sm_fraction"])
    gpus = load_table("gpus")
    assert gpus["board_power_w"].between(50, 2000).all() and gpus["board_power_source"].str.len().min() > 10


def test_the_entry_averages_the_seeds_and_prices_the_energy_in_the_plans_currency():
    entry = energy_entry([("H100-80G", 8)], [1000.0, 2000.0, 0.0], "CNY", 7.0)
    kwh = (5.6 / 3.6 + 5.6 / 7.2) / 2  # a seed that made nothing gives no figure
    assert entry["card_power_w"] == 700.0 and entry["kwh_per_1m_output_tokens_max"] == pytest.approx(kwh)
    assert entry["price_per_kwh"] == pytest.approx(ELECTRICITY_USD_PER_KWH * 7.0)
    assert entry["cost_per_1m_output_tokens_max"] == pytest.approx(kwh * ELECTRICITY_USD_PER_KWH * 7.0)
    assert energy_entry([("H100-80G", 8)], [0.0], "USD", 7.0)["kwh_per_1m_output_tokens_max"] is None


def test_a_mixed_fleet_adds_its_groups_cards_and_says_their_power_together():
    # 4 x 700 W + 2 x 1,000 W = 4,800 W making 2,000 tokens a second: 2.4 MJ per million = 2/3 kWh
    entry = energy_entry([("H100-80G", 4), ("B200", 2)], [2000.0], "USD", 7.0)
    assert entry["card_power_w"] is None and entry["fleet_power_w"] == 4800.0
    assert entry["kwh_per_1m_output_tokens_max"] == pytest.approx(2 / 3)
    assert energy_words(entry, 6, "USD").startswith("Energy: at most 0.667 kWh per 1M output tokens (6 cards at "
                                                    "their 4,800 W of board power limits the whole time)")
    data = tomllib.loads((REPO / "data" / "scenarios" / "article_mixed_8xa100.toml").read_text())
    data["fleet"] = {"groups": [{"gpu": "A100-80G", "quant": "int4", "tensor_parallel": 4, "replicas": 1},
                                {"gpu": "H100-80G", "quant": "fp8", "tensor_parallel": 2, "replicas": 3}]}
    assert fleet_parts(load_scenario(data)) == [("A100-80G", 4), ("H100-80G", 6)]


def _plan(energy: dict | None) -> dict:
    return {"offer": "x", "gpu": "H100-80G", "tensor_parallel": 8, "expert_parallel": False, "replicas": 1,
            "cards": 8, "quant": "fp8", "decoding": "plain", "policy": {"name": "fcfs"}, "same_fleet_policies": [],
            "router": "least-tokens", "monthly_cost": {"low": 1.0, "high": 1.0, "currency": "USD",
                                                       "billing": "pay as you go"},
            "cost_per_1m_output_tokens": {"low": 0.3, "high": 0.3}, "targets": [], "headroom_rate_per_s": None,
            "step_times": "calibrated", "calibrated": True, **({"energy": energy} if energy else {})}


def test_the_plan_says_its_energy_as_an_upper_bound_with_its_cost_and_what_a_rental_includes():
    plan = _plan(energy_entry([("H100-80G", 8)], [1000.0], "USD", 7.0))
    text = energy_text(plan)
    assert text.startswith("Energy: at most 1.56 kWh per 1M output tokens (8 cards at their 700 W board power "
                           "limit the whole time)")
    cost = money_text(5.6 / 3.6 * ELECTRICITY_USD_PER_KWH)
    price = f"{ELECTRICITY_USD_PER_KWH:g}"
    assert f"the whole time), {cost} USD at {price} USD/kWh, which a rental's price includes" in text
    assert energy_text(_plan(None)) is None
    one = energy_words(energy_entry([("L4", 1)], [100.0], "USD", 7.0), 1, "USD")
    assert one.startswith("Energy: at most 0.200 kWh per 1M output tokens (1 card at its 72 W board power limit")
    frame = alternatives_frame([plan, _plan(None)])
    assert frame[ENERGY_COLUMN].tolist() == ["1.56", "—"]
