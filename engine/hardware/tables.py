"""The hardware tables (``data/hardware/*.csv``) read once: GPU cards and slices, and the shipped calibration's
efficiency of each GPU family (``calibration.csv``: shares of peak, sharpness) composed with that of each serving
engine (``engines.csv``: per-iteration overhead, all-reduce latency factor).

A leaf of the hardware layer: the saved calibrations (``calibration_store``) and the roofline (``roofline``) read
their rows here.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import pandas as pd

from ..scenario.errors import ScenarioError, excerpt
from ..scenario.registry import TP_DEGREES
from ..scenario.table_names import DATA_DIR
from .steptime import HARD_MAX

@functools.lru_cache(maxsize=None)
def load_table(name: str) -> pd.DataFrame:
    """One table from ``data/hardware/NAME.csv``, indexed by its first column."""
    frame = pd.read_csv(DATA_DIR / f"{name}.csv")
    return frame.set_index(frame.columns[0])


@functools.lru_cache(maxsize=1)
def data_version() -> str:
    """The version of the hardware tables: the first 12 hex digits of the SHA-256 of every ``data/hardware`` CSV
    file, names and contents, so an answer kept under it is recomputed when a price, a GPU or a factor changes."""
    digest = hashlib.sha256()
    for path in sorted(DATA_DIR.glob("*.csv")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def table_row(table: str, key: str, field: str) -> pd.Series:
    """Row ``key`` of ``data/hardware/TABLE.csv``; a missing one is one line naming ``server.FIELD`` and the choices."""
    frame = load_table(table)
    if key not in frame.index:
        raise ScenarioError(f"server.{field} = {excerpt(key)} is not in data/hardware/{table}.csv; "
                            f"choose one of {', '.join(frame.index)}")
    return frame.loc[key]


def gpu_names() -> list[str]:
    """Every GPU profile: whole cards, then slices."""
    return [*load_table("gpus").index, *load_table("gpu_slices").index]


# The dense tensor-core peak of each compute format (``quant.csv``'s ``compute``), by its ``gpus.csv`` column; an
# empty cell: the card has no tensor cores for that format.
PEAK_COLUMNS = {"fp16": "fp16_tflops", "fp8": "fp8_tflops", "int8": "int8_tops", "fp4": "fp4_tflops"}


@functools.lru_cache(maxsize=None)
def gpu_row(name: str) -> pd.Series:
    """The ``gpus.csv`` row of a card, or the derived row of a slice (``parent``/``kind`` set, no link)."""
    slices = load_table("gpu_slices")
    if name not in slices.index:
        if name not in load_table("gpus").index:
            raise ScenarioError(f"server.gpu = {excerpt(name)} is neither in data/hardware/gpus.csv nor "
                                f"gpu_slices.csv; choose one of {', '.join(gpu_names())}")
        return load_table("gpus").loc[name].copy()
    cut = slices.loc[name]
    row = load_table("gpus").loc[cut["parent"]].copy()
    for column in PEAK_COLUMNS.values():
        row[column] = row[column] * cut["sm_fraction"]
    if pd.isna(cut["memory_mib"]):
        row["memory_mib"] = row["memory_mib"] * cut["memory_fraction"]
    else:
        row["memory_mib"] = float(cut["memory_mib"])
    row["memory_source"] = cut["memory_source"]
    row["mem_bw_tb_s"] = row["mem_bw_tb_s"] * cut["memory_fraction"]
    row["board_power_w"] = row["board_power_w"] * cut["sm_fraction"]  # its share of the card's draw, by compute
    row["interconnect_gb_s"] = float("nan")
    row["parent"], row["kind"] = cut["parent"], cut["kind"]
    row["source"] = f"{cut['source']}; parent card: {row['source']}"
    return row


def link_domain_cards(gpu: str) -> int:
    """Cards one fast link joins (``gpus.csv``): the most one server may split a model over (8 for an HGX or OAM
    board, 72 for a GB200 NVL72 rack; 1 for a slice)."""
    return 1 if is_slice(gpu) else int(gpu_row(gpu)["link_domain_cards"])


def tensor_parallel_degrees(gpu: str) -> tuple[int, ...]:
    """The tensor-parallel degrees ``gpu`` can serve with (``registry.TP_DEGREES`` within its link domain)."""
    return tuple(tp for tp in TP_DEGREES if tp <= link_domain_cards(gpu))


def is_slice(gpu: str) -> bool:
    """True for a MIG or cloud slice: no link to other slices, so tensor_parallel stays 1."""
    return "parent" in gpu_row(gpu)


def calibration_row(gpu: str) -> pd.Series:
    """The ``calibration.csv`` row of ``gpu``'s family (slices use their card's)."""
    return load_table("calibration").loc[gpu_row(gpu)["family"]]


@dataclass(frozen=True)
class Efficiency:
    """How close a serving engine gets to the card's peaks: shares of tensor FLOP/s and of HBM bandwidth, a
    fixed cost per iteration (scheduling, kernel launches, sampling), the sharpness k of the smooth maximum of
    compute and memory time (``steptime``; ``HARD_MAX``: the plain maximum), a factor on the all-reduce
    latency of ``gpus.csv`` and the share of peak of 8- and 4-bit matmuls (FP8, INT8, FP4; None: the 16-bit
    ``compute`` share). The first, fourth and last are properties of the card's family, the overhead and the
    all-reduce factor of the serving engine."""

    compute: float
    bandwidth: float
    overhead_ms: float
    sharpness: float = HARD_MAX
    allreduce_factor: float = 1.0
    low_precision_compute: float | None = None

    def matmul_share(self, low_precision: bool) -> float:
        """The share of peak of matmuls in a 16-bit format, or in an 8- or 4-bit one (``low_precision``)."""
        if low_precision and self.low_precision_compute is not None:
            return self.low_precision_compute
        return self.compute


FAMILY_FACTORS = ("compute", "low_precision_compute", "bandwidth", "sharpness")  # calibration.csv, per GPU family
ENGINE_FACTORS = ("overhead_ms", "allreduce_factor")  # engines.csv, per serving engine


def released_formats(model: str) -> list[str]:
    """The weight formats a shipped model's own release is in (``checkpoints.csv`` rows whose repository is its
    ``models.csv`` one: DeepSeek-R1 FP8, gpt-oss MXFP4 both ways it runs); none for a model released in 16 bits only
    or not in ``models.csv``."""
    models = load_table("models")
    if model not in models.index:
        return []
    rows = load_table("checkpoints")
    rows = rows[(rows.index == model) & (rows["hf_repo"] == models.loc[model, "hf_repo"])]
    return list(dict.fromkeys(rows["quant"]))


def default_formats(model: str, quant: str) -> tuple[str, ...]:
    """The weight formats a plan sizes when the customer names none: the scenario's ``quant``, unless it is a 16-bit
    format and ``model`` was released in fewer bits (DeepSeek-R1 in FP8), whose release's formats are then what a
    customer would run."""
    formats = load_table("quant")
    wide = quant in formats.index and float(formats.loc[quant, "weight_bytes_per_param"]) >= 2.0
    released = released_formats(model)
    return tuple(released) if wide and released else (quant,)


def engine_row(engine: str) -> pd.Series:
    """The ``engines.csv`` row of a serving engine."""
    return table_row("engines", engine, "engine")


def default_batched_tokens(engine: str, gpu: str, attention_dp: int = 1) -> int:
    """The token budget of one iteration that ``engine`` starts with on ``gpu`` when none is given
    (``engine_budgets.csv``: vLLM's max_num_batched_tokens, SGLang's chunked_prefill_size, TensorRT-LLM's
    max_num_tokens), for each of ``attention_dp`` data-parallel attention ranks: the rule of the largest card
    memory the card reaches (in MiB, as nvidia-smi reports it), skipping a rule the card's name is excepted from;
    an engine that splits its budget over those ranks (SGLang) gives each its share."""
    rules = load_table("engine_budgets")
    card = gpu_row(gpu)
    name = str(card.get("parent", gpu))  # a slice reports its card's name
    applies = [rule for _, rule in rules[rules["engine"] == engine_row(engine).name].iterrows()
               if rule["from_card_mib"] <= card["memory_mib"]
               and not (isinstance(rule["except_gpu_prefix"], str) and name.startswith(rule["except_gpu_prefix"]))]
    rule = max(applies, key=lambda r: r["from_card_mib"])
    tokens = int(rule["tokens"])
    return tokens if rule["per_attention_dp_rank"] == "yes" else max(1, tokens // max(1, attention_dp))


def shipped_efficiency(gpu: str, engine: str) -> Efficiency:
    """The efficiency of ``gpu``'s family in the shipped ``calibration.csv`` (slices use their card's) with the
    overhead and all-reduce factor of ``engine`` in ``engines.csv``."""
    row, served = calibration_row(gpu), engine_row(engine)
    return Efficiency(float(row["compute_efficiency"]), float(row["bandwidth_efficiency"]),
                      float(served["overhead_ms"]), float(row["roofline_sharpness"]),
                      float(served["allreduce_latency_factor"]), float(row["low_precision_compute_efficiency"]))
