"""Hand-computed schedules of the batching modes (``server.batching``) and admission modes
(``server.admission``), on the fixed step model (10 ms per iteration); times in seconds."""

import math

import numpy as np

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


def test_new_token_ratio_holds_back_room_for_the_running_outputs(tmp_path):
    """SGLang's admission, 16 KV tokens in blocks of 4, ratio 0.7. At 0 r0 (prompt 6, output 4) needs 2 blocks and
    holds back ceil(0.7 x 4 / 4) = 1: 3 of 4 free, admitted. r1 needs 2 and holds back ceil(0.7 x (4 + 4) / 4) = 2:
    4 > the 2 left, so it waits, and at 0.01, 0.02 and 0.03 too (r0's output left 3, 2, 1: still 2 blocks held
    back; at 0.03 r0 takes its third block). r0 leaves at 0.04; r1 then holds back ceil(0.699 x 4 / 4) = 1 block
    and runs 0.04-0.08: no preemption, where optimistic admission runs both and preempts r1 at 0.03."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 6, 4), (0.0, 6, 4)],
                                            {**MEMORY_TIGHT, "admission": "new-token-ratio"}))
    assert_events(result, {0: (0.0, 0.01, 0.04), 1: (0.04, 0.05, 0.08)})
    assert result.summary["system"]["preemptions"] == 0
    optimistic = engine.simulate(trace_scenario(tmp_path, [(0.0, 6, 4), (0.0, 6, 4)], MEMORY_TIGHT))
    assert optimistic.summary["system"]["preemptions"] == 1


def test_new_token_ratio_admits_beside_a_long_output_that_reserve_full_waits_for(tmp_path):
    """32 KV tokens in blocks of 4 (8 blocks). r0: prompt 4, output 16; r1: prompt 4, output 12. Reserve-full takes
    ceil(19 / 4) = 5 blocks for r0, and r1's ceil(15 / 4) = 4 do not fit beside them: r1 waits for r0. The
    new-token ratio admits r1 at once: 1 block now and ceil(0.7 x (12 + 16) / 4) = 5 held back, 6 of the 7 left.
    The bet pays here: r1 ends (4 blocks) while r0 holds 4, so the 9 blocks both would need at their longest are
    never needed at once, and nothing is retracted."""
    tight = {**MEMORY_TIGHT, "kv_capacity_tokens": 32}
    rows = [(0.0, 4, 16), (0.0, 4, 12)]
    full = engine.simulate(trace_scenario(tmp_path, rows, {**tight, "admission": "reserve-full"}))
    ratio = engine.simulate(trace_scenario(tmp_path, rows, {**tight, "admission": "new-token-ratio"}))
    assert full.requests["first_scheduled_s"].iloc[1] > 0.1  # after r0's 16 tokens
    assert ratio.requests["first_scheduled_s"].iloc[1] == 0.0
    assert (full.summary["system"]["preemptions"], ratio.summary["system"]["preemptions"]) == (0, 0)
    assert ratio.requests["finish_s"].max() < full.requests["finish_s"].max()  # both done sooner


def test_the_new_token_ratio_falls_with_each_decode_and_rises_after_a_retraction():
    """SGLang's defaults: 0.7 falls by (0.7 - 0.7 x 0.14) / 600 per decoding iteration, to 0.098 at most; after a
    retraction, (tokens decoded + 20 per running request) / their max_new_tokens; a request's part of the estimate
    is its output left, at most 4,096 tokens."""
    from engine.sim.kernel.kv import held_back_blocks_nb, update_new_token_ratio_nb
    from engine.sim.kernel.state import (C_NEW_TOKEN_RATIO_PPM, C_RUNNING, N_COUNTERS, NEW_TOKEN_RATIO, SV_ADMISSION,
                                         SV_BLOCK_SIZE_TOKENS, SV_KV_LINK_S_PER_TOKEN)
    from engine.sim.layout import I_GENERATED, I_OUTPUT, N_INT_FIELDS
    srv = np.zeros(SV_KV_LINK_S_PER_TOKEN + 1)  # the server tuple's fields, as an array
    srv[SV_ADMISSION], srv[SV_BLOCK_SIZE_TOKENS] = NEW_TOKEN_RATIO, 16
    ints = np.zeros((3, N_INT_FIELDS), np.int64)
    ints[0, [I_OUTPUT, I_GENERATED]] = 8, 3
    ints[1, [I_OUTPUT, I_GENERATED]] = 100, 0
    ints[2, I_OUTPUT] = 5000
    cnt = np.zeros(N_COUNTERS, np.int64)
    cnt[C_RUNNING], cnt[C_NEW_TOKEN_RATIO_PPM] = 1, 700_000
    running = np.array([0, 1, 2])
    assert held_back_blocks_nb(srv, ints, running, cnt, 2) == math.ceil(0.7 * (5 + 4096) / 16)  # 180 blocks
    update_new_token_ratio_nb(srv, ints, running, cnt, False, 10)
    # a whole number of ppm per iteration (1,003), ten iterations at once as one by one
    assert cnt[C_NEW_TOKEN_RATIO_PPM] == 700_000 - 10 * int((700_000 - 98_000) / 600)
    update_new_token_ratio_nb(srv, ints, running, cnt, False, 100_000)
    assert cnt[C_NEW_TOKEN_RATIO_PPM] == 98_000
    cnt[C_RUNNING] = 2
    update_new_token_ratio_nb(srv, ints, running, cnt, True, 1)
    assert cnt[C_NEW_TOKEN_RATIO_PPM] == int(1e6 * (3 + 20 + 0 + 20) / (8 + 100))
