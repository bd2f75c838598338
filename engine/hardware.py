"""GPU, model and weight-format tables, and the roofline step-time coefficients.

The tables live in ``data/hardware/*.csv`` (one row per item, with ``source``
and ``as_of``); nothing here hard-codes a hardware number. ``roofline_profile``
derives, for one (GPU, model, quant), the per-token coefficients the compiled
loop needs, and ``kv_capacity_tokens`` the KV-cache capacity left after weights
and the activation reserve. Formulas (units in the names):

- parameters = L * (h*n_h*d [Q] + 2*h*n_kv*d [K,V] + n_h*d*h [O] + 3*h*I [MLP] + 2*h [norms])
  + 2 * vocab * h [embedding + untied lm_head] + h [final norm]
- mixture of experts (E experts, k per token): the MLP term becomes E * 3*h*I + h*E [router]; a token
  uses k experts, and an iteration of T tokens reads the weights of the E * (1 - (1 - k/E)^T) experts
  it is expected to touch in each layer
- matmul FLOPs per token = 2 * (parameters - vocab*h)       (embedding lookup is not a matmul)
- attention FLOPs per (token, context token) = 4 * L * n_h * d   (Q.K^T and A.V)
- KV bytes per token = 2 [K and V] * L * n_kv * d * 2 bytes (FP16 cache)
- weight bytes read per iteration = (parameters - vocab*h) * bytes per weight

Tensor parallelism over T cards divides weights, KV, FLOP/s and bandwidth by T and adds two
all-reduces of the batch's activations per layer (ring: 2 (T-1)/T x tokens x h x 2 B over the
per-direction link bandwidth, plus a fixed latency each), not overlapped with compute.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .config import Server
from .errors import ScenarioError
from .steptime import ROOFLINE, step_params

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "hardware"
KV_CACHE_BYTES_PER_VALUE = 2  # FP16/BF16 KV cache
ACTIVATION_BYTES = 2  # FP16 activations
LOGIT_BYTES = 4  # FP32 logits
GIB = 1024 ** 3


@functools.lru_cache(maxsize=None)
def load_table(name: str) -> pd.DataFrame:
    """One table from ``data/hardware/NAME.csv``, indexed by its first column."""
    frame = pd.read_csv(DATA_DIR / f"{name}.csv")
    return frame.set_index(frame.columns[0])


def _row(table: str, key: str, field: str) -> pd.Series:
    frame = load_table(table)
    if key not in frame.index:
        raise ScenarioError(f"server.{field} = {key!r} is not in data/hardware/{table}.csv; "
                            f"choose one of {', '.join(frame.index)}")
    return frame.loc[key]


@dataclass(frozen=True)
class RooflineProfile:
    """Per-iteration cost coefficients for one GPU, model and weight format."""

    parameters: float
    active_parameters: float            # used by one token (all of them for a dense model)
    weight_bytes: float                 # matmul weights read per iteration, experts excluded
    expert_bytes: float                 # one expert's weights in all layers (mixture of experts)
    experts: int
    experts_per_token: int
    resident_weight_bytes: float        # bytes of all weights in GPU memory (incl. embedding)
    kv_bytes_per_token: float
    matmul_flops_per_token: float
    attention_flops_per_context_token: float
    effective_flops_per_s: float        # peak tensor throughput x compute efficiency
    effective_bytes_per_s: float        # HBM bandwidth x bandwidth efficiency
    iteration_overhead_s: float
    memory_bytes: float                 # all cards of the server together
    comm_s_per_token: float             # tensor-parallel all-reduce time per batched token
    comm_fixed_s: float                 # tensor-parallel all-reduce latency per iteration
    activation_bytes_per_token: float   # transient activations of one batched token
    logit_bytes_per_sequence: float


def roofline_profile(server: Server, tensor_parallel: int | None = None) -> RooflineProfile:
    """Coefficients of the roofline step-time model for ``server.gpu/model/quant`` over
    ``tensor_parallel`` cards (default: ``server.tensor_parallel``)."""
    tp = tensor_parallel or server.tensor_parallel
    gpu = _row("gpus", server.gpu, "gpu")
    model = _row("models", server.model, "model")
    quant = _row("quant", server.quant, "quant")
    L, h, n_h, n_kv, d = (int(model[k]) for k in ("layers", "hidden", "heads", "kv_heads", "head_dim"))
    inter, vocab = int(model["intermediate"]), int(model["vocab"])
    experts, per_token = int(model["experts"]), int(model["experts_per_token"])
    expert_params = 3 * h * inter  # one MLP (gate, up, down)
    attention_params = h * n_h * d + 2 * h * n_kv * d + n_h * d * h
    if experts:
        layer_params = attention_params + experts * expert_params + h * experts + 2 * h
        active_layer_params = attention_params + per_token * expert_params + h * experts + 2 * h
    else:
        layer_params = active_layer_params = attention_params + expert_params + 2 * h
    parameters = L * layer_params + 2 * vocab * h + h
    matmul_params = parameters - vocab * h
    active_matmul_params = L * active_layer_params + vocab * h + h
    peak_column = {"fp16": "fp16_tflops", "fp8": "fp8_tflops", "int8": "int8_tops"}[quant["compute"]]
    peak = gpu[peak_column]
    if pd.isna(peak):
        raise ScenarioError(f"server.quant = {server.quant!r} needs {quant['compute']} tensor cores, which "
                            f"{server.gpu} does not have; choose fp16, bf16 or int4 (or another GPU)")
    bytes_per_weight = float(quant["weight_bytes_per_param"])
    link_bytes_per_s = float(gpu["interconnect_gb_s"]) * 1e9 / 2  # the table gives both directions
    allreduces = 2 * L
    return RooflineProfile(
        parameters=float(parameters),
        active_parameters=float(active_matmul_params + vocab * h),
        weight_bytes=(matmul_params - L * experts * expert_params) * bytes_per_weight,
        expert_bytes=L * expert_params * bytes_per_weight if experts else 0.0,
        experts=experts,
        experts_per_token=per_token,
        resident_weight_bytes=parameters * bytes_per_weight,
        kv_bytes_per_token=float(2 * L * n_kv * d * KV_CACHE_BYTES_PER_VALUE),
        matmul_flops_per_token=2.0 * active_matmul_params,
        attention_flops_per_context_token=4.0 * L * n_h * d,
        effective_flops_per_s=tp * float(peak) * 1e12 * float(gpu["compute_efficiency"]),
        effective_bytes_per_s=tp * float(gpu["mem_bw_tb_s"]) * 1e12 * float(gpu["bandwidth_efficiency"]),
        iteration_overhead_s=float(gpu["iteration_overhead_ms"]) / 1000.0,
        memory_bytes=tp * float(gpu["memory_gb"]) * 1e9,
        comm_s_per_token=allreduces * 2 * (tp - 1) / tp * h * ACTIVATION_BYTES / link_bytes_per_s,
        comm_fixed_s=allreduces * float(gpu["allreduce_latency_us"]) * 1e-6 if tp > 1 else 0.0,
        activation_bytes_per_token=float((4 * h + 2 * inter) * ACTIVATION_BYTES),
        logit_bytes_per_sequence=float(vocab * LOGIT_BYTES),
    )


def roofline_step_params(profile: RooflineProfile) -> tuple:
    """The compiled loop's step tuple for ``profile``."""
    return step_params(ROOFLINE, matmul_flops_per_token=profile.matmul_flops_per_token,
                       attention_flops_per_context_token=profile.attention_flops_per_context_token,
                       weight_bytes=profile.weight_bytes, kv_bytes_per_token=profile.kv_bytes_per_token,
                       flops_per_s=profile.effective_flops_per_s, bytes_per_s=profile.effective_bytes_per_s,
                       overhead_s=profile.iteration_overhead_s, comm_s_per_token=profile.comm_s_per_token,
                       comm_fixed_s=profile.comm_fixed_s, expert_bytes=profile.expert_bytes,
                       experts=profile.experts, experts_per_token=profile.experts_per_token)


def activation_reserve_bytes(server: Server, profile: RooflineProfile, tensor_parallel: int) -> float:
    """Memory held back for activations on all cards: the given GiB per card, or an estimate.

    Estimate per card = max_batched_tokens x (4*h + 2*I) x 2 B (residual, norm, attention and MLP
    intermediates of every batched token) + max_batch_size x vocab x 4 B (FP32 logits); every card
    keeps the full residual stream, so the estimate is not divided by the tensor-parallel degree.
    """
    if server.activation_reserve_gib is not None:
        return tensor_parallel * server.activation_reserve_gib * GIB
    return tensor_parallel * (server.max_batched_tokens * profile.activation_bytes_per_token
                              + server.max_batch_size * profile.logit_bytes_per_sequence)


def _free_kv_bytes(server: Server, profile: RooflineProfile, tensor_parallel: int) -> float:
    """Bytes left for the KV cache on ``tensor_parallel`` cards described by ``profile``."""
    return (profile.memory_bytes * server.gpu_memory_utilization - profile.resident_weight_bytes
            - activation_reserve_bytes(server, profile, tensor_parallel))


TP_DEGREES = (1, 2, 4, 8)


def kv_capacity_tokens(server: Server, profile: RooflineProfile) -> int:
    """KV-cache tokens that fit: (memory x utilisation - weights - reserve) / KV bytes per token.

    A model that leaves no room raises ``ScenarioError`` naming the smallest tensor-parallel degree
    that would fit (or the other fixes when none up to 8 does).
    """
    tp = server.tensor_parallel
    one_block = profile.kv_bytes_per_token * server.block_size_tokens
    free = _free_kv_bytes(server, profile, tp)
    if free < one_block:
        usable = profile.memory_bytes * server.gpu_memory_utilization
        reserve = activation_reserve_bytes(server, profile, tp)
        fits = [d for d in TP_DEGREES if d > tp and
                _free_kv_bytes(server, roofline_profile(server, d), d) >= one_block]
        fix = (f"set server.tensor_parallel = {fits[0]} (the smallest that fits), or choose a lower-bit quant "
               f"or a larger GPU") if fits else "choose a lower-bit quant, a smaller model or a larger GPU"
        raise ScenarioError(
            f"server.model = {server.model!r} ({server.quant}) does not fit on {tp} x {server.gpu}: weights "
            f"{profile.resident_weight_bytes / GIB:.1f} GiB + activation reserve {reserve / GIB:.1f} GiB leave "
            f"no KV cache in {usable / GIB:.1f} GiB usable (gpu_memory_utilization = "
            f"{server.gpu_memory_utilization}); {fix}")
    return int(free // profile.kv_bytes_per_token)
