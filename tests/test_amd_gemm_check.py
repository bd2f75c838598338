"""bench/amd_gemm_check.py: AMD's measured GEMMs priced the way the roofline prices an iteration's matmuls."""

import importlib.util
import sys

import pytest

from conftest import REPO
from engine.hardware.tables import calibration_row, gpu_row

sys.path.insert(0, str(REPO / "bench"))
SPEC = importlib.util.spec_from_file_location("amd_gemm_check", REPO / "bench" / "amd_gemm_check.py")
check = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(check)
FIXTURES = REPO / "tests" / "fixtures" / "aiter_configs"


def test_each_measured_gemm_is_priced_at_its_cards_fitted_shares_by_hand():
    """A 64 x 1536 x 5120 INT8 GEMM on MI300X (16.78 us measured): 2MNK FLOPs at the FP8/INT8 peak times cdna3's
    low-precision share, one-byte operands and a 16-bit result at its bandwidth share, summed (cdna3's sharpness 1);
    MI308X's row (80 compute units) is left out."""
    rows = check.tables(FIXTURES)
    assert set(rows["gpu"]) == {"MI300X", "MI355X"} and len(rows) == 7
    priced = check.priced(rows)
    one = priced[(priced["gpu"] == "MI300X") & (priced["M"] == 64) & (priced["N"] == 1536)].iloc[0]
    card, family = gpu_row("MI300X"), calibration_row("MI300X")
    compute_s = 2 * 64 * 1536 * 5120 / (card["fp8_tflops"] * 1e12 * family["low_precision_compute_efficiency"])
    memory_s = (64 * 5120 + 5120 * 1536 + 64 * 1536 * 2) / (card["mem_bw_tb_s"] * 1e12 * family["bandwidth_efficiency"])
    assert family["roofline_sharpness"] == 1.0
    assert one["roofline_us"] == pytest.approx((compute_s + memory_s) * 1e6, rel=1e-12)
    assert one["us"] == 16.7759 and one["bits"] == 8
    assert one["peak_share"] == pytest.approx(2 * 64 * 1536 * 5120 / 16.7759e-6 / (card["fp8_tflops"] * 1e12))
    table = check.report(priced)
    assert "| MI300X | 8 | 17-256 | 2 |" in table and "| MI355X | 16 | 1-16 rows | 1 |" in table
