"""Roofline tables and formulas against published figures and hand computation."""

import pandas as pd
import pytest

import engine
from engine.config import Server
from engine.hardware import DATA_DIR, GIB, kv_capacity_tokens, roofline_profile
from engine.steptime import ROOFLINE, step_params, step_time_s_nb


@pytest.mark.parametrize("model, params_b, kv_bytes", [("Llama-3-8B", 8.03, 131072), ("Llama-3-70B", 70.55, 327680)])
def test_model_shapes_reproduce_published_sizes(model, params_b, kv_bytes):
    profile = roofline_profile(Server(step_model="roofline", model=model, quant="int4"))
    assert profile.parameters / 1e9 == pytest.approx(params_b, abs=0.01)
    assert profile.kv_bytes_per_token == kv_bytes
    assert profile.resident_weight_bytes == pytest.approx(profile.parameters * 0.5)


def test_kv_capacity_by_hand():
    server = Server(step_model="roofline", gpu="A100-80G", model="Llama-3-8B", quant="fp16",
                    gpu_memory_utilization=0.9, activation_reserve_gib=2.0)
    profile = roofline_profile(server)
    expected = (80e9 * 0.9 - profile.parameters * 2 - 2 * GIB) // 131072
    assert kv_capacity_tokens(server, profile) == expected


def test_decode_step_at_batch_one_is_memory_bound():
    server = Server(step_model="roofline", gpu="H100-80G", model="Llama-3-70B", quant="int4")
    p = roofline_profile(server)
    step = step_params(ROOFLINE, 0.0, p.matmul_flops_per_token, p.attention_flops_per_context_token, p.weight_bytes,
                       p.kv_bytes_per_token, p.effective_flops_per_s, p.effective_bytes_per_s, p.iteration_overhead_s)
    context = 1000
    by_hand = (p.weight_bytes + p.kv_bytes_per_token * (context + 1)) / (3.35e12 * 0.85) + 0.002
    assert step_time_s_nb(step, 1, context + 1, context) == pytest.approx(by_hand)
    # A long prefill is compute-bound: time grows with the tokens.
    assert step_time_s_nb(step, 8192, 8192 * 8193 / 2, 0) > 8192 * p.matmul_flops_per_token / p.effective_flops_per_s


def test_impossible_setups_say_how_to_fix_them():
    base = {"workload": {"num_requests": 5, "arrival": {"process": "poisson", "rate_per_s": 1.0},
                         "classes": [{"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 8},
                                      "output_tokens": {"dist": "constant", "value": 8}}]},
            "server": {"step_model": "roofline", "gpu": "A100-80G", "model": "Llama-3-70B", "quant": "fp16"}}
    with pytest.raises(engine.ScenarioError, match="does not fit on A100-80G.*lower-bit quant"):
        engine.simulate(engine.load_scenario(base))
    with pytest.raises(engine.ScenarioError,
                       match="server.gpu = .T1000. is not in .*choose one of T4, RTX-3090, .*H100-80G"):
        engine.simulate(engine.load_scenario(base, overrides=["server.gpu=T1000"]))
    with pytest.raises(engine.ScenarioError, match="needs fp8 tensor cores"):
        engine.simulate(engine.load_scenario(base, overrides=["server.quant=fp8"]))


def test_every_table_row_has_a_source_and_a_date():
    for name in ("gpus", "models", "quant"):
        table = pd.read_csv(DATA_DIR / f"{name}.csv")
        assert table["source"].str.len().min() > 10 and table["as_of"].notna().all(), name
