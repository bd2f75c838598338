"""Step times from measured operator tables (``aiconfigurator-core``): where they cover a server, and its tables.

``aiconfigurator-core`` ships kernel times measured on each GPU system (GEMMs, attention and MLA, MoE, all-reduce and
all-to-all) per serving engine and engine version, and composes them into the time of one model iteration. Where
it covers a server (its GPU, engine and version, weight and KV formats, and a model shape it can express), the
roofline's iteration time is replaced by tables built from those kernels (``steptime.TABLE``): the dense part over
the iteration's tokens, the LM head over the sequences that emit, prefill attention over (prefill tokens, context)
and decode attention over (sequences, context). Everything else (memory, KV capacity, the roofline terms for the
utilisation) stays the roofline's. Where it does not, the calibrated roofline prices the server and
``coverage`` says why, so every answer can name what priced it.

The tables are built once per hardware key (``KernelKey``: a few hundred kernel look-ups, well under a second once
the package has read that GPU's data) and kept on disk beside the compiled code, keyed on the package's version and
the key. The package is imported only here, and only when a table is built.

Names map through ``data/hardware/kernel_names.csv`` (GPU to system, engine to backend, weight and KV formats to
the package's quantisation modes). A model is handed over as a Hugging Face ``config.json`` written from its
``models.csv`` row (or the user's own shape): dense grouped-query models as Llama, mixtures of experts as Qwen3-MoE,
multi-head latent attention as DeepSeek-V3; a model whose Hugging Face name the package bundles (DeepSeek-V3/R1,
gpt-oss with its 128-token windows, GLM-5 with its sparse attention, Kimi-K2.5, MiniMax-M2.5) goes by that name.
Shapes none of these express (shared experts beside grouped-query attention, short sliding windows, dense layers in
a grouped-query MoE) use the roofline, said as such. A query/key norm over all heads (``qk_norm_all_reduce``:
MiniMax-M2) all-reduces its statistics over the attention cards in every layer, which the package's op lists lack:
the dense table adds it, timed on the package's all-reduce (``_norm_all_reduce_ms``).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from ..scenario.config import Server
from ..scenario.labels import format_label, words
from .roofline import ACTIVATION_BYTES, SHORT_WINDOW_TOKENS, model_row
from .steptime import (CONTEXT_AXIS, PREFILL_AXIS, SEQUENCES_AXIS, ST_FIELDS, ST_MODEL, TABLE, TABLE_FIELDS,
                       TOKENS_AXIS, T_DECODE_ATTENTION, T_DENSE, T_LOGITS, T_PREFILL_ATTENTION)
from .tables import load_table

PACKAGE = "aiconfigurator-core"
MAX_POSITIONS = 262_144  # the context the written config.json declares (the package only bounds by it)
# Operator names (substrings) the package's op lists give attention kernels: timed per context, not per token.
# FP8 with one scale per tensor, as the package resolves a checkpoint (its model helpers): static activation scales
# unless the checkpoint marks them dynamic, and none of the dense FP8 checkpoints served here does (ModelOpt and
# vLLM/llm-compressor per-tensor checkpoints ship their input scales). The package derives the static GEMM from its
# measured dynamic one and its scale kernels (``fp8_static``) where it has those for a backend and GPU; elsewhere
# the dynamic table prices it.
STATIC_FP8, DYNAMIC_FP8 = "fp8_static", "fp8"
# The package's GEMM modes a stand-in names (kernel_names.csv ``gemm_stand_in``), in the answer's words
MODE_WORDS = {"fp8_block": "block-scaled FP8", "fp8": "per-tensor FP8"}
ATTENTION_OPS = ("attention", "mla_block", "mla_module", "dsa", "msa")
LOGITS_OP = "logits"
ALL_REDUCE_OP = "embedding_ar"  # the all-reduce of the embedding's output over the attention cards
NORM_STAT_BYTES = 8  # a query/key norm's statistics all-reduced per token: two FP32 sums of squares


@dataclass(frozen=True)
class KernelKey:
    """Everything a server's operator tables depend on (the disk cache's key)."""

    system: str            # the package's GPU system (h100_sxm ...)
    backend: str           # vllm, sglang, trtllm
    version: str           # the engine version whose kernels were measured
    model_config: str      # the config.json handed over, as sorted JSON, or the name of a model the package bundles
    tensor_parallel: int   # attention and dense layers split over this many cards
    attention_dp: int      # data-parallel attention ranks (1: none)
    moe_tp: int            # expert layers: tensor-parallel width
    moe_ep: int            # expert layers: expert-parallel width
    gemm: str              # the package's quantisation modes
    moe: str
    kv: str
    qk_norm_layers: int = 0  # layers that all-reduce their query/key norm's statistics over the attention cards
    hidden: int = 0          # the model's hidden size where qk_norm_layers needs it (0: it does not)

    @property
    def ranks(self) -> int:
        """Schedulers sharing one iteration (data-parallel attention): the tables are per rank."""
        return self.attention_dp


@dataclass(frozen=True)
class Coverage:
    """Whether measured operator tables price a server: its ``key`` (None: the roofline does), the words that say
    which, and why not, and the same in a few words for a table cell (``short``)."""

    key: KernelKey | None
    words: str
    short: str = "roofline"


def systems_dir() -> Path:
    """The installed package's ``systems`` folder: its GPU systems, their measured tables (``data``) and its
    end-to-end measurements (``silicon_sample.csv``)."""
    import aiconfigurator_core
    return Path(aiconfigurator_core.__file__).parent / "systems"


def package_version() -> str:
    """The installed ``aiconfigurator-core`` version, or "" when it is not installed."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return ""


def _names(kind: str) -> pd.DataFrame:
    """The rows of ``kernel_names.csv`` of one kind, indexed by our name."""
    table = load_table("kernel_names")
    return table.loc[[kind]].set_index("name")


def kernel_name(kind: str, name: str, column: str = "kernel") -> str:
    """Our ``name`` of ``kind`` in the package's words ("" when it has none)."""
    rows = _names(kind)
    if name not in rows.index or pd.isna(rows.loc[name, column]):
        return ""
    return str(rows.loc[name, column])


@functools.lru_cache(maxsize=64)
def version_slots(system: str, backend: str) -> dict[str, str]:
    """The package's queryable versions of ``backend`` on ``system`` ({} when none). Only ``current`` (and a
    ``previous`` one) are complete collections; ``next`` borrows most kernels from ``current``, so it is not
    offered. Kept on disk per package version: asking the package imports its whole data layer (about a second)."""
    path = _cache_dir() / f"versions-{package_version()}-{system}-{backend}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    from aiconfigurator_core.sdk.perf_database import get_version_slots
    slots = get_version_slots(system, backend) or {}
    kept = {slot: version for slot, version in slots.items() if slot in ("current", "previous") and version}
    _write_atomically(path, json.dumps(kept).encode())
    return kept


def _write_atomically(path: Path, data: bytes) -> None:
    """``data`` as ``path``, renamed into place (a reader never sees half a file)."""
    handle, partial = tempfile.mkstemp(dir=path.parent, suffix=".partial")
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    os.replace(partial, path)


@functools.lru_cache(maxsize=1)
def bundled_models() -> frozenset[str]:
    """The Hugging Face names of the models whose config.json the package ships."""
    from aiconfigurator_core.sdk.common import DefaultHFModels
    return frozenset(DefaultHFModels)


SHAPE_COLUMNS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "experts",
                 "experts_per_token", "attention", "q_lora_rank", "kv_lora_rank", "rope_head_dim", "v_head_dim",
                 "expert_intermediate", "shared_experts", "dense_layers", "tied_embeddings", "sliding_window",
                 "sliding_layers", "qk_norm_all_reduce")


def shape_key(row: pd.Series) -> tuple[str, ...]:
    """A model row's shape (``SHAPE_COLUMNS``) as text, so that a user's row and a ``models.csv`` row compare equal
    whatever types their columns were read as."""
    return tuple(str(row[column]) for column in SHAPE_COLUMNS)


def bundled_name(row: pd.Series) -> str:
    """The name under which the package bundles the model of ``row``: its own Hugging Face repository, or that of a
    ``models.csv`` row of the very same shape (a user's copy of a shipped model); "" when there is none."""
    if str(row.get("hf_repo", "")) in bundled_models():
        return str(row["hf_repo"])
    models = load_table("models")
    for _, other in models.iterrows():
        if str(other["hf_repo"]) in bundled_models() and shape_key(other) == shape_key(row):
            return str(other["hf_repo"])
    return ""


def table_versions(gpu: str, engine: str) -> list[str]:
    """The engine versions whose kernels the tables measured on ``gpu`` (none without tables or the package)."""
    system, backend = kernel_name("gpu", gpu), kernel_name("engine", engine)
    if not (system and backend and package_version()):
        return []
    return sorted(set(version_slots(system, backend).values()))


def model_config_json(row: pd.Series) -> dict | str:
    """A Hugging Face ``config.json`` for the model of ``models.csv`` ``row`` (or the user's shape), or why none of
    the architectures the package times can express it."""
    experts = int(row["experts"])
    windowed = int(row["sliding_layers"]) > 0 and int(row["sliding_window"]) <= SHORT_WINDOW_TOKENS
    common = {"num_hidden_layers": int(row["layers"]), "hidden_size": int(row["hidden"]),
              "num_attention_heads": int(row["heads"]), "num_key_value_heads": int(row["kv_heads"]),
              "head_dim": int(row["head_dim"]), "intermediate_size": int(row["intermediate"]),
              "vocab_size": int(row["vocab"]), "max_position_embeddings": MAX_POSITIONS,
              "tie_word_embeddings": bool(int(row["tied_embeddings"]))}
    if row["attention"] == "mla":
        return {"architectures": ["DeepseekV3ForCausalLM"], **common, "n_routed_experts": experts,
                "num_experts_per_tok": int(row["experts_per_token"]),
                "moe_intermediate_size": int(row["expert_intermediate"]),
                "n_shared_experts": int(row["shared_experts"]), "first_k_dense_replace": int(row["dense_layers"]),
                "q_lora_rank": int(row["q_lora_rank"]), "kv_lora_rank": int(row["kv_lora_rank"]),
                "qk_rope_head_dim": int(row["rope_head_dim"]), "qk_nope_head_dim": int(row["head_dim"]),
                "v_head_dim": int(row["v_head_dim"])}
    if windowed:
        return (f"its {int(row['sliding_layers'])} layers with a {int(row['sliding_window'])}-token window are not "
                f"expressible in the operator tables")
    if experts == 0:
        return {"architectures": ["LlamaForCausalLM"], **common}
    if int(row["shared_experts"]) or int(row["dense_layers"]):
        return "shared experts or dense layers beside grouped-query experts are not expressible in the operator tables"
    return {"architectures": ["Qwen3MoeForCausalLM"], **common, "num_experts": experts,
            "num_experts_per_tok": int(row["experts_per_token"]),
            "moe_intermediate_size": int(row["expert_intermediate"]), "norm_topk_prob": True}


def _parallel(server: Server, experts: bool) -> tuple[int, int, int, int]:
    """(tensor_parallel, attention data-parallel ranks, expert tensor-parallel, expert-parallel) of ``server``."""
    cards = server.tensor_parallel
    if server.expert_parallel and experts:
        if server.attention_data_parallel:
            return 1, cards, 1, cards
        return cards, 1, 1, cards
    return cards, 1, cards if experts else 1, 1


def engine_version_words(engine: str, version: str) -> str:
    """"vLLM 0.24.0": the engine's display name and its version."""
    return f"{words('engine_name', engine)} {version}".strip()


@functools.lru_cache(maxsize=512)
def coverage(server: Server) -> Coverage:
    """Whether measured operator tables price ``server`` (``Coverage``), with the words an answer shows."""
    if server.step_model != "roofline":
        return Coverage(None, "fixed iteration time", "fixed")
    if server.calibration:
        return Coverage(None, f"Roofline fitted on your own runs (calibration {server.calibration})")
    if server.kernel_tables == "off":
        return Coverage(None, "Roofline estimate (measured kernels switched off)")
    if not package_version():
        return Coverage(None, f"Roofline estimate ({PACKAGE} is not installed)")
    system, backend = kernel_name("gpu", server.gpu), kernel_name("engine", server.engine)
    if not system:
        return Coverage(None, f"Roofline estimate (no measured operator tables for {server.gpu})")
    if not backend:
        return Coverage(None, f"Roofline estimate (no measured operator tables for the engine {server.engine})")
    slots = version_slots(system, backend)
    version = server.engine_version or slots.get("current", "")
    if version not in slots.values():
        have = ", ".join(sorted(set(slots.values()))) or "none"
        return Coverage(None, f"Roofline estimate ({engine_version_words(server.engine, server.engine_version)} has "
                              f"no operator tables on {server.gpu}; they have {have})")
    row = model_row(server)
    # a shape the package knows by name first (gpt-oss's windows, GLM-5's sparse attention), else written out
    config = bundled_name(row) or model_config_json(row)
    if isinstance(config, str) and config not in bundled_models():
        return Coverage(None, f"Roofline estimate ({server.model}: {config})")
    experts = int(row["experts"]) > 0
    gemm = kernel_name("quant", server.quant)
    # an engine that runs a format's experts its own way (vLLM: MXFP4 experts with 16-bit activations)
    moe = (kernel_name("moe_for_engine", f"{backend} {server.quant}", "moe_kernel")
           or kernel_name("quant", server.quant, "moe_kernel")) if experts else ""
    if experts and gemm == STATIC_FP8:
        gemm = moe  # a mixture-of-experts FP8 checkpoint is block-scaled throughout (kernel_names.csv)
    # a GEMM table whose measurement is mostly host time: another of the same engine's tables prices those GEMMs
    stand_in = kernel_name("gemm_stand_in", f"{backend} {version} {gemm}")
    stood_in, gemm = (gemm, stand_in) if stand_in else ("", gemm)
    kv = kernel_name("kv_quant", server.kv_quant)
    if not gemm or (experts and not moe) or not kv or (server.quant.startswith("mxfp4") and not experts):
        return Coverage(None, f"Roofline estimate (weights {server.quant} with KV {server.kv_quant} have no operator "
                              f"tables for {server.model})")
    tp, dp, moe_tp, moe_ep = _parallel(server, experts)
    model = config if isinstance(config, str) else json.dumps(config, sort_keys=True)
    # a dense model's expert mode is unused: the package's own for its weights (FP8: the dynamic one's name)
    # the package's op lists have no all-reduce for a query/key norm over all heads (MiniMax-M2): added to the tables
    norm_layers = int(row["layers"]) if int(row["qk_norm_all_reduce"]) and tp > 1 else 0
    key = KernelKey(system, backend, version, model, tp, dp, moe_tp, moe_ep, gemm,
                    moe or (DYNAMIC_FP8 if gemm == STATIC_FP8 else gemm), kv, norm_layers,
                    int(row["hidden"]) if norm_layers else 0)
    for tried in (key, replace(key, gemm=DYNAMIC_FP8)) if gemm == STATIC_FP8 else (key,):
        try:
            operator_tables(tried)
            key = tried
            break
        except Exception:  # the package refuses this combination (a kernel it never measured): the next, else
            continue       # the roofline prices it
    else:
        named = engine_version_words(server.engine, version)
        return Coverage(None, f"Roofline estimate ({named} on {server.gpu} has no measured kernel for "
                              f"{format_label(server.quant)} weights in this model and layout)")
    named = engine_version_words(server.engine, version)
    instead = (f"; its {MODE_WORDS[stood_in]} GEMMs timed on its {MODE_WORDS[gemm]} table (the "
               f"{MODE_WORDS[stood_in]} one measured mostly host time)") if stood_in else ""
    return Coverage(key, f"measured kernels: {named} on {server.gpu} ({PACKAGE} {package_version()}){instead}",
                    f"measured kernels ({named})")


def table_step(roofline_step: np.ndarray, key: KernelKey) -> np.ndarray:
    """The compiled loop's ``TABLE`` step row: the roofline's fields (for the utilisation and the diagnosis) with the
    model code ``TABLE``, followed by the operator tables (which time the whole iteration)."""
    row = np.zeros(TABLE_FIELDS)
    row[:ST_FIELDS] = roofline_step
    row[ST_MODEL] = TABLE
    row[ST_FIELDS:] = operator_tables(key)
    return row


def _cache_dir() -> Path:
    """Where built tables are kept: beside the compiled code when writable, else the user's cache folder."""
    folder = Path(__file__).resolve().parents[1] / "__pycache__" / "kernel_tables"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return folder
    except OSError:
        pass
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "scheduler-lab" / "kernel_tables"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _key_digest(key: KernelKey) -> str:
    axes = [a.tolist() for a in (TOKENS_AXIS, SEQUENCES_AXIS, PREFILL_AXIS, CONTEXT_AXIS)]
    text = json.dumps({"package": package_version(), "key": asdict(key), "axes": axes}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@functools.lru_cache(maxsize=256)
def operator_tables(key: KernelKey) -> np.ndarray:
    """The tables of ``key`` in seconds, laid out as ``steptime.TABLE_FIELDS`` after the roofline fields; read from
    the disk cache, else built (``build_tables``) and kept there."""
    path = _cache_dir() / f"{_key_digest(key)}.npy"
    expected = TABLE_FIELDS - T_DENSE
    try:
        cells = np.load(path)
        if cells.shape == (expected,) and np.isfinite(cells).all():
            return cells
    except (OSError, ValueError):
        pass
    cells = build_tables(key)
    buffer = io.BytesIO()
    np.save(buffer, cells)
    _write_atomically(path, buffer.getvalue())
    return cells


@functools.lru_cache(maxsize=16)
def model_folder(config_json: str) -> str:
    """A folder holding ``config_json`` as ``config.json`` (how the package reads a model it does not bundle)."""
    folder = _cache_dir() / "models" / hashlib.sha256(config_json.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(config_json)
    return str(folder)


def _engine_handle(key: KernelKey):
    """The package's compiled engine for ``key`` (its kernel data loaded once per process and system)."""
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)  # its data loader warns of every fallback row
    from aiconfigurator_core.sdk import EngineHandle
    model = model_folder(key.model_config) if key.model_config.startswith("{") else key.model_config
    return EngineHandle.compile(model, key.system, key.backend,
                                backend_version=key.version, tp_size=key.tensor_parallel,
                                attention_dp_size=key.attention_dp, moe_tp_size=key.moe_tp, moe_ep_size=key.moe_ep,
                                gemm_quant_mode=key.gemm, moe_quant_mode=key.moe, kvcache_quant_mode=key.kv,
                                fmha_quant_mode="bfloat16")  # engines keep attention in 16 bits (roofline.py)


def _op_names(evaluate) -> list[str]:
    """The names of one of the handle's op lists, in index order."""
    names = []
    while True:
        try:
            names.append(evaluate([len(names)], batch_size=1, s=16)[0][0])
        except (IndexError, ValueError):
            return names


def _ms(results) -> float:
    return float(sum(result[1] for result in results))


def _norm_all_reduce_ms(handle, context_ops: list[str], key: KernelKey):
    """n tokens -> the all-reduces of ``key.qk_norm_layers`` layers' query/key norm statistics (two FP32 numbers a
    token) in ms, each timed on the package's measured all-reduce of the embedding (h 16-bit numbers a token) at the
    tokens that make a message as long; 0 without such layers."""
    if not key.qk_norm_layers:
        return lambda n: 0.0
    all_reduce = [i for i, name in enumerate(context_ops) if name.endswith(ALL_REDUCE_OP)]
    if not all_reduce:
        raise ValueError("the package times no all-reduce for this model: the query/key norm's cannot be priced")

    def ms(n: int) -> float:
        tokens = max(1, int(np.ceil(n * NORM_STAT_BYTES / (key.hidden * ACTIVATION_BYTES))))
        return key.qk_norm_layers * _ms(handle.evaluate_context_ops(all_reduce, batch_size=1, s=tokens, x=tokens))
    return ms


def build_tables(key: KernelKey) -> np.ndarray:
    """The four tables of ``key`` in seconds (``steptime`` module docstring), each grid point one look-up of the
    package's measured kernels; per rank under data-parallel attention (every rank given an equal share)."""
    handle = _engine_handle(key)
    context_ops = _op_names(handle.evaluate_context_ops)
    generation_ops = _op_names(handle.evaluate_generation_ops)

    def attention(name: str) -> bool:
        return any(part in name for part in ATTENTION_OPS)

    dense = [i for i, name in enumerate(context_ops) if not attention(name) and LOGITS_OP not in name]
    logits = [i for i, name in enumerate(context_ops) if LOGITS_OP in name]
    prefill_attention = [i for i, name in enumerate(context_ops) if attention(name)]
    decode_attention = [i for i, name in enumerate(generation_ops) if attention(name)]
    ranks = key.ranks

    def share(n: float) -> int:
        return max(1, int(np.ceil(n / ranks)))

    norm_all_reduce = _norm_all_reduce_ms(handle, context_ops, key)
    row = np.zeros(TABLE_FIELDS)  # laid out as a step row, the roofline's fields left empty
    for i, tokens in enumerate(TOKENS_AXIS):
        n = share(tokens)
        row[T_DENSE + i] = _ms(handle.evaluate_context_ops(dense, batch_size=1, s=n, x=n)) + norm_all_reduce(n)
    for i, sequences in enumerate(SEQUENCES_AXIS):
        n = share(sequences)
        row[T_LOGITS + i] = _ms(handle.evaluate_context_ops(logits, batch_size=1, s=n, x=n)) if logits else 0.0
    for i, sequences in enumerate(SEQUENCES_AXIS):
        for j, context in enumerate(CONTEXT_AXIS):
            row[T_DECODE_ATTENTION + i * len(CONTEXT_AXIS) + j] = _ms(handle.evaluate_generation_ops(
                decode_attention, batch_size=share(sequences), s=int(context)))
    for i, tokens in enumerate(PREFILL_AXIS):
        chunk = share(tokens)
        for j, context in enumerate(CONTEXT_AXIS):
            prefix = max(0, int(round(context - (chunk + 1) / 2.0)))  # mean context = prefix + (chunk + 1) / 2
            row[T_PREFILL_ATTENTION + i * len(CONTEXT_AXIS) + j] = _ms(handle.evaluate_context_ops(
                prefill_attention, batch_size=1, s=prefix + chunk, prefix=prefix))
    cells = row[T_DENSE:]
    if not np.isfinite(cells).all() or (cells < 0).any():
        raise ValueError("the operator tables gave a time that is not a finite, non-negative number")
    return cells / 1000.0

