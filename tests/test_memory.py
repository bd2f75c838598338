"""A card's memory budgeted the way vLLM does (engine.hardware.roofline.card_memory): hand arithmetic for a
grouped-query and a latent-attention model, and published vLLM start-up figures."""

import pytest

from engine.hardware.roofline import (GIB, card_memory, kv_capacity_tokens, memory_breakdown_gib, memory_convention,
                                      roofline_profile)
from engine.scenario.caps import MIB
from engine.scenario.config import Server

# The measured conventions (data/hardware/serving_memory.csv); the start-up logs below check them.
SAMPLER_BYTES = memory_convention("sampler_bytes_per_logit")
HIDDEN = memory_convention("cuda_hidden_gib") * GIB
NON_TORCH_ONE_CARD = memory_convention("non_torch_gib_one_card") * GIB
NON_TORCH_TP = memory_convention("non_torch_gib_tensor_parallel") * GIB


def test_grouped_query_model_by_hand():
    """Llama-3-8B FP16 on one A100-80G at utilisation 0.9, 8,192 batched tokens, 256 sequences."""
    server = Server(step_model="roofline", gpu="A100-80G", model="Llama-3-8B", quant="fp16",
                    gpu_memory_utilization=0.9, max_batched_tokens=8192, max_batch_size=256)
    profile = roofline_profile(server)
    assert profile.parameters == 8_030_261_248
    usable = 0.9 * (81920 * MIB - HIDDEN)                     # nvidia-smi total less what CUDA never sees
    weights = 8_030_261_248 * 2
    activation = 8192 * (4 * 4096 + 2 * 14336) * 2 + 256 * 128256 * SAMPLER_BYTES
    kv_bytes = 32 * 2 * 8 * 128 * 2                           # layers x (K, V) x KV heads x head dim x 2 B
    expected = (usable - weights - activation - NON_TORCH_ONE_CARD) // kv_bytes
    assert kv_capacity_tokens(server, profile) == expected
    card = card_memory(server, profile, 1)
    assert card.activation == activation and card.weights == weights
    assert memory_breakdown_gib(server)["over by"] == 0


def test_a_model_too_large_shows_how_far_it_overflows():
    """Llama-3-70B BF16 on one A100-80G: no KV cache, and the bar's parts exceed the card by "over by"."""
    server = Server(step_model="roofline", gpu="A100-80G", model="Llama-3-70B", quant="bf16")
    card = card_memory(server, roofline_profile(server), 1)
    parts = memory_breakdown_gib(server)
    assert parts["KV cache"] == 0 and parts["over by"] * GIB == pytest.approx(card.weights - 0.9 * (
        card.total - HIDDEN) + card.activation + card.non_torch)


def test_latent_attention_is_copied_on_every_card():
    """DeepSeek-V3, FP8 weights (embedding and LM head in 16 bits), BF16 KV, on 8 x H200: every card holds
    the whole 576-value latent of every layer, so capacity is one card's KV memory / (61 x 576 x 2 B)."""
    server = Server(step_model="roofline", gpu="H200", model="DeepSeek-V3", quant="fp8", kv_quant="bf16",
                    tensor_parallel=8, gpu_memory_utilization=0.9, max_batched_tokens=8192, max_batch_size=256)
    profile = roofline_profile(server)
    embedding = 2 * 129280 * 7168
    weights_per_card = ((profile.parameters - embedding) * 1 + embedding * 2) / 8
    activation = 8192 * (4 * 7168 + 2 * 18432 / 8) * 2 + 256 * 129280 * SAMPLER_BYTES
    usable = 0.9 * (143771 * MIB - HIDDEN)
    expected = (usable - weights_per_card - activation - NON_TORCH_TP) // (61 * 576 * 2)
    assert profile.kv_bytes_per_token_per_card == 61 * 576 * 2
    assert kv_capacity_tokens(server, profile) == expected
    assert 600_000 < expected < 750_000  # ~45 GiB per card left for KV after ~78 GiB of weights; split 8 ways, 1/8


@pytest.mark.parametrize("tp, heads_per_card", [(1, 4), (2, 2), (4, 1), (8, 1)])
def test_kv_heads_split_over_cards_until_each_has_one(tp, heads_per_card):
    """Qwen2.5-7B has 4 KV heads: beyond 4 cards each card keeps a copy of one (as vLLM does)."""
    profile = roofline_profile(Server(step_model="roofline", gpu="H100-80G", model="Qwen2.5-7B",
                                      tensor_parallel=tp))
    assert profile.kv_bytes_per_token_per_card == 28 * 2 * heads_per_card * 128 * 2


@pytest.mark.parametrize("model, quant, tp, seqs, measured_gib, source", [
    # KV cache per card that vLLM printed at start-up ("the rest of the memory reserved for KV Cache is ...").
    ("Llama-3-8B", "bf16", 1, 1024, 51.38, "llm-d-benchmark empirical-vllm-memory-results.md, Llama-3.1-8B"),
    ("Llama-3-70B", "fp8", 2, 1024, 32.0, "llm-d-benchmark empirical-vllm-memory-results.md, Llama-3.3-70B FP8"),
    ("Llama-3-8B", "bf16", 1, 256, 53.29, "vllm-project/vllm PR #10511, Meta-Llama-3-8B, vLLM 0.6.5"),
])
def test_kv_memory_matches_vllm_start_up_logs(model, quant, tp, seqs, measured_gib, source):
    """H100 80GB at utilisation 0.9 with 8,192 batched tokens; within 3% (the logs' activation and non-torch
    terms vary by version by about 1 GiB: see serving_memory.csv)."""
    server = Server(step_model="roofline", gpu="H100-80G", model=model, quant=quant, kv_quant="bf16",
                    tensor_parallel=tp, gpu_memory_utilization=0.9, max_batched_tokens=8192, max_batch_size=seqs)
    kv_gib = card_memory(server, roofline_profile(server), tp).kv / GIB
    assert kv_gib == pytest.approx(measured_gib, rel=0.03), source


def test_llama_2_70b_on_two_a100s_holds_its_real_capacity():
    """The case the old "80 GB = 80e9 B" arithmetic got three times too small (13,847 tokens): Llama-2-70B FP16 on
    2 x A100-80G at 0.9 leaves ~5.5 GiB of KV per card, 163,840 B per token per card."""
    server = Server(step_model="roofline", gpu="A100-80G", model="Llama-2-70B", tensor_parallel=2,
                    gpu_memory_utilization=0.9)
    capacity = kv_capacity_tokens(server, roofline_profile(server))
    assert 33_000 < capacity < 40_000


def test_tensorrt_llm_gives_the_kv_cache_a_share_of_the_free_memory():
    """The same Llama-3-8B card under TensorRT-LLM: the KV cache is 0.9 of what the weights, the forward pass's
    activations, 4 B logits per sequence and vocabulary entry and the rest leave free (free_gpu_memory_fraction)."""
    server = Server(step_model="roofline", gpu="A100-80G", model="Llama-3-8B", quant="fp16", engine="tensorrt-llm",
                    gpu_memory_utilization=0.9, max_batched_tokens=8192, max_batch_size=256)
    profile = roofline_profile(server)
    weights = 8_030_261_248 * 2
    activation = 8192 * (4 * 4096 + 2 * 14336) * 2 + 256 * 128256 * 4
    free = 81920 * MIB - HIDDEN - weights - activation - NON_TORCH_ONE_CARD
    assert card_memory(server, profile, 1).kv == pytest.approx(0.9 * free)
    assert kv_capacity_tokens(server, profile) == int(0.9 * free // (32 * 2 * 8 * 128 * 2))
    vllm = Server(**{**server.__dict__, "engine": "vllm"})
    assert kv_capacity_tokens(server, profile) > kv_capacity_tokens(vllm, roofline_profile(vllm))


def test_sglang_keeps_its_share_for_weights_and_kv_as_its_start_up_log_shows():
    """SGLang 0.4.10 on 8 x B200 serving DeepSeek-R1 FP8 (TP8 + EP8, BF16 KV, its default mem_fraction_static on a
    B200: (183,359 - 32,768 MiB) / 183,359 MiB) logged max_total_num_tokens = 980,344 (a published deployment guide
    for DeepSeek-R1 FP8 and NVFP4 on B200, image lmsysorg/sglang:v0.4.10.post1-cu128-b200). Its share holds the
    weights and the KV cache only: counting its 15 GiB activation peak inside the share, as vLLM does, would give
    18% fewer tokens. Within 10% (the log's free memory after start-up is not given)."""
    server = Server(step_model="roofline", gpu="B200", model="DeepSeek-R1", quant="fp8", kv_quant="bf16",
                    engine="sglang", tensor_parallel=8, expert_parallel=True,
                    gpu_memory_utilization=round((183_359 - 32_768) / 183_359, 4), max_batched_tokens=16_384,
                    max_batch_size=3063)
    assert kv_capacity_tokens(server, roofline_profile(server)) == pytest.approx(980_344, rel=0.10)
    memory = card_memory(server, roofline_profile(server), 8)
    assert memory.kv == pytest.approx(server.gpu_memory_utilization * (memory.total - memory.hidden - memory.non_torch)
                                      - memory.weights, rel=1e-12)
