"""Properties that hold for every valid scenario (Hypothesis), speculative decoding and prefix caching on or off:
nothing lost, memory within capacity, batches within limits, time runs forward, same seed gives the same result."""

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine.scenario.config import fleet_servers
from engine.scenario.registry import ADMISSION_CODES
from engine.sim.policies import POLICIES

MAX_PROMPT = 200
MAX_OUTPUT = 50


def token_dist(max_tokens: int):
    return st.one_of(
        st.builds(lambda v: {"dist": "constant", "value": v}, st.integers(1, max_tokens)),
        st.integers(1, max_tokens).flatmap(lambda lo: st.integers(lo, max_tokens).map(
            lambda hi: {"dist": "uniform", "low": lo, "high": hi})),
        st.builds(lambda m: {"dist": "geometric", "mean": m, "max": max_tokens}, st.floats(1.0, max_tokens / 2)),
        st.builds(lambda m, cv: {"dist": "lognormal", "mean": m, "cv": cv, "max": max_tokens},
                  st.floats(1.0, max_tokens / 2), st.floats(0.0, 2.0)),
    )


@st.composite
def scenarios(draw):
    n_classes = draw(st.integers(1, 3))
    weights = draw(st.lists(st.integers(1, 10), min_size=n_classes, max_size=n_classes))
    classes = []
    for k, w in enumerate(weights):
        cls = {"name": f"c{k}", "share": w / sum(weights), "priority": draw(st.integers(0, 2)),
               "prompt_tokens": draw(token_dist(MAX_PROMPT)), "output_tokens": draw(token_dist(MAX_OUTPUT)),
               "shared_prefix_tokens": draw(st.sampled_from([0, 0, 8, 64, 150])),
               "conversation_turns": draw(st.sampled_from([1, 1, 2, 5])), "turn_gap_s": draw(st.floats(0.01, 2.0))}
        timeout = draw(st.one_of(st.none(), st.floats(5.0, 500.0)))
        if timeout is not None:
            cls["timeout_ms"] = timeout
        classes.append(cls)
    classes[-1]["share"] = 1.0 - sum(c["share"] for c in classes[:-1])
    arrival = draw(st.one_of(
        st.builds(lambda r: {"process": "poisson", "rate_per_s": r}, st.floats(1.0, 300.0)),
        st.builds(lambda r, cv: {"process": "gamma", "rate_per_s": r, "cv": cv}, st.floats(1.0, 300.0),
                  st.floats(0.3, 4.0))))
    max_batch = draw(st.integers(1, 16))
    block = draw(st.sampled_from([1, 4, 16, 32]))
    talks = any(c["conversation_turns"] > 1 for c in classes)  # prompts grow with the turns: up to 5 x 250 tokens
    static = not talks and draw(st.booleans())
    draft = draw(st.integers(0, 4))  # speculative decoding's draft tokens (0: off)
    server = {"step_model": "fixed", "step_time_ms": draw(st.floats(1.0, 50.0)), "max_batch_size": max_batch,
              "max_batched_tokens": draw(st.integers(max_batch * (draft + 1), 512)),
              "min_batch_size": draw(st.integers(1, max_batch)), "wait_timeout_ms": draw(st.floats(0.0, 50.0)),
              "block_size_tokens": block,
              "kv_capacity_tokens": draw(st.sampled_from([0, 4096] if talks else [0, 320, 600, 1000, 4096])),
              "kv_allocation": "static" if static else "paged",
              "batching": draw(st.sampled_from(["mixed", "prefill-first"])),
              "admission": draw(st.sampled_from(sorted(ADMISSION_CODES)))}
    if draft:
        server["speculative"] = {"draft_tokens": draft, "acceptance": draw(st.floats(0.0, 1.0)),
                                 "draft_cost": draw(st.floats(0.0, 1.0))}
    if not static:
        server["prefix_caching"] = draw(st.booleans())
    capacities = [0, 4096] if talks else [0, 600, 1000, 4096] if static else [0, 320, 600, 1000, 4096]
    if static:
        server["max_seq_len"] = MAX_PROMPT + MAX_OUTPUT
        server["kv_capacity_tokens"] = draw(st.sampled_from(capacities))
    scheduler = draw(st.sampled_from(["plain", "receive", "balance", "delay"]))
    if scheduler == "receive":  # SGLang reads new requests once every few iterations
        server.update(engine="sglang", scheduler_recv_interval=draw(st.integers(2, 40)))
    elif scheduler == "balance":  # TensorRT-LLM holds prompts until every attention-DP rank has one
        server.update(engine="tensorrt-llm", model="Qwen3-30B-A3B", tensor_parallel=draw(st.sampled_from([2, 4])),
                      expert_parallel=True,
                      attention_data_parallel=True, attention_dp_balance=True,
                      attention_dp_batching_wait_iters=draw(st.integers(0, 12)),
                      attention_dp_timeout_iters=draw(st.integers(1, 60)))
    elif scheduler == "delay":  # ATOM holds prompts until every rank has one and they fill the budget or stall
        server.update(engine="atom", model="Qwen3-30B-A3B", tensor_parallel=draw(st.sampled_from([2, 4])),
                      expert_parallel=True, attention_data_parallel=True,
                      prefill_delayer_target_fill=draw(st.floats(0.05, 1.0)),
                      prefill_delayer_max_ticks=draw(st.integers(1, 40)),
                      prefill_delayer_stall_ticks=draw(st.integers(1, 12)),
                      prefill_delayer_kv_high=draw(st.floats(0.0, 1.0)))
    router = draw(st.sampled_from(["round-robin", "least-tokens", "shortest-queue", "prefix-affinity"]))
    fleet = {"replicas": draw(st.integers(1, 4)), "router": router}
    def table():  # a group or pool: its own iteration time, KV cache and batch limits
        batch = draw(st.integers(server["min_batch_size"], 16))
        return {"replicas": draw(st.integers(1, 2)), "step_time_ms": draw(st.floats(1.0, 50.0)),
                "kv_capacity_tokens": draw(st.sampled_from(capacities)), "max_batch_size": batch,
                "max_batched_tokens": draw(st.integers(batch * (draft + 1), 512))}

    layout = draw(st.sampled_from(["plain", "mixed", "disaggregated"]))
    if layout == "mixed":
        fleet = {"router": router, "groups": [table() for _ in range(draw(st.integers(1, 3)))]}
    elif layout == "disaggregated":  # a prefill and a decode pool, the KV over links of 10 MB/s to 50 GB/s
        fleet = {"router": router, "mode": "disaggregated", "prefill": table(), "decode": table(),
                 "kv_link_gb_s": draw(st.sampled_from([0.01, 1.0, 50.0]))}
    return {"seed": draw(st.integers(0, 2 ** 31)), "workload": {
        "num_requests": draw(st.integers(1, 150)), "arrival": arrival, "classes": classes},
        "server": server,
        "fleet": fleet,
        "policy": {"name": draw(st.sampled_from(sorted(POLICIES))), "preemptive": draw(st.booleans()),
                   "preempt_mode": draw(st.sampled_from(["keep", "swap", "recompute"])),
                   "preempt_overhead_ms": draw(st.floats(0.0, 2.0)), "aging_per_s": draw(st.floats(0.0, 5.0)),
                   "predictor_error": draw(st.floats(0.0, 1.0)), "margin": draw(st.floats(0.0, 1.0)),
                   "alpha": draw(st.floats(0.0, 5.0)), "beta": draw(st.floats(0.0, 5.0)),
                   "gamma": draw(st.floats(0.0, 5.0)),
                   "weights": {c["name"]: draw(st.floats(0.1, 10.0)) for c in classes}}}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold(data):
    scenario = engine.load_scenario(data)
    result = engine.simulate(scenario)
    frame, series, summary = result.requests, result.timeseries, result.summary
    server = scenario.server

    # Nothing lost: every arrived request is completed, timed out or still in the system.
    for block in [summary["overall"], *summary["classes"].values()]:
        assert block["arrived"] == block["completed"] + block["timed_out"] + block["unfinished"]
    assert summary["overall"]["arrived"] == len(frame)
    assert summary["system"]["stop_reason"] == "drained" and summary["overall"]["unfinished"] == 0

    # Every arrived request went to one replica; the replicas' counts add up.
    replicas = pd.DataFrame(summary["system"]["replicas"])
    assert frame["replica"].between(0, scenario.fleet.replicas - 1).all()
    # A disaggregated fleet routes twice: arrivals to the prefill pool, finished prompts to the decode pool.
    handed = int((frame["prefill_replica"] >= 0).sum()) if "prefill_replica" in frame else 0
    assert replicas["routed"].sum() == len(frame) + handed
    assert replicas["completed"].sum() == summary["overall"]["completed"]

    # Tokens: never more than asked for; a completed request got exactly its output, a timed-out one none.
    assert (frame["generated_tokens"] <= frame["output_tokens"]).all()
    done = frame[frame["state"] == "completed"]
    assert (done["generated_tokens"] == done["output_tokens"]).all()
    assert (frame.loc[frame["state"] == "timed_out", "generated_tokens"] == 0).all()

    # Time runs forward for every request.
    assert (done["first_scheduled_s"] >= done["arrival_s"]).all()
    assert (done["first_token_s"] > done["first_scheduled_s"]).all()
    assert (done["finish_s"] >= done["first_token_s"]).all()

    # Limits hold in every iteration of every replica (small runs record every iteration).
    assert summary["system"]["timeseries_stride"] == 1 and len(series) == summary["system"]["iterations"]
    servers = [s for s, n in fleet_servers(scenario) for _ in range(n)]  # each replica's own limits
    max_batch = series["replica"].map(lambda k: servers[k].total_batch_size)  # every attention-DP rank's
    budget = series["replica"].map(lambda k: servers[k].total_batched_tokens)
    assert (series["batch_size"] <= max_batch).all()
    over_budget = series["prefill_tokens"] + series["decode_tokens"] > budget
    if server.batching == "prefill-first":
        # Whole prompts: one longer than the budget runs alone; an iteration never mixes prefill and decode.
        assert (series.loc[over_budget, "batch_size"] == 1).all()
        assert ((series["prefill_tokens"] == 0) | (series["decode_tokens"] == 0)).all()
    else:
        assert not over_budget.any()
    spec = POLICIES[scenario.policy.name]
    if server.admission == "reserve-full" and (spec.preemption == "never" or (
            spec.preemption == "param" and not scenario.policy.preemptive)):
        assert summary["system"]["preemptions"] == 0  # blocks for the whole output are taken at admission
    capacity = replicas.set_index("replica")["kv_capacity_tokens"]  # each replica's (a mixed fleet's differ)
    limited = capacity.notna()
    assert (series["kv_used_tokens"] <= series["replica"].map(capacity).fillna(np.inf)).all()
    if limited.all():
        assert summary["system"]["kv_peak_frac"] <= 1.0

    # Determinism: the same scenario and seed give the same result, bit for bit.
    again = engine.simulate(engine.load_scenario(data))
    pd.testing.assert_frame_equal(frame, again.requests, check_exact=True)
    pd.testing.assert_frame_equal(series, again.timeseries, check_exact=True)
    assert {k: v for k, v in summary.items() if k != "run"} == {k: v for k, v in again.summary.items() if k != "run"}

    # A minimum batch and wait that cannot hold an iteration back change nothing, bit for bit: the app caches the
    # run under the defaults (``Server.holds_batches``, ``ui.runner.normal_json``).
    if not server.holds_batches and (server.min_batch_size, server.wait_timeout_ms) != (1, 0.0):
        plain = dict(data, server={**data["server"], "min_batch_size": 1, "wait_timeout_ms": 0.0})
        gateless = engine.simulate(engine.load_scenario(plain))
        pd.testing.assert_frame_equal(frame, gateless.requests, check_exact=True)
        pd.testing.assert_frame_equal(series, gateless.timeseries, check_exact=True)


def test_different_seeds_give_different_arrivals():
    data = {"seed": 1, "workload": {"num_requests": 50, "arrival": {"process": "poisson", "rate_per_s": 5.0},
                                    "classes": [{"name": "a", "share": 1.0,
                                                 "prompt_tokens": {"dist": "constant", "value": 4},
                                                 "output_tokens": {"dist": "constant", "value": 4}}]}}
    first = engine.simulate(engine.load_scenario(data)).requests["arrival_s"].to_numpy()
    second = engine.simulate(engine.load_scenario({**data, "seed": 2})).requests["arrival_s"].to_numpy()
    assert not np.array_equal(first, second)
