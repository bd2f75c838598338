"""Sizing: the fewest replicas that meet a latency target, and every offer priced for its smallest fleet."""

import pytest

import engine
from conftest import REPO
from engine.decide.cost import deployment_cost, offer_hosting_problem
from engine.decide.sizing import cheapest_fleets, fewest_replicas, smallest_tensor_parallel
from engine.decide.targets import Target
from engine.scenario.config import apply_overrides, read_toml
from engine.sim.simulate import run_summary

ARTICLE = REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"


def fixed_load() -> dict:
    """One slot per replica, 10 ms x 10 tokens = 0.1 s per request at 25 req/s: 2.5 replicas' worth of work."""
    return {"seed": 2, "workload": {"num_requests": 3000, "arrival": {"process": "poisson", "rate_per_s": 25.0},
                                    "classes": [{"name": "a", "share": 1.0,
                                                 "prompt_tokens": {"dist": "constant", "value": 4},
                                                 "output_tokens": {"dist": "constant", "value": 10}}]},
            "server": {"step_model": "fixed", "step_time_ms": 10.0, "max_batch_size": 1, "max_batched_tokens": 4},
            "fleet": {"router": "shortest-queue"}}


def test_fewest_replicas_is_the_smallest_that_meets_the_target():
    target = Target("a", "ttft_p99_ms", 400.0)
    replicas, summary = fewest_replicas(fixed_load(), target, 16, run_summary)
    assert replicas >= 3  # 2.5 replicas of work: fewer are overloaded
    assert target.met(summary)[0]
    fewer = run_summary(apply_overrides(fixed_load(), {"fleet.replicas": replicas - 1}))
    assert not target.met(fewer)[0]
    assert fewest_replicas(fixed_load(), Target("a", "ttft_p99_ms", 1.0), 4, run_summary) == (None, None)


def test_targets_are_validated():
    with pytest.raises(engine.ScenarioError, match="target metric 'sla' is not one of"):
        Target("a", "sla", 1.0)
    with pytest.raises(engine.ScenarioError, match="target class 'b' is not a class; classes are a"):
        Target("b", "ttft_p99_ms", 100.0).met(run_summary(fixed_load()))


def test_smallest_tensor_parallel_that_fits():
    data = read_toml(ARTICLE)
    assert smallest_tensor_parallel(apply_overrides(data, {"server.quant": "int4"})) == 1   # 35 GB on 80 GB
    # 141 GB of FP16 weights: 65.7 GiB per card of the 71.6 GiB two A100-80G give at utilisation 0.9
    assert smallest_tensor_parallel(apply_overrides(data, {"server.quant": "fp16"})) == 2
    assert smallest_tensor_parallel(apply_overrides(data, {"server.quant": "fp16", "server.gpu": "A100-40G"})) == 4
    assert smallest_tensor_parallel(apply_overrides(data, {"server.gpu": "H100-80G-MIG-1g.10gb"})) is None


def test_single_card_rentals_cannot_host_tensor_parallel_groups():
    assert offer_hosting_problem("ref-a100-40g-single", 1) is None
    assert "at most 1 card(s): a tensor-parallel group of 2" in offer_hosting_problem("ref-a100-40g-single", 2)
    assert offer_hosting_problem("ref-8x-h100-server", 8) is None


def test_cheapest_fleets_price_the_smallest_fleet_that_meets_the_target():
    data = apply_overrides(read_toml(ARTICLE), {"workload.num_requests": 1500})
    target = Target("interactive", "ttft_p99_ms", 1000.0)
    frame = cheapest_fleets(data, target, "pay as you go", "USD", 7.0)
    priced = frame[frame["per_month_low"].notna()]
    assert priced["per_month_low"].is_monotonic_increasing and len(priced) >= 10
    assert (priced["target_value_ms"] <= 1000.0).all()
    for _, row in priced.head(3).iterrows():
        cost = deployment_cost(row["offer"], int(row["cards"]), "pay as you go", "USD", 7.0)
        assert row["per_month_low"] == pytest.approx(cost.per_month[0])
    # Llama-3-70B int4 needs two A100 40G cards linked: the single-card rental cannot host it.
    single = frame.set_index("offer").loc["ref-a100-40g-single"]
    assert "tensor-parallel group of 2" in single["note"]
    slice_row = frame.set_index("offer").loc["ref-h100-mig-1of7"]
    assert "does not fit on one slice" in slice_row["note"]
