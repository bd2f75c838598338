"""Hand-computed schedules of the batching modes (``server.batching``) and admission modes
(``server.admission``), on the fixed step model (10 ms per iteration); times in seconds."""

import engine
from conftest import trace_scenario
from test_schedule import assert_events

THREE = [(0.0, 4, 3), (0.005, 4, 2), (0.006, 5, 2)]  # (arrival_s, prompt_tokens, output_tokens)
MEMORY_TIGHT = {"max_batch_size": 4, "kv_capacity_tokens": 16, "block_size_tokens": 4}


def test_mixed_batching_chunks_prompts_beside_running_decodes(tmp_path):
    """Budget 8. At 0.01 r0 decodes (1 token) beside r1's whole prompt (4) and 3 of r2's 5 tokens; r2's last
    two prompt tokens run at 0.02 beside the decodes of r0 and r1."""
    result = engine.simulate(trace_scenario(tmp_path, THREE, {"max_batch_size": 4, "max_batched_tokens": 8}))
    assert_events(result, {0: (0.0, 0.01, 0.03), 1: (0.01, 0.02, 0.03), 2: (0.01, 0.03, 0.04)})
    assert list(result.timeseries["prefill_tokens"]) == [4, 7, 2, 0]
    assert list(result.timeseries["decode_tokens"]) == [0, 1, 2, 1]


def test_prefill_first_runs_whole_prompts_alone_and_pauses_decodes(tmp_path):
    """Budget 8. At 0.01 r1's prompt (4) is admitted whole and r2's (5) does not fit the 4 tokens left, so
    admission stops there; r0 does not decode. At 0.02 r2's prompt runs alone; only at 0.03, with nobody
    waiting, do r0, r1 and r2 decode together. r0's three tokens take 0.05 instead of 0.03."""
    result = engine.simulate(trace_scenario(tmp_path, THREE, {"max_batch_size": 4, "max_batched_tokens": 8,
                                                             "batching": "prefill-first"}))
    assert_events(result, {0: (0.0, 0.01, 0.05), 1: (0.01, 0.02, 0.04), 2: (0.02, 0.03, 0.04)})
    assert list(result.timeseries["prefill_tokens"]) == [4, 4, 5, 0, 0]
    assert list(result.timeseries["decode_tokens"]) == [0, 0, 0, 3, 1]


def test_prefill_first_runs_a_prompt_longer_than_the_budget_alone(tmp_path):
    """Budget 5: r1's 10-token prompt is not chunked; it runs alone at 0.01, then r0 decodes."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 2, 3), (0.001, 10, 1)],
                                            {"max_batch_size": 4, "max_batched_tokens": 5,
                                             "batching": "prefill-first"}))
    assert_events(result, {0: (0.0, 0.01, 0.04), 1: (0.01, 0.02, 0.02)})
    assert list(result.timeseries["prefill_tokens"]) == [2, 10, 0, 0]


def test_reserve_full_admits_only_what_fits_to_the_end_and_never_preempts(tmp_path):
    """16 KV tokens in blocks of 4; each request needs 6 + 4 - 1 = 9 tokens at its longest, 3 blocks. r0
    takes 3 blocks at 0; r1 (3 more) waits until r0 finishes at 0.04, then runs 0.04-0.08. Optimistic
    admission runs both at once and preempts r1 at 0.03 (test_schedule)."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 6, 4), (0.0, 6, 4)],
                                            {**MEMORY_TIGHT, "admission": "reserve-full"}))
    assert_events(result, {0: (0.0, 0.01, 0.04), 1: (0.04, 0.05, 0.08)})
    assert result.summary["system"]["preemptions"] == 0
    assert list(result.timeseries["kv_used_tokens"]) == [12] * 8


def test_reserve_full_holds_the_blocks_from_admission(tmp_path):
    """One request, prompt 2 and output 8 in blocks of 4: it holds ceil(9 / 4) = 3 blocks from its first
    iteration, where optimistic admission grows from 1 block to 3."""
    rows = [(0.0, 2, 8)]
    full = engine.simulate(trace_scenario(tmp_path, rows, {**MEMORY_TIGHT, "admission": "reserve-full"}))
    grow = engine.simulate(trace_scenario(tmp_path, rows, MEMORY_TIGHT))
    assert list(full.timeseries["kv_used_tokens"]) == [12] * 8
    assert list(grow.timeseries["kv_used_tokens"]) == [4, 4, 4, 8, 8, 8, 8, 12]
