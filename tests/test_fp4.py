"""FP4 weights (NVFP4, MXFP4) on the cards that have FP4 tensor cores: bytes per weight with the block scales,
the dense FP4 peak of gpus.csv, and a clear error on a card without them. Hand arithmetic throughout."""

import pytest

import engine
from engine.hardware.roofline import peak_profile
from engine.hardware.tables import PEAK_COLUMNS, gpu_names, gpu_row, load_table
from engine.scenario.config import Server

# Llama-3-70B: 80 layers, hidden 8192, 64 heads, 8 KV heads, head_dim 128, MLP 28672, vocab 128256
LAYER = 8192 * 64 * 128 + 2 * 8192 * 8 * 128 + 64 * 128 * 8192 + 3 * 8192 * 28672 + 2 * 8192
EMBEDDING = 2 * 128256 * 8192  # embedding and untied LM head, kept 16-bit
NON_EMBEDDING = 80 * LAYER + 8192  # the final norm too


@pytest.mark.parametrize("quant, bits_per_weight", [("nvfp4", 4 + 8 / 16), ("mxfp4", 4 + 8 / 32)])
def test_a_4_bit_format_counts_its_block_scales(quant, bits_per_weight):
    """NVFP4: one FP8 scale per 16 values; MXFP4: one E8M0 scale per 32 (4.5 and 4.25 bits per weight)."""
    assert float(load_table("quant").loc[quant, "weight_bytes_per_param"]) == bits_per_weight / 8
    profile = peak_profile(Server(step_model="roofline", gpu="B200", model="Llama-3-70B", quant=quant), 1)
    assert profile.resident_weight_bytes == pytest.approx(NON_EMBEDDING * bits_per_weight / 8 + EMBEDDING * 2)


def test_fp4_math_runs_at_the_dense_fp4_peak_twice_fp8():
    """B200 (HGX, 1,000 W): 9,000 dense FP4 TFLOPS against 4,500 FP8 (the datasheet figures of gpus.csv)."""
    fp4, fp8 = (peak_profile(Server(step_model="roofline", gpu="B200", model="Llama-3-70B", quant=q), 2)
                for q in ("nvfp4", "fp8"))
    assert fp4.effective_flops_per_s == 2 * 9000e12
    assert fp4.effective_flops_per_s == 2 * fp8.effective_flops_per_s


def test_every_compute_format_has_its_peak_column_and_only_fp4_cards_list_an_fp4_rate():
    assert set(load_table("quant")["compute"]) == set(PEAK_COLUMNS)
    assert set(PEAK_COLUMNS.values()) <= set(load_table("gpus").columns)
    with_fp4 = [g for g in gpu_names() if gpu_row(g)["fp4_tflops"] == gpu_row(g)["fp4_tflops"]]  # not NaN
    assert with_fp4 and all(gpu_row(g)["family"] in ("blackwell", "blackwell-workstation", "cdna4") for g in with_fp4)


def test_a_card_without_fp4_tensor_cores_is_one_line():
    scenario = engine.load_scenario("data/scenarios/example.toml", overrides=[
        "server.step_model=roofline", "server.gpu=H100-80G", "server.quant=nvfp4"])
    with pytest.raises(engine.ScenarioError, match="needs fp4 tensor cores, which H100-80G does not have"):
        engine.simulate(scenario)


def test_an_fp4_fleet_runs_end_to_end():
    scenario = engine.load_scenario("data/scenarios/example.toml", overrides=[
        "server.step_model=roofline", "server.gpu=B200", "server.model=Qwen3-30B-A3B", "server.quant=nvfp4",
        "workload.num_requests=200"])
    summary = engine.simulate(scenario).summary
    assert summary["overall"]["completed"] == 200
