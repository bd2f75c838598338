"""Diagnosis in words (engine.decide.diagnosis): each limit is found on a run built to hit it, with its numbers, and
nothing is said where nothing limits."""

import copy
import dataclasses

import pytest

from conftest import SCENARIOS
from engine.decide.diagnosis import diagnose, ridge_batch
from engine.hardware.roofline import roofline_profile, roofline_step_params
from engine.hardware.steptime import step_terms_nb
from engine.scenario.config import load_scenario
from engine.sim.simulate import simulate


def run(*overrides: str):
    scenario = load_scenario(SCENARIOS / "example.toml", overrides=["workload.num_requests=3000", *overrides])
    return scenario, simulate(scenario).summary


def kinds(scenario, summary) -> list[str]:
    return [f.kind for f in diagnose(scenario, summary)]


def text(scenario, summary, kind: str) -> str:
    return next(f.text for f in diagnose(scenario, summary) if f.kind == kind)


def test_a_light_load_has_nothing_to_say_but_its_numbers():
    scenario, summary = run("workload.arrival.rate_per_s=0.5")
    assert kinds(scenario, summary) == ["room"]
    assert "offered load 0.15 (an estimate, under 0.8)" in text(scenario, summary, "room")


def test_overload_comes_first_with_the_replicas_that_relieve_it():
    scenario, summary = run("workload.arrival.rate_per_s=10")
    assert kinds(scenario, summary) == ["overload", "batch_limit", "timeouts"]
    load = summary["system"]["offered_load"]
    assert 2.0 < load < 3.0 and "at least 3 replicas" in text(scenario, summary, "overload")
    interactive = summary["classes"]["interactive"]
    assert f"{interactive['timed_out']:,} of {interactive['arrived']:,} requests" in text(scenario, summary, "timeouts")


def test_queueing_near_saturation_gives_the_mm1_factor():
    scenario, summary = run("workload.arrival.rate_per_s=3.0", "workload.num_requests=20000")
    load = summary["system"]["offered_load"]
    assert 0.8 <= load < 1.0 and kinds(scenario, summary)[0] == "near_saturation"
    assert f"waits {load / (1 - load):.1f}x its service time" in text(scenario, summary, "near_saturation")
    assert f"brings the load to {load / 2:.2f}" in text(scenario, summary, "near_saturation")


def test_a_full_kv_cache_counts_its_preemptions():
    scenario, summary = run("workload.arrival.rate_per_s=1.5", "server.kv_capacity_tokens=8192",
                            "server.max_batch_size=32")
    preemptions = summary["system"]["preemptions"]
    assert preemptions > 0 and "kv_full" in kinds(scenario, summary)
    said = text(scenario, summary, "kv_full")
    assert said.startswith(f"KV cache full: {preemptions:,} running requests were preempted") and "8,192 tokens" in said


def test_a_class_starving_under_strict_priority_is_named_with_its_relief():
    scenario, summary = run("workload.arrival.rate_per_s=3.35", "policy.name=priority", "workload.num_requests=20000")
    said = text(scenario, summary, "starving")
    assert said.startswith("Class offline starves") and "Let waiting count: Aging or promote after waiting." in said
    fifo_scenario, fifo = run("workload.arrival.rate_per_s=3.35", "workload.num_requests=20000")
    assert "starving" not in kinds(fifo_scenario, fifo), "FIFO serves the offline class in its turn"


@pytest.mark.parametrize("busy, said", [((0.9, 0.5), True), ((0.9, 0.75), False), ((0.4, 0.1), False)])
def test_router_imbalance_is_said_only_on_a_busy_fleet_split_badly(busy, said):
    scenario, summary = run("workload.arrival.rate_per_s=1.0", "fleet.replicas=2", "fleet.router=round-robin")
    summary = copy.deepcopy(summary)
    for replica, share in zip(summary["system"]["replicas"], busy):
        replica["busy_frac"] = share
    assert ("router_imbalance" in kinds(scenario, summary)) == said
    summary["system"]["sim_time_s"] *= 2  # half the run a drain: one replica busy alone with the last requests
    assert "router_imbalance" not in kinds(scenario, summary)
    summary["system"]["sim_time_s"] /= 2
    if said:
        assert text(scenario, summary, "router_imbalance") == (
            "Router imbalance (Round robin): replica 0 was busy 90% of the time, replica 1 50%. A load-aware router "
            "(Fewest tokens) evens it out.")


def test_a_kv_cache_at_its_peak_without_preemptions_is_nearly_full():
    scenario, summary = run("workload.arrival.rate_per_s=1.0", "server.kv_capacity_tokens=65536")
    summary = copy.deepcopy(summary)
    summary["system"].update(preemptions=0, kv_peak_frac=0.97)
    assert text(scenario, summary, "kv_full").startswith("KV cache nearly full: peak use 97% of 65,536 tokens")
    summary["system"]["kv_peak_frac"] = 0.9
    assert "kv_full" not in kinds(scenario, summary)


def test_preemptions_with_room_in_memory_are_the_policy_s_and_an_unlimited_cache_is_never_full():
    scenario, summary = run("workload.arrival.rate_per_s=3.2", "policy.name=priority", "policy.preemptive=true")
    preemptions = summary["system"]["preemptions"]
    assert summary["system"]["kv_peak_frac"] is None and preemptions > 0, "unlimited KV: only the policy evicts"
    assert "kv_full" not in kinds(scenario, summary)
    assert text(scenario, summary, "preemptions").startswith(f"{preemptions:,} running requests were preempted for "
                                                             f"requests the policy ranks higher")


def preset_run(name: str, *overrides: str):
    scenario = load_scenario(SCENARIOS / name, overrides=["workload.num_requests=3000", *overrides])
    return scenario, simulate(scenario).summary


def decode_terms(scenario, summary):
    """The mean decode iteration's (batch, context, compute_s, memory_s), from the run's own figures."""
    system, overall = summary["system"], summary["overall"]
    per_request = system["sim_time_s"] / overall["completed"]
    context = overall["prompt_tokens_per_s_run"] * per_request + overall["output_tokens_per_s_run"] * per_request / 2
    batch = system["mean_batch_size"]
    step = roofline_step_params(roofline_profile(scenario.server))
    return (batch, context, step, *step_terms_nb(step, batch, batch * context, batch * context)[:2])


def test_a_small_batch_of_long_contexts_is_memory_bound_and_says_where_it_turns():
    scenario, summary = preset_run("bursty_code_h100_70b.toml")
    batch, context, step, compute_s, memory_s = decode_terms(scenario, summary)
    assert memory_s > compute_s
    said = text(scenario, summary, "decode_memory_bound")
    ridge = ridge_batch(step, context)
    assert ridge and f"compute catches up at ~{ridge:,} sequences" in said
    assert f"traffic takes {memory_s * 1e3:.2f} ms against {compute_s * 1e3:.2f} ms of compute" in said
    below = step_terms_nb(step, ridge // 2, ridge // 2 * context, ridge // 2 * context)
    at = step_terms_nb(step, ridge, ridge * context, ridge * context)
    assert below[0] < below[1] and at[0] >= at[1], "the ridge is the first power of two where compute catches up"


def test_a_full_batch_of_short_contexts_is_compute_bound():
    scenario, summary = preset_run("article_mixed_8xa100.toml")
    batch, context, step, compute_s, memory_s = decode_terms(scenario, summary)
    assert compute_s > memory_s and "decode_memory_bound" not in kinds(scenario, summary)
    assert f"Decode is compute-bound: at {batch:.0f} sequences of ~" in text(scenario, summary, "decode_compute_bound")


def test_long_prompts_make_prefill_a_large_share_of_the_busy_time():
    scenario, summary = preset_run("chat_and_batch_a100_8b.toml")
    said = text(scenario, summary, "prefill_heavy")
    assert "compute-bound" in said and "a prompt of 1,5" in said
    short = [*(f"workload.classes.{i}.prompt_tokens={{dist = \"constant\", value = 16}}" for i in range(2))]
    scenario, summary = preset_run("chat_and_batch_a100_8b.toml", *short)
    assert "prefill_heavy" not in kinds(scenario, summary)


def test_the_fixed_step_model_has_no_bound_to_name():
    scenario, summary = run("workload.arrival.rate_per_s=0.5")
    assert not {"decode_memory_bound", "decode_compute_bound", "prefill_heavy"} & set(kinds(scenario, summary))


def test_the_engines_own_scheduler_holding_requests_back_is_named_with_its_key():
    """SGLang reading new requests every 30 decode iterations holds each request back for part of its wait: the
    diagnosis says how long on average and which key sets it; at 1 (its default) it says nothing of it."""
    scenario = load_scenario(SCENARIOS / "engine_sglang.toml",
                             overrides=["workload.num_requests=400", "server.scheduler_recv_interval=30"])
    summary = simulate(scenario).summary
    held_ms = summary["system"]["scheduler_hold_s"] / summary["overall"]["arrived"] * 1000.0
    said = text(scenario, summary, "engine_scheduler")
    assert held_ms > 100 and f"held each request back {held_ms:,.1f} ms on average" in said
    assert "server.scheduler_recv_interval = 30" in said
    default = load_scenario(SCENARIOS / "engine_sglang.toml", overrides=["workload.num_requests=400"])
    plain = simulate(default).summary
    assert plain["system"]["scheduler_hold_s"] == 0.0 and "engine_scheduler" not in kinds(default, plain)


def test_a_memory_bound_decode_names_only_the_8_bit_formats_the_plan_does_not_use_yet():
    """The advice for a memory-bound decode: FP8 KV alone for the preset's INT4 weights and 16-bit KV; FP8 weights
    and KV for a 16-bit plan, FP8 KV alone where the weights are FP8 already, more bandwidth alone where both are."""
    from engine.decide.diagnosis import smaller_formats
    scenario, summary = preset_run("bursty_code_h100_70b.toml")
    server = scenario.server
    assert (server.quant, server.kv_quant) == ("int4", "fp16")
    assert "little per token; more bandwidth or FP8 KV speeds every iteration" in text(scenario, summary,
                                                                                      "decode_memory_bound")
    assert smaller_formats(dataclasses.replace(server, quant="bf16")) == ["FP8 weights", "FP8 KV"]
    fp8 = dataclasses.replace(server, quant="fp8")
    assert smaller_formats(fp8) == ["FP8 KV"]
    assert smaller_formats(dataclasses.replace(fp8, kv_quant="fp8")) == []
    assert smaller_formats(dataclasses.replace(server, quant="int4", kv_quant="int8")) == []
