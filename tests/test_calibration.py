"""Calibration: the measurements table, the simulator's predictions of it, the fitted factors and the
predicted-versus-measured table of the manual (docs/method.md)."""

import math

import pandas as pd
import pytest

from conftest import REPO
from engine.calibrate.calibration import (BOUNDS, CHECK_FACTORS, METRICS, MIN_FAMILY_MEASUREMENTS, Case, badge, cases,
                                          conservative, family_factors, free_factors, loss, measurements, predict)
from engine.calibrate.calibration_report import markdown_table
from engine.hardware.roofline import efficiency_for, roofline_profile, roofline_step_params
from engine.hardware.steptime import step_time_s_nb
from engine.hardware.tables import Efficiency, load_table
from engine.scenario.config import Server
from engine.scenario.table_names import DATA_DIR


def test_measurements_name_known_hardware_and_a_source():
    table = pd.read_csv(DATA_DIR / "measurements.csv")
    assert table["id"].is_unique and table["source"].str.len().min() > 20
    assert set(table["metric"]) <= set(METRICS)
    assert set(table["gpu"]) <= set(load_table("gpus").index)
    assert set(table["model"]) <= set(load_table("models").index)
    assert set(table["quant"]) <= set(load_table("quant").index)
    assert set(table["kv_quant"]) <= set(load_table("kv_quant").index)
    assert (table["measured"] > 0).all() and (table["batch"] >= 1).all()


def test_every_gpu_family_has_calibrated_factors():
    calibration = load_table("calibration")
    assert set(load_table("gpus")["family"]) == set(calibration.index)
    assert calibration[["compute_efficiency", "bandwidth_efficiency"]].gt(0).all().all()
    assert calibration[["compute_efficiency", "bandwidth_efficiency"]].le(1).all().all()
    counts = measurements().groupby("family").size()
    for family, row in calibration.iterrows():
        assert row["measurements"] == counts.get(family, 0)


def test_batch_one_decode_prediction_by_hand():
    """One request, prompt 128, 128 outputs: TPOT = mean of the decode steps at contexts 128..254, each
    (weights + KV x (context + 1)) / bandwidth + overhead (memory-bound at batch 1)."""
    row = measurements().loc["lmdeploy-a100-7b-b1-tpot"]
    eff = Efficiency(0.6, 0.7, 1.5)
    p = roofline_profile(Server(step_model="roofline", gpu="A100-80G", model="Llama-2-7B"), efficiency=eff)
    steps = [(p.weight_bytes + p.kv_bytes_per_token * (ctx + 1)) / p.effective_bytes_per_s + p.iteration_overhead_s
             for ctx in range(128, 128 + 127)]
    assert predict(row, eff) == pytest.approx(sum(steps) / len(steps) * 1e3, rel=1e-9)


def test_fitted_factors_are_a_local_optimum():
    """Each family with its own fit: moving any factor it fits 10% either way (inside the fit's bounds) does not
    lower the squared log error."""
    table = measurements()
    for family, row in load_table("calibration").iterrows():
        rows = table[table["family"] == family]
        if not family_factors(len(rows)):
            continue
        fitted = cases(rows)
        best = efficiency_for(rows["gpu"].iloc[0])
        base = loss(fitted, best)
        for field in set(family_factors(len(rows))) & set(free_factors(fitted)):
            for factor in CHECK_FACTORS:
                value = getattr(best, field) * factor
                low, high = BOUNDS[field]
                if not low <= value <= high:
                    continue
                moved = Efficiency(**{**best.__dict__, field: value})
                assert loss(fitted, moved) >= base - 1e-6, (family, field, factor)


def test_smooth_roofline_by_hand():
    """Sharpness 2: an iteration takes sqrt(compute^2 + memory^2) + overhead; at the hard maximum, the larger."""
    server = Server(step_model="roofline", gpu="A100-80G", model="Llama-2-70B", tensor_parallel=2)
    tokens, pairs, reads = 128, 128 * 600, 128 * 600
    times = {}
    for k in (0.0, 2.0):
        p = roofline_profile(server, efficiency=Efficiency(0.6, 0.7, 1.5, k, 1.0))
        flops = p.matmul_flops_per_token * tokens + p.attention_flops_per_context_token * pairs
        compute_s = flops / p.effective_flops_per_s
        memory_s = (p.weight_bytes + p.kv_bytes_per_token * (reads + tokens)) / p.effective_bytes_per_s
        comm_s = p.comm_fixed_s + p.comm_s_per_token * tokens
        times[k] = step_time_s_nb(roofline_step_params(p), tokens, pairs, reads)
        combined = max(compute_s, memory_s) if k == 0 else (compute_s ** 2 + memory_s ** 2) ** 0.5
        assert times[k] == pytest.approx(combined + comm_s + 0.0015, rel=1e-12)
    assert times[2.0] > times[0.0] * 1.2  # near the ridge the smooth maximum is well above the hard one


def test_closed_loop_time_to_first_token_counts_from_scheduling():
    """Two clients, four requests: requests 2 and 3 wait for a slot, but a closed-loop client only sends them
    then, so their wait is no part of the measured time to first token."""
    row = measurements().iloc[0].copy()
    row[["batch", "requests", "rate_per_s", "input_tokens", "output_tokens"]] = [2, 4, 0, 10, 3]
    row["metric"] = "ttft_mean_ms"
    case = Case.from_row(row)
    assert case.closed_loop
    eff = Efficiency(0.6, 0.7, 1.5)
    opened = Case(case.prepared, case.server, case.measured).predict(eff)["ttft_mean_ms"]
    assert case.predict(eff)["ttft_mean_ms"] < opened / 1.5


def test_uncalibrated_families_get_the_slowest_factors():
    fitted = {"a": Efficiency(0.6, 0.8, 1.0, 2.0, 3.0), "b": Efficiency(0.5, 0.9, 2.0, 1.5, 1.0)}
    assert conservative(fitted) == Efficiency(0.5, 0.8, 2.0, 1.5, 3.0)


def test_the_manuals_table_is_the_current_prediction():
    page = (REPO / "docs" / "method.md").read_text()
    start, end = page.index("<!-- calibration:start -->\n"), page.index("<!-- calibration:end -->")
    assert page[start + len("<!-- calibration:start -->\n"):end] == markdown_table(), \
        "docs/method.md calibration table is stale: run python bench/calibrate.py"


def test_badge_says_calibrated_or_estimate():
    calibration = load_table("calibration")
    fitted = calibration[calibration["measurements"] >= MIN_FAMILY_MEASUREMENTS].index[0]
    gpu = load_table("gpus").index[load_table("gpus")["family"] == fitted][0]
    assert badge(gpu).startswith("calibrated against")
    assert badge("T4").startswith("estimate only")
    assert math.isfinite(efficiency_for("H100-80G-MIG-1g.10gb").compute)  # a slice uses its card's family
