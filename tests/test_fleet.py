"""Fleets: R replicas behind a router on one clock. Routing decisions by hand, conservation and balance,
the exact equivalence of a replicated stream, and the tensor- versus data-parallel trade-off."""

import numpy as np
import pandas as pd
import pytest

import engine
from conftest import REPO, trace_scenario
from engine.scenario.registry import ROUTER_CODES

ROUTERS = list(ROUTER_CODES)


def replicas_of(result):
    return list(result.requests["replica"])


@pytest.mark.parametrize("router, expected", [
    ("round-robin", [0, 1, 0]),      # in turn, whatever the load
    ("shortest-queue", [0, 1, 1]),   # at 0.05 replica 1 is empty again, replica 0 still holds r0
    ("least-tokens", [0, 1, 1]),
])
def test_router_choices_by_hand(tmp_path, router, expected):
    """Step 10 ms, one request per replica at a time. r0 (10 output tokens) and r1 (1 token) arrive at 0:
    r0 -> 0, r1 -> 1 (replica 0 already holds r0). r1 leaves at 0.01, r0 holds replica 0 until 0.10; r2
    arrives at 0.05 and gets its first token at 0.06 on replica 1, or at 0.11 behind r0."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 4, 10), (0.0, 4, 1), (0.05, 4, 2)],
                                            {"max_batch_size": 1},
                                            fleet={"replicas": 2, "router": router}))
    assert replicas_of(result) == expected
    assert result.requests.loc[2, "first_token_s"] == pytest.approx(0.06 if expected[2] == 1 else 0.11)


def test_least_tokens_and_shortest_queue_differ_on_sizes(tmp_path):
    """All at t = 0 but the last. r0 (999 tokens of work) -> 0, r1 (9) -> 1 under both. r2: the queues
    tie at one request each (-> 0), but replica 1 holds far fewer tokens (-> 1). r3: replica 0 now holds
    two requests under shortest-queue (-> 1), and still the most tokens under least-tokens (-> 1)."""
    rows = [(0.0, 500, 500), (0.0, 5, 5), (0.0, 5, 5), (0.001, 5, 5)]
    queue = engine.simulate(trace_scenario(tmp_path, rows, {}, fleet={"replicas": 2, "router": "shortest-queue"}))
    tokens = engine.simulate(trace_scenario(tmp_path, rows, {}, fleet={"replicas": 2, "router": "least-tokens"}))
    assert replicas_of(queue) == [0, 1, 0, 1]
    assert replicas_of(tokens) == [0, 1, 1, 1]


def test_a_duplicated_stream_on_two_replicas_is_the_single_server_run_twice(tmp_path):
    """Every arrival twice at the same instant, round robin over 2 replicas: each replica sees exactly the
    single-server stream, so every request's timestamps equal those of its original, bit for bit."""
    rng = np.random.default_rng(7)
    arrivals = np.cumsum(rng.exponential(0.02, 200))
    rows = [(round(float(a), 6), int(rng.integers(1, 300)), int(rng.integers(1, 40))) for a in arrivals]
    server = {"max_batch_size": 8, "max_batched_tokens": 256, "kv_capacity_tokens": 1024}  # fills: preemptions
    policy = {"name": "priority", "preemptive": True, "preempt_mode": "recompute"}
    single = engine.simulate(trace_scenario(tmp_path, rows, server, policy))
    doubled_rows = [row for row in rows for _ in range(2)]
    fleet = engine.simulate(trace_scenario(tmp_path, doubled_rows, server, policy,
                                           fleet={"replicas": 2, "router": "round-robin"}))
    columns = ["first_scheduled_s", "first_token_s", "finish_s", "preemptions"]
    for k in range(2):
        half = fleet.requests.iloc[k::2][columns].reset_index(drop=True)
        pd.testing.assert_frame_equal(half, single.requests[columns], check_exact=True)
    system, one = fleet.summary["system"], single.summary["system"]
    assert system["iterations"] == 2 * one["iterations"] and system["preemptions"] == 2 * one["preemptions"]
    assert system["gpu_busy_frac"] == pytest.approx(one["gpu_busy_frac"])
    # Shares of all replicas' time: twice the waste over twice the GPU time.
    assert one["preemption_waste_frac"] > 0 and system["preemption_waste_frac"] == pytest.approx(
        one["preemption_waste_frac"])


@pytest.mark.parametrize("router", ROUTERS)
def test_fleet_conserves_requests_and_balances_load(router):
    data = {"seed": 3, "workload": {"num_requests": 4000, "arrival": {"process": "poisson", "rate_per_s": 120.0},
                                    "classes": [{"name": "chat", "share": 0.7,
                                                 "prompt_tokens": {"dist": "lognormal", "mean": 300, "cv": 1.0},
                                                 "output_tokens": {"dist": "geometric", "mean": 100, "max": 1000}},
                                                {"name": "batch", "share": 0.3,
                                                 "prompt_tokens": {"dist": "lognormal", "mean": 1500, "cv": 0.5},
                                                 "output_tokens": {"dist": "geometric", "mean": 400, "max": 2000}}]},
            "server": {"step_model": "fixed", "step_time_ms": 20.0, "max_batch_size": 32,
                       "kv_capacity_tokens": 60000},
            "fleet": {"replicas": 4, "router": router}}
    result = engine.simulate(engine.load_scenario(data))
    overall, replicas = result.summary["overall"], pd.DataFrame(result.summary["system"]["replicas"])
    assert overall["arrived"] == overall["completed"] + overall["timed_out"] + overall["unfinished"] == 4000
    assert replicas["routed"].sum() == 4000 and replicas["completed"].sum() == overall["completed"]
    assert (result.requests.groupby("replica").size().to_numpy() == replicas["routed"].to_numpy()).all()
    if router == "round-robin":
        assert replicas["routed"].max() - replicas["routed"].min() <= 1
    # No replica is left idle while another does most of the work.
    assert replicas["busy_frac"].min() > 0.6 * replicas["busy_frac"].max()
    assert replicas["output_tokens"].min() > 0.6 * replicas["output_tokens"].max()


def test_load_aware_routers_beat_round_robin_on_mixed_sizes():
    """With sizes that vary 10x, sending by load (tokens or queue length) cuts the tail of the wait
    that blind turn-taking leaves (same arrivals, same fleet)."""
    p99 = {}
    for router in ROUTERS:
        data = {"seed": 5, "workload": {"num_requests": 6000, "arrival": {"process": "poisson", "rate_per_s": 24.0},
                                        "classes": [{"name": "mixed", "share": 1.0,
                                                     "prompt_tokens": {"dist": "constant", "value": 16},
                                                     "output_tokens": {"dist": "lognormal", "mean": 100, "cv": 2.0,
                                                                       "max": 3000}}]},
                "server": {"step_model": "fixed", "step_time_ms": 10.0, "max_batch_size": 8},
                "fleet": {"replicas": 4, "router": router}}
        p99[router] = engine.simulate(engine.load_scenario(data)).summary["overall"]["ttft_ms"]["p99"]
    assert p99["least-tokens"] < 0.8 * p99["round-robin"]
    assert p99["shortest-queue"] < 0.8 * p99["round-robin"]


def test_fleet_offered_load_divides_over_replicas():
    base = {"seed": 1, "workload": {"num_requests": 3000, "arrival": {"process": "poisson", "rate_per_s": 30.0},
                                    "classes": [{"name": "a", "share": 1.0,
                                                 "prompt_tokens": {"dist": "constant", "value": 8},
                                                 "output_tokens": {"dist": "constant", "value": 5}}]},
            "server": {"step_model": "fixed", "step_time_ms": 10.0, "max_batch_size": 1,
                       "max_batched_tokens": 8}}
    one = engine.simulate(engine.load_scenario(base)).summary["system"]
    three = engine.simulate(engine.load_scenario({**base, "fleet": {"replicas": 3}})).summary["system"]
    assert one["offered_load"] == pytest.approx(30.0 * 0.05, rel=0.05)  # lambda x 5 iterations of 10 ms
    assert three["offered_load"] == pytest.approx(one["offered_load"] / 3)
    assert three["gpu_busy_frac"] == pytest.approx(three["offered_load"], rel=0.05)


def test_same_cards_in_every_shape_trade_per_token_latency():
    """8 A100s as 8 x TP1 ... 1 x TP8 on the article preset at light load: everything is served, and each
    step up in tensor parallelism shortens the time per output token (the token rate differs only by
    the drain after the last arrival)."""
    from engine.decide.sizing import fleet_shapes
    from engine.scenario.config import apply_overrides, read_toml
    data = apply_overrides(read_toml(REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"),
                           {"workload.arrival.rate_per_s": 5.0, "workload.num_requests": 1500})
    frame = fleet_shapes(data, 8)
    assert list(frame["shape"]) == ["8 x TP1", "4 x TP2", "2 x TP4", "1 x TP8"]
    assert frame["tpot_mean_ms"].is_monotonic_decreasing and frame["tpot_mean_ms"].is_unique
    assert (frame["completed"] == 1500).all()
    assert frame["output_tokens_per_s"].max() < 1.05 * frame["output_tokens_per_s"].min()


def test_shapes_name_the_ones_that_do_not_fit():
    from engine.decide.sizing import fleet_shapes
    from engine.scenario.config import apply_overrides, read_toml
    data = apply_overrides(read_toml(REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"),
                           {"server.quant": "fp16", "workload.num_requests": 300})
    frame = fleet_shapes(data, 8)
    assert frame.loc[frame["shape"] == "8 x TP1", "note"].str.contains("does not fit").all()
    assert frame.loc[frame["shape"] == "1 x TP8", "output_tokens_per_s"].notna().all()
    with pytest.raises(engine.ScenarioError, match="is a slice"):
        fleet_shapes(apply_overrides(data, {"server.gpu": "H100-80G-MIG-1g.10gb", "server.tensor_parallel": 1,
                                            "fleet.replicas": 1}), 4)


def test_article_preset_is_physically_plausible_at_50_per_s():
    """The article's set-up at its own rate must be servable: offered load below 1 and the run drains."""
    scenario = engine.load_scenario(REPO / "data" / "scenarios" / "article_mixed_8xa100.toml",
                                    overrides=["workload.num_requests=6000"])
    system = engine.simulate(scenario).summary["system"]
    assert scenario.workload.arrival.rate_per_s == 50.0
    assert scenario.fleet.replicas * scenario.server.tensor_parallel == 8
    assert system["offered_load"] < 1.0 and system["stop_reason"] == "drained"
