"""The engines' schedulers: each knob that holds a new request back, on hand-computed schedules (step times of 1/8 s,
which add up exactly), with and without event skipping; each knob set on another engine, or beside a setting its
engine's release refuses, is a one-line error; the recipe writes each knob's flag."""

import numpy as np
import pytest

import engine
from engine.decide.recipe import commands
from engine.scenario.errors import ScenarioError
from engine.scenario.schedulers import MODULES, OWN_KEYS, loop_gates
from engine.scenario.schedulers.knob import all_knobs
from engine.hardware.tables import load_table
from engine.sim.layout import F_FIRST_SCHEDULED, F_FIRST_TOKEN
from engine.sim.simulate import execute, prepare
from engine.sim.workload import RequestArrays

STEP_MS = 125.0
CLASS = {"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 1},
         "output_tokens": {"dist": "constant", "value": 4}}
WORKLOAD = {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1.0}, "classes": [CLASS]}


def run(server: dict, arrivals: list[float], outputs: list[int]) -> np.ndarray:
    """The requests' (first scheduled, first token) times on one replica of ``server`` (fixed 1/8 s steps), the same
    with event skipping and without (asserted), prompts of one token."""
    n = len(arrivals)
    scenario = engine.load_scenario({
        "seed": 1, "workload": {"num_requests": n, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                                "classes": [CLASS]},
        "server": {"step_model": "fixed", "step_time_ms": STEP_MS, "max_batch_size": 8, **server}})
    one, output = np.ones(n, np.int64), np.array(outputs, np.int64)
    requests = RequestArrays(np.array(arrivals), one, output, 0 * one, output)
    skipped, stepped = (execute(prepare(scenario, requests=requests, event_skipping=skip)) for skip in (True, False))
    np.testing.assert_array_equal(skipped.ints, stepped.ints)
    np.testing.assert_array_equal(skipped.floats, stepped.floats)
    return skipped.floats[:, [F_FIRST_SCHEDULED, F_FIRST_TOKEN]]


def test_sglang_reads_new_requests_once_its_counter_reaches_the_receive_interval():
    """A at 0 (read at once: the server was idle) prefills in [0, 1/8]; that prefill weighs 1000, so the decision at
    1/8 reads; then each decode adds 1. B arrives at 0.3: with an interval of 4 the decisions at 0.25, 0.375 and 0.5
    count 1, 2, 3 and the one at 0.625 reads it (prefill-first: its prompt runs alone, first token at 0.75); with
    an interval of 1 the decision at 0.375 does."""
    sglang = {"engine": "sglang", "batching": "prefill-first", "admission": "new-token-ratio"}
    every = run({**sglang, "scheduler_recv_interval": 1}, [0.0, 0.3], [40, 5])
    assert every[1].tolist() == [0.375, 0.5]
    fourth = run({**sglang, "scheduler_recv_interval": 4}, [0.0, 0.3], [40, 5])
    assert fourth[1].tolist() == [0.625, 0.75]
    assert fourth[0].tolist() == every[0].tolist() == [0.0, 0.125]


def test_a_prefill_makes_sglang_read_at_the_next_decision_and_an_idle_server_reads_at_once():
    """Interval 1000: decodes alone would take 1000 iterations to read, but C, arriving while B's prefill runs
    ([0.625, 0.75] as above is [0.125 ...] here: B arrives at 0.1 and is read at 0.125 after A's prefill), is read
    at the decision after it; and a request reaching an idle server is read at once."""
    sglang = {"engine": "sglang", "scheduler_recv_interval": 1000}
    times = run(sglang, [0.0, 0.1, 0.2, 30.0], [4, 40, 5, 3])
    assert times[:, 0].tolist() == [0.0, 0.125, 0.25, 30.0]


TRT_ADP = {"engine": "tensorrt-llm", "model": "Qwen3-30B-A3B", "tensor_parallel": 2, "expert_parallel": True,
           "attention_data_parallel": True, "admission": "reserve-full", "batching": "mixed"}


def test_tensorrt_llm_holds_a_lone_prompt_until_the_balance_time_out():
    """Two ranks, time-out 5, batching wait 3. A and B at 0 give each rank a context and nobody generates: they go
    at once. Every later iteration with no context on every rank counts towards the time-out (1 at 1/8, ... 5 at
    0.625, which releases and restarts); C alone at 0.3 waits at 0.375 and 0.5 and goes at 0.625. D and E at 0.8
    give every rank a context while every rank generates: they gather 3 iterations (0.875, 1.0, 1.125) and go at
    1.25. Without balancing each goes at the first decision after it arrives."""
    balance = {**TRT_ADP, "attention_dp_balance": True, "attention_dp_batching_wait_iters": 3,
               "attention_dp_timeout_iters": 5}
    arrivals, outputs = [0.0, 0.0, 0.3, 0.8, 0.8], [40, 40, 30, 5, 5]
    held = run(balance, arrivals, outputs)
    assert held[:, 0].tolist() == [0.0, 0.0, 0.625, 1.25, 1.25]
    free = run(TRT_ADP, arrivals, outputs)
    assert free[:, 0].tolist() == [0.0, 0.0, 0.375, 0.875, 0.875]


def test_tensorrt_llm_lets_prompts_go_when_some_rank_generates_nothing():
    """One request runs, two ranks: not every rank generates, so a lone prompt is never held."""
    balance = {**TRT_ADP, "attention_dp_balance": True, "attention_dp_timeout_iters": 50}
    assert run(balance, [0.0, 0.3], [40, 5])[:, 0].tolist() == [0.0, 0.375]


ATOM_DP = {**TRT_ADP, "engine": "atom", "admission": "optimistic", "batching": "prefill-first"}


@pytest.mark.parametrize("fill, started", [(0.9, [0.0, 0.0, 1.0, 1.75, 1.75]), (0.1, [0.0, 0.0, 1.0, 1.375, 1.375])])
def test_atom_holds_prompts_until_every_rank_has_one_and_they_fill_the_budget_or_stop_growing(fill, started):
    """Two ranks of 8 tokens each, at most 5 turns held, 3 stall turns. A and B reach an idle server: nothing
    decodes, they go. C alone at 0.3: one rank lacks a prompt, so it is held at 0.375 ... 0.875 (5 turns) and goes
    at 1.0. D and E at 1.3 give every rank one, 2 tokens of 16: below a 0.9 fill they wait while their tokens do
    not grow (stall 0, 1, 2 at 1.375, 1.5, 1.625) and go at the third stall, 1.75; a 0.1 fill (1.6 tokens) lets
    them go at once. Without data-parallel attention ATOM installs no delayer."""
    atom = {**ATOM_DP, "max_batched_tokens": 8, "prefill_delayer_max_ticks": 5, "prefill_delayer_stall_ticks": 3,
            "prefill_delayer_target_fill": fill}
    arrivals, outputs = [0.0, 0.0, 0.3, 1.3, 1.3], [40, 40, 30, 5, 5]
    assert run(atom, arrivals, outputs)[:, 0].tolist() == started
    free = {**ATOM_DP, "attention_data_parallel": False, "expert_parallel": False}
    assert run(free, arrivals, outputs)[:, 0].tolist() == [0.0, 0.0, 0.375, 1.375, 1.375]


def test_atom_lets_prompts_go_when_the_kv_cache_is_nearly_full():
    """A KV watermark of 0: the cache is always at it, so the delayer never holds."""
    atom = {**ATOM_DP, "prefill_delayer_kv_high": 0.0, "kv_capacity_tokens": 4096}
    assert run(atom, [0.0, 0.0, 0.3], [40, 40, 30])[:, 0].tolist() == [0.0, 0.0, 0.375]


@pytest.mark.parametrize("key, value, engine_name", [
    ("scheduler_recv_interval", 8, "vllm"), ("scheduler_recv_interval", 8, "tensorrt-llm"),
    ("attention_dp_balance", True, "sglang"), ("attention_dp_timeout_iters", 7, "vllm"),
    ("prefill_delayer_stall_ticks", 4, "sglang")])
def test_a_knob_of_another_engine_is_a_one_line_error(key, value, engine_name):
    with pytest.raises(ScenarioError) as error:
        engine.load_scenario({"workload": WORKLOAD, "server": {"engine": engine_name, key: value}})
    message = str(error.value)
    assert "\n" not in message and f"server.{key} = {value}" in message and "server.engine" in message


def test_each_release_refuses_what_it_refuses():
    with pytest.raises(ScenarioError, match="refuses the two together"):
        engine.load_scenario({"workload": WORKLOAD,
                              "server": {**TRT_ADP, "engine": "sglang", "admission": "new-token-ratio",
                                         "scheduler_recv_interval": 4}})
    with pytest.raises(ScenarioError, match="attention_dp_balance balances the ranks"):
        engine.load_scenario({"workload": WORKLOAD,
                              "server": {"engine": "tensorrt-llm", "attention_dp_balance": True}})


def test_every_engine_has_a_scheduler_module_and_every_own_knob_the_engines_default():
    """The key's default is the engine's own default as the knobs table gives it (read from the engine's source);
    every knob names a server key of an engine the engines table has."""
    assert set(MODULES) == set(load_table("engines").index)
    server = engine.load_scenario({"workload": WORKLOAD}).server
    for knob in all_knobs():
        assert knob.engine in MODULES and hasattr(server, knob.key), knob
        if knob.own:
            assert str(getattr(server, knob.key)).lower() == knob.default, knob
    assert set(OWN_KEYS) == {"scheduler_recv_interval", "attention_dp_balance", "attention_dp_batching_wait_iters",
                             "attention_dp_timeout_iters", "prefill_delayer", "prefill_delayer_target_fill",
                             "prefill_delayer_max_ticks", "prefill_delayer_stall_ticks", "prefill_delayer_kv_high"}
    assert loop_gates(server) == {"recv_interval": 1, "adp_balance": (0, 0, 0), "prefill_delay": (0, 0.0, 0, 0, 0.0)}


def test_the_recipe_runs_the_simulated_knobs():
    """The SGLang command carries the receive interval and mixed chunks when the scenario mixes; TensorRT-LLM's
    options carry the capacity policy and the attention-DP balance."""
    plan = {"gpu": "H100-80G", "tensor_parallel": 2, "expert_parallel": True, "replicas": 1, "cards": 2,
            "quant": "fp16", "decoding": "plain", "policy": {"name": "fifo"}, "router": "least-tokens"}
    scenario = engine.load_scenario({"workload": WORKLOAD, "server": {
        "step_model": "roofline", "gpu": "H100-80G", "model": "Qwen3-30B-A3B", "tensor_parallel": 2,
        "expert_parallel": True, "attention_data_parallel": True, "engine": "tensorrt-llm", "admission": "reserve-full",
        "attention_dp_balance": True, "attention_dp_timeout_iters": 60, "attention_dp_batching_wait_iters": 0}})
    by_engine = {c.engine: c for c in commands(plan, scenario)}
    options = by_engine["tensorrt-llm"].extra_yaml
    assert 'capacity_scheduler_policy: "GUARANTEED_NO_EVICT"' in options
    assert "enable_balance: true" in options and "timeout_iters: 60" in options and "batching_wait_iters: 0" in options
    sglang_argv = by_engine["sglang"].argv()
    assert sglang_argv[sglang_argv.index("--scheduler-recv-interval") + 1] == "1"
    assert "--enable-mixed-chunk" in sglang_argv  # the scenario mixes (the key's default)
