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
the key. The package is imported only here, and only when a table is built. The disk cache is bounded and distrusted
(``prune``, ``table_problem``): at most ``caps.kernel_cache_entries`` tables and model folders for the shipped models,
``kernel_cache_own_entries`` apart for users' own shapes, ``kernel_cache_bytes`` in all, none unused for
``kernel_cache_s``; whatever it reads back is checked first, and what fails is removed and built again.

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

import contextlib
import functools
import hashlib
import io
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

try:
    import fcntl
except ImportError:  # not POSIX: model folders are not locked (see _folders_lock)
    fcntl = None

from ..scenario.caps import DEFAULT_CAPS, Caps
from ..scenario.config import VERSION_PATTERN, Server
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
    data, problem = _read_kept(path, VERSIONS_FILE_MAX_BYTES)
    if data is not None:
        try:
            slots = json.loads(data)
        except ValueError:
            slots = None
        problem = _slots_problem(slots)
        if not problem:
            _touch(path)
            return slots
    if problem:
        _discard(path, problem)
    from aiconfigurator_core.sdk.perf_database import get_version_slots
    slots = get_version_slots(system, backend) or {}
    kept = {slot: version for slot, version in slots.items() if slot in ("current", "previous") and version}
    _write_atomically(path, json.dumps(kept).encode())
    prune(keep=path)
    return kept


def _slots_problem(slots) -> str:
    """What is wrong with a kept versions file's content ("" when nothing): it must be what ``version_slots``
    writes, {"current": version, "previous": version} or less, each an engine release."""
    if not isinstance(slots, dict):
        return "not a JSON object"
    for slot, version in slots.items():
        if slot not in ("current", "previous") or not isinstance(version, str) or not VERSION_PATTERN.fullmatch(
                version):
            return f"{str(slot)[:20]!r}: {str(version)[:20]!r} is not a slot and an engine version"
    return ""


def _write_atomically(path: Path, data: bytes) -> None:
    """``data`` as ``path``, renamed into place (a reader never sees half a file; a write cut short leaves a partial
    file that ``prune`` removes once it is old)."""
    handle, partial = tempfile.mkstemp(dir=path.parent, suffix=PARTIAL_SUFFIX)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)  # gone once renamed into place


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


def table_step(roofline_step: np.ndarray, key: KernelKey, engine: str) -> np.ndarray:
    """The compiled loop's ``TABLE`` step row: the roofline's fields (for the utilisation and the diagnosis) with the
    model code ``TABLE``, followed by the operator tables (which time the whole iteration), the dense table carrying
    ``engine``'s host time per iteration (``iteration_host_s``: every iteration reads it once). Marks the kept table
    as used (the disk cache removes the least recently used first), also when this process holds it in memory."""
    row = np.zeros(TABLE_FIELDS)
    row[:ST_FIELDS] = roofline_step
    row[ST_MODEL] = TABLE
    row[ST_FIELDS:] = operator_tables(key)
    row[T_DENSE:T_LOGITS] += iteration_host_s(engine)
    _touch(_table_path(key))
    return row


def _costs(engine: str) -> pd.Series | None:
    """``engine``'s row of ``engine_costs.csv`` (None: an engine the operator tables never time)."""
    table = load_table("engine_costs")
    return table.loc[engine] if engine in table.index else None


def iteration_host_s(engine: str) -> float:
    """Seconds of host work (scheduling, preparing inputs, sampling) each iteration of ``engine`` leaves the GPU
    idle, which kernel micro-benchmarks do not contain: the profiled gap of ``engine_costs.csv`` (0 for an engine
    it lacks, which the tables never time)."""
    row = _costs(engine)
    return 0.0 if row is None else float(row["host_ms"]) / 1000.0


def client_fixed_ms(server: Server) -> float:
    """Milliseconds a client sees per request beyond the engine's iterations (HTTP, tokenizing, the hand-offs
    between the engine's processes, the first chunk), added to its time to first token and end-to-end latency:
    ``server.request_fixed_ms`` where set; else, where measured operator tables time ``server`` (which hold kernels
    only), its engine's measured figure (``engine_costs.csv``); else 0: the roofline's factors were fitted on runs
    measured at the client, so they carry it already, and a fixed step time is a model's own."""
    if server.request_fixed_ms is not None:
        return float(server.request_fixed_ms)
    row = _costs(server.engine)
    return float(row["request_fixed_ms"]) if row is not None and coverage(server).key is not None else 0.0


# --------------------------------------------------------------------------- the disk cache
# Layout: ``versions-*.json`` (per package version, GPU system and engine: a fixed set), and two parts, each holding
# tables (``<digest>.npy``) and model folders (``models/<digest>/config.json``): SHIPPED (the top folder, where all
# tables were kept before, so those built already stay valid) for the models of models.csv and those the package
# bundles, OWN (``own/``) for users' own shapes (``server.model_config``). Any visitor can send any number of own
# shapes through links, so they get their own, smaller, part: however many arrive, they only push each other out,
# never the shipped models' tables, among them the presets' that ``python -m engine warm`` builds (5 tables and 3
# model folders, 17 KiB). The shipped part is bounded too, as a visitor can still ask for every GPU, format and
# layout of a shipped model, but at 256 times what warm builds, and every use marks a table as recent
# (``table_step``), so the tables in use stay at its fresh end. Protecting the presets' tables by name instead would
# need the presets' servers here, which only the scenario loader (a layer above) can build.
SHIPPED, OWN = "shipped", "own"
PARTIAL_SUFFIX = ".partial"
PARTIAL_MAX_AGE_S = 3600.0  # a partial file this old is a write cut short by a crash: removed
VERSIONS_FILE_MAX_BYTES = 4096  # a versions file is some 40 bytes
TABLE_NAME = re.compile(r"[0-9a-f]{24}\.npy")
FOLDER_NAME = re.compile(r"[0-9a-f]{16}")
TABLE_CELLS = TABLE_FIELDS - T_DENSE
LOGITS_CELLS = slice(T_LOGITS - T_DENSE, T_LOGITS - T_DENSE + len(SEQUENCES_AXIS))
LOG = logging.getLogger(__name__)


def _npy_bytes(cells: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, cells, allow_pickle=False)
    return buffer.getvalue()


TABLE_FILE_BYTES = len(_npy_bytes(np.zeros(TABLE_CELLS)))  # 3,368: a 128-byte header and 405 float64 cells


def table_problem(cells: np.ndarray) -> str:
    """What is wrong with operator tables ``cells`` ("" when nothing), the promise ``build_tables`` keeps and a kept
    table is checked against: the layout (``TABLE_CELLS`` float64 cells), every time finite, the dense part and both
    attention tables strictly positive, the LM head's strictly positive or all zero (a model without one). Not
    monotonic: measured kernels are not (a GEMM may take less time at more tokens with another tile)."""
    if not isinstance(cells, np.ndarray) or cells.dtype != np.float64 or cells.shape != (TABLE_CELLS,):
        shape, dtype = getattr(cells, "shape", "?"), getattr(cells, "dtype", type(cells).__name__)
        return f"{dtype} cells of shape {shape}, not {TABLE_CELLS} float64 ones"
    if not np.isfinite(cells).all():
        return "a time that is not finite"
    logits = cells[LOGITS_CELLS]
    others = np.delete(cells, np.arange(TABLE_CELLS)[LOGITS_CELLS])
    if not (others > 0).all() or not ((logits > 0).all() or (logits == 0).all()):
        return "a time that is not positive"
    return ""


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


@functools.lru_cache(maxsize=1)
def _shipped_configs() -> frozenset[str]:
    """The config.json of every models.csv row as a key carries it (a bundled model goes by its name instead)."""
    configs = (model_config_json(row) for _, row in load_table("models").iterrows())
    return frozenset(json.dumps(config, sort_keys=True) for config in configs if isinstance(config, dict))


def _part(model_config: str) -> str:
    """The part of the cache a model's tables and folder are kept in: a bundled model's name or a models.csv shape
    (also a user's copy of one: the same tables) is SHIPPED, any other shape OWN."""
    return SHIPPED if not model_config.startswith("{") or model_config in _shipped_configs() else OWN


def _part_folder(part: str) -> Path:
    folder = _cache_dir() / ("" if part == SHIPPED else OWN)
    folder.mkdir(exist_ok=True)
    return folder


def _table_path(key: KernelKey) -> Path:
    return _part_folder(_part(key.model_config)) / f"{_key_digest(key)}.npy"


def _touch(path: Path) -> None:
    """Mark a kept file or folder as used now (nothing when it has been removed meanwhile)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _discard(path: Path, problem: str) -> None:
    """Remove a kept file that failed its check, saying so in one line (it is built again)."""
    LOG.warning("kernel table cache: %s %s; removed, built again", path.name, problem)
    _remove(path)


def _read_kept(path: Path, size_bytes: int) -> tuple[bytes | None, str]:
    """(its bytes, "") for the kept file ``path``; (None, "") when there is none (not built yet, or pruned: built
    again); (None, what is wrong) for a link, a folder or more than ``size_bytes``. One open with no link followed,
    so what is checked is what is read, and never more than ``size_bytes`` of it."""
    try:
        handle = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None, ""
    except OSError as exc:  # a link (ELOOP)
        return None, f"is not a file ({exc.strerror})"
    with os.fdopen(handle, "rb") as kept:
        if not stat.S_ISREG(os.fstat(kept.fileno()).st_mode):
            return None, "is not a file"
        data = kept.read(size_bytes + 1)
    return (data, "") if len(data) <= size_bytes else (None, f"holds more than {size_bytes:,} bytes")


def _read_table(path: Path) -> np.ndarray | None:
    """The table kept at ``path`` if it passes ``table_problem``, marked as used; else None (removed when there)."""
    data, problem = _read_kept(path, TABLE_FILE_BYTES)
    cells = None
    if data is not None and len(data) != TABLE_FILE_BYTES:
        problem = f"holds {len(data):,} bytes, not {TABLE_FILE_BYTES:,}"
    elif data is not None:
        try:
            cells = np.load(io.BytesIO(data), allow_pickle=False)
            problem = f"holds {why}" if (why := table_problem(cells)) else ""
        except (ValueError, EOFError, OSError) as exc:
            problem = f"is not a table ({' '.join(str(exc).split())[:80]})"
    if problem:
        _discard(path, problem)
        return None
    if cells is not None:
        _touch(path)
    return cells


@functools.lru_cache(maxsize=256)
def operator_tables(key: KernelKey) -> np.ndarray:
    """The tables of ``key`` in seconds, laid out as ``steptime.TABLE_FIELDS`` after the roofline fields; read from
    the disk cache if they pass their check, else built (``build_tables``), kept there and the cache pruned. Kept in
    memory too: 256 x 3.2 KiB of cells, about 1 MiB with their keys (measured with tracemalloc)."""
    path = _table_path(key)
    cells = _read_table(path)
    if cells is None:
        cells = build_tables(key)
        _write_atomically(path, _npy_bytes(cells))
        prune(keep=path)
    return cells


def model_folder(config_json: str) -> str:
    """A folder holding exactly ``config_json`` as ``config.json`` (how the package reads a model it does not
    bundle), marked as used. Checked on every call (not cached: a path handed out earlier may have been pruned since):
    a folder holding anything else (another config, a quantisation file the package would read too) is emptied and
    written again. The caller reads it under ``_folders_lock`` so that no prune removes it meanwhile."""
    expected = config_json.encode()
    folder = _part_folder(_part(config_json)) / "models" / hashlib.sha256(expected).hexdigest()[:16]
    with _folders_lock(exclusive=False):
        problem = _folder_problem(folder, expected)
        if problem:
            LOG.warning("kernel table cache: model folder %s %s; written again", folder.name, problem)
            _remove(folder)
        if problem or not (folder / "config.json").is_file():
            folder.mkdir(parents=True, exist_ok=True)
            _write_atomically(folder / "config.json", expected)
            prune(keep=folder)
        else:
            _touch(folder)
    return str(folder)


def _folder_problem(folder: Path, expected: bytes) -> str:
    """What is wrong with a kept model folder ("" when nothing, or when it is missing or being written): anything
    but ``config.json`` holding ``expected`` (and partial writes under way)."""
    if not folder.exists() and not folder.is_symlink():
        return ""
    if folder.is_symlink() or not folder.is_dir():
        return "is not a folder"
    others = sorted(p.name for p in _listing(folder) if p.name != "config.json" and not p.name.endswith(
        PARTIAL_SUFFIX))
    if others:
        return f"holds {', '.join(others)[:80]}"
    data, problem = _read_kept(folder / "config.json", len(expected))
    if problem or data not in (None, expected):
        return f"config.json {problem or 'is another one'}"
    return ""


def _remove(path: Path) -> None:
    """Remove a kept file, link or folder (nothing when another process removed it first)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def _folders_lock(exclusive: bool) -> Iterator[bool]:
    """The model folders' lock (a file lock, so it holds between processes and, one open file each, between
    threads): shared while a folder is written or read by the package (``model_folder``, ``_engine_handle``: the
    package treats a missing folder as a Hugging Face name to download), exclusive while ``prune`` removes folders,
    which does not wait for it (it leaves the folders for the next prune). Yields whether it is held. Tables need no
    lock: one removed under a reader is simply built again."""
    if fcntl is None:  # not POSIX (the app's servers are): unguarded, a build racing a prune may fail once
        yield True
        return
    handle = os.open(_cache_dir() / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
            held = True
        except BlockingIOError:
            held = False
        yield held
    finally:
        os.close(handle)  # releases it


@dataclass(frozen=True)
class _Entry:
    """A kept table or model folder, as ``prune`` sees it."""

    path: Path
    part: str
    used_s: float  # its modification time: when it was last used (``_touch``)
    size_bytes: int
    folder: bool


def prune(caps: Caps | None = None, keep: Path | None = None) -> None:
    """Keep the disk cache within its limits (``caps``, else ``DEFAULT_CAPS``): remove entries unused for
    ``kernel_cache_s``, then the least recently used beyond ``kernel_cache_entries`` (shipped models) and
    ``kernel_cache_own_entries`` (own shapes), then, own shapes' first, beyond ``kernel_cache_bytes`` in all; never
    ``keep`` (the entry just written). Also partial writes a crash left behind and versions files unused as long.
    Runs after every write. While a model folder is in use (``_folders_lock``: a build lasts seconds), no folder
    goes: tables go in their place, and folders still beyond a limit go at the next prune."""
    try:
        _prune(caps or DEFAULT_CAPS, keep)
    except OSError as exc:  # a cache that cannot be pruned must not stop a run: the tables are built
        LOG.warning("kernel table cache: not pruned (%s)", exc)


def _prune(caps: Caps, keep: Path | None) -> None:
    root, now = _cache_dir(), time.time()
    with _folders_lock(exclusive=True) as folders_free:
        _remove_leftovers(root, now, caps.kernel_cache_s)
        entries = [e for part in (SHIPPED, OWN) for e in _entries(_part_folder(part), part) if e.path != keep]
        removable = [e for e in entries if folders_free or not e.folder]
        gone = {e.path for e in removable if now - e.used_s > caps.kernel_cache_s}
        for part, limit in ((SHIPPED, caps.kernel_cache_entries), (OWN, caps.kernel_cache_own_entries)):
            count = sum(e.part == part and e.path not in gone for e in entries) + int(_part_of(keep) == part)
            for entry in sorted((e for e in removable if e.part == part), key=lambda e: e.used_s):
                if count <= limit:
                    break
                if entry.path not in gone:
                    gone.add(entry.path)
                    count -= 1
        total = _tree_bytes(root) - sum(e.size_bytes for e in entries if e.path in gone)  # keep's bytes counted
        for entry in sorted(removable, key=lambda e: (e.part != OWN, e.used_s)):
            if total <= caps.kernel_cache_bytes:
                break
            if entry.path not in gone:
                gone.add(entry.path)
                total -= entry.size_bytes
        for path in gone:
            _remove(path)


def _part_of(path: Path | None) -> str:
    """The part the table or model folder ``path`` is kept in ("" for none or a versions file)."""
    if path is None or path.suffix == ".json":
        return ""
    return OWN if (path.parent.parent if path.parent.name == "models" else path.parent).name == OWN else SHIPPED


def _entries(folder: Path, part: str) -> list[_Entry]:
    """The tables and model folders kept in one part; a file or folder there under a name never written (a kept
    name is a digest) is removed. The top folder's other files (versions, lock) are not the part's."""
    tables = [p for p in _listing(folder) if part == OWN or p.suffix == ".npy"]
    found = []
    for path, pattern, is_folder in ([(p, TABLE_NAME, False) for p in tables if p.name != "models"]
                                     + [(p, FOLDER_NAME, True) for p in _listing(folder / "models")]):
        if path.name.endswith(PARTIAL_SUFFIX):
            continue  # a write under way (or cut short: _remove_leftovers)
        try:
            info = path.lstat()
        except FileNotFoundError:  # removed meanwhile by another prune
            continue
        right_kind = stat.S_ISDIR(info.st_mode) if is_folder else stat.S_ISREG(info.st_mode)
        if not pattern.fullmatch(path.name) or not right_kind:
            _remove(path)  # never written here: a kept name is a digest
            continue
        size = _tree_bytes(path) if is_folder else info.st_size
        found.append(_Entry(path, part, info.st_mtime, size, is_folder))
    return found


def _remove_leftovers(root: Path, now: float, unused_s: float) -> None:
    """Partial writes older than ``PARTIAL_MAX_AGE_S`` anywhere in the cache, and versions files unused for
    ``unused_s`` (those of an earlier package version are never read again)."""
    partials = [Path(folder, name) for folder, _, files in os.walk(root)  # a folder removed meanwhile: skipped
                for name in files if name.endswith(PARTIAL_SUFFIX)]
    for path in partials:
        try:
            if now - path.lstat().st_mtime > PARTIAL_MAX_AGE_S:
                path.unlink(missing_ok=True)
        except FileNotFoundError:
            continue
    for path in root.glob("versions-*.json"):
        try:
            if now - path.lstat().st_mtime > unused_s:
                path.unlink(missing_ok=True)
        except FileNotFoundError:
            continue


def _listing(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _tree_bytes(path: Path) -> int:
    """The bytes of the files under ``path`` (links not followed; one removed meanwhile counts nothing)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue
    return total


def _engine_handle(key: KernelKey):
    """The package's compiled engine for ``key`` (its kernel data loaded once per process and system); a model it
    does not bundle is read from its folder under the folders' lock, so no prune removes it meanwhile."""
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)  # its data loader warns of every fallback row
    from aiconfigurator_core.sdk import EngineHandle
    with _folders_lock(exclusive=False):
        model = model_folder(key.model_config) if key.model_config.startswith("{") else key.model_config
        return EngineHandle.compile(model, key.system, key.backend,
                                    backend_version=key.version, tp_size=key.tensor_parallel,
                                    attention_dp_size=key.attention_dp, moe_tp_size=key.moe_tp,
                                    moe_ep_size=key.moe_ep, gemm_quant_mode=key.gemm, moe_quant_mode=key.moe,
                                    kvcache_quant_mode=key.kv,
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
    cells = row[T_DENSE:] / 1000.0
    problem = table_problem(cells)
    if problem:  # e.g. a format the GPU cannot compute: the package ends its op list early (_op_names)
        raise ValueError(f"the operator tables gave {problem}")
    return cells

