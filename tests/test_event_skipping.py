"""Event skipping (``kernel.skip.skip_decodes_nb``) gives the results of deciding every iteration, bit for bit:
every request record, every time-series row and every counter, on Hypothesis-drawn scenarios over every
policy, preemption mode, batching and admission mode, router, both step models and the run limits."""

import math

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine.sim.kernel.state import S_SKIPPED
from engine.sim.layout import F_FIRST_SCHEDULED
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
        server.update(step_model="roofline", gpu="A100-80G", model="Llama-3-8B", quant="fp16")
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
    skipped, stepped = (execute(prepare(scenario, requests=requests, event_skipping=skip)) for skip in (True, False))
    assert skipped.stop_reason == stepped.stop_reason == "queue_bound"
    assert skipped.sim_time_s == stepped.sim_time_s < 0.5
    np.testing.assert_array_equal(skipped.stats, stepped.stats)
    np.testing.assert_array_equal(skipped.ints, stepped.ints)
