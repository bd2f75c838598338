"""The steady-state window and utilisation while busy, against hand computations on the roofline model.

Rates and utilisation are reported over the steady-state window by default (``simulate.steady_window_s``); the
fixed-model schedule of ``test_schedule`` pins the window's bounds and token counts, these tests pin what the
roofline terms add up to.
"""

import pytest

import engine
from conftest import trace_scenario
from engine.hardware.roofline import peak_profile, roofline_profile, roofline_step_params
from engine.hardware.steptime import step_terms_nb, step_time_s_nb

ROOFLINE = {"step_model": "roofline", "gpu": "A100-80G", "model": "Llama-3-8B", "max_batch_size": 8}


def test_one_prefill_uses_its_flops_over_the_peak_in_its_time(tmp_path):
    """One request of 512 prompt tokens and one output token: one iteration, whose FLOPs over the datasheet peak
    times its duration is the compute utilisation, and whose bytes over the peak bandwidth times its duration is
    the bandwidth utilisation; all at once, so the window is the whole run."""
    scenario = trace_scenario(tmp_path, [(0.0, 512, 1)], {**ROOFLINE, "kernel_tables": "off"})
    system = engine.simulate(scenario).summary["system"]
    profile = roofline_profile(scenario.server)
    peak = peak_profile(scenario.server, scenario.server.tensor_parallel)
    step = roofline_step_params(profile)
    pairs = 512 * 513 / 2.0
    dt = step_time_s_nb(step, 512, pairs, 0.0)
    compute_s, memory_s, _ = step_terms_nb(step, 512, pairs, 0.0)
    flops = compute_s * profile.effective_flops_per_s
    bytes_moved = memory_s * profile.effective_bytes_per_s
    assert system["compute_util_frac"] == pytest.approx(flops / (peak.effective_flops_per_s * dt), rel=1e-12)
    assert system["bandwidth_util_frac"] == pytest.approx(bytes_moved / (peak.effective_bytes_per_s * dt), rel=1e-12)
    assert system["compute_util_frac"] == system["compute_util_frac_run"]
    assert 0.0 < system["compute_util_frac"] < 1.0


def test_all_at_once_the_window_is_the_whole_run(tmp_path):
    rows = [(0.0, 64, 20)] * 6
    summary = engine.simulate(trace_scenario(tmp_path, rows, ROOFLINE)).summary
    system, overall = summary["system"], summary["overall"]
    assert system["window_s"] == [0.0, system["sim_time_s"]]
    for key in ("output_tokens_per_s", "prompt_tokens_per_s", "sla_met_per_s"):
        assert overall[key] == pytest.approx(overall[f"{key}_run"], rel=1e-12), key
    assert system["gpu_busy_frac"] == pytest.approx(system["gpu_busy_frac_run"], rel=1e-12)


def test_fuller_iterations_use_more_of_the_gpu_while_busy(tmp_path):
    """Eight decodes in one iteration read the weights once for eight tokens: the same work in batches of 8
    instead of 1 raises compute utilisation while busy and shortens the busy time."""
    rows = [(0.0, 16, 200)] * 8
    one = engine.simulate(trace_scenario(tmp_path, rows, {**ROOFLINE, "max_batch_size": 1})).summary["system"]
    eight = engine.simulate(trace_scenario(tmp_path, rows, ROOFLINE)).summary["system"]
    assert eight["compute_util_frac"] > 5 * one["compute_util_frac"]
    assert eight["gpu_busy_frac_run"] * eight["sim_time_s"] < one["gpu_busy_frac_run"] * one["sim_time_s"] / 5
