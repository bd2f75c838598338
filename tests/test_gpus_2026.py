"""The GPUs customers rent in 2026: each row carries its sourced figures, FP4 where the card has it, and runs."""
import math

import pandas as pd
import pytest

import engine
from engine.hardware.tables import DATA_DIR

COLUMNS = ("memory_mib", "mem_bw_tb_s", "fp16_tflops", "fp8_tflops", "int8_tops", "fp4_tflops", "interconnect_gb_s",
           "allreduce_latency_us")
NAN = math.nan
# Hand-copied from the sources named in each row's source text (dense tensor figures):
SOURCED = {
    # nvidia-smi 97871MiB (find_string id 53244009727); willitrunai.com/es/gpus/h20-96gb; lmsys.org 2025-09-26 blog
    "H20": (97871, 4.0, 148, 296, 296, NAN, 900, 10),
    # nvidia-smi 189471MiB; glennklockwood.com/garden/processors/B200 (GB200 at 1,200 W); NVL72 NVLink 1.8 TB/s
    "GB200": (189471, 8.0, 2500, 5000, 5000, 10000, 1800, 10),
    # nvidia-smi 275040MiB (B300 SXM6 AC); glennklockwood.com/garden/processors/B300 (HGX B300); INT8 cut to 150 TOPS
    # on Blackwell Ultra (verda.com/blog/gb300-nvl72-architecture; aiconfigurator-core systems/b300_sxm.yaml)
    "B300": (275040, 8.0, 2250, 4500, 150, 13125, 1800, 10),
    # nvidia-smi 284208MiB, BF16 2,500, FP8 5,000, INT8 165, FP4 15,000 (aiconfigurator-core systems/gb300.yaml, citing
    # NVIDIA's Blackwell Ultra datasheet; verda.com/blog/gb300-nvl72-architecture); NVL72 NVLink 1.8 TB/s
    "GB300": (284208, 8.0, 2500, 5000, 165, 15000, 1800, 10),
    # marketed 256 GB; awesomeagents.ai/hardware/amd-mi325x; stas00/ml-engineering INT8 2,600; 7 x 128 GB/s
    "MI325X": (244140, 6.0, 1307.4, 2614.9, 2600, NAN, 896, 10),
    # marketed 288 GB; 256 CUs x 8,192 FP8 FLOPS a clock x 2.4 GHz (ISSCC 2026, Hot Chips 2025); 7 x 153.6 GB/s
    "MI355X": (274658, 8.0, 2516.6, 5033.2, 5033.2, 10066.3, 1075.2, 10),
    # nvidia-smi 97887MiB (Server Edition); 1,597 GB/s; sparse 1/2/4 PFLOPS halved; PCIe Gen5 x16 both ways, 25 us
    "RTX-PRO-6000": (97887, 1.597, 500, 1000, 1000, 2000, 128, 25),
    # marketed 288 GB; AMD's MI350X brochure (FP16 2,309.6, FP8 and INT8 4,614), MXFP4 twice FP8; as the MI355X
    "MI350X": (274658, 8.0, 2309.6, 4614, 4614, 9228, 1075.2, 10),
}
FAMILY = {"H20": "hopper", "GB200": "blackwell", "B300": "blackwell", "GB300": "blackwell", "MI325X": "cdna3",
          "MI355X": "cdna4", "RTX-PRO-6000": "blackwell-workstation", "MI350X": "cdna4"}
ADDED = {"RTX-PRO-6000": "2026-12-03", "MI350X": "2026-12-03",
         "B300": "2026-12-07", "GB300": "2026-12-07"}


@pytest.fixture(scope="module")
def gpus():
    return pd.read_csv(DATA_DIR / "gpus.csv").set_index("gpu")


@pytest.mark.parametrize("name", sorted(SOURCED))
def test_row_has_the_sourced_figures(gpus, name):
    row = gpus.loc[name]
    for column, expected in zip(COLUMNS, SOURCED[name]):
        if math.isnan(expected):
            assert pd.isna(row[column]), f"{name} {column} should be empty"
        else:
            assert row[column] == pytest.approx(expected), f"{name} {column}"
    assert row["family"] == FAMILY[name] and row["as_of"] == ADDED.get(name, "2026-12-02")


def test_the_mi350x_is_the_mi355x_at_its_lower_clock(gpus):
    """The same 256 CUs at 2.2 GHz instead of 2.4 (8,192 FP8 FLOPS a CU and clock): 4.61 against 5.03 PFLOPS."""
    assert gpus.loc["MI350X", "fp8_tflops"] == pytest.approx(256 * 8192 * 2.2e9 / 1e12, rel=1e-3)
    assert gpus.loc["MI355X", "fp8_tflops"] == pytest.approx(256 * 8192 * 2.4e9 / 1e12, rel=1e-3)


def test_a_workstation_blackwell_is_timed_as_an_estimate():
    """No measured run of the RTX PRO 6000's family: its factors are the slowest fitted ones, and it says so."""
    from engine.calibrate.calibration import status
    assert "estimate" in status("RTX-PRO-6000")


def test_fp4_exactly_on_blackwell_and_cdna4(gpus):
    has_fp4 = gpus["fp4_tflops"].notna()
    assert (has_fp4 == gpus["family"].isin(["blackwell", "blackwell-workstation", "cdna4"])).all()


def test_marketed_sizes_say_so(gpus):
    assert "marketed" in gpus.loc["MI325X", "memory_source"] and "marketed" in gpus.loc["MI355X", "memory_source"]
    assert "72" in gpus.loc["GB200", "source"] and "NVLink domain" in gpus.loc["GB200", "source"]


@pytest.mark.parametrize("name", sorted(SOURCED))
def test_each_new_gpu_runs_end_to_end(name):
    scenario = engine.load_scenario("data/scenarios/example.toml", overrides=[
        "server.step_model=roofline", f"server.gpu={name}", "workload.num_requests=100"])
    result = engine.simulate(scenario)
    assert result.summary["overall"]["completed"] == 100
