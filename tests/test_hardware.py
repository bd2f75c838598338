"""Roofline tables and formulas against published figures and hand computation."""

import tomllib

import pytest

import engine
from conftest import SCENARIOS
from engine.hardware.roofline import (GIB, card_memory, efficiency_for, kv_capacity_tokens, roofline_profile,
                                      roofline_step_params)
from engine.hardware.steptime import step_terms_nb, step_time_s_nb
from engine.hardware.tables import Efficiency, engine_row, load_table
from engine.scenario.config import Server, load_scenario
from engine.scenario.errors import ScenarioError


@pytest.mark.parametrize("model, params_b, kv_bytes", [("Llama-3-8B", 8.03, 131072), ("Llama-3-70B", 70.55, 327680)])
def test_model_shapes_reproduce_published_sizes(model, params_b, kv_bytes):
    profile = roofline_profile(Server(step_model="roofline", model=model, quant="int4"))
    assert profile.parameters / 1e9 == pytest.approx(params_b, abs=0.01)
    assert profile.kv_bytes_per_token == kv_bytes
    embedding = 2 * 4096 * 128256 if model == "Llama-3-8B" else 2 * 8192 * 128256
    assert profile.resident_weight_bytes == pytest.approx((profile.parameters - embedding) * 0.5 + embedding * 2)


def test_decode_step_at_batch_one_is_memory_bound():
    server = Server(step_model="roofline", gpu="H100-80G", model="Llama-3-70B", quant="int4")
    p = roofline_profile(server, efficiency=Efficiency(0.7, 0.85, 2.0))
    step = roofline_step_params(p)
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
    with pytest.raises(engine.ScenarioError, match="does not fit on 1 x A100-80G.*lower-bit quant"):
        engine.simulate(engine.load_scenario(base))
    with pytest.raises(engine.ScenarioError,
                       match="server.gpu = .T1000. is not a GPU of data/hardware/gpus.csv or gpu_slices.csv; choose "
                             "one of T4, RTX-3090, .*H100-80G.*, \\.\\.\\."):
        engine.simulate(engine.load_scenario(base, overrides=["server.gpu=T1000"]))
    with pytest.raises(engine.ScenarioError, match="needs fp8 tensor cores"):
        engine.simulate(engine.load_scenario(base, overrides=["server.quant=fp8"]))


def test_fit_check_names_the_smallest_tensor_parallel_degree():
    """Llama-3-70B FP16 weights are 141 GB: one A100-80G cannot hold them, two can (65.7 GiB each of 71.6 GiB
    usable at utilisation 0.9)."""
    server = Server(step_model="roofline", gpu="A100-80G", model="Llama-3-70B", quant="fp16")
    with pytest.raises(engine.ScenarioError, match=r"does not fit on 1 x A100-80G.*set server.tensor_parallel = 2"):
        kv_capacity_tokens(server, roofline_profile(server))
    with pytest.raises(engine.ScenarioError, match="smaller model"):
        big = Server(step_model="roofline", gpu="T4", model="Llama-3.1-405B", quant="fp16")
        kv_capacity_tokens(big, roofline_profile(big))


def test_more_cards_are_faster_per_iteration_until_communication_dominates():
    batch, context = 32, 2000
    times = []
    for tp in (1, 2, 4, 8):
        profile = roofline_profile(Server(step_model="roofline", gpu="H100-80G", model="Llama-3-70B", quant="int4",
                                          tensor_parallel=tp))
        times.append(step_time_s_nb(roofline_step_params(profile), batch, batch * (context + 1), batch * context))
    assert times == sorted(times, reverse=True) and times[-1] < times[0] / 2
    # The all-reduces (and the fixed overhead) make the gain sub-linear, over NVLink and over PCIe.
    assert times[2] / times[3] < 2
    gains = {}
    for gpu in ("H100-80G", "L40S"):
        p4, p8 = (roofline_profile(Server(step_model="roofline", gpu=gpu, model="Llama-3-8B", tensor_parallel=tp))
                  for tp in (4, 8))
        assert p8.comm_s_per_token > p4.comm_s_per_token > 0
        gains[gpu] = (step_time_s_nb(roofline_step_params(p4), 1, 1001, 1000)
                      / step_time_s_nb(roofline_step_params(p8), 1, 1001, 1000))
    assert all(1 < gain < 2 for gain in gains.values()), gains


def test_mixture_of_experts_sizes_and_expert_reads():
    """Mixtral-8x7B: 46.7B parameters, 12.9B used per token (published); one token reads 2 of 8 experts
    per layer, a large batch reads all 8."""
    profile = roofline_profile(Server(step_model="roofline", gpu="H100-80G", model="Mixtral-8x7B", quant="fp16"),
                               efficiency=Efficiency(0.7, 0.85, 2.0))  # the hard maximum of compute and memory
    assert profile.parameters / 1e9 == pytest.approx(46.70, abs=0.01)
    assert profile.active_parameters / 1e9 == pytest.approx(12.88, abs=0.01)
    step = roofline_step_params(profile)
    one, many = (step_time_s_nb(step, t, 0.0, 0.0) for t in (1, 512))
    bandwidth = profile.effective_bytes_per_s
    assert one == pytest.approx((profile.weight_bytes + 2 * profile.expert_bytes + profile.kv_bytes_per_token)
                                / bandwidth + profile.iteration_overhead_s)
    assert many >= (profile.weight_bytes + 8 * profile.expert_bytes * (1 - 0.75 ** 512)) / bandwidth


def test_profile_uses_the_gpu_familys_calibrated_efficiency():
    eff = efficiency_for("H100-80G")
    p = roofline_profile(Server(step_model="roofline", gpu="H100-80G", model="Llama-3-8B"))
    assert p.effective_bytes_per_s == pytest.approx(3.35e12 * eff.bandwidth)
    assert p.effective_flops_per_s == pytest.approx(989.4e12 * eff.compute)
    assert p.iteration_overhead_s == pytest.approx(eff.overhead_ms / 1000)


def test_deepseek_v3_latent_attention_by_hand():
    """MLA caches one latent of kv_lora_rank + rope dims = 576 values per layer; the absorbed attention
    scores use 576 dims and values 512 per head (2 x 61 layers x 128 heads x (576 + 512) FLOPs)."""
    profile = roofline_profile(Server(step_model="roofline", gpu="H200", model="DeepSeek-V3", quant="fp8"))
    assert profile.parameters / 1e9 == pytest.approx(671.03, abs=0.01)      # 671B published
    assert profile.active_parameters / 1e9 == pytest.approx(37.55, abs=0.01)  # 37B activated per token
    assert profile.kv_bytes_per_token == 61 * 576 * 2
    assert profile.attention_flops_per_context_token == 2 * 61 * 128 * (576 + 512)
    assert profile.experts == 256 and profile.experts_per_token == 8
    assert profile.expert_bytes == 58 * 3 * 7168 * 2048 * 1.0  # 58 MoE layers, FP8 weights


def test_kv_cache_quantisation_halves_bytes_and_doubles_capacity():
    base = Server(step_model="roofline", gpu="A100-80G", model="Llama-3-8B", activation_reserve_gib=2.0)
    fp8 = Server(step_model="roofline", gpu="A100-80G", model="Llama-3-8B", activation_reserve_gib=2.0,
                 kv_quant="fp8")
    full, half = roofline_profile(base), roofline_profile(fp8)
    assert half.kv_bytes_per_token == full.kv_bytes_per_token / 2 == 65536
    free = card_memory(base, full, 1).kv
    assert kv_capacity_tokens(base, full) == free // 131072
    assert kv_capacity_tokens(fp8, half) == free // 65536
    with pytest.raises(engine.ScenarioError, match="server.kv_quant = 'fp4' is not in data/hardware/kv_quant.csv"):
        roofline_profile(Server(step_model="roofline", kv_quant="fp4"))


def test_mig_slice_is_its_share_of_the_card():
    """H100 1g.10gb: 16 of 132 SMs, 9.75 GiB of memory (nvidia-smi mig -lgip) and 1/8 of the bandwidth (by our
    inference)."""
    card = roofline_profile(Server(step_model="roofline", gpu="H100-80G", model="Llama-3-8B", quant="int4"))
    cut = roofline_profile(Server(step_model="roofline", gpu="H100-80G-MIG-1g.10gb", model="Llama-3-8B",
                                  quant="int4"))
    assert cut.card_memory_bytes == 9.75 * GIB and card.card_memory_bytes == 81559 * 1024 ** 2
    assert cut.effective_bytes_per_s == pytest.approx(card.effective_bytes_per_s / 8)
    assert cut.effective_flops_per_s == pytest.approx(card.effective_flops_per_s * 16 / 132, rel=1e-5)
    with pytest.raises(engine.ScenarioError, match="no link to other slices; set tensor_parallel = 1 and add "
                                                   "fleet.replicas"):
        roofline_profile(Server(step_model="roofline", gpu="H100-80G-MIG-1g.10gb", tensor_parallel=2))
    too_big = Server(step_model="roofline", gpu="H100-80G-MIG-1g.10gb", model="Llama-3-8B", quant="fp16")
    with pytest.raises(engine.ScenarioError, match="does not fit.*lower-bit quant, a smaller model or a larger GPU"):
        kv_capacity_tokens(too_big, roofline_profile(too_big))


def test_all_reduces_take_the_faster_of_one_shot_and_two_shot():
    """Llama-3-70B over TP4 on H100 (450 GB/s a direction, 10 us a synchronisation, factor 1): 160 all-reduces of
    tokens x 8192 x 2 B. One-shot: 1 latency + 3 messages a card; two-shot: 2 latencies + 1.5 messages. They cross
    where 1.5 messages take one latency: 10 us x 450e9 / (1.5 x 16384 B) = 183 tokens."""
    server = Server(step_model="roofline", gpu="H100-80G", model="Llama-3-70B", tensor_parallel=4)
    p = roofline_profile(server, efficiency=Efficiency(0.7, 0.85, 0.0, 0.0, 1.0))
    message_s = 8192 * 2 / 450e9
    assert p.comm_fixed_s == pytest.approx(160 * 10e-6)
    assert p.comm_one_shot_s_per_token == pytest.approx(160 * 3 * message_s)
    assert p.comm_s_per_token == pytest.approx(160 * 1.5 * message_s)
    step = roofline_step_params(p)
    for tokens in (1, 100, 183, 184, 4096):
        one = 160 * (10e-6 + 3 * message_s * tokens)
        two = 160 * (2 * 10e-6 + 1.5 * message_s * tokens)
        assert step_terms_nb(step, tokens, 0.0, 0.0)[2] == pytest.approx(min(one, two), rel=1e-9)
        assert (one <= two) == (tokens <= 183)


def test_attention_runs_at_the_16_bit_rate_under_fp8_weights():
    """FP8 weights: matmuls at the FP8 peak times the low-precision share, attention at the FP16 peak times the
    16-bit share (H100: 1,978.9 and 989.4 TFLOPS dense)."""
    eff = Efficiency(0.6, 0.8, 1.0, 0.0, 1.0, low_precision_compute=0.4)
    fp8 = roofline_profile(Server(step_model="roofline", gpu="H100-80G", model="Llama-3-8B", quant="fp8"),
                           efficiency=eff)
    fp16 = roofline_profile(Server(step_model="roofline", gpu="H100-80G", model="Llama-3-8B"), efficiency=eff)
    assert fp8.low_precision and not fp16.low_precision
    assert fp8.effective_flops_per_s == pytest.approx(1978.9e12 * 0.4)
    assert fp8.attention_flops_per_s == pytest.approx(989.4e12 * 0.6) == fp16.attention_flops_per_s
    assert fp16.effective_flops_per_s == pytest.approx(989.4e12 * 0.6)
    tokens, pairs = 4096, 4096 * 4097 / 2
    compute_s = tokens * fp8.matmul_flops_per_token / fp8.effective_flops_per_s \
        + pairs * fp8.attention_flops_per_context_token / fp8.attention_flops_per_s
    memory_s = (fp8.weight_bytes + fp8.kv_bytes_per_token * tokens) / fp8.effective_bytes_per_s
    assert step_time_s_nb(roofline_step_params(fp8), tokens, pairs, 0.0) == pytest.approx(
        max(compute_s, memory_s) + 0.001, rel=1e-12)


def test_the_serving_engine_sets_the_overhead_and_the_all_reduce_factor():
    """Family factors from calibration.csv, the overhead and all-reduce factor from the engine's engines.csv row;
    naming the default engine changes nothing."""
    family = load_table("calibration").loc["hopper"]
    for engine in load_table("engines").index:
        eff = efficiency_for("H100-80G", engine=engine)
        assert eff.overhead_ms == engine_row(engine)["overhead_ms"]
        assert eff.allreduce_factor == engine_row(engine)["allreduce_latency_factor"]
        assert (eff.compute, eff.bandwidth) == (family["compute_efficiency"], family["bandwidth_efficiency"])
    base = Server(step_model="roofline", gpu="H100-80G", model="Llama-3-8B")
    assert roofline_profile(base) == roofline_profile(Server(step_model="roofline", gpu="H100-80G",
                                                             model="Llama-3-8B", engine=Server.engine))


def test_an_unknown_engine_is_one_line_naming_the_choices():
    data = tomllib.loads((SCENARIOS / "example.toml").read_text())
    data["server"].update(step_model="roofline", engine="triton-fast")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(data)
    text = str(caught.value)
    assert "\n" not in text and text.startswith("server.engine = 'triton-fast'")
    assert all(name in text for name in load_table("engines").index)
