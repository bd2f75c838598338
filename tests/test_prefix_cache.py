"""Prefix caching: hand-computed schedules on the fixed step model, eviction when memory is short, the cache's
bookkeeping after every run, the Mooncake trace's hit rate against an independent replay of its block ids, and
the router and policy that use the cache."""

import json

import numpy as np
import pytest

import engine
from conftest import MOONCAKE_CONVERSATION, trace_scenario
from engine.scenario.errors import ScenarioError
from engine.sim import kernel
from engine.sim.simulate import execute, prepare

EXACT = 1e-12
CHAT = {"name": "chat", "share": 1.0, "shared_prefix_tokens": 32}
OTHER = {"name": "other", "share": 1.0}


def first_tokens(result):
    return result.requests["first_token_s"].tolist()


def test_a_cached_prefix_skips_its_prefill(tmp_path):
    """Budget 8 tokens, 10 ms steps, 32 shared tokens (2 units of 16): r0's 40-token prompt takes 5 iterations
    (first token at 0.05, done at 0.06); r1 arrives at 0.07 and finds both units cached, so 8 tokens are left:
    first token at 0.08 (at 0.12 without caching). Hit rate 32 of 80 prompt tokens."""
    rows = [(0.0, 40, 2), (0.07, 40, 2)]
    server = {"max_batch_size": 4, "max_batched_tokens": 8, "block_size_tokens": 16}
    plain = engine.simulate(trace_scenario(tmp_path, rows, server, classes=[CHAT]))
    cached = engine.simulate(trace_scenario(tmp_path, rows, {**server, "prefix_caching": True}, classes=[CHAT]))
    assert first_tokens(plain) == pytest.approx([0.05, 0.12], abs=EXACT)
    assert first_tokens(cached) == pytest.approx([0.05, 0.08], abs=EXACT)
    assert cached.summary["system"]["prefix_hit_frac"] == pytest.approx(32 / 80)
    assert cached.summary["system"]["prefill_saved_tokens"] == 32
    assert plain.summary["system"]["prefix_hit_frac"] is None


def test_the_last_prompt_token_is_always_computed(tmp_path):
    """A prompt of exactly the shared 32 tokens: one unit may be used (31 tokens at most), so 16 are computed."""
    rows = [(0.0, 32, 2), (0.07, 32, 2)]
    server = {"max_batch_size": 4, "max_batched_tokens": 8, "block_size_tokens": 16, "prefix_caching": True}
    result = engine.simulate(trace_scenario(tmp_path, rows, server, classes=[CHAT]))
    assert first_tokens(result) == pytest.approx([0.04, 0.07 + 0.02], abs=EXACT)
    assert result.summary["system"]["prefill_saved_tokens"] == 16


def test_requests_in_flight_together_do_not_share_what_is_not_computed_yet(tmp_path):
    """r0 and r1 arrive together and are prefilled in the same iteration: nothing is cached yet, both compute the
    prefix; r0's units are cached and r1's copies freed when their prefills end."""
    rows = [(0.0, 40, 2), (0.0, 40, 2)]
    server = {"max_batch_size": 4, "max_batched_tokens": 80, "block_size_tokens": 16, "prefix_caching": True}
    result = engine.simulate(trace_scenario(tmp_path, rows, server, classes=[CHAT]))
    assert result.summary["system"]["prefill_saved_tokens"] == 0
    assert_cache_consistent(prepare(trace_scenario(tmp_path, rows, server, classes=[CHAT])))


def test_cached_units_nobody_holds_are_evicted_before_anything_is_preempted(tmp_path):
    """A cache of 4 blocks: r0 (chat, 40 + 2 tokens) leaves 2 cached units; r1 (another class, 50 + 2 tokens)
    needs all 4 blocks, so both units are evicted (no preemption) and r2 (chat) finds nothing cached."""
    rows = [(0.0, 40, 2, "chat"), (0.1, 50, 2, "other"), (0.2, 40, 2, "chat")]
    server = {"max_batch_size": 4, "max_batched_tokens": 64, "block_size_tokens": 16, "kv_capacity_tokens": 64,
              "prefix_caching": True}
    result = engine.simulate(trace_scenario(tmp_path, rows, server, classes=[CHAT, {**OTHER, "share": 1.0}]))
    assert result.summary["system"]["preemptions"] == 0
    assert result.summary["system"]["prefill_saved_tokens"] == 0
    assert (result.requests["state"] == "completed").all()
    roomy = engine.simulate(trace_scenario(tmp_path, rows, {**server, "kv_capacity_tokens": 128},
                                           classes=[CHAT, {**OTHER, "share": 1.0}]))
    assert roomy.summary["system"]["prefill_saved_tokens"] == 32


def assert_cache_consistent(prepared):
    """After a drained run nobody holds a unit, every block in use is a cached unit's, and the list of
    evictable units holds exactly the cached ones, each once."""
    run = execute(prepared)
    assert run.stop_reason == "drained"
    unit_blocks = prepared.srv[kernel.SV_PREFIX_UNIT_TOKENS] // prepared.srv[kernel.SV_BLOCK_SIZE_TOKENS]
    for k in range(run.prefix_caches.shape[0]):
        pc = run.prefix_caches[k]
        units = pc.shape[1] - 1
        assert (pc[kernel.PC_REF, :units] == 0).all()
        cached = set(np.flatnonzero(pc[kernel.PC_CACHED, :units] == 1))
        assert run.counters[k, kernel.C_USED_BLOCKS] == len(cached) * unit_blocks
        listed, u = [], pc[kernel.PC_NEXT, units]
        while u != units:
            listed.append(u)
            u = pc[kernel.PC_NEXT, u]
        assert len(listed) == len(set(listed)) and set(listed) == cached


@pytest.mark.parametrize("policy", [{"name": "fifo"}, {"name": "lpm"},
                                    {"name": "priority", "preemptive": True, "preempt_mode": "swap"},
                                    {"name": "priority", "preemptive": True, "preempt_mode": "recompute"},
                                    {"name": "priority", "preemptive": True, "preempt_mode": "keep"}])
@pytest.mark.parametrize("router", ["round-robin", "prefix-affinity"])
def test_the_cache_keeps_its_books_under_memory_pressure_and_preemption(policy, router):
    classes = [{"name": "a", "share": 0.5, "priority": 1, "shared_prefix_tokens": 96,
                "prompt_tokens": {"dist": "uniform", "low": 20, "high": 200},
                "output_tokens": {"dist": "geometric", "mean": 20, "max": 80}},
               {"name": "b", "share": 0.5, "priority": 0, "shared_prefix_tokens": 48,
                "prompt_tokens": {"dist": "uniform", "low": 10, "high": 120},
                "output_tokens": {"dist": "geometric", "mean": 10, "max": 80}}]
    scenario = engine.load_scenario({
        "seed": 3, "workload": {"num_requests": 400, "arrival": {"process": "poisson", "rate_per_s": 150.0},
                                "classes": classes},
        "server": {"step_model": "fixed", "step_time_ms": 5.0, "max_batch_size": 8, "max_batched_tokens": 256,
                   "block_size_tokens": 16, "kv_capacity_tokens": 800, "prefix_caching": True},
        "policy": policy, "fleet": {"replicas": 2, "router": router}})
    result = engine.simulate(scenario)
    assert (result.requests["state"] == "completed").all()
    assert result.summary["system"]["prefix_hit_frac"] > 0.1
    assert_cache_consistent(prepare(scenario))


def test_the_mooncake_hit_rate_is_the_traces_repeated_prefix_blocks():
    """Replaying the conversation trace's first 1,500 requests on one server with an unlimited cache, the prompt
    tokens served from the cache are the leading 512-token blocks seen before (at most all but the last prompt
    token), counted here from the file in arrival order; requests that arrive together do not yet share what the
    other is computing, so the simulation finds a little less."""
    path = MOONCAKE_CONVERSATION
    scenario = engine.load_scenario({
        "workload": {"classes": [{"name": "chat", "share": 1.0}], "num_requests": 1500,
                     "trace": {"path": str(path), "format": "mooncake"}},
        "server": {"step_model": "fixed", "step_time_ms": 1.0, "max_batch_size": 64, "max_batched_tokens": 65536,
                   "prefix_caching": True}})
    found = engine.simulate(scenario).summary["system"]["prefix_hit_frac"]
    rows = sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda r: r["timestamp"])
    seen, hit, asked = set(), 0, 0
    for row in rows:
        ids, prompt = row["hash_ids"], row["input_length"]
        usable, leading = min(len(ids), (prompt - 1) // 512), 0
        while leading < usable and ids[leading] in seen:
            leading += 1
        hit, asked = hit + leading * 512, asked + prompt
        seen.update(ids[:prompt // 512])
    expected = hit / asked
    assert 0.25 < expected < 0.3
    assert expected * 0.99 <= found <= expected


def test_prefix_affinity_sends_a_shared_prefix_where_it_is_cached():
    """Four replicas on the Mooncake trace: routing by cached prefix finds far more of it than round robin,
    which spreads each conversation over all four caches."""
    def hit_rate(router):
        return engine.simulate(engine.load_scenario({
            "workload": {"classes": [{"name": "chat", "share": 1.0}], "num_requests": 1500,
                         "trace": {"path": str(MOONCAKE_CONVERSATION), "format": "mooncake"}},
            "server": {"step_model": "fixed", "step_time_ms": 1.0, "max_batch_size": 64,
                       "max_batched_tokens": 65536, "prefix_caching": True},
            "fleet": {"replicas": 4, "router": router}})).summary["system"]["prefix_hit_frac"]
    assert hit_rate("prefix-affinity") > 1.5 * hit_rate("round-robin")


def test_prefix_caching_needs_paged_memory_and_blocks_that_divide_the_trace_blocks():
    with pytest.raises(ScenarioError, match="server.prefix_caching needs kv_allocation = 'paged'"):
        engine.load_scenario({"workload": {"classes": [{**CHAT, "prompt_tokens": {"dist": "constant", "value": 9},
                                                        "output_tokens": {"dist": "constant", "value": 9}}],
                                           "num_requests": 5,
                                           "arrival": {"process": "poisson", "rate_per_s": 1.0}},
                              "server": {"prefix_caching": True, "kv_allocation": "static", "max_seq_len": 100}})
    scenario = engine.load_scenario({
        "workload": {"classes": [{"name": "chat", "share": 1.0}], "num_requests": 10,
                     "trace": {"path": str(MOONCAKE_CONVERSATION), "format": "mooncake"}},
        "server": {"prefix_caching": True, "block_size_tokens": 24}})
    with pytest.raises(ScenarioError, match="block_size_tokens = 24 does not divide the prefix blocks of 512"):
        engine.simulate(scenario)
