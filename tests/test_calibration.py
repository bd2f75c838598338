"""Calibration: the measurements table, the simulator's predictions of it, the fitted factors and the
README's predicted-versus-measured table."""

import math

import pandas as pd
import pytest

from conftest import REPO
from engine.calibration import BOUNDS, CHECK_FACTORS, METRICS, MIN_FAMILY_MEASUREMENTS, _loss, badge, measurements, predict
from engine.calibration_report import markdown_table
from engine.config import Server
from engine.hardware import DATA_DIR, Efficiency, efficiency_for, load_table, roofline_profile


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
    """Each family with its own fit: moving any factor 10% either way (inside the fit's bounds) does not
    lower the squared log error."""
    table = measurements()
    for family, row in load_table("calibration").iterrows():
        if row["measurements"] < MIN_FAMILY_MEASUREMENTS:
            continue
        rows = table[table["family"] == family]
        best = efficiency_for(rows["gpu"].iloc[0])
        base = _loss(rows, best)
        for field in ("compute", "bandwidth", "overhead_ms"):
            for factor in CHECK_FACTORS:
                value = getattr(best, field) * factor
                low, high = BOUNDS[field]
                if not low <= value <= high:
                    continue
                moved = Efficiency(**{**best.__dict__, field: value})
                assert _loss(rows, moved) >= base - 1e-9, (family, field, factor)


def test_readme_table_is_the_current_prediction():
    readme = (REPO / "README.md").read_text()
    start, end = readme.index("<!-- calibration:start -->\n"), readme.index("<!-- calibration:end -->")
    assert readme[start + len("<!-- calibration:start -->\n"):end] == markdown_table(), \
        "README calibration table is stale: run python bench/calibrate.py"


def test_badge_says_calibrated_or_estimate():
    calibration = load_table("calibration")
    fitted = calibration[calibration["measurements"] >= MIN_FAMILY_MEASUREMENTS].index[0]
    gpu = load_table("gpus").index[load_table("gpus")["family"] == fitted][0]
    assert badge(gpu).startswith("calibrated against")
    assert badge("T4").startswith("estimate only")
    assert math.isfinite(efficiency_for("H100-80G-MIG-1g.10gb").compute)  # a slice uses its card's family
