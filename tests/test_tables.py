"""The hardware tables load, validate and reproduce the published model sizes."""

import pandas as pd
import pytest

from engine.hardware.roofline import roofline_profile
from engine.hardware.tables import default_batched_tokens, load_table
from engine.scenario.config import Server
from engine.scenario.table_names import DATA_DIR

REQUIRED = {
    "gpus": ["memory_mib", "mem_bw_tb_s", "fp16_tflops", "int8_tops", "interconnect_gb_s", "allreduce_latency_us",
             "board_power_w"],
    "calibration": ["compute_efficiency", "low_precision_compute_efficiency", "bandwidth_efficiency"],
    "engines": ["overhead_ms", "allreduce_latency_factor"],
    "measurements": ["tensor_parallel", "batch", "input_tokens", "output_tokens", "measured"],  # requests 0: not stated
    "models": ["layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"],
    "quant": ["weight_bytes_per_param"],
    "kv_quant": ["bytes_per_value"],
    "gpu_slices": ["sm_fraction", "memory_fraction", "max_per_card"],
    "pricing_conventions": ["value"],
    "serving_memory": ["value"],
    "engine_budgets": ["tokens"],
}


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_rows_are_complete_sourced_and_unique(name):
    table = pd.read_csv(DATA_DIR / f"{name}.csv")
    key = table.columns[0]
    assert table[key].is_unique, f"duplicate {key} in {name}.csv"
    assert table["source"].str.len().min() > 10 and table["as_of"].notna().all()
    for column in REQUIRED[name]:
        assert pd.to_numeric(table[column]).gt(0).all(), f"{name}.csv {column} must be positive"


def test_gpu_units_are_plausible():
    gpus = pd.read_csv(DATA_DIR / "gpus.csv")
    # MiB per card (nvidia-smi): up to 320 GiB, room for the 288 GB cards (B300, MI355X), not for a GB total
    assert gpus["memory_mib"].between(8 * 1024, 320 * 1024).all()
    assert gpus["mem_bw_tb_s"].between(0.1, 10).all()       # TB/s
    assert gpus["fp16_tflops"].between(20, 3000).all()      # dense TFLOPS, not sparse
    # INT8 runs at least at the 16-bit rate, except on Blackwell Ultra, whose INT8 NVIDIA cut to about 150 TOPS
    ultra = gpus["gpu"].isin(["B300", "GB300"])
    assert (gpus.loc[~ultra, "int8_tops"] >= gpus.loc[~ultra, "fp16_tflops"]).all()
    assert gpus.loc[ultra, "int8_tops"].between(100, 200).all()


def test_slices_are_real_shares_of_a_listed_card():
    slices = pd.read_csv(DATA_DIR / "gpu_slices.csv")
    cards = set(pd.read_csv(DATA_DIR / "gpus.csv")["gpu"])
    assert set(slices["parent"]) <= cards and not set(slices["slice"]) & cards
    assert set(slices["kind"]) <= {"mig", "cloud"}
    # As many instances as the card holds never exceed the whole card.
    assert (slices["max_per_card"] * slices["sm_fraction"]).le(1 + 1e-6).all()
    assert (slices["max_per_card"] * slices["memory_fraction"]).le(1 + 1e-6).all()
    # A MIG instance's memory (nvidia-smi mig -lgip) is at most its share of the card's total.
    total = slices["parent"].map(pd.read_csv(DATA_DIR / "gpus.csv").set_index("gpu")["memory_mib"])
    assert (slices["memory_mib"].fillna(0) <= total * slices["memory_fraction"]).all()
    assert slices["memory_source"].str.len().min() > 10


def test_latent_attention_rows_give_their_latent_sizes():
    models = pd.read_csv(DATA_DIR / "models.csv")
    assert set(models["attention"]) == {"gqa", "mla"}
    mla = models[models["attention"] == "mla"]
    assert (mla[["q_lora_rank", "kv_lora_rank", "rope_head_dim", "v_head_dim"]] > 0).all().all()
    moe = models[models["experts"] > 0]
    assert (moe["expert_intermediate"] > 0).all() and (moe["experts_per_token"] < moe["experts"]).all()


@pytest.mark.parametrize("model, params_b", [
    ("Llama-2-7B", 6.74), ("Llama-2-13B", 13.02), ("Llama-2-70B", 68.98), ("Llama-3-8B", 8.03),
    ("Llama-3-70B", 70.55), ("Llama-3.1-405B", 405.85), ("Mistral-7B", 7.24), ("Qwen2.5-14B", 14.77),
    ("Qwen2.5-72B", 72.71),
])
def test_parameter_counts_match_the_published_sizes(model, params_b):
    # Published figures from ../shared/reference/hardware_and_models.md; Qwen adds Q/K/V biases (< 0.01B).
    profile = roofline_profile(Server(step_model="roofline", model=model))
    assert profile.parameters / 1e9 == pytest.approx(params_b, abs=0.015)


@pytest.mark.parametrize("model, kv_bytes", [("Llama-2-7B", 524288), ("Llama-2-70B", 327680),
                                             ("Qwen2.5-7B", 57344), ("Llama-3.1-405B", 516096)])
def test_kv_bytes_per_token(model, kv_bytes):
    assert roofline_profile(Server(step_model="roofline", model=model)).kv_bytes_per_token == kv_bytes


@pytest.mark.parametrize("engine, gpu, ranks, tokens", [
    ("vllm", "H100-80G", 1, 8192), ("vllm", "A100-80G", 1, 2048), ("vllm", "L40S", 1, 2048),
    ("vllm", "B200", 8, 8192), ("sglang", "A10", 1, 2048), ("sglang", "L40S", 1, 4096), ("sglang", "H200", 1, 8192),
    ("sglang", "B200", 1, 16384), ("sglang", "B200", 4, 4096), ("sglang", "H100-80G-MIG-1g.10gb", 1, 2048),
    ("tensorrt-llm", "L40S", 1, 8192), ("legacy", "A100-80G", 1, 8192)])
def test_each_engine_starts_with_its_own_token_budget_on_a_card(engine, gpu, ranks, tokens):
    """vLLM: 8,192 from 70 GiB except on an A100, else 2,048; SGLang's chunk by the card's memory, split over its
    data-parallel attention ranks; TensorRT-LLM 8,192 everywhere."""
    assert default_batched_tokens(engine, gpu, ranks) == tokens


def test_every_engine_has_a_budget_for_every_card():
    rules = load_table("engine_budgets")
    for engine in load_table("engines").index:
        own = rules[rules["engine"] == engine]
        assert ((own["from_card_mib"] == 0) & own["except_gpu_prefix"].isna()).any(), engine
    assert set(rules["per_attention_dp_rank"]) <= {"yes", "no"}
    assert set(rules["engine"]) <= set(load_table("engines").index)
