"""Mixed-GPU fleets ([[fleet.groups]]): replicas of different speeds and KV caches behind one router. Schedules by
hand, the exact equivalence of identical groups with a plain fleet, routers weighing replicas by speed, the
service rates of the offered load adding up, and errors that name the group."""

import copy
import json
import tomllib

import pandas as pd
import pytest

import engine
from conftest import REPO, trace_scenario
from engine.hardware.steptime import prefill_s
from engine.scenario.registry import ROUTER_CODES
from engine.sim.simulate import estimated_offered_load, prepare

ARTICLE = REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"
A100 = {"gpu": "A100-80G", "quant": "int4", "tensor_parallel": 4}
H100 = {"gpu": "H100-80G", "quant": "fp8", "tensor_parallel": 4}


def article(num_requests: int = 600, **fleet) -> dict:
    data = tomllib.loads(ARTICLE.read_text())
    data["workload"]["num_requests"] = num_requests
    data["fleet"] = {"router": data["fleet"]["router"], **fleet}
    return data


def fixed_groups(*groups: dict, router: str = "round-robin") -> dict:
    return {"router": router, "groups": [{"replicas": 1, **g} for g in groups]}


def test_round_robin_gives_turns_in_proportion_to_speed(tmp_path):
    """Replica 0 iterates every 10 ms, replica 1 every 20 ms: speeds 1 and 0.5. The weighted turn (credits gain
    the speeds, the richest is chosen and pays 1.5) goes 0, 1, 0 and again, where the plain turn would send r3 to
    replica 1. Each request is alone: a 4-token prompt is one iteration (first token), two decodes follow."""
    rows = [(float(t), 4, 3) for t in range(4)]
    result = engine.simulate(trace_scenario(tmp_path, rows, {}, fleet=fixed_groups(
        {"step_time_ms": 10.0}, {"step_time_ms": 20.0})))
    frame = result.requests
    assert list(frame["replica"]) == [0, 1, 0, 0]
    assert list(frame["first_token_s"]) == pytest.approx([0.01, 1.02, 2.01, 3.01])
    assert list(frame["finish_s"]) == pytest.approx([0.03, 1.06, 2.03, 3.03])
    assert [r["speed"] for r in result.summary["system"]["replicas"]] == [1.0, 0.5]


def test_least_tokens_weighs_each_replica_by_its_speed(tmp_path):
    """Seven equal requests (10 + 10 tokens: 19 outstanding each) arrive at once, before any replica decides.
    Replica 1 is four times slower (40 ms against 10 ms), so its load counts four times: loads 0|0 -> 0,
    19|0 -> 1, 19|76 -> 0, 38|76 -> 0, 57|76 -> 0, 76|76 (a tie: the lower index) -> 0, 95|76 -> 1. Unweighted,
    the two would alternate."""
    rows = [(0.0, 10, 10)] * 7
    result = engine.simulate(trace_scenario(tmp_path, rows, {}, fleet=fixed_groups(
        {"step_time_ms": 10.0}, {"step_time_ms": 40.0}, router="least-tokens")))
    assert list(result.requests["replica"]) == [0, 1, 0, 0, 0, 0, 1]


def test_each_group_has_its_own_kv_cache(tmp_path):
    """Ten 15 + 2-token requests (16 KV tokens each) at once; replica 1 holds 16 KV tokens, replica 0 is
    unlimited, both take 4 sequences. Replica 1 runs one request at a time where replica 0 runs four, so its speed
    is a quarter and the weighted turn sends it r2 and r7 only. Replica 0 serves r0, r1, r3, r4 by 20 ms, the rest
    by 40 ms (its batch is full); replica 1 serves r2 by 20 ms and r7, which waited for memory, by 40 ms."""
    rows = [(0.0, 15, 2)] * 10
    result = engine.simulate(trace_scenario(tmp_path, rows, {"max_batch_size": 4}, fleet=fixed_groups(
        {"kv_capacity_tokens": 0}, {"kv_capacity_tokens": 16})))
    frame, series = result.requests, result.timeseries
    assert list(frame["replica"]) == [0, 0, 1, 0, 0, 0, 0, 1, 0, 0]
    assert list(frame["finish_s"]) == pytest.approx([0.02, 0.02, 0.02, 0.02, 0.02, 0.04, 0.04, 0.04, 0.04, 0.04])
    assert series.loc[series["replica"] == 1, "kv_used_tokens"].max() == 16
    assert series.loc[series["replica"] == 0, "kv_used_tokens"].max() == 64
    assert [r["kv_capacity_tokens"] for r in result.summary["system"]["replicas"]] == [None, 16]


@pytest.mark.parametrize("router", list(ROUTER_CODES))
def test_groups_of_the_same_hardware_are_the_plain_fleet_bit_for_bit(router):
    """Three identical replicas written as two groups: every speed is 1, so every route, iteration and timestamp
    equals the plain fleet's."""
    plain = engine.simulate(engine.load_scenario({**article(), "fleet": {"router": router, "replicas": 3}}))
    grouped = engine.simulate(engine.load_scenario(
        {**article(), "fleet": {"router": router, "groups": [{**A100, "replicas": 1}, {**A100, "replicas": 2}]}}))
    pd.testing.assert_frame_equal(plain.requests, grouped.requests, check_exact=True)
    pd.testing.assert_frame_equal(plain.timeseries, grouped.timeseries, check_exact=True)


def test_each_replica_iterates_at_its_own_gpus_speed():
    """Requests 10 s apart are alone on their replica: the first token comes one prefill of the prompt after the
    arrival, timed by the step model of the replica's own group (A100 INT4 or H100 FP8)."""
    data = article(12, groups=[{**A100, "replicas": 1}, {**H100, "replicas": 1}])
    data["fleet"]["router"] = "round-robin"
    data["workload"]["arrival"] = {"process": "gamma", "rate_per_s": 0.1, "cv": 0.01}
    scenario = engine.load_scenario(data)
    prepared = prepare(scenario)
    frame = engine.simulate(scenario).requests
    assert set(frame["replica"]) == {0, 1}
    assert frame["arrival_s"].diff().min() > 5.0  # nothing queues
    expected = [prefill_s(prepared.groups[k].step, p) for k, p in zip(frame["replica"], frame["prompt_tokens"])]
    assert list(frame["first_token_s"] - frame["arrival_s"]) == pytest.approx(expected, rel=1e-9)
    speeds = prepared.speeds
    assert speeds.max() == 1.0 and 0.0 < speeds[0] < speeds[1]  # FP8 tensor cores: the H100 is the faster


def test_the_service_rates_of_the_groups_add_up_in_the_offered_load():
    """rho = arrival rate / service rate: a fleet's service rate is the sum of its groups', so 1 / rho of A100 +
    H100 is 1 / rho of the A100 alone plus 1 / rho of the H100 alone; two groups of one replica of the same kind
    are the plain fleet of two."""
    def load(*groups):
        return estimated_offered_load(engine.load_scenario(article(groups=list(groups))))
    a, h = load({**A100, "replicas": 1}), load({**H100, "replicas": 1})
    both = load({**A100, "replicas": 1}, {**H100, "replicas": 1})
    assert 1 / both == pytest.approx(1 / a + 1 / h, rel=1e-12)
    plain = estimated_offered_load(engine.load_scenario({**article(), "fleet": {"replicas": 2}}))
    assert load({**A100, "replicas": 1}, {**A100, "replicas": 1}) == pytest.approx(plain, rel=1e-12)


def test_a_mixed_fleet_summary_names_each_replicas_hardware():
    summary = engine.simulate(engine.load_scenario(article(
        300, groups=[{**A100, "replicas": 2}, {**H100, "replicas": 1}]))).summary
    replicas = summary["system"]["replicas"]
    assert [r["hardware"] for r in replicas] == ["TP4 A100-80G INT4"] * 2 + ["TP4 H100-80G FP8"]
    assert summary["system"]["kv_capacity_tokens"] == min(r["kv_capacity_tokens"] for r in replicas)
    assert sum(r["routed"] for r in replicas) == 300


def small(fleet: dict) -> dict:
    return {"workload": {"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                         "classes": [{"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 5},
                                      "output_tokens": {"dist": "constant", "value": 5}}]},
            "fleet": fleet}


def test_with_groups_the_replicas_are_their_sum():
    """A preset's fleet.replicas may meet groups set over it: the groups' sum replaces it."""
    fleet = engine.load_scenario(small({"replicas": 4, "groups": [{"replicas": 1}, {"replicas": 2}]})).fleet
    assert fleet.replicas == 3


def test_a_key_the_step_model_does_not_read_is_refused():
    with pytest.raises(engine.ScenarioError, match=r"fleet\.groups\[0\]\.gpu is not used with server\.step_model "
                                                   r"= 'fixed'; remove it"):
        engine.load_scenario(small({"groups": [{"replicas": 1, "gpu": "A100-80G"}]}))


def test_a_roofline_group_error_names_the_group():
    data = article(groups=[{**A100, "replicas": 1}, {**H100, "gpu": "H900", "replicas": 1}])
    with pytest.raises(engine.ScenarioError,
                       match=r"^fleet\.groups\[1\]\.gpu = 'H900' is not a GPU of data/hardware/gpus\.csv or gpu_"):
        engine.simulate(engine.load_scenario(data))
    step_time = article(groups=[{**A100, "replicas": 1, "step_time_ms": 5.0}])
    with pytest.raises(engine.ScenarioError, match=r"fleet\.groups\[0\]\.step_time_ms is not used with "
                                                   r"server\.step_model = 'roofline'"):
        engine.load_scenario(step_time)


def test_a_request_too_long_for_one_groups_cache_names_that_group(tmp_path):
    with pytest.raises(engine.ScenarioError, match=r"the KV cache of fleet\.groups\[1\] holds 16"):
        engine.simulate(trace_scenario(tmp_path, [(0.0, 30, 2)], {}, fleet=fixed_groups(
            {"kv_capacity_tokens": 0}, {"kv_capacity_tokens": 16})))


def test_a_draft_model_on_groups_of_different_weight_formats_asks_for_a_draft_cost():
    data = article(groups=[{**A100, "replicas": 1}, {**H100, "replicas": 1}])
    data["server"]["speculative"] = {"draft_tokens": 4, "acceptance": 0.7, "draft_model": "Llama-3.2-1B"}
    with pytest.raises(engine.ScenarioError, match="give server.speculative.draft_cost instead"):
        engine.simulate(engine.load_scenario(data))
    data["server"]["speculative"] = {"draft_tokens": 4, "acceptance": 0.7, "draft_cost": 0.1}
    assert engine.simulate(engine.load_scenario(copy.deepcopy(data))).summary["overall"]["completed"] == 600


def test_the_command_lines_table_names_each_group(tmp_path):
    from engine.cli import format_table
    result = engine.simulate(trace_scenario(tmp_path, [(float(t), 4, 3) for t in range(4)], {}, fleet=fixed_groups(
        {"step_time_ms": 10.0}, {"step_time_ms": 20.0})))
    text = format_table(result)
    assert "fleet: 1 x fixed 10 ms iterations (speed 1.00, 3 routed, busy " in text
    assert "; 1 x fixed 20 ms iterations (speed 0.50, 1 routed, busy " in text


def test_the_command_line_prices_each_group_or_says_which_offer_to_give():
    """--offer cheapest rents each group through its cheapest offer, the sum of the two rentals; an offer that
    rents one GPU only is one line naming the other GPU and the fix."""
    from engine.decide.cost import BILLING_MODES, CNY_PER_USD_DEFAULT, cheapest_offer, deployment_cost
    from test_safety import cli, one_line_error
    groups = '[{replicas = 2, gpu = "A100-80G", tensor_parallel = 4}, {replicas = 1, gpu = "H100-80G", ' \
             'quant = "fp8", tensor_parallel = 4}]'
    args = ("run", str(ARTICLE), "--set", "workload.num_requests=300", "--set", f"fleet.groups={groups}",
            "--currency", "USD")
    code, out, err, _ = cli(*args, "--offer", "cheapest", "--json", "-")
    assert code == 0, err
    cost = json.loads(out)["cost"]
    parts = [deployment_cost(cheapest_offer(gpu, cards, 4), cards, BILLING_MODES[0], "USD", CNY_PER_USD_DEFAULT)
             for gpu, cards in (("A100-80G", 8), ("H100-80G", 4))]
    assert cost["cards"] == 12 and cost["offer"] == " + ".join(p.offer for p in parts)
    assert cost["per_month"] == pytest.approx([sum(p.per_month[i] for p in parts) for i in range(2)])
    one_line_error(*cli(*args, "--offer", "vast-h100-spot"), "--offer 'vast-h100-spot' does not rent A100-80G",
                   "give --offer cheapest")


def test_a_group_on_the_servers_gpu_keeps_the_servers_calibration():
    data = article(groups=[{**A100, "replicas": 1}, {**H100, "replicas": 1}])
    data["server"]["calibration"] = "measured-a100"
    servers = [s for s, _ in engine.scenario.config.fleet_servers(engine.load_scenario(data))]
    assert [s.calibration for s in servers] == ["measured-a100", ""]  # another GPU: its family's shipped one
