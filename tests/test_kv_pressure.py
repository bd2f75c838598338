"""Tiny hand-computed schedules under KV-cache pressure: what a preempted request keeps (keep, swap,
recompute), when the KV of a paused request is dropped, and the dynamic policy's preemption margin.

Fixed step model (10 ms per iteration); the cache holds 8 or 16 tokens in blocks of 4. Each test states
the schedule it expects in its docstring; times are in seconds.
"""

import pytest

import engine
from conftest import trace_scenario
from test_schedule import assert_events

# Two classes for the priority policy: hi (level 0) evicts lo (level 1).
LEVELS = [{"name": "hi", "share": 0.5, "priority": 0}, {"name": "lo", "share": 0.5, "priority": 1}]
KEEP = {"name": "priority", "preemptive": True, "preempt_mode": "keep", "preempt_overhead_ms": 1.0}
# Two KV blocks of 4 tokens, room for four sequences: memory, not slots, is what runs out.
TWO_BLOCKS = {"max_batch_size": 4, "kv_capacity_tokens": 8, "block_size_tokens": 4}
# lo r0 (4-token prompt, 3 tokens) is decoding when hi r1 (4-token prompt) arrives.
EVICTION_ROWS = [(0.0, 4, 3, "lo"), (0.005, 4, 1, "hi")]
# 131072 B of KV per token (Llama-3-8B, fp16) over 0.131072 GB/s: 1 ms per swapped token.
ONE_MS_PER_TOKEN_GB_S = 0.131072


def run(tmp_path, rows, server, policy, classes=None):
    return engine.simulate(trace_scenario(tmp_path, rows, server, policy=policy, classes=classes))


def column(result, name):
    return list(result.timeseries[name])


def test_keep_eviction_gives_back_the_new_block_and_resumes_without_recompute(tmp_path):
    """Keep mode (1 ms pause/resume). r0 is prefilled 0-0.01 (1 block). At 0.01 its decode gets the second
    block, filling the cache; r1 finds no free block and evicts r0, which gives back the block of the decode
    it no longer runs and waits paused with 1 block (its 4 prompt tokens). r1 takes the freed block,
    prefills 0.01-0.02 and ends. At 0.02 r0 resumes with its KV (1 ms overhead): tokens at 0.031 and 0.041,
    nothing recomputed. The cache is full from 0.01 on."""
    result = run(tmp_path, EVICTION_ROWS, TWO_BLOCKS, KEEP, LEVELS)
    assert_events(result, {0: (0.0, 0.01, 0.041), 1: (0.01, 0.02, 0.02)})
    assert list(result.requests["preemptions"]) == [1, 0]
    assert list(result.requests["state"]) == ["completed", "completed"]
    assert column(result, "kv_used_tokens") == [4, 8, 8, 8]
    assert column(result, "prefill_tokens") == [4, 4, 0, 0]
    assert column(result, "decode_tokens") == [0, 0, 1, 1]
    assert column(result, "step_s") == pytest.approx([0.01, 0.01, 0.011, 0.01], abs=1e-12)
    assert result.summary["system"]["preemption_waste_s"] == pytest.approx(0.001, abs=1e-12)  # overhead only


def test_paused_kv_is_dropped_before_a_running_request_is_preempted(tmp_path):
    """As above, but r1 generates 3 tokens. r0 waits paused with 1 block (r1 is more urgent). At 0.02 r1
    (4 KV tokens, 1 block) needs a second block for its next token and the cache is full (r0 1 + r1 1 of
    2): r0's paused KV is dropped and r1 keeps running: tokens at 0.02, 0.03, 0.04. r0, now without KV,
    re-prefills prompt + 1 generated = 5 tokens (4 computed before) 0.04-0.05 and decodes 0.05-0.06; it
    never resumes paused, so no overhead is paid."""
    result = run(tmp_path, [(0.0, 4, 3, "lo"), (0.005, 4, 3, "hi")], TWO_BLOCKS, KEEP, LEVELS)
    assert_events(result, {0: (0.0, 0.01, 0.06), 1: (0.01, 0.02, 0.04)})
    assert list(result.requests["preemptions"]) == [1, 0]
    assert result.summary["system"]["preemptions"] == 1  # dropping a paused KV is no new preemption
    assert column(result, "kv_used_tokens") == [4, 8, 8, 8, 8, 8]
    assert column(result, "prefill_tokens") == [4, 4, 0, 0, 5, 0]
    assert column(result, "decode_tokens") == [0, 0, 1, 1, 0, 1]
    assert result.summary["system"]["preemption_waste_s"] == pytest.approx(0.01 * 4 / 5, abs=1e-12)


def test_paused_kv_is_dropped_to_admit_a_more_urgent_request(tmp_path):
    """The first schedule plus hi r2 (8-token prompt, 1 token) arriving at 0.015. At 0.02 r1 has left; r0
    waits paused with 1 block and r2, first in line, needs both blocks: r0's paused KV is dropped to admit
    r2, which runs 0.02-0.03. r0 (no KV now, its 5 tokens need both blocks) waits, re-prefills 4 + 1 tokens
    0.03-0.04 and decodes its last token 0.04-0.05."""
    rows = EVICTION_ROWS + [(0.015, 8, 1, "hi")]
    result = run(tmp_path, rows, TWO_BLOCKS, KEEP, LEVELS)
    assert_events(result, {0: (0.0, 0.01, 0.05), 1: (0.01, 0.02, 0.02), 2: (0.02, 0.03, 0.03)})
    assert list(result.requests["preemptions"]) == [1, 0, 0]
    assert column(result, "kv_used_tokens") == [4, 8, 8, 8, 8]
    assert column(result, "prefill_tokens") == [4, 4, 8, 5, 0]
    assert column(result, "decode_tokens") == [0, 0, 0, 0, 1]
    assert result.summary["system"]["preemption_waste_s"] == pytest.approx(0.01 * 4 / 5, abs=1e-12)


def test_swap_eviction_moves_the_kv_out_and_back(tmp_path):
    """Swap mode, 1 ms per token. At 0.01 r1 evicts r0 as in the keep schedule, but r0's 4 KV tokens go to
    host memory (4 ms: the iteration ends at 0.024, r1's token) and free both its blocks. At 0.024 r0 comes
    back (4 ms) into 2 blocks: tokens at 0.038 and 0.048; 8 ms of transfers wasted, nothing recomputed."""
    server = {**TWO_BLOCKS, "host_link_gb_s": ONE_MS_PER_TOKEN_GB_S}
    policy = {"name": "priority", "preemptive": True, "preempt_mode": "swap"}
    result = run(tmp_path, EVICTION_ROWS, server, policy, LEVELS)
    assert_events(result, {0: (0.0, 0.01, 0.048), 1: (0.01, 0.024, 0.024)})
    assert list(result.requests["preemptions"]) == [1, 0]
    assert column(result, "kv_used_tokens") == [4, 4, 8, 8]
    assert column(result, "step_s") == pytest.approx([0.01, 0.014, 0.014, 0.01], abs=1e-12)
    assert result.summary["system"]["preemption_waste_s"] == pytest.approx(0.008, abs=1e-12)


def test_memory_shortage_in_swap_mode_swaps_out_the_latest_arrival(tmp_path):
    """16 KV tokens in blocks of 4, 1 ms per swapped token. Two 6-token prompts take 2 blocks each; at 0.03
    r0 needs a third block, so r1 (the later one: 8 KV tokens, 3 tokens generated) is swapped out, 8 ms:
    r0's last token ends the 0.03 iteration at 0.048. r1 is swapped back (8 ms) into 3 blocks and decodes
    its last token 0.048-0.066: nothing recomputed, 16 ms wasted."""
    server = {"max_batch_size": 4, "kv_capacity_tokens": 16, "block_size_tokens": 4,
              "host_link_gb_s": ONE_MS_PER_TOKEN_GB_S}
    result = run(tmp_path, [(0.0, 6, 4), (0.0, 6, 4)], server, {"name": "priority", "preempt_mode": "swap"})
    assert_events(result, {0: (0.0, 0.01, 0.048), 1: (0.0, 0.01, 0.066)})
    assert list(result.requests["preemptions"]) == [0, 1]
    assert column(result, "kv_used_tokens") == [16, 16, 16, 12, 12]
    assert column(result, "step_s") == pytest.approx([0.01, 0.01, 0.01, 0.018, 0.018], abs=1e-12)
    assert column(result, "prefill_tokens") == [12, 0, 0, 0, 0]
    assert result.summary["system"]["preemption_waste_s"] == pytest.approx(0.016, abs=1e-12)


TIERS = [{"name": "bulk", "share": 0.5, "tier_weight": 1.0}, {"name": "gold", "share": 0.5, "tier_weight": 2.0}]
EVICTS = {0: (0.0, 0.01, 0.04), 1: (0.01, 0.02, 0.02)}
WAITS = {0: (0.0, 0.01, 0.03), 1: (0.03, 0.04, 0.04)}


@pytest.mark.parametrize("margin, expected, preemptions", [
    (0.5, EVICTS, [1, 0]),
    (1.0, WAITS, [0, 0]),   # a cost gap equal to the margin does not preempt
    (1.5, WAITS, [0, 0]),
], ids=["gap-above-margin", "gap-equal-to-margin", "gap-below-margin"])
def test_dynamic_preempts_under_kv_pressure_only_beyond_the_margin(tmp_path, margin, expected, preemptions):
    """Cost = gamma * tier only (alpha = beta = 0, gamma = 1): bulk r0 costs 1, gold r1 costs 2, a gap of 1.
    Recompute mode. At 0.01 r0's decode takes the second block and gold r1 (arrived 0.005) finds none free.
    Margin 0.5: r1 evicts r0 (KV dropped), runs 0.01-0.02; r0 re-prefills 4 + 1 tokens 0.02-0.03 and ends
    at 0.04. Margin 1.0 or 1.5: r1 waits until r0 ends at 0.03 and runs 0.03-0.04."""
    policy = {"name": "dynamic", "alpha": 0.0, "beta": 0.0, "gamma": 1.0, "margin": margin}
    result = run(tmp_path, [(0.0, 4, 3, "bulk"), (0.005, 4, 1, "gold")], TWO_BLOCKS, policy, TIERS)
    assert_events(result, expected)
    assert list(result.requests["preemptions"]) == preemptions
    assert list(result.requests["generated_tokens"]) == [3, 1]
    assert result.summary["system"]["preemptions"] == sum(preemptions)
