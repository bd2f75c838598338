"""Each policy behaves as its definition says (properties and hand-computed schedules, not seeded numbers)."""

import json

import numpy as np
import pandas as pd
import pytest

import engine
from engine.scenario.config import apply_overrides, read_toml
from conftest import synthetic, trace_scenario
from engine.sim.policies import POLICIES, POLICY_PARAMS, predicted_tokens, unread_params
from test_schedule import PRIORITY_CLASSES, PRIORITY_ROWS, assert_events

SWAP_S = 131072 / 25e9  # one KV token of Llama-3-8B over a 25 GB/s host link


def one_slot(classes, rate, n=6000, policy=None, seed=0, step_ms=10.0):
    return synthetic(classes, rate_per_s=rate, num_requests=n, seed=seed, policy=policy,
                     server={"max_batch_size": 1, "step_time_ms": step_ms})


def test_keep_mode_pauses_with_the_kv_and_pays_the_overhead_on_resume(tmp_path):
    """As the preemptive-priority schedule, but r0 resumes at 0.03 with 1 ms of overhead: 0.041, 0.051."""
    policy = {"name": "priority", "preemptive": True, "preempt_mode": "keep", "preempt_overhead_ms": 1.0}
    result = engine.simulate(trace_scenario(tmp_path, PRIORITY_ROWS, {"max_batch_size": 1, "kv_capacity_tokens": 64,
                                                                    "block_size_tokens": 4},
                                            policy=policy, classes=PRIORITY_CLASSES))
    assert_events(result, {2: (0.01, 0.02, 0.03), 0: (0.0, 0.01, 0.051), 1: (0.051, 0.061, 0.071)})
    assert result.summary["system"]["preemption_waste_s"] == pytest.approx(0.001)


def test_swap_mode_moves_the_kv_both_ways(tmp_path):
    """r0 holds one KV token when evicted: the swap-out lengthens the 0.01 iteration, the swap-in the 0.03 one."""
    policy = {"name": "priority", "preemptive": True, "preempt_mode": "swap"}
    result = engine.simulate(trace_scenario(tmp_path, PRIORITY_ROWS, {"max_batch_size": 1},
                                            policy=policy, classes=PRIORITY_CLASSES))
    s = SWAP_S
    assert_events(result, {2: (0.01, 0.02 + s, 0.03 + s), 0: (0.0, 0.01, 0.05 + 2 * s),
                           1: (0.05 + 2 * s, 0.06 + 2 * s, 0.07 + 2 * s)})
    assert result.summary["system"]["preemption_waste_s"] == pytest.approx(2 * s)


def test_recompute_wastes_the_tokens_computed_before(tmp_path):
    """The memory-preemption schedule of test_schedule: r1 re-prefills 6 + 3 = 9 tokens at 0.04."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 6, 4), (0.0, 6, 4)],
                                            {"max_batch_size": 4, "kv_capacity_tokens": 16, "block_size_tokens": 4}))
    # The 0.04 iteration processes r1's 9 tokens, 8 of them computed before (6 prompt + 2 decodes).
    assert result.summary["system"]["preemption_waste_s"] == pytest.approx(0.01 * 8 / 9)


def test_only_alpha_with_equal_slas_orders_like_fifo():
    classes = [{"name": n, "share": 0.5, "tier_weight": w, "sla_ttft_ms": 800, "sla_e2e_ms": 800,
                "prompt_tokens": {"dist": "constant", "value": 1}, "output_tokens": {"dist": "geometric", "mean": 8}}
               for n, w in (("a", 3.0), ("b", 1.0))]
    dynamic = engine.simulate(one_slot(classes, 10.0, policy={"name": "dynamic", "alpha": 1.0, "beta": 0.0,
                                                              "gamma": 0.0})).requests
    fifo = engine.simulate(one_slot(classes, 10.0, policy={"name": "fifo"})).requests
    pd.testing.assert_series_equal(dynamic["first_scheduled_s"], fifo["first_scheduled_s"])
    assert dynamic["preemptions"].sum() == 0


def test_only_gamma_orders_like_preemptive_strict_priority_by_tier():
    classes = [{"name": "gold", "share": 0.3, "tier_weight": 3.0, "priority": 0},
               {"name": "bronze", "share": 0.7, "tier_weight": 1.0, "priority": 1}]
    for c in classes:
        c.update({"prompt_tokens": {"dist": "constant", "value": 1},
                  "output_tokens": {"dist": "geometric", "mean": 8}})
    dynamic = engine.simulate(one_slot(classes, 10.0, policy={"name": "dynamic", "alpha": 0.0, "beta": 0.0,
                                                              "gamma": 1.0})).requests
    priority = engine.simulate(one_slot(classes, 10.0, policy={"name": "priority", "preemptive": True})).requests
    assert dynamic["preemptions"].sum() > 0
    pd.testing.assert_frame_equal(dynamic[["first_scheduled_s", "finish_s"]], priority[["first_scheduled_s",
                                                                                        "finish_s"]])


LONG_AND_SHORT = [{"name": "all", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 1},
                   "output_tokens": {"dist": "lognormal", "mean": 10, "cv": 2.0, "max": 400}}]


def longest_wait_ms(policy, rate=9.0):
    summary = engine.simulate(one_slot(LONG_AND_SHORT, rate, n=8000, policy=policy)).summary
    return summary["overall"]["longest_wait_ms"]


def test_beta_does_not_starve_long_requests_where_sjf_does():
    """At a load of about 0.9, SJF keeps pushing long requests back; beta alone never preempts a running
    request and orders the waiting ones by arrival (all have consumed nothing), so nothing waits longer
    than under FIFO."""
    fifo = longest_wait_ms({"name": "fifo"})
    beta_only = longest_wait_ms({"name": "dynamic", "alpha": 0.0, "beta": 1.0, "gamma": 0.0})
    sjf = longest_wait_ms({"name": "sjf"})
    assert beta_only <= fifo * 1.0001
    assert sjf > 3 * fifo


def test_aging_bounds_the_wait_of_the_lowest_level():
    """The top level alone loads the server to 0.9: plain priority starves the bottom level, aging by
    one level per second lets a bottom request overtake top requests that arrived a second after it."""
    classes = [{"name": "top", "share": 0.9, "priority": 0, "prompt_tokens": {"dist": "constant", "value": 1},
                "output_tokens": {"dist": "constant", "value": 10}},
               {"name": "bottom", "share": 0.1, "priority": 1, "prompt_tokens": {"dist": "constant", "value": 1},
                "output_tokens": {"dist": "constant", "value": 10}}]
    plain = engine.simulate(one_slot(classes, 9.5, n=20000, policy={"name": "priority"})).summary["classes"]
    aged = engine.simulate(one_slot(classes, 9.5, n=20000, policy={"name": "priority",
                                                                  "aging_per_s": 1.0})).summary["classes"]
    bound_ms = 1000 + aged["top"]["longest_wait_ms"] + 100  # one level of aging + the top backlog + one job
    assert aged["bottom"]["longest_wait_ms"] <= bound_ms
    assert plain["bottom"]["longest_wait_ms"] > 3 * bound_ms


def test_max_wait_promotes_to_the_top_level():
    classes = [{"name": "top", "share": 0.9, "priority": 0, "prompt_tokens": {"dist": "constant", "value": 1},
                "output_tokens": {"dist": "constant", "value": 10}},
               {"name": "bottom", "share": 0.1, "priority": 2, "prompt_tokens": {"dist": "constant", "value": 1},
                "output_tokens": {"dist": "constant", "value": 10}}]
    aged = engine.simulate(one_slot(classes, 9.5, n=20000, policy={"name": "priority",
                                                                  "max_wait_ms": 2000})).summary["classes"]
    assert aged["bottom"]["longest_wait_ms"] <= 2000 + aged["top"]["longest_wait_ms"] + 100


def test_srpt_has_the_lowest_mean_latency_on_one_class():
    classes = [{"name": "all", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 1},
                "output_tokens": {"dist": "geometric", "mean": 10}}]
    means = {}
    for name in POLICIES:
        policy = {"name": name, "preempt_mode": "keep", "preempt_overhead_ms": 0.0}
        means[name] = engine.simulate(one_slot(classes, 8.0, n=20000, policy=policy)).summary["overall"]["e2e_ms"][
            "mean"]
    best = min(means, key=means.get)
    assert best == "srpt", means
    assert means["srpt"] < 0.8 * means["fifo"]


def test_wfq_shares_follow_the_weights_while_both_classes_are_backlogged():
    classes = [{"name": n, "share": 0.5, "prompt_tokens": {"dist": "constant", "value": 1},
                "output_tokens": {"dist": "constant", "value": 20}} for n in ("gold", "silver")]
    scenario = engine.load_scenario(engine.scenario_to_dict(synthetic(
        classes, rate_per_s=20000.0, num_requests=20000, server={"max_batch_size": 8},
        policy={"name": "wfq", "weights": {"gold": 70, "silver": 30}})), overrides=["limits.max_drain_s=60"])
    summary = engine.simulate(scenario).summary
    assert summary["system"]["stop_reason"] == "horizon"  # both classes still waiting at the end
    assert summary["classes"]["gold"]["service_share"] == pytest.approx(0.7, rel=0.02)
    assert summary["classes"]["silver"]["service_share"] == pytest.approx(0.3, rel=0.02)


def test_wfq_gives_an_idle_class_share_to_the_busy_one(tmp_path):
    rows = [(0.0, 1, 20, "gold")] * 400
    classes = [{"name": "gold", "share": 0.5}, {"name": "silver", "share": 0.5}]
    result = engine.simulate(trace_scenario(tmp_path, rows, {"max_batch_size": 8},
                                            policy={"name": "wfq", "weights": {"gold": 1, "silver": 9}},
                                            classes=classes))
    busy = result.timeseries[result.timeseries["time_s"] < 0.01 * (400 / 8 - 1) * 20]
    assert (busy["batch_size"] == 8).all()
    assert result.summary["classes"]["gold"]["service_share"] == 1.0


def test_edf_serves_the_earliest_deadline():
    classes = [{"name": "tight", "share": 0.5, "sla_ttft_ms": 100, "prompt_tokens": {"dist": "constant", "value": 1},
                "output_tokens": {"dist": "constant", "value": 5}},
               {"name": "loose", "share": 0.5, "sla_ttft_ms": 5000, "prompt_tokens": {"dist": "constant", "value": 1},
                "output_tokens": {"dist": "constant", "value": 5}}]
    edf = engine.simulate(one_slot(classes, 15.0, n=8000, policy={"name": "edf"})).summary["classes"]
    fifo = engine.simulate(one_slot(classes, 15.0, n=8000, policy={"name": "fifo"})).summary["classes"]
    assert edf["tight"]["sla_attainment"] > fifo["tight"]["sla_attainment"]
    assert edf["tight"]["queue_ms"]["p99"] < fifo["tight"]["queue_ms"]["p99"]


def test_vllm_presets_recompute_and_pick_the_latest_lowest_priority_victim(tmp_path):
    policy = {"name": "vllm-priority", "preempt_mode": "keep"}  # the preset ignores the mode: recompute
    result = engine.simulate(trace_scenario(tmp_path, PRIORITY_ROWS, {"max_batch_size": 1}, policy=policy,
                                            classes=PRIORITY_CLASSES))
    assert_events(result, {2: (0.01, 0.02, 0.03), 0: (0.0, 0.01, 0.05), 1: (0.05, 0.06, 0.07)})
    assert result.summary["system"]["preemption_waste_s"] > 0
    fcfs = engine.simulate(trace_scenario(tmp_path, PRIORITY_ROWS, {"max_batch_size": 1},
                                          policy={"name": "vllm-fcfs", "preemptive": True},
                                          classes=PRIORITY_CLASSES))
    assert fcfs.summary["system"]["preemptions"] == 0


def test_predictor_error_interpolates_from_exact_to_uninformative():
    true = np.array([10, 100, 1000])
    other = np.array([1000, 10, 100])
    assert list(predicted_tokens(true, other, 0.0)) == [10, 100, 1000]
    assert list(predicted_tokens(true, other, 1.0)) == [1000, 10, 100]
    assert list(predicted_tokens(true, other, 0.5)) == [100, 32, 316]


def test_predictor_error_blunts_sjf():
    exact = engine.simulate(one_slot(LONG_AND_SHORT, 8.0, n=8000, policy={"name": "sjf"})).summary
    blind = engine.simulate(one_slot(LONG_AND_SHORT, 8.0, n=8000, policy={"name": "sjf", "predictor_error": 1.0}))
    assert exact["overall"]["e2e_ms"]["mean"] < blind.summary["overall"]["e2e_ms"]["mean"]


def test_weights_must_name_every_class():
    classes = [{"name": n, "share": 0.5, "prompt_tokens": {"dist": "constant", "value": 1},
                "output_tokens": {"dist": "constant", "value": 2}} for n in ("a", "b")]
    base = engine.scenario_to_dict(synthetic(classes, 1.0, 10))
    with pytest.raises(engine.ScenarioError, match="policy.weights lacks class 'b'"):
        engine.load_scenario(base, overrides=["policy.weights={a = 1}"])
    with pytest.raises(engine.ScenarioError, match="policy.weights.c is not a class"):
        engine.load_scenario(base, overrides=["policy.weights={a = 1, b = 1, c = 1}"])
    with pytest.raises(engine.ScenarioError, match="policy.weights.a = 0 must be a number from 1e-06 to 1,000,000"):
        engine.load_scenario(base, overrides=["policy.weights={a = 0, b = 1}"])


# Every run below keeps a preempted request's KV, so that the pause's overhead counts.
KEEPING = {"preempt_mode": "keep"}
# A value other than that of the runs below for every [policy] key (weights name the preset's classes).
CHANGED_PARAMS = {"preemptive": True, "aging_per_s": 2.0, "max_wait_ms": 300.0,
                  "weights": {"interactive": 9, "offline": 1}, "alpha": 4.0, "beta": 0.2, "gamma": 0.0, "margin": 1.5,
                  "default_sla_ms": 800.0, "prefill_token_weight": 0.3, "predictor_error": 0.8, "preempt_mode": "swap",
                  "preempt_overhead_ms": 40.0}


def busy_summary(policy: dict) -> str:
    """The whole summary, as text, of the example preset overloaded on a small KV cache (queues and preemptions:
    every policy key has something to act on)."""
    data = apply_overrides(read_toml("data/scenarios/example.toml"), {
        "workload.num_requests": 600, "workload.arrival.rate_per_s": 9.0, "server.kv_capacity_tokens": 20000})
    data["policy"] = policy
    summary = engine.simulate(engine.load_scenario(data)).summary
    del summary["run"]["wall_s"]  # the one figure of a run that is not its result
    return json.dumps(summary, sort_keys=True, default=str)


def test_a_policy_key_read_by_other_policies_only_changes_nothing_in_a_run():
    """What lets a cached result serve every value of another policy's keys (``unread_params``): each such key
    changed leaves the summary the same bit for bit, under every policy; and each key changes it under some
    policy that reads it (so this scenario would show a key read by mistake)."""
    assert set(CHANGED_PARAMS) == {p.key for p in POLICY_PARAMS}
    unchanged = {name: busy_summary({"name": name, **KEEPING}) for name in POLICIES}
    for key, value in CHANGED_PARAMS.items():
        moved = False
        for name in POLICIES:
            same = unchanged[name] == busy_summary({"name": name, **KEEPING, key: value})
            if key in unread_params(name):
                assert same, f"{key} changes a {name} run"
            moved = moved or not same
        assert moved, f"no policy's run moves with {key}: this scenario cannot tell whether it is read"
    assert "prefill_token_weight" not in unread_params("fifo")  # the service share reads it under every policy
