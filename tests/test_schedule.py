"""Tiny hand-computed schedules on the fixed step model (10 ms per iteration), asserted event by event.

Each test states the schedule it expects in its docstring; times are in seconds.
"""

import math

import numpy as np
import pytest

import engine
from conftest import trace_scenario

EXACT = 1e-12


def events(result, r):
    row = result.requests.loc[r]
    return row["first_scheduled_s"], row["first_token_s"], row["finish_s"]


def assert_events(result, expected):
    for r, want in expected.items():
        got = events(result, r)
        for g, w in zip(got, want):
            if w is None:
                assert math.isnan(g), (r, got, want)
            else:
                assert g == pytest.approx(w, abs=EXACT), (r, got, want)


def test_one_slot_serves_in_arrival_order(tmp_path):
    """max_batch_size 1: r0 (3 tokens) runs 0-0.03, r1 waits from 0.005 and runs 0.03-0.05."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 4, 3), (0.005, 4, 2)], {"max_batch_size": 1}))
    assert_events(result, {0: (0.0, 0.01, 0.03), 1: (0.03, 0.04, 0.05)})
    assert result.requests.loc[1, "queue_ms"] == pytest.approx(25.0)
    assert result.summary["system"]["iterations"] == 5


def test_new_request_joins_the_running_batch_at_the_next_iteration(tmp_path):
    """max_batch_size 2: r1 arrives at 0.005 and is prefilled at 0.01 beside r0's first decode."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 4, 3), (0.005, 4, 2)], {"max_batch_size": 2}))
    assert_events(result, {0: (0.0, 0.01, 0.03), 1: (0.01, 0.02, 0.03)})
    assert list(result.timeseries["batch_size"]) == [1, 2, 2]


def test_long_prompt_is_prefilled_in_chunks(tmp_path):
    """Budget 4 tokens: a 10-token prompt takes chunks 4, 4, 2; the first token comes after the third."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 10, 2)], {"max_batch_size": 4, "max_batched_tokens": 4}))
    assert_events(result, {0: (0.0, 0.03, 0.04)})
    assert list(result.timeseries["prefill_tokens"]) == [4, 4, 2, 0]
    assert list(result.timeseries["decode_tokens"]) == [0, 0, 0, 1]


def test_decodes_take_the_budget_first_and_prefill_gets_the_rest(tmp_path):
    """Budget 5: r0 decodes (1 token) while r1's 10-token prompt gets 4, 4, then 2 tokens."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 2, 3), (0.001, 10, 1)],
                                            {"max_batch_size": 4, "max_batched_tokens": 5}))
    assert_events(result, {0: (0.0, 0.01, 0.03), 1: (0.01, 0.04, 0.04)})
    assert list(result.timeseries["prefill_tokens"]) == [2, 4, 4, 2]
    assert list(result.timeseries["decode_tokens"]) == [0, 1, 1, 0]


def test_memory_shortage_preempts_the_latest_arrival_and_recomputes(tmp_path):
    """16 KV tokens in blocks of 4. Two 6-token prompts take 2 blocks each; at 0.03 r0 needs a third
    block, so r1 (the later one) is preempted with 3 tokens generated; r0 ends at 0.04 and r1
    re-prefills 6 + 3 = 9 tokens at 0.04, emitting its last token at 0.05."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 6, 4), (0.0, 6, 4)],
                                            {"max_batch_size": 4, "kv_capacity_tokens": 16, "block_size_tokens": 4}))
    assert_events(result, {0: (0.0, 0.01, 0.04), 1: (0.0, 0.01, 0.05)})
    assert list(result.requests["preemptions"]) == [0, 1]
    assert list(result.requests["generated_tokens"]) == [4, 4]
    assert result.summary["system"]["preemptions"] == 1
    assert list(result.timeseries["kv_used_tokens"]) == [16, 16, 16, 12, 12]
    assert list(result.timeseries["preemptions"]) == [0, 0, 0, 1, 0]
    assert result.summary["system"]["kv_peak_frac"] == 1.0


def test_waiting_request_times_out_at_its_deadline(tmp_path):
    """r1 waits behind r0 (0-0.05) and leaves at its 15 ms time-out; it counts as timed out."""
    classes = [{"name": "only", "share": 1.0, "timeout_ms": 15, "sla_e2e_ms": 1000}]
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 1, 5), (0.001, 1, 1)], {"max_batch_size": 1},
                                            classes=classes))
    assert_events(result, {0: (0.0, 0.01, 0.05), 1: (None, None, 0.016)})
    overall = result.summary["overall"]
    assert (overall["completed"], overall["timed_out"], overall["unfinished"]) == (1, 1, 0)
    assert overall["sla_attainment"] == 0.5


def test_a_class_without_an_sla_target_has_no_attainment(tmp_path):
    """r0 (class 'urgent', TTFT target 5 ms) gets its first token at 10 ms and misses; r1 ('bulk', no target)
    completes. 'bulk' has no attainment (not 100%), and the overall attainment judges only 'urgent': 0%."""
    classes = [{"name": "urgent", "share": 0.5, "sla_ttft_ms": 5}, {"name": "bulk", "share": 0.5}]
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 1, 1, "urgent"), (0.0, 1, 1, "bulk")], {},
                                            classes=classes))
    summary = result.summary
    assert summary["classes"]["bulk"]["completed"] == 1 and summary["classes"]["bulk"]["sla_attainment"] is None
    assert summary["classes"]["urgent"]["sla_attainment"] == 0.0 and summary["overall"]["sla_attainment"] == 0.0
    assert summary["overall"]["sla_met_per_s"] > 0  # the completed request of 'bulk' counts as served


def test_first_token_after_the_deadline_counts_as_time_out_and_frees_memory(tmp_path):
    """A 12-token prompt in chunks of 4 would emit at 0.03, after its 25 ms time-out: it leaves at 0.025."""
    classes = [{"name": "only", "share": 1.0, "timeout_ms": 25}]
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 12, 3)], {"max_batch_size": 4, "max_batched_tokens": 4,
                                                                     "kv_capacity_tokens": 64}, classes=classes))
    assert_events(result, {0: (0.0, None, 0.025)})
    assert result.requests.loc[0, "state"] == "timed_out"
    assert result.requests.loc[0, "generated_tokens"] == 0


def test_min_batch_waits_for_the_timeout_when_alone(tmp_path):
    """min_batch_size 2, wait 50 ms: a lone request starts at 0.05."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 1, 1)], {"min_batch_size": 2, "wait_timeout_ms": 50}))
    assert_events(result, {0: (0.05, 0.06, 0.06)})
    assert result.summary["system"]["batch_hold_s"] == pytest.approx(0.05)


def test_the_time_held_back_for_a_minimum_batch_is_counted_hold_by_hold(tmp_path):
    """Held from 0 to 0.02 (the second arrival releases both), then from 1.0 to its wait's end at 1.05: 0.07 s;
    without a minimum batch, nothing."""
    arrivals = [(0.0, 1, 1), (0.02, 1, 1), (1.0, 1, 1)]
    result = engine.simulate(trace_scenario(tmp_path, arrivals, {"min_batch_size": 2, "wait_timeout_ms": 50}))
    assert_events(result, {0: (0.02, 0.03, 0.03), 1: (0.02, 0.03, 0.03), 2: (1.05, 1.06, 1.06)})
    assert result.summary["system"]["batch_hold_s"] == pytest.approx(0.07)
    assert engine.simulate(trace_scenario(tmp_path, arrivals, {"wait_timeout_ms": 50})).summary["system"][
        "batch_hold_s"] == 0.0


def test_min_batch_starts_as_soon_as_enough_requests_are_ready(tmp_path):
    """min_batch_size 2: the second arrival at 0.02 releases both."""
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 1, 1), (0.02, 1, 1)],
                                            {"min_batch_size": 2, "wait_timeout_ms": 50}))
    assert_events(result, {0: (0.02, 0.03, 0.03), 1: (0.02, 0.03, 0.03)})


def test_idle_server_starts_at_the_next_arrival(tmp_path):
    result = engine.simulate(trace_scenario(tmp_path, [(0.0, 1, 1), (5.0, 1, 1)], {}))
    assert_events(result, {0: (0.0, 0.01, 0.01), 1: (5.0, 5.01, 5.01)})
    system = result.summary["system"]
    assert system["iterations"] == 2
    assert system["gpu_busy_frac_run"] == pytest.approx(0.02 / 5.01)
    assert system["window_s"] == [0.5, 5.0]  # 10% of the arrival span of warm-up, then until the last arrival
    assert system["gpu_busy_frac"] == 0.0, "both iterations lie outside the steady-state window"


def test_rates_and_utilisation_over_the_steady_state_window(tmp_path):
    """Eleven requests at 0, 1, ..., 10 s, each 2 prompt tokens and 10 output tokens, one at a time: each runs
    ten iterations of 10 ms (its first token at +0.01, its last at +0.1). The window is [1, 10): the requests
    arriving at 1, ..., 9 emit all 90 of their tokens inside it, the others none; the GPU is busy 0.9 s of its
    9 s; over the whole run, 110 tokens in 10.1 s."""
    rows = [(float(t), 2, 10) for t in range(11)]
    summary = engine.simulate(trace_scenario(tmp_path, rows, {"max_batch_size": 1})).summary
    system, overall = summary["system"], summary["overall"]
    assert system["window_s"] == [1.0, 10.0]
    assert overall["output_tokens_per_s"] == pytest.approx(90 / 9.0, abs=EXACT)
    assert overall["output_tokens_per_s_run"] == pytest.approx(110 / 10.1, abs=EXACT)
    assert overall["prompt_tokens_per_s"] == pytest.approx(9 * 2 / 9.0, abs=EXACT)
    assert system["gpu_busy_frac"] == pytest.approx(0.9 / 9.0, abs=EXACT)
    assert system["gpu_busy_frac_run"] == pytest.approx(1.1 / 10.1, abs=EXACT)
    assert system["compute_util_frac"] is None, "the fixed step model has no FLOPs to count"


PRIORITY_CLASSES = [{"name": "hi", "share": 0.5, "priority": 0}, {"name": "lo", "share": 0.5, "priority": 1}]
PRIORITY_ROWS = [(0.0, 1, 3, "lo"), (0.001, 1, 2, "lo"), (0.002, 1, 2, "hi")]


def test_priority_serves_the_urgent_level_next_without_preempting(tmp_path):
    """Non-preemptive: lo r0 keeps the slot to 0.03, then hi r2 (0.03-0.05), then lo r1."""
    result = engine.simulate(trace_scenario(tmp_path, PRIORITY_ROWS, {"max_batch_size": 1},
                                            policy={"name": "priority"}, classes=PRIORITY_CLASSES))
    assert_events(result, {0: (0.0, 0.01, 0.03), 2: (0.03, 0.04, 0.05), 1: (0.05, 0.06, 0.07)})


def test_preemptive_priority_evicts_the_lower_level(tmp_path):
    """Preemptive: hi r2 evicts lo r0 at 0.01 (r0 keeps its first token, re-prefills 1 + 1 tokens
    at 0.03 and ends at 0.05); lo r1 waits for r0, which arrived first."""
    result = engine.simulate(trace_scenario(tmp_path, PRIORITY_ROWS, {"max_batch_size": 1},
                                            policy={"name": "priority", "preemptive": True},
                                            classes=PRIORITY_CLASSES))
    assert_events(result, {2: (0.01, 0.02, 0.03), 0: (0.0, 0.01, 0.05), 1: (0.05, 0.06, 0.07)})
    assert list(result.requests["preemptions"]) == [1, 0, 0]
    assert list(result.requests["generated_tokens"]) == [3, 2, 2]


def test_static_allocation_reserves_max_seq_len_per_request(tmp_path):
    """16 KV tokens, static 8 per request: two run at once, the third starts when both end at 0.03."""
    rows = [(0.0, 2, 3)] * 3
    result = engine.simulate(trace_scenario(tmp_path, rows, {"max_batch_size": 4, "kv_capacity_tokens": 16,
                                                           "block_size_tokens": 4, "kv_allocation": "static",
                                                           "max_seq_len": 8}))
    assert_events(result, {0: (0.0, 0.01, 0.03), 1: (0.0, 0.01, 0.03), 2: (0.03, 0.04, 0.06)})
    assert np.all(result.timeseries["kv_used_tokens"] <= 16)
