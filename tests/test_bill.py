"""The bill of traffic that moves (``decide.bill``): billing by use, by hand, and the three ways to buy a day."""

from __future__ import annotations

import pytest

import engine
from engine.cli import main
from engine.decide.bill import HOURLY_MINIMUM_S, STRATEGIES, billed_s, fixed_overrides, strategy_bills
from engine.scenario.config import apply_overrides, scenario_to_dict
from engine.decide.cost import HOURS_PER_MONTH

# Hyperstack's H100 SXM per card-hour (data/hardware/offers.csv): 3.20 USD on demand, 2.72 USD reserved.
ON_DEMAND_USD, RESERVED_USD = 3.20, 2.72


def test_hourly_offers_bill_whole_seconds_with_a_minute_at_least():
    assert HOURLY_MINIMUM_S == 60
    assert billed_s(0.4) == 60 and billed_s(59.0) == 60 and billed_s(61.2) == 62 and billed_s(3600.0) == 3600


def h100_scenario(**fleet) -> engine.Scenario:
    return engine.load_scenario({
        "workload": {"duration_s": 600, "arrival": {"process": "poisson", "rate_per_s": 2.0},
                     "classes": [{"name": "chat", "share": 1.0, "sla_ttft_ms": 1000,
                                  "prompt_tokens": {"dist": "constant", "value": 500},
                                  "output_tokens": {"dist": "constant", "value": 100}}]},
        "server": {"step_model": "roofline", "gpu": "H100-80G", "model": "Llama-3.1-8B"},
        "fleet": {"replicas": 2, "autoscale": {"min_replicas": 2, "max_replicas": 5}, **fleet}})


def summary_of(billed: list[tuple[int, float]], span_s: float, peak: int, windows: list[float]) -> dict:
    """A run's summary as the bill reads it: (slot, seconds billed) of each stay, its span, peak and replicas per
    window."""
    return {"system": {"sim_time_s": span_s, "replica_hours": sum(s for _, s in billed) / 3600,
                       "autoscale": {"peak_replicas": peak, "billed_s": [s for _, s in billed],
                                     "billed_slots": [j for j, _ in billed]}},
            "overall": {"sla_attainment": 0.9},
            "windows": [{"replicas": r} for r in windows]}


def test_three_ways_to_buy_a_day_by_hand():
    """A day: two baseline replicas up 24 h, a third up 2 h and 30 s (billed as such), a fourth up 20 s (billed
    a minute). Month = 730 / 24 days of it."""
    day_s = 86_400.0
    autoscaled = summary_of([(0, day_s), (1, day_s), (2, 7230.0), (3, 20.0)], day_s, 4, [2.0, 3.5])
    fixed = {"overall": {"sla_attainment": 0.99}}
    bills = {b.strategy: b for b in strategy_bills(h100_scenario(), autoscaled, fixed, "USD", 7.0)}
    assert list(bills) == list(STRATEGIES)
    month = HOURS_PER_MONTH / 24
    peak = bills["fixed at the peak"]
    assert peak.per_month == pytest.approx((4 * RESERVED_USD * HOURS_PER_MONTH,) * 2)
    assert (peak.sla_attainment, peak.offers) == (0.99, "hyperstack-h100-sxm-reserved")
    scaled = bills["autoscaled, on demand"]
    assert scaled.per_month == pytest.approx((ON_DEMAND_USD * (48 + 7230 / 3600 + 60 / 3600) * month,) * 2)
    assert scaled.cost_per_hour == pytest.approx((2 * ON_DEMAND_USD, 3.5 * ON_DEMAND_USD))
    mixed = bills["reserved baseline + bursts"]
    assert mixed.per_month == pytest.approx(
        (2 * RESERVED_USD * HOURS_PER_MONTH + ON_DEMAND_USD * (7290 / 3600) * month,) * 2)
    assert mixed.cost_per_hour == pytest.approx((2 * RESERVED_USD, 2 * RESERVED_USD + 1.5 * ON_DEMAND_USD))
    assert mixed.offers == "hyperstack-h100-sxm-reserved + hyperstack-h100-sxm-on-demand"
    assert not any(b.estimate for b in bills.values())


def test_a_share_of_the_fleet_is_billed_as_the_whole_fleet():
    """The same day simulated as a third of the fleet (``multiple`` 3): every replica and every second it counts
    stands for three; the bills equal a run of the whole fleet that did three times what the share did."""
    day_s = 86_400.0
    share = summary_of([(0, day_s), (1, day_s), (2, 7230.0), (3, 20.0)], day_s, 4, [2.0, 3.5])
    whole = summary_of([(j, s) for j, s in ((0, day_s), (1, day_s), (2, 7230.0), (3, 20.0)) for _ in range(3)],
                       day_s, 12, [6.0, 10.5])
    fixed = {"overall": {"sla_attainment": 0.99}}
    scenario = h100_scenario()
    tripled = {b.strategy: b for b in strategy_bills(scenario, share, fixed, "USD", 7.0, multiple=3)}
    base = scenario.fleet.autoscale.min_replicas
    whole_bills = {b.strategy: b for b in strategy_bills(
        h100_scenario(replicas=3 * base, autoscale={"min_replicas": 3 * base, "max_replicas": 15}),
        {**whole, "system": {**whole["system"], "autoscale": {
            **whole["system"]["autoscale"], "billed_slots": [3 * j + k for j in (0, 1, 2, 3) for k in range(3)]}}},
        fixed, "USD", 7.0)}
    for strategy in STRATEGIES:
        assert tripled[strategy].per_month == pytest.approx(whole_bills[strategy].per_month), strategy
        assert tripled[strategy].replica_hours == pytest.approx(whole_bills[strategy].replica_hours), strategy
        assert tripled[strategy].cost_per_hour == pytest.approx(whole_bills[strategy].cost_per_hour), strategy
    assert tripled["fixed at the peak"].fleet == "12 replicas all month"


def test_spot_bursts_are_billed_through_a_spot_offer_and_marked_an_estimate():
    scenario = h100_scenario(spot_interruptions_per_hour=1.0)
    autoscaled = summary_of([(0, 3600.0), (1, 3600.0), (2, 600.0)], 3600.0, 3, [2.2])
    bills = {b.strategy: b for b in strategy_bills(scenario, autoscaled, {"overall": {"sla_attainment": 1.0}},
                                                   "USD", 7.0)}
    assert "spot" in bills["reserved baseline + bursts"].fleet and bills["reserved baseline + bursts"].estimate
    assert bills["autoscaled, on demand"].offers.startswith("hyperstack-h100-sxm-on-demand + ")
    assert not bills["fixed at the peak"].estimate


def test_the_fixed_fleet_drops_the_autoscaler_and_the_spot_replicas():
    data = scenario_to_dict(h100_scenario(spot_interruptions_per_hour=1.0))
    fixed = engine.load_scenario(apply_overrides(data, fixed_overrides(5)))
    assert (fixed.fleet.replicas, fixed.fleet.autoscale, fixed.fleet.spot_interruptions_per_hour) == (5, None, 0.0)


def test_the_command_line_prices_an_autoscaled_scenario_three_ways(tmp_path, capsys):
    path = tmp_path / "day.toml"
    path.write_text('[workload]\nduration_s = 900\narrival = { process = "poisson", rate_per_s = 4.0, rate_curve = '
                    '[[0, 1.0], [300, 1.0], [301, 4.0], [600, 4.0], [601, 1.0]] }\n'
                    '[[workload.classes]]\nname = "chat"\nshare = 1.0\nsla_ttft_ms = 1000\n'
                    'prompt_tokens = { dist = "constant", value = 500 }\n'
                    'output_tokens = { dist = "constant", value = 100 }\n'
                    '[server]\nstep_model = "roofline"\ngpu = "H100-80G"\nmodel = "Llama-3.1-8B"\n'
                    '[fleet]\nreplicas = 1\n[fleet.autoscale]\nmax_replicas = 3\nprovision_s = 30\ninterval_s = 15\n')
    assert main(["bill", str(path)]) == 0
    out = capsys.readouterr().out
    assert "scaled to a month of 730 h" in out
    for strategy in STRATEGIES:
        assert f"\n{strategy}" in out
    path.write_text(path.read_text().split("[fleet.autoscale]")[0])
    assert main(["bill", str(path)]) == 2
    assert "error: bill needs an autoscaled fleet ([fleet.autoscale]) of a real GPU" in capsys.readouterr().err


def test_the_offers_a_customer_accepts_are_the_only_ones_rented():
    """Held to Hyperstack's on-demand H100 offer, the fixed fleet and the baseline pay its 3.20 USD an hour too."""
    day_s = 86_400.0
    autoscaled = summary_of([(0, day_s), (1, day_s), (2, 7230.0)], day_s, 3, [2.0, 3.0])
    bills = {b.strategy: b for b in strategy_bills(h100_scenario(), autoscaled, {"overall": {"sla_attainment": 1.0}},
                                                   "USD", 7.0, ("hyperstack-h100-sxm-on-demand",))}
    assert bills["fixed at the peak"].offers == "hyperstack-h100-sxm-on-demand"
    assert bills["fixed at the peak"].per_month == pytest.approx((3 * ON_DEMAND_USD * HOURS_PER_MONTH,) * 2)
    assert bills["reserved baseline + bursts"].offers == "hyperstack-h100-sxm-on-demand + hyperstack-h100-sxm-on-demand"
