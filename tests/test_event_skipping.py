"""Event skipping (``kernel.skip.skip_decodes_nb``) gives the results of deciding every iteration, bit for bit:
every request record, every time-series row and every counter, on Hypothesis-drawn scenarios over every
policy, preemption mode, batching and admission mode, router, both step models and the run limits."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine.sim.kernel.kv import update_new_token_ratio_nb
from engine.sim.kernel.state import C_NEW_TOKEN_RATIO_PPM, NEW_TOKEN_RATIO_INIT_PPM, S_SKIPPED, T_START_S, T_WAITING
from engine.sim.layout import F_FINISH, F_FIRST_SCHEDULED, F_FIRST_TOKEN, F_KEY, I_STATE, TIMED_OUT
from engine.sim.simulate import execute, prepare, simulate
from engine.sim.workload import RequestArrays
from tests.test_invariants import scenarios

PEER = "data/scenarios/engine_vllm_v1.toml"


@st.composite
def skip_scenarios(draw):
    """The invariant tests' scenarios, some on the roofline step model (step times grow with the context,
    so a skipped iteration's time depends on the tokens cached so far), some stopped by a run limit."""
    data = draw(scenarios())
    if draw(st.booleans()):
        server = data["server"]
        server.update(step_model="roofline", gpu="A100-80G", model=server.get("model", "Llama-3-8B"), quant="fp16",
                      kernel_tables=draw(st.sampled_from(["auto", "off"])))  # measured kernels, or the roofline
        server.pop("step_time_ms")
        if server["kv_capacity_tokens"] == 0:
            server.pop("kv_capacity_tokens")
        fleet = data["fleet"]
        for table in [*fleet.get("groups", []), *(fleet[k] for k in ("prefill", "decode") if k in fleet)]:
            table.pop("step_time_ms")  # the roofline's groups and pools: other GPUs
            table.pop("kv_capacity_tokens")
            table["gpu"] = draw(st.sampled_from(["A100-80G", "H100-80G", "L40S"]))
    limit = draw(st.sampled_from([None, "queue", "horizon"]))
    if limit == "queue":
        data["limits"] = {"max_waiting_requests": draw(st.integers(1, 20))}
    elif limit == "horizon":
        data["limits"] = {"max_drain_s": draw(st.floats(0.001, 0.5))}
    return data


def assert_same(skipped, stepped) -> None:
    """Identical request records, time series and system counters (the wall time and the count of skipped
    iterations aside)."""
    pd.testing.assert_frame_equal(skipped.requests, stepped.requests, check_exact=True)
    pd.testing.assert_frame_equal(skipped.timeseries, stepped.timeseries, check_exact=True)
    a, b = skipped.summary, stepped.summary
    ignored = {"skipped_iterations"}
    assert {k: v for k, v in a["system"].items() if k not in ignored} == \
        {k: v for k, v in b["system"].items() if k not in ignored}
    assert a["classes"].keys() == b["classes"].keys()
    for name in a["classes"]:
        for key, value in a["classes"][name].items():
            other = b["classes"][name][key]
            assert value == other or (isinstance(value, float) and math.isnan(value) and math.isnan(other)), key
    assert stepped.summary["system"]["skipped_iterations"] == 0


def both_ways(scenario, requests: RequestArrays):
    """The runs of ``requests`` with event skipping and deciding every iteration in full."""
    return tuple(execute(prepare(scenario, requests=requests, event_skipping=skip)) for skip in (True, False))


def assert_same_state(skipped, stepped, ranking_keys: bool = True) -> None:
    """Identical request arrays, time series and statistics (the count of skipped iterations aside; without
    ``ranking_keys``, the policy's last ranking key of each request too: only decisions keep it)."""
    columns = np.arange(skipped.floats.shape[1]) != (-1 if ranking_keys else F_KEY)
    np.testing.assert_array_equal(skipped.ints, stepped.ints)
    np.testing.assert_array_equal(skipped.floats[:, columns], stepped.floats[:, columns])
    np.testing.assert_array_equal(skipped.series, stepped.series)
    others = np.arange(skipped.stats.shape[1]) != S_SKIPPED
    np.testing.assert_array_equal(skipped.stats[:, others], stepped.stats[:, others])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skip_scenarios())
def test_skipping_gives_the_results_of_stepping_every_iteration(data):
    scenario = engine.load_scenario(data)
    assert_same(simulate(scenario), simulate(scenario, event_skipping=False))


def test_skipping_is_on_by_default_and_covers_most_decode_iterations():
    """On the peer-comparable workload (one arrival a second, 128 output tokens) most iterations are decodes
    between two events: skipping runs them, with the same results."""
    scenario = engine.load_scenario(PEER, overrides=["workload.num_requests=300", "workload.arrival.rate_per_s=1.0",
                                                     "server.max_batched_tokens=8192"])
    skipped, stepped = simulate(scenario), simulate(scenario, event_skipping=False)
    assert_same(skipped, stepped)
    system = skipped.summary["system"]
    assert system["skipped_iterations"] > 0.75 * system["iterations"]


def test_skipping_crosses_kv_blocks_and_stops_where_memory_runs_out():
    """A KV cache that fills during decode-only stretches: the blocks each request grows into are counted
    in the skipped iterations, and the iteration that finds memory short is decided in full (it preempts)."""
    data = {"seed": 5, "workload": {"num_requests": 40, "arrival": {"process": "poisson", "rate_per_s": 50.0},
                                    "classes": [{"name": "a", "share": 1.0,
                                                 "prompt_tokens": {"dist": "constant", "value": 30},
                                                 "output_tokens": {"dist": "uniform", "low": 20, "high": 90}}]},
            "server": {"step_model": "fixed", "step_time_ms": 10.0, "max_batch_size": 16, "max_batched_tokens": 512,
                       "block_size_tokens": 4, "kv_capacity_tokens": 600},
            "policy": {"name": "vllm-fcfs"}}
    scenario = engine.load_scenario(data)
    skipped, stepped = simulate(scenario), simulate(scenario, event_skipping=False)
    assert_same(skipped, stepped)
    system = skipped.summary["system"]
    assert system["preemptions"] > 0 and system["skipped_iterations"] > 0.2 * system["iterations"]


def test_an_arrival_at_the_very_time_of_a_decision_goes_first():
    """Step times of 1/8 s add up exactly: a request arriving at 0.625 s meets the decision at 0.625 s, and is
    admitted by it (an arrival at a tie comes first), as deciding every iteration does; skipping stops there."""
    scenario = engine.load_scenario({
        "seed": 1, "workload": {"num_requests": 2, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                "classes": [{"name": "a", "share": 1.0,
                                             "prompt_tokens": {"dist": "constant", "value": 1},
                                             "output_tokens": {"dist": "constant", "value": 10}}]},
        "server": {"step_model": "fixed", "step_time_ms": 125.0, "max_batch_size": 4}})
    one = np.ones(2, np.int64)
    requests = RequestArrays(np.array([0.0, 0.625]), one, 10 * one, 0 * one, 10 * one)
    runs = [execute(prepare(scenario, requests=requests, event_skipping=skip)) for skip in (True, False)]
    for skipped, stepped in [(runs[0].ints, runs[1].ints), (runs[0].floats, runs[1].floats)]:
        np.testing.assert_array_equal(skipped, stepped)
    assert runs[0].floats[1, F_FIRST_SCHEDULED] == 0.625 and runs[0].stats[0, S_SKIPPED] > 0


def test_no_skipping_while_preemptions_elsewhere_could_reach_the_queue_bound():
    """Two replicas, a queue bound of 2: replica 0 decodes one long request alone while replica 1's KV cache
    fills and its preemptions send requests back to wait. The run stops at the first decision after the
    waiting requests pass the bound; replica 0 must not have run ahead of that decision."""
    scenario = engine.load_scenario({
        "seed": 1, "workload": {"num_requests": 10, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                "classes": [{"name": "a", "share": 1.0,
                                             "prompt_tokens": {"dist": "constant", "value": 1},
                                             "output_tokens": {"dist": "constant", "value": 10}}]},
        "server": {"step_model": "fixed", "step_time_ms": 10.0, "max_batch_size": 8, "block_size_tokens": 16,
                   "kv_capacity_tokens": 256, "max_batched_tokens": 512},
        "fleet": {"replicas": 2, "router": "round-robin"},
        "policy": {"name": "vllm-fcfs"}, "limits": {"max_waiting_requests": 2}})
    # Round robin: even requests go to replica 0 (one long decode, then single-token requests), odd ones to 1.
    output = np.array([100, 60, 1, 60, 1, 60, 1, 60, 1, 60])
    prompt = np.array([10, 60, 1, 60, 1, 60, 1, 60, 1, 60])
    requests = RequestArrays(np.repeat([0.0, 0.0101, 0.0202, 0.0303, 0.0404], 2), prompt, output,
                             np.zeros(10, np.int64), output)
    skipped, stepped = both_ways(scenario, requests)
    assert skipped.stop_reason == stepped.stop_reason == "queue_bound"
    assert skipped.sim_time_s == stepped.sim_time_s < 0.5
    others = np.arange(skipped.stats.shape[1]) != S_SKIPPED
    np.testing.assert_array_equal(skipped.stats[:, others], stepped.stats[:, others])
    np.testing.assert_array_equal(skipped.ints, stepped.ints)


def test_skipping_runs_while_requests_wait_for_a_slot_and_stops_at_their_time_out():
    """Two slots, both taken by requests decoding 20 tokens (from 0 s, 1/8-s steps); a third arrives at
    1/16 s with a 1-s time-out and waits, nothing being able to admit it. Skipping runs with it waiting
    (decisions 2 to 8, at 0.25 to 1.0 s) but stops before its deadline (1.0625 s): the decision at 1.125 s
    times it out (its finish is its deadline), then skips the 10 decodes left (decisions 10 to 19). 17 of the
    20 iterations are skipped; the results, the waiting column of the series included, are stepping's."""
    scenario = engine.load_scenario({
        "seed": 1, "workload": {"num_requests": 3, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                "classes": [{"name": "a", "share": 1.0, "timeout_ms": 1000,
                                             "prompt_tokens": {"dist": "constant", "value": 1},
                                             "output_tokens": {"dist": "constant", "value": 20}}]},
        "server": {"step_model": "fixed", "step_time_ms": 125.0, "max_batch_size": 2}})
    output = np.array([20, 20, 3])
    requests = RequestArrays(np.array([0.0, 0.0, 0.0625]), np.ones(3, np.int64), output, np.zeros(3, np.int64),
                             output)
    skipped, stepped = both_ways(scenario, requests)
    assert_same_state(skipped, stepped)
    assert skipped.ints[2, I_STATE] == TIMED_OUT and skipped.floats[2, F_FINISH] == 1.0625
    assert skipped.stats[0, S_SKIPPED] == 17 and stepped.stats[0, S_SKIPPED] == 0
    rows = stepped.series[0][:20]
    np.testing.assert_array_equal(rows[:, T_START_S], np.arange(20) / 8)
    np.testing.assert_array_equal(rows[:, T_WAITING], [0] + [1] * 8 + [0] * 11)


def test_no_skipping_while_a_request_waits_for_memory_with_a_slot_free():
    """New-token-ratio admission keeps free the blocks the running request may still need (0.7 of its output
    at first, less each decode): a second request waits with a slot free until the ratio has fallen enough,
    some 150 decodes later, then is admitted by the decision that finds room. The iterations before cannot be
    skipped (each decision may admit it); the results are stepping's."""
    scenario = engine.load_scenario({
        "seed": 1, "workload": {"num_requests": 2, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                "classes": [{"name": "a", "share": 1.0,
                                             "prompt_tokens": {"dist": "constant", "value": 16},
                                             "output_tokens": {"dist": "constant", "value": 1000}}]},
        "server": {"step_model": "fixed", "step_time_ms": 10.0, "max_batch_size": 8, "block_size_tokens": 16,
                   "kv_capacity_tokens": 1200, "admission": "new-token-ratio"}})
    output = np.array([1000, 1000])
    requests = RequestArrays(np.array([0.0, 0.005]), np.full(2, 16), output, np.zeros(2, np.int64), output)
    skipped, stepped = both_ways(scenario, requests)
    assert_same_state(skipped, stepped)
    assert 1.0 < skipped.floats[1, F_FIRST_SCHEDULED] < 3.0 and skipped.stats[0, S_SKIPPED] > 0


def test_no_skipping_at_a_full_batch_while_a_preemptive_policy_may_evict():
    """One slot, taken by a request of a class with a 100-s SLA; a request of a 0.1-s SLA waits, and under the
    dynamic policy (alpha 1, margin 0.5) its cost passes the running one's by the margin about 50 ms later: the
    decision then evicts the running request. Every decision before may evict, so none is skipped while it waits;
    the results are stepping's."""
    slow = {"dist": "constant", "value": 200}
    scenario = engine.load_scenario({
        "seed": 1, "workload": {"num_requests": 2, "arrival": {"process": "poisson", "rate_per_s": 1.0}, "classes": [
            {"name": "long", "share": 0.5, "sla_ttft_ms": 100_000, "sla_e2e_ms": 100_000,
             "prompt_tokens": {"dist": "constant", "value": 1}, "output_tokens": slow},
            {"name": "urgent", "share": 0.5, "sla_ttft_ms": 100, "sla_e2e_ms": 100,
             "prompt_tokens": {"dist": "constant", "value": 1}, "output_tokens": slow}]},
        "server": {"step_model": "fixed", "step_time_ms": 10.0, "max_batch_size": 1},
        "policy": {"name": "dynamic", "preemptive": True, "alpha": 1.0, "beta": 0.0, "gamma": 0.0, "margin": 0.5}})
    output = np.array([200, 200])
    requests = RequestArrays(np.array([0.0, 0.105]), np.ones(2, np.int64), output, np.array([0, 1]), output)
    skipped, stepped = both_ways(scenario, requests)
    assert_same_state(skipped, stepped, ranking_keys=False)
    assert 0.15 < skipped.floats[1, F_FIRST_SCHEDULED] < 0.2 and skipped.stats[0, S_SKIPPED] > 0


@pytest.mark.parametrize("timeout_ms", [None, 150])
def test_skipping_starts_at_the_decision_that_computes_a_whole_prompt(timeout_ms):
    """1/8-s steps, four slots: r0 (one-token prompt, 20 tokens out) from 0 s; r1 (5 tokens out) arrives at
    1/16 s and the decision at 1/8 s computes its prompt beside r0's decode. Its first token comes at 0.25 s,
    then both decode: skipping starts at that decision (r1's first token at the first skipped one) and runs
    4 decisions (0.25 to 0.625 s) until r1's last token; the decision at 0.75 s lets r1 leave, then r0 alone
    skips 13 (0.875 to 2.375 s): 17 of its 20 iterations. With a 150-ms time-out r1's deadline (0.2125 s)
    comes before its first token: the decision at 0.25 s is decided in full and times it out, then r0 alone
    skips 17 (0.375 to 2.375 s)."""
    cls = {"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 1},
           "output_tokens": {"dist": "constant", "value": 20}}
    if timeout_ms:
        cls["timeout_ms"] = timeout_ms
    scenario = engine.load_scenario({
        "seed": 1, "workload": {"num_requests": 2, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                "classes": [cls]},
        "server": {"step_model": "fixed", "step_time_ms": 125.0, "max_batch_size": 4}})
    output = np.array([20, 5])
    requests = RequestArrays(np.array([0.0, 0.0625]), np.ones(2, np.int64), output, np.zeros(2, np.int64), output)
    skipped, stepped = both_ways(scenario, requests)
    assert_same_state(skipped, stepped)
    if timeout_ms:
        assert skipped.ints[1, I_STATE] == TIMED_OUT and skipped.floats[1, F_FINISH] == 0.2125
        assert skipped.stats[0, S_SKIPPED] == 17
    else:
        assert skipped.floats[1, F_FIRST_TOKEN] == 0.25 and skipped.stats[0, S_SKIPPED] == 17


def test_fair_queuing_charges_in_the_batch_order_so_a_prompt_is_decided_in_full():
    """Under fair queuing (weight 3: each token adds 1/3 to the class's virtual time, not exactly) the virtual
    time's additions must come in the order stepping makes them, a prompt's charge among the decodes of its
    iteration; skipping does not start at a decision that computes a prompt, and the virtual times match."""
    scenario = engine.load_scenario({
        "seed": 1, "workload": {"num_requests": 2, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                "classes": [{"name": "a", "share": 1.0,
                                             "prompt_tokens": {"dist": "constant", "value": 7},
                                             "output_tokens": {"dist": "constant", "value": 20}}]},
        "server": {"step_model": "fixed", "step_time_ms": 125.0, "max_batch_size": 4},
        "policy": {"name": "wfq", "weights": {"a": 3.0}}})
    output = np.array([20, 5])
    requests = RequestArrays(np.array([0.0, 0.0625]), np.full(2, 7), output, np.zeros(2, np.int64), output)
    skipped, stepped = both_ways(scenario, requests)
    np.testing.assert_array_equal(skipped.replica_classes, stepped.replica_classes)
    assert skipped.stats[0, S_SKIPPED] > 0


def test_the_new_token_ratio_falls_after_a_skipped_stretch_as_after_each_of_its_decodes():
    """The new-token-ratio falls by a whole number of ppm per decoding iteration (the decay step, 1,003.3 ppm,
    truncated): seven at once (a decision and the six it skipped) give what seven one by one give."""
    scenario = engine.load_scenario("data/scenarios/example.toml", overrides=["server.admission=new-token-ratio"])
    srv = prepare(scenario).srv
    ints, running = np.zeros((1, 32), np.int64), np.zeros(1, np.int64)
    at_once, one_by_one = (np.zeros(32, np.int64) for _ in range(2))
    at_once[C_NEW_TOKEN_RATIO_PPM] = one_by_one[C_NEW_TOKEN_RATIO_PPM] = NEW_TOKEN_RATIO_INIT_PPM
    update_new_token_ratio_nb(srv, ints, running, at_once, False, 7)
    for _ in range(7):
        update_new_token_ratio_nb(srv, ints, running, one_by_one, False, 1)
    assert at_once[C_NEW_TOKEN_RATIO_PPM] == one_by_one[C_NEW_TOKEN_RATIO_PPM] == NEW_TOKEN_RATIO_INIT_PPM - 7 * 1003


def test_a_skipped_stretch_from_a_prompt_decays_the_new_token_ratio_by_its_decodes_only():
    """One request alone: the decision at 0 s computes its prompt (no decode: the ratio stays), then skips the
    decodes that follow; the run stops at its 1-s horizon with the ratio lowered once per decode, as stepping."""
    scenario = engine.load_scenario({
        "seed": 1, "workload": {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                "classes": [{"name": "a", "share": 1.0,
                                             "prompt_tokens": {"dist": "constant", "value": 1},
                                             "output_tokens": {"dist": "constant", "value": 100}}]},
        "server": {"step_model": "fixed", "step_time_ms": 125.0, "admission": "new-token-ratio",
                   "kv_capacity_tokens": 4096}, "limits": {"max_drain_s": 1.0}})
    requests = RequestArrays(np.zeros(1), np.ones(1, np.int64), np.array([100]), np.zeros(1, np.int64),
                             np.array([100]))
    skipped, stepped = both_ways(scenario, requests)
    assert skipped.stop_reason == stepped.stop_reason == "horizon" and skipped.stats[0, S_SKIPPED] > 0
    ratio = skipped.counters[0, C_NEW_TOKEN_RATIO_PPM]
    # the decodes at 0.125 to 1.0 s: 8 steps of 1,003 ppm
    assert ratio == stepped.counters[0, C_NEW_TOKEN_RATIO_PPM] == NEW_TOKEN_RATIO_INIT_PPM - 8 * 1003
