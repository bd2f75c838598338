"""GPU, model and weight-format tables, and the roofline step-time coefficients.

The tables live in ``data/hardware/*.csv`` (one row per item, with ``source``
and ``as_of``); nothing here hard-codes a hardware number. ``roofline_profile``
derives, for one (GPU, model, quant, KV format), the per-token coefficients the
compiled loop needs, and ``kv_capacity_tokens`` the KV-cache capacity left after
weights and the activation reserve. Formulas (units in the names):

- attention parameters per layer: grouped-query h*n_h*d [Q] + 2*h*n_kv*d [K,V] + n_h*d*h [O];
  multi-head latent (MLA, DeepSeek-V3): h*q_r + q_r + q_r*n_h*(d + d_rope) [Q down, norm, up]
  + h*(kv_r + d_rope) + kv_r + kv_r*n_h*(d + d_v) [KV down, norm, up] + n_h*d_v*h [O]
- MLP per layer: 3*h*I (gate, up, down); a mixture-of-experts layer has E routed experts of 3*h*I_e,
  S shared ones and a router h*E, and a token uses k routed + S shared; the first ``dense_layers``
  layers of a MoE model are dense. An iteration of T tokens reads the weights of the
  E * (1 - (1 - k/E)^T) routed experts it is expected to touch in each MoE layer
- parameters = L * (attention + MLP + 2*h [norms]) + 2 * vocab * h [embedding + untied lm_head] + h
- matmul FLOPs per token = 2 * (active parameters - vocab*h)      (embedding lookup is not a matmul)
- attention FLOPs per (token, context token) = 2 * L * n_h * (score dim + value dim): 4 * L * n_h * d
  for grouped-query attention; MLA in the absorbed form MLA-aware engines use: score dim kv_r + d_rope,
  value dim kv_r
- KV bytes per token = cached values per layer x L x bytes per value of ``server.kv_quant``:
  2 * n_kv * d (keys and values), or kv_r + d_rope for MLA (one compressed latent)
- weight bytes read per iteration = non-expert matmul parameters * bytes per weight (+ touched experts)
- windowed layers (``sliding_layers`` of them attend to the last ``sliding_window`` tokens only): with a window of
  at most ``SHORT_WINDOW_TOKENS`` (gpt-oss: 128 on every other layer) their cache and attention are left out of the
  per-token KV bytes and attention FLOPs (each sequence holds at most a window there: for gpt-oss-120b 4.5 MiB of
  FP16 KV, what 128 tokens of the full layers hold); a longer window (Mistral-7B's 4,096, Llama-4's 8,192-token
  chunks) counts as full attention, exact up to the window and an upper bound past it

Tensor parallelism over T cards divides weights, KV, FLOP/s and bandwidth by T and adds two
all-reduces of the batch's activations (tokens x h x 2 B) per layer, not overlapped with compute, each the
faster of one-shot (one latency, (T-1) messages per card over the per-direction link bandwidth) and two-shot
(two latencies, 2 (T-1)/T messages: reduce-scatter and all-gather); ``steptime`` takes the minimum. A model that
normalises queries and keys over all heads at once (``qk_norm_all_reduce``: MiniMax-M2, whose heads tensor
parallelism splits) adds a third all-reduce a layer, of two numbers a token: one latency.

Expert parallelism (``server.expert_parallel``) splits a MoE model's experts whole over the T cards: each MoE layer
replaces its MLP all-reduce by an all-to-all dispatch and combine (two latencies; a token's activations go to the
T (1 - (1 - 1/T)^k) distinct cards of its k experts, all but its own over the link, each card sending for its 1/T
of the batch), and the iteration waits for the busiest card: expert bytes and expert FLOPs are counted
``server.expert_imbalance`` times. With data-parallel attention (``server.attention_data_parallel``) each card runs
attention and the dense layers for 1/T of the sequences: no all-reduce, every card holds and reads all non-expert
weights, and the KV cache is split by sequences (a latent held once, not on every card). One scheduler stands for
the T ranks: their batches are taken as equal (an estimate: real ranks differ by their sequences' lengths).

Matmuls run at the peak of the weight format's compute format (``quant.csv``) times the family's share for it
(``Efficiency.matmul_share``: 16-bit, or 8- and 4-bit); attention at the 16-bit peak times the 16-bit share,
as engines keep attention in 16 bits (FP8 attention kernels exist but are not the default).

A GPU slice (``gpu_slices.csv``: MIG instances and fractional cloud slices) is its parent card with
compute scaled by its SM share and memory and bandwidth by its memory share; slices have no link
between them, so they serve with tensor_parallel = 1 (use fleet replicas for more).
"""


from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..scenario.caps import MIB
from ..scenario.config import Server
from ..scenario.errors import ScenarioError
from .calibration_store import saved_for
from .steptime import HARD_MAX, ROOFLINE, step_params
from .tables import (PEAK_COLUMNS, Efficiency, engine_row, gpu_row, is_slice, link_domain_cards, load_table,
                     shipped_efficiency, table_row, tensor_parallel_degrees)

ACTIVATION_BYTES = 2  # FP16 activations
SHORT_WINDOW_TOKENS = 512  # a windowed layer's cache at most this long is left out of KV per token (module docstring)
EMBEDDING_BYTES = 2  # embedding and LM head stay 16-bit in quantised checkpoints (FP8, INT8, AWQ/GPTQ INT4)
GIB = 1024 * MIB
# engines.csv memory_budget: gpu_memory_utilization of the card for weights, activations and KV (vLLM); of the card
# for weights and KV only, activations and CUDA graphs in the rest (SGLang); else of the memory left free (TensorRT-LLM)
TOTAL_SHARE, STATIC_SHARE = "total-share", "static-share"


def efficiency_for(gpu: str, calibration: str = "", engine: str = Server.engine) -> Efficiency:
    """The fitted efficiency of ``gpu``'s family under serving ``engine``: the saved calibration named
    ``calibration`` when given (``calibration_store``: all factors fitted on the user's own engine), else the
    shipped one (``calibration.csv`` for the family, slices using their parent's; ``engines.csv`` for the
    engine)."""
    if calibration:
        return saved_for(calibration, gpu).efficiency
    return shipped_efficiency(gpu, engine)


@dataclass(frozen=True)
class ModelShape:
    """Parameter counts and per-token sizes of one model (formulas in the module docstring)."""

    parameters: float                 # all weights, embedding included
    matmul_parameters: float          # all weights a matmul reads (no embedding lookup), experts included
    active_matmul_parameters: float   # used by one token
    expert_parameters: float          # one routed expert in all MoE layers
    kv_values_per_token: float        # cached values per token, all layers
    attention_flops_per_context_token: float
    kv_heads: int                     # key/value heads per layer (0 for MLA: one latent, copied on every card)
    embedding_parameters: float       # embedding + LM head


def kv_values_per_token_per_card(shape: ModelShape, tensor_parallel: int) -> float:
    """Cached values per token on one card: key/value heads split over the cards (each card keeps at least one,
    so heads are copied when there are more cards than heads, as vLLM does); an MLA latent is copied whole."""
    if shape.kv_heads == 0:
        return shape.kv_values_per_token
    return shape.kv_values_per_token / shape.kv_heads * max(1, shape.kv_heads // tensor_parallel)


def model_shape(model: pd.Series) -> ModelShape:
    """Parameter and KV arithmetic of a ``models.csv`` row."""
    L, h, n_h, n_kv, d = (int(model[k]) for k in ("layers", "hidden", "heads", "kv_heads", "head_dim"))
    inter, vocab = int(model["intermediate"]), int(model["vocab"])
    experts, per_token = int(model["experts"]), int(model["experts_per_token"])
    if model["attention"] == "mla":
        q_r, kv_r, d_rope, d_v = (int(model[k]) for k in ("q_lora_rank", "kv_lora_rank", "rope_head_dim",
                                                           "v_head_dim"))
        attention = (h * q_r + q_r + q_r * n_h * (d + d_rope) + h * (kv_r + d_rope) + kv_r
                     + kv_r * n_h * (d + d_v) + n_h * d_v * h)
        kv_values_per_layer = kv_r + d_rope
        score_dim, value_dim = kv_r + d_rope, kv_r
    else:
        attention = h * n_h * d + 2 * h * n_kv * d + n_h * d * h
        kv_values_per_layer = 2 * n_kv * d
        score_dim = value_dim = d
    short_window = 0 < int(model.get("sliding_window", 0)) <= SHORT_WINDOW_TOKENS
    context_layers = L - int(model.get("sliding_layers", 0)) * short_window  # layers that cache every token
    dense_layer = attention + 3 * h * inter + 2 * h
    if experts:
        expert = 3 * h * int(model["expert_intermediate"])
        shared = int(model["shared_experts"]) * expert
        moe_layers = L - int(model["dense_layers"])
        moe_layer = attention + experts * expert + shared + h * experts + 2 * h
        active_moe_layer = attention + per_token * expert + shared + h * experts + 2 * h
    else:
        expert = moe_layers = moe_layer = active_moe_layer = 0
    dense_layers = L - moe_layers
    layers = dense_layers * dense_layer + moe_layers * moe_layer
    tables = 1 if int(model.get("tied_embeddings", 0)) else 2  # a tied LM head reads the embedding table
    parameters = layers + tables * vocab * h + h
    return ModelShape(
        parameters=float(parameters),
        matmul_parameters=float(layers + vocab * h + h),
        active_matmul_parameters=float(dense_layers * dense_layer + moe_layers * active_moe_layer + vocab * h + h),
        expert_parameters=float(moe_layers * expert),
        kv_values_per_token=float(context_layers * kv_values_per_layer),
        attention_flops_per_context_token=2.0 * context_layers * n_h * (score_dim + value_dim),
        kv_heads=0 if model["attention"] == "mla" else n_kv,
        embedding_parameters=float(tables * vocab * h),
    )


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
    kv_bytes_per_token: float           # on all cards together (an MLA latent counts once per card)
    kv_bytes_per_token_per_card: float
    matmul_flops_per_token: float
    attention_flops_per_context_token: float
    effective_flops_per_s: float        # peak tensor throughput x compute efficiency
    effective_bytes_per_s: float        # HBM bandwidth x bandwidth efficiency
    attention_flops_per_s: float        # 16-bit tensor throughput x the 16-bit compute efficiency
    low_precision: bool                 # matmuls in an 8- or 4-bit compute format (FP8, INT8, FP4)
    iteration_overhead_s: float
    sharpness: float                    # of the smooth maximum of compute and memory time
    card_memory_bytes: float            # one card's total (nvidia-smi)
    comm_s_per_token: float             # tensor-parallel all-reduce time per batched token, two-shot
    comm_one_shot_s_per_token: float    # the same, one-shot
    comm_fixed_s: float                 # tensor-parallel all-reduce latency per iteration (once per algorithm step)
    activation_bytes_per_token: float   # forward-pass activations of one batched token on one card
    vocab: int
    draft_weight_bytes: float = 0.0           # speculative decoding's draft model: weights one draft step reads
    draft_resident_weight_bytes: float = 0.0  # and holds in GPU memory (0: no draft model)
    replicated_weight_bytes: float = 0.0      # of resident_weight_bytes, held whole on every card (data-parallel
    #                                           attention's non-expert weights); the rest is split over the cards
    all_to_all_fixed_s: float = 0.0           # expert parallelism: latency of an iteration's dispatches and combines
    all_to_all_s_per_token: float = 0.0       # and their transfer time per batched token

    @property
    def draft_cost(self) -> float:
        """One draft step as a share of a plain decode iteration: the draft's weights over the served model's (a
        decode iteration is bound by reading its weights)."""
        return self.draft_weight_bytes / self.weight_bytes


def model_text(profile: RooflineProfile) -> str:
    """The model's size in one line: parameters, those a token uses (its embedding row included, as most model
    cards count them; gpt-oss's leaves it out), weight and KV bytes."""
    return (f"{profile.parameters / 1e9:,.1f} billion parameters, {profile.active_parameters / 1e9:,.1f} billion "
            f"active per token (embedding row included); weights {profile.resident_weight_bytes / GIB:,.1f} GiB; "
            f"KV cache {profile.kv_bytes_per_token / 1024:,.1f} KiB per token on all cards")


def with_efficiency(peak: RooflineProfile, efficiency: Efficiency) -> RooflineProfile:
    """``peak`` (a ``peak_profile``) at ``efficiency``: throughputs scaled down, overhead, sharpness and the
    all-reduce latency factor applied. The calibration fit tries candidates this way, without the tables."""
    return dataclasses.replace(
        peak, effective_flops_per_s=peak.effective_flops_per_s * efficiency.matmul_share(peak.low_precision),
        attention_flops_per_s=peak.attention_flops_per_s * efficiency.compute,
        effective_bytes_per_s=peak.effective_bytes_per_s * efficiency.bandwidth,
        iteration_overhead_s=efficiency.overhead_ms / 1000.0, sharpness=efficiency.sharpness,
        comm_fixed_s=peak.comm_fixed_s * efficiency.allreduce_factor,
        all_to_all_fixed_s=peak.all_to_all_fixed_s * efficiency.allreduce_factor)


def roofline_profile(server: Server, tensor_parallel: int | None = None,
                     efficiency: Efficiency | None = None) -> RooflineProfile:
    """Coefficients of the roofline step-time model for ``server.gpu/model/quant/kv_quant`` over
    ``tensor_parallel`` cards (default: ``server.tensor_parallel``), at ``efficiency`` (default: the
    GPU family's calibration)."""
    return with_efficiency(peak_profile(server, tensor_parallel or server.tensor_parallel),
                           efficiency or efficiency_for(server.gpu, server.calibration, server.engine))


@functools.lru_cache(maxsize=1024)
def peak_profile(server: Server, tp: int) -> RooflineProfile:
    """The profile of ``server`` on ``tp`` cards at the datasheet peaks, with no per-iteration overhead, the hard
    maximum of compute and memory time and ``gpus.csv``'s all-reduce latency."""
    gpu = gpu_row(server.gpu)
    model = model_row(server)
    quant = table_row("quant", server.quant, "quant")
    kv_bytes_per_value = float(table_row("kv_quant", server.kv_quant, "kv_quant")["bytes_per_value"])
    if tp > 1 and is_slice(server.gpu):
        raise ScenarioError(f"server.tensor_parallel = {tp}: {server.gpu} is a {gpu['kind']} slice with no link to "
                            f"other slices; set tensor_parallel = 1 and add fleet.replicas instead")
    if tp > link_domain_cards(server.gpu):
        raise ScenarioError(f"server.tensor_parallel = {tp}: one link joins at most {link_domain_cards(server.gpu)} "
                            f"{server.gpu} cards; choose {link_domain_cards(server.gpu)} or fewer and add "
                            f"fleet.replicas (a GB200 NVL72 rack joins 72)")
    shape = model_shape(model)
    h, vocab, experts = int(model["hidden"]), int(model["vocab"]), int(model["experts"])
    if server.expert_parallel and not experts:
        raise ScenarioError(f"server.expert_parallel = true needs a mixture-of-experts model; {server.model} has no "
                            f"experts: turn it off")
    peak = gpu[PEAK_COLUMNS[quant["compute"]]]
    if pd.isna(peak):
        raise ScenarioError(f"server.quant = {server.quant!r} needs {quant['compute']} tensor cores, which "
                            f"{server.gpu} does not have; choose fp16, bf16 or int4 (or another GPU)")
    bytes_per_weight = float(quant["weight_bytes_per_param"])
    draft_read, draft_resident = _draft_weight_bytes(server, vocab, bytes_per_weight)
    ep = server.expert_parallel and tp > 1
    dp = ep and server.attention_data_parallel
    layers, per_token = int(model["layers"]), int(model["experts_per_token"])
    moe_layers = layers - int(model["dense_layers"]) if experts else 0
    imbalance = server.expert_imbalance if ep else 1.0  # split by tensor parallelism, every card holds 1/tp of each
    active_expert = per_token * shape.expert_parameters
    read, resident = _weight_bytes(shape, h, vocab, bytes_per_weight)  # all experts read: take them out
    expert_bytes = experts * shape.expert_parameters * bytes_per_weight
    non_expert = read - expert_bytes
    if dp:  # each card caches its own sequences whole: a latent once, heads unsplit
        kv_total = shape.kv_values_per_token * kv_bytes_per_value
        kv_per_card = kv_total / tp
    else:
        kv_per_card = kv_values_per_token_per_card(shape, tp) * kv_bytes_per_value
        kv_total = tp * kv_per_card
    link_bytes_per_s = float(gpu["interconnect_gb_s"]) * 1e9 / 2 if tp > 1 else 1.0  # both directions listed
    latency_s = float(gpu["allreduce_latency_us"]) * 1e-6
    # all-reduces: two per layer (attention, MLP); under expert parallelism the MoE layers' MLP all-reduce becomes an
    # all-to-all dispatch and combine, and data-parallel attention needs none
    allreduces = 0 if dp else (layers + layers - moe_layers if ep else 2 * layers)
    # a model that normalises queries and keys over all heads at once all-reduces their statistics (two numbers a
    # token) in every layer: a latency each, the bytes negligible
    norm_allreduces = 0 if dp else layers * int(model["qk_norm_all_reduce"])
    # a token goes to the distinct cards holding its experts, tp (1 - (1 - 1/tp)^k) of them, all but its own remote;
    # each card sends and receives for its 1/tp share of the batch
    remote_cards = tp * (1.0 - (1.0 - 1.0 / tp) ** per_token) * (tp - 1) / tp if ep else 0.0
    return RooflineProfile(
        parameters=shape.parameters,
        active_parameters=shape.active_matmul_parameters + shape.embedding_parameters - vocab * h,
        weight_bytes=non_expert * (tp if dp else 1),
        expert_bytes=shape.expert_parameters * bytes_per_weight * imbalance,
        experts=experts,
        experts_per_token=per_token,
        resident_weight_bytes=resident,
        replicated_weight_bytes=resident - expert_bytes if dp else 0.0,
        kv_bytes_per_token=kv_total,
        kv_bytes_per_token_per_card=kv_per_card,
        matmul_flops_per_token=2.0 * (shape.active_matmul_parameters + (imbalance - 1.0) * active_expert),
        attention_flops_per_context_token=shape.attention_flops_per_context_token,
        effective_flops_per_s=tp * float(peak) * 1e12,
        attention_flops_per_s=tp * float(gpu[PEAK_COLUMNS["fp16"]]) * 1e12,
        low_precision=quant["compute"] != "fp16",
        effective_bytes_per_s=tp * float(gpu["mem_bw_tb_s"]) * 1e12,
        iteration_overhead_s=0.0,
        sharpness=HARD_MAX,
        card_memory_bytes=float(gpu["memory_mib"]) * MIB,
        comm_s_per_token=allreduces * 2 * (tp - 1) / tp * h * ACTIVATION_BYTES / link_bytes_per_s,
        comm_one_shot_s_per_token=allreduces * (tp - 1) * h * ACTIVATION_BYTES / link_bytes_per_s,
        comm_fixed_s=(allreduces + norm_allreduces) * latency_s if tp > 1 else 0.0,
        all_to_all_fixed_s=2 * moe_layers * latency_s if ep else 0.0,
        all_to_all_s_per_token=2 * moe_layers * remote_cards * h * ACTIVATION_BYTES / tp / link_bytes_per_s,
        activation_bytes_per_token=(4 * h + 2 * int(model["intermediate"]) / tp) * ACTIVATION_BYTES,
        vocab=vocab,
        draft_weight_bytes=draft_read,
        draft_resident_weight_bytes=draft_resident,
    )


def model_row(server: Server) -> pd.Series:
    """``server.model``'s shape as a ``models.csv`` row: the user's ``server.model_config`` when ``server.model``
    names it, else the shipped row."""
    if server.own_model is None:
        return table_row("models", server.model, "model")
    row = dataclasses.asdict(server.own_model)
    return pd.Series({"model": row.pop("name"), **row, "tied_embeddings": int(row["tied_embeddings"]),
                      "qk_norm_all_reduce": int(row["qk_norm_all_reduce"])})


def has_experts(server: Server) -> bool:
    """True when ``server.model`` is a mixture of experts (expert parallelism can split it)."""
    return int(model_row(server)["experts"]) > 0


def _weight_bytes(shape: ModelShape, h: int, vocab: int, bytes_per_weight: float) -> tuple[float, float]:
    """(bytes of the matmul weights an iteration reads if it touches every expert, bytes of all weights resident):
    the LM head and the embedding stay 16-bit."""
    read = (shape.matmul_parameters - vocab * h) * bytes_per_weight + vocab * h * EMBEDDING_BYTES
    resident = (shape.parameters - shape.embedding_parameters) * bytes_per_weight \
        + shape.embedding_parameters * EMBEDDING_BYTES
    return read, resident


def _draft_weight_bytes(server: Server, vocab: int, bytes_per_weight: float) -> tuple[float, float]:
    """``_weight_bytes`` of ``server.speculative.draft_model`` in the served model's weight format; (0, 0) when no
    draft model is named. The draft must share the served model's vocabulary (its tokens are verified as is)."""
    spec = server.speculative
    if spec is None or not spec.draft_model:
        return 0.0, 0.0
    row = table_row("models", spec.draft_model, "speculative.draft_model")
    if int(row["experts"]) or row["attention"] != "gqa":
        raise ScenarioError(f"server.speculative.draft_model = {spec.draft_model!r} is not a small dense model; "
                            f"choose one such as Llama-3.2-1B, or give draft_cost instead")
    if int(row["vocab"]) != vocab:
        raise ScenarioError(f"server.speculative.draft_model = {spec.draft_model!r} has a {int(row['vocab'])}-token "
                            f"vocabulary, {server.model!r} {vocab}: a draft must share the served model's tokenizer; "
                            f"choose another draft model or give draft_cost")
    return _weight_bytes(model_shape(row), int(row["hidden"]), vocab, bytes_per_weight)


def roofline_step_params(profile: RooflineProfile) -> np.ndarray:
    """The compiled loop's step row for ``profile``."""
    return step_params(ROOFLINE, matmul_flops_per_token=profile.matmul_flops_per_token,
                       attention_flops_per_context_token=profile.attention_flops_per_context_token,
                       weight_bytes=profile.weight_bytes, kv_bytes_per_token=profile.kv_bytes_per_token,
                       flops_per_s=profile.effective_flops_per_s, bytes_per_s=profile.effective_bytes_per_s,
                       overhead_s=profile.iteration_overhead_s, comm_s_per_token=profile.comm_s_per_token,
                       comm_fixed_s=profile.comm_fixed_s, expert_bytes=profile.expert_bytes,
                       experts=profile.experts, experts_per_token=profile.experts_per_token,
                       sharpness=profile.sharpness, comm_one_shot_s_per_token=profile.comm_one_shot_s_per_token,
                       attention_flops_per_s=profile.attention_flops_per_s,
                       all_to_all_fixed_s=profile.all_to_all_fixed_s,
                       all_to_all_s_per_token=profile.all_to_all_s_per_token)


@functools.lru_cache(maxsize=None)
def memory_convention(name: str) -> float:
    """One value of ``data/hardware/serving_memory.csv`` (what a serving engine keeps besides weights and KV)."""
    return float(load_table("serving_memory").loc[name, "value"])


@dataclass(frozen=True)
class CardMemory:
    """One card's memory as the serving engine budgets it, in bytes (``engines.csv``'s ``memory_budget``).

    ``total-share`` (vLLM's gpu_memory_utilization): of the card's total (nvidia-smi), CUDA sees all but
    ``hidden``; the server may use ``gpu_memory_utilization`` of that, the rest is ``held_back`` (CUDA graphs live
    there); from its share it subtracts the weights, the activation peak of its profile run and the memory outside
    PyTorch (``non_torch``), and ``card_reserve_share`` of the card where the engine keeps a margin (ATOM: 2%);
    what is left is the KV cache (negative when the model does not fit). ``static-share``
    (SGLang's mem_fraction_static): the share of what is free once CUDA and the collectives are set up (visible -
    non_torch) holds the weights and the KV cache only, so KV = share x (visible - non_torch) - weights, and the
    activations and CUDA graphs live in the rest (``held_back`` is what the activation peak leaves of it).
    ``free-share`` (TensorRT-LLM's free_gpu_memory_fraction): the KV cache takes ``gpu_memory_utilization`` of what
    is free once the weights, activations and the rest are in place, and the rest of that free memory is held
    back."""

    total: float
    hidden: float
    held_back: float
    weights: float
    activation: float
    non_torch: float

    @property
    def kv(self) -> float:
        return self.total - self.hidden - self.held_back - self.weights - self.activation - self.non_torch

    def parts_gib(self) -> dict[str, float]:
        """The bar of the Hardware page: every part in GiB, the KV cache at least 0, and by how much the model
        overflows the card (0 when it fits)."""
        parts = {"weights": self.weights, "activation peak": self.activation, "outside PyTorch": self.non_torch,
                 "KV cache": max(self.kv, 0.0), "held back": self.held_back, "hidden from CUDA": self.hidden,
                 "over by": max(-self.kv, 0.0)}
        return {name: value / GIB for name, value in parts.items()}


def activation_bytes(server: Server, profile: RooflineProfile) -> float:
    """The activation peak of one card's profile run, or ``server.activation_reserve_gib`` when given.

    Estimate = max_batched_tokens x (4 x hidden + 2 x intermediate / tensor_parallel) x 2 B (residual, norm
    and attention outputs, and this card's share of the MLP's gate and up projections) + max_batch_size x
    vocabulary x the engine's ``sampler_bytes_per_logit`` (vLLM's sampler profiles logits, probabilities and
    sort buffers over the full vocabulary on every card; TensorRT-LLM keeps one FP32 logit per sequence and
    vocabulary entry).
    """
    if server.activation_reserve_gib is not None:
        return server.activation_reserve_gib * GIB
    return (server.max_batched_tokens * profile.activation_bytes_per_token
            + server.max_batch_size * profile.vocab * sampler_bytes_per_logit(server.engine))


def sampler_bytes_per_logit(engine: str) -> float:
    """Bytes the engine keeps per (sequence x vocabulary entry) for sampling: its ``engines.csv`` value, or
    vLLM's measured one (``serving_memory.csv``) where that is empty."""
    value = engine_row(engine)["sampler_bytes_per_logit"]
    return memory_convention("sampler_bytes_per_logit") if pd.isna(value) else float(value)


def card_memory(server: Server, profile: RooflineProfile, tensor_parallel: int) -> CardMemory:
    """How one of ``tensor_parallel`` cards described by ``profile`` splits its memory (``CardMemory``)."""
    hidden = memory_convention("cuda_hidden_gib") * GIB
    non_torch = memory_convention("non_torch_gib_one_card" if tensor_parallel == 1 else
                                  "non_torch_gib_tensor_parallel") * GIB
    visible = profile.card_memory_bytes - hidden
    weights = (profile.resident_weight_bytes - profile.replicated_weight_bytes + profile.draft_resident_weight_bytes) \
        / tensor_parallel + profile.replicated_weight_bytes
    activation = activation_bytes(server, profile)
    budget = engine_row(server.engine)["memory_budget"]
    share = server.gpu_memory_utilization
    if budget == STATIC_SHARE:  # the rest of the card: activations (and CUDA graphs), or less when they outgrow it
        rest = (visible - non_torch) * (1.0 - share)
        held_back = max(rest - activation, 0.0)
        activation = min(activation, rest)
    else:
        free = visible if budget == TOTAL_SHARE else max(visible - weights - activation - non_torch, 0.0)
        # and a share of the card some engines keep back besides (ATOM's 2% safety margin)
        held_back = free * (1.0 - share) + visible * float(engine_row(server.engine)["card_reserve_share"])
    return CardMemory(total=profile.card_memory_bytes, hidden=hidden, held_back=held_back, weights=weights,
                      activation=activation, non_torch=non_torch)


def smallest_fitting_tensor_parallel(server: Server, above: int = 0) -> int | None:
    """The smallest tensor-parallel degree above ``above`` whose cards leave room for one KV block (None when
    no degree within the card's link domain does: 8 cards, 72 on a GB200 NVL72; a slice only tries 1)."""
    for tp in tensor_parallel_degrees(server.gpu):
        if tp > above:
            profile = roofline_profile(server, tp)
            if card_memory(server, profile, tp).kv >= profile.kv_bytes_per_token_per_card * server.block_size_tokens:
                return tp
    return None


def kv_capacity_tokens(server: Server, profile: RooflineProfile) -> int:
    """KV-cache tokens that fit: one card's KV memory (``card_memory``) / KV bytes per token on one card.

    A model that leaves no room raises ``ScenarioError`` naming the smallest tensor-parallel degree
    that would fit (or the other fixes when none within its link domain does).
    """
    tp = server.tensor_parallel
    card = card_memory(server, profile, tp)
    if card.kv < profile.kv_bytes_per_token_per_card * server.block_size_tokens:
        fit = smallest_fitting_tensor_parallel(server, above=tp)
        fix = (f"set server.tensor_parallel = {fit} (the smallest that fits), or choose a lower-bit quant "
               f"or a larger GPU") if fit else "choose a lower-bit quant, a smaller model or a larger GPU"
        usable = card.total - card.hidden - card.held_back
        raise ScenarioError(
            f"server.model = {server.model!r} ({server.quant}) does not fit on {tp} x {server.gpu}: per card, weights "
            f"{card.weights / GIB:.1f} GiB + activation peak {card.activation / GIB:.1f} GiB + "
            f"{card.non_torch / GIB:.2f} GiB outside PyTorch leave no KV cache in {usable / GIB:.1f} GiB usable "
            f"(gpu_memory_utilization = {server.gpu_memory_utilization}); {fix}")
    return int(card.kv // profile.kv_bytes_per_token_per_card)


def memory_breakdown_gib(server: Server) -> dict[str, float]:
    """One card's memory in GiB, part by part (``CardMemory.parts_gib``)."""
    return card_memory(server, roofline_profile(server), server.tensor_parallel).parts_gib()
