"""The 2026 open models of ``data/hardware/models.csv`` reproduce their published sizes, checked by hand.

Every row added for a 2026 model must give, through ``model_shape``, the total and active parameter counts its
publisher states, and a KV cache per token equal to the hand product of its config values. A wrong layer count,
expert count, expert width or tying flag moves one of these numbers by more than the stated tolerance.
"""

import pytest

from engine.hardware.roofline import model_shape, roofline_profile
from engine.hardware.tables import table_row
from engine.scenario.config import Server

BF16_BYTES = 2


def shape(model: str):
    """``model_shape`` of the ``models.csv`` row named ``model``."""
    return model_shape(table_row("models", model, "model"))


@pytest.mark.parametrize("model, published, unmodelled", [
    # keras-team/keras-hub keras_hub/src/models/qwen3/qwen3_presets.py and qwen3_moe/qwen3_moe_presets.py give
    # exact counts; Qwen3 adds a Q and a K RMSNorm weight of head_dim 128 in every layer, not modelled.
    ("Qwen3-8B", 8_190_735_360, 36 * 2 * 128),
    ("Qwen3-14B", 14_768_307_200, 40 * 2 * 128),
    ("Qwen3-32B", 32_762_123_264, 64 * 2 * 128),
    ("Qwen3-30B-A3B", 30_532_122_624, 48 * 2 * 128),
    ("Qwen3-235B-A22B", 235_093_634_560, 94 * 2 * 128),
    # OpenMOSE/RWKV-LM-RLHF main/tokenizer/mistralsmall3/model.safetensors.index.json: total_size 47,144,806,400 B
    # of BF16 weights for mistralai/Mistral-Small-24B-Instruct-2501.
    ("Mistral-Small-24B", 47_144_806_400 // BF16_BYTES, 0),
])
def test_parameter_count_equals_the_published_exact_count(model, published, unmodelled):
    assert shape(model).parameters + unmodelled == published


@pytest.mark.parametrize("model, published, rel", [
    # huggingface/transformers docs/source/en/model_doc/glm4_moe.md: "355 billion total parameters with 32 billion
    # active", "106 billion total parameters and 12 billion active"; biases, Q/K norms and the multi-token-
    # prediction layer are left out; the rows compute 352.8B (0.6% below) and 106.9B (0.8% above).
    ("GLM-4.5", 355e9, 0.01),
    ("GLM-4.5-Air", 106e9, 0.01),
    # Kimi K2 technical report (arXiv 2507.20534), quoted in code-index files (find_string ids 70239869214 and
    # 54922728716): "1.04 trillion" (the model card rounds to "1 trillion"). The row computes 1.026T, 1.3% below,
    # a gap the config does not explain (no multi-token-prediction layer in it), so 1.5%: a row with DeepSeek-V3's
    # 3 dense layers instead of 1 gives 0.993T and fails.
    ("Kimi-K2", 1.04e12, 0.015),
])
def test_parameter_count_matches_the_published_rounded_size(model, published, rel):
    assert shape(model).parameters == pytest.approx(published, rel=rel)


# What a vendor's "activated parameters" counts is not stated; each figure is compared with the count it matches:
# "token" = every weight one token uses, embedding table included (active matmul weights + vocab x hidden);
# "matmul" = model_shape.active_matmul_parameters (LM head, no embedding lookup), as DeepSeek-V3's 37B;
# "non-embedding" = neither embedding nor LM head. Figures are rounded to two digits, hence 2%.
@pytest.mark.parametrize("model, published, counts", [
    ("Qwen3-30B-A3B", 3.3e9, "token"),         # keras-hub qwen3_moe_presets.py: "3.3 billion activated"
    ("Qwen3-235B-A22B", 22e9, "token"),        # keras-hub qwen3_moe_presets.py: "22 billion activated"
    ("Kimi-K2", 32e9, "matmul"),               # Kimi-K2 model card (Helicone copy): "32 billion activated"
    ("GLM-4.5", 32e9, "non-embedding"),        # transformers glm4_moe.md: "32 billion active"
    ("GLM-4.5-Air", 12e9, "non-embedding"),    # transformers glm4_moe.md: "12 billion active"
])
def test_active_parameters_match_the_published_activated_count(model, published, counts):
    row = table_row("models", model, "model")
    s, table = model_shape(row), int(row["vocab"]) * int(row["hidden"])  # one embedding table
    active = {"token": s.active_matmul_parameters + table, "matmul": s.active_matmul_parameters,
              "non-embedding": s.active_matmul_parameters - table}[counts]
    assert active == pytest.approx(published, rel=0.02)


@pytest.mark.parametrize("model, kv_bytes", [
    # grouped-query attention: 2 (K and V) x layers x kv_heads x head_dim x 2 B (BF16), values from each row's
    # config source in models.csv
    ("Qwen3-8B", 2 * 36 * 8 * 128 * 2),           # 147,456
    ("Qwen3-14B", 2 * 40 * 8 * 128 * 2),          # 163,840
    ("Qwen3-32B", 2 * 64 * 8 * 128 * 2),          # 262,144
    ("Qwen3-30B-A3B", 2 * 48 * 4 * 128 * 2),      # 98,304
    ("Qwen3-235B-A22B", 2 * 94 * 4 * 128 * 2),    # 192,512
    ("GLM-4.5", 2 * 92 * 8 * 128 * 2),            # 376,832 (partial rotary still caches whole 128-wide keys)
    ("GLM-4.5-Air", 2 * 46 * 8 * 128 * 2),        # 188,416
    ("Mistral-Small-24B", 2 * 40 * 8 * 128 * 2),  # 163,840
    # multi-head latent attention: layers x (kv_lora_rank + rope_head_dim) x 2 B
    ("Kimi-K2", 61 * (512 + 64) * 2),             # 70,272
])
def test_kv_bytes_per_token_by_hand(model, kv_bytes):
    assert shape(model).kv_values_per_token * BF16_BYTES == kv_bytes
    assert roofline_profile(Server(step_model="roofline", model=model)).kv_bytes_per_token == kv_bytes
