"""The KV cache each engine budgets at start-up, against the figures engines printed in published start-up logs
(never fitted on: each test says how far the budget is, and a known gap is a strict expected failure that turns red
the day it closes). The card's memory model is ``roofline.card_memory``; the engines' rules are in the Method page.

- SGLang (sgl-project mid-2025, vllm issue #21348): Qwen3-235B-A22B-FP8 on 4 x H100 80GB, --tp 4
  --mem-fraction-static 0.93: "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB".
- vLLM V1 (the same issue, July 2025, gpu_memory_utilization 0.9 then the default): the same model and cards:
  "Available KV cache memory: 8.11 GiB", "GPU KV cache size: 178,880 tokens".
- vLLM (PR #48322, 2026): Qwen3-8B BF16 on one RTX 4090, gpu_memory_utilization 0.9: 40,464 tokens with
  max_num_batched_tokens 2,048 and 36,720 with 8,192 (the profile run's activations grow with the budget).
- TensorRT-LLM (issue #6294, July 2025, trtllm-bench): Llama-3.1-8B FP8 weights and KV on one H100,
  free_gpu_memory_fraction 0.8, max_num_tokens 23,552, max_num_requests 4,096: "Allocated 52.51 GiB for max tokens
  in paged KV cache (860320)", a figure trtllm-bench capped (max_tokens 860,308): the memory allowed at least that.
"""

import pytest

import engine
from engine.hardware.roofline import kv_capacity_tokens, roofline_profile

WORKLOAD = {"num_requests": 1, "arrival": {"process": "poisson", "rate_per_s": 1.0},
            "classes": [{"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 1},
                         "output_tokens": {"dist": "constant", "value": 1}}]}
QWEN3_235B_4X_H100 = {"gpu": "H100-80G", "model": "Qwen3-235B-A22B", "quant": "fp8", "kv_quant": "bf16",
                      "tensor_parallel": 4, "max_batched_tokens": 8192, "max_batch_size": 1024}


def budget_tokens(**server) -> int:
    loaded = engine.load_scenario({"workload": WORKLOAD, "server": {"step_model": "roofline", **server}}).server
    return kv_capacity_tokens(loaded, roofline_profile(loaded))


def test_sglang_budgets_within_12_percent_of_its_log():
    """367,404 tokens logged; the budget is 9.7% above (the weights and the memory SGLang holds outside PyTorch
    at TP4 are the likely rest)."""
    tokens = budget_tokens(**QWEN3_235B_4X_H100, engine="sglang", gpu_memory_utilization=0.93)
    assert tokens == pytest.approx(367_404, rel=0.12)


def test_vllm_v1_budgets_within_25_percent_of_its_2025_log():
    """178,880 tokens logged; the budget is 22% above: vLLM then held 1.7 GiB a card more than this model counts,
    likely its MoE profile run's activations and its CUDA graphs."""
    tokens = budget_tokens(**QWEN3_235B_4X_H100, engine="vllm", gpu_memory_utilization=0.9)
    assert tokens == pytest.approx(178_880, rel=0.25)


def test_vllms_activation_share_grows_with_its_token_budget_as_logged():
    """40,464 - 36,720 = 3,744 tokens fewer for 6,144 more tokens per iteration; the budget loses 3,414 (9% less)."""
    small, large = (budget_tokens(gpu="RTX-4090", model="Qwen3-8B", quant="bf16", kv_quant="bf16", engine="vllm",
                                  gpu_memory_utilization=0.9, max_batched_tokens=budget, max_batch_size=256)
                    for budget in (2048, 8192))
    assert small - large == pytest.approx(40_464 - 36_720, rel=0.15)


@pytest.mark.xfail(strict=True, reason="known gap: on a 24 GiB card the 2026 vLLM keeps about 1.5 GiB less back "
                                       "than this model counts (its sampler reserve and the memory hidden from CUDA), "
                                       "so the budget is 28% short of the log")
def test_vllm_2026_budgets_within_15_percent_of_its_log_on_a_small_card():
    tokens = budget_tokens(gpu="RTX-4090", model="Qwen3-8B", quant="bf16", kv_quant="bf16", engine="vllm",
                           gpu_memory_utilization=0.9, max_batched_tokens=2048, max_batch_size=256)
    assert tokens == pytest.approx(40_464, rel=0.15)


def test_tensorrt_llm_budgets_at_least_its_capped_log():
    """At least the 860,320 tokens trtllm-bench capped the cache at, and no more than 2% over the 52.51 GiB it
    allocated for them would give were it the whole budget (870,404 tokens: 1.2% over)."""
    tokens = budget_tokens(gpu="H100-80G", model="Llama-3.1-8B", quant="fp8", kv_quant="fp8", engine="tensorrt-llm",
                           gpu_memory_utilization=0.8, max_batched_tokens=23_552, max_batch_size=4096)
    assert 860_320 <= tokens <= 860_320 * 1.02
