"""Independent end-to-end measurements for validation only: ``aiconfigurator-core``'s ``systems/silicon_sample.csv``.

The package ships closed-loop benchmark runs of current engines (vLLM, SGLang, TensorRT-LLM) on H100, H200, B200,
B300 and GB200: a fixed prompt and output length, a number of concurrent clients, and the mean time to first token
and time per output token measured. They never enter a fit or tune any factor of this project: ``validation_rows``
turns the aggregated (one server) runs of models this project expresses into rows shaped like
``measurements.csv`` (two metrics a run), replayed as their benchmark client runs them (a closed loop of
``batch`` clients) by ``calibration.Case``.

Runs left out, with the reason counted (``skipped``): a run the file lists again (``REPEAT``), disaggregated runs (a
prefill and a decode pool with their own parallelism), models without a row in ``models.csv``, pipeline parallelism, a
GPU system the project does not profile, a run whose attention ranks are not given (``attention_ranks``), and a
parallel layout a scenario cannot state (``layout``), which would otherwise be replayed as another.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pandas as pd

from ..hardware.kernel_tables import systems_dir
from ..hardware.tables import load_table

SOURCE = "aiconfigurator-core systems/silicon_sample.csv"
# The package's model names -> models.csv (a published checkpoint of the same shape; its format is the run's own).
MODELS = {"deepseek-ai/DeepSeek-R1": "DeepSeek-R1", "nvidia/DeepSeek-R1-NVFP4": "DeepSeek-R1",
          "deepseek-ai/DeepSeek-V3": "DeepSeek-V3", "nvidia/DeepSeek-V3.1-NVFP4": "DeepSeek-V3",
          "meta-llama/Llama-3.1-70B": "Llama-3.1-70B", "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B",
          "nvidia/Llama-3.1-8B-Instruct-FP8": "Llama-3.1-8B", "Qwen/Qwen3-32B": "Qwen3-32B",
          "nvidia/Qwen3-32B-NVFP4": "Qwen3-32B", "Qwen/Qwen3-235B-A22B-FP8": "Qwen3-235B-A22B",
          "openai/gpt-oss-120b": "gpt-oss-120b", "MiniMaxAI/MiniMax-M2.5": "MiniMax-M2.5",
          "moonshotai/Kimi-K2.5": "Kimi-K2.5", "zai-org/GLM-5": "GLM-5", "zhipuai/GLM-5": "GLM-5"}
ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}
# A run that gives no precision ran its checkpoint's own weights: the 16-bit checkpoints the file names without one
# (their config.json's torch_dtype, as the package bundles it in model_configs/).
CHECKPOINT_PRECISION = {"Qwen/Qwen3-32B": "bf16", "meta-llama/Llama-3.1-8B-Instruct": "bf16"}
HOPPER_FP4 = "mxfp4-w4a16"  # gpt-oss's MXFP4 experts on a card without FP4 tensor cores
# Requests a replay sends: ten per client, as serving benchmarks of a set concurrency send (InferenceMAX's
# num_prompts = 10 x concurrency), so that the clients' first requests, which all start together, do not dominate;
# at least MIN_REQUESTS (and at most ``calibration.replayed_requests``' cap).
ROUNDS, MIN_REQUESTS = 10, 64
# A run's settings and measured times: two rows that agree on all of them are one run listed twice (the file repeats
# runs of its earlier source files, and gives some DeepSeek runs once as DeepSeek-V3 and once as DeepSeek-R1, whose
# shapes are the same; the times agree to 0.1 us, the copies' last digits differ), which would count twice in every
# median.
RUN_KEY = ("system", "backend", "backend_version", "precision", "mode", "isl", "osl", "batch_size", "tp_size",
           "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "silicon_ttft_ms", "silicon_tpot_ms")
REPEAT = "the same run listed again (its settings and measured times repeat an earlier row's)"
HYBRID = ("parallel layout a scenario cannot state (attention tensor-parallel inside data-parallel ranks, or experts "
          "split both ways)")  # the reason ``validation_rows`` counts a run ``layout`` cannot state under


def row_id(run_id: str, metric: str) -> str:
    """The id of one measured figure of a run: the run's id and the metric's first word ("<run>-ttft")."""
    return f"{run_id}-{metric.split('_')[0]}"


def run_of(row_id: str) -> str:
    """The run a ``row_id`` is a figure of (a run's two figures share it)."""
    return row_id.rsplit("-", 1)[0]


def run_ids(row_ids: pd.Index) -> pd.Index:
    """``run_of`` each of ``row_ids``."""
    return pd.Index([run_of(str(name)) for name in row_ids])


def path() -> Path:
    """Where the installed package keeps the file."""
    return systems_dir() / "silicon_sample.csv"


def _gpus() -> dict[str, str]:
    """The package's GPU systems -> ``gpus.csv`` names (``kernel_names.csv``)."""
    names = load_table("kernel_names").loc[["gpu"]]
    return dict(zip(names["kernel"], names["name"]))


def _quant(precision: str, model: str, gpu: str) -> str:
    if precision == "fp4":
        if model == "gpt-oss-120b":
            return "mxfp4" if gpu.startswith(("B", "GB")) else HOPPER_FP4
        return "nvfp4"
    return {"fp8": "fp8", "bf16": "bf16", "fp16": "fp16", "int4": "int4"}.get(precision, "")


def layout(tp: int, dp: int, moe_tp: int, moe_ep: int, experts: bool) -> str | None:
    """The ``measurements.csv`` ``parallel`` of a run's layout (package sizes, each at least 1): "" for tensor
    parallelism alone (a mixture of experts' experts split by tensor parallelism too), "ep" for experts split whole
    over the tensor-parallel cards, "dep" for data-parallel attention with experts split whole over its ranks; None
    for what a scenario cannot state: attention tensor-parallel inside data-parallel ranks, experts split both ways,
    or a mixture of experts split otherwise than its attention."""
    if not experts:
        return "" if dp == 1 else None
    if dp == 1 and moe_tp == tp and moe_ep == 1:
        return ""
    if dp == 1 and moe_tp == 1 and moe_ep == tp:
        return "ep"
    if tp == 1 and moe_tp == 1 and moe_ep == dp:
        return "dep"
    return None


def attention_ranks(run: pd.Series) -> int | None:
    """A run's data-parallel attention ranks (at least 1): its ``attention_dp_size``, else 1 where the clients its
    source names (``silicon_concurrency`` in ``silicon_data_source``) are its ``batch_size`` (the clients are
    ``batch_size`` on each rank: so in 99% of the rows that give both), else None (not given)."""
    if pd.notna(run["attention_dp_size"]):
        return max(1, int(run["attention_dp_size"]))
    clients = re.search(r"silicon_concurrency=(\d+)", str(run["silicon_data_source"]))
    if clients and pd.notna(run["batch_size"]) and int(clients.group(1)) == int(run["batch_size"]):
        return 1
    return None


@functools.lru_cache(maxsize=1)
def raw() -> pd.DataFrame:
    return pd.read_csv(path())


def validation_rows() -> tuple[pd.DataFrame, dict[str, int]]:
    """(rows, skipped): the runs this project can replay, as ``measurements.csv`` rows (``parallel`` "dep" for
    data-parallel attention, "ep" for experts split over the tensor-parallel cards; ``run_version`` added), and how
    many runs were left out, by reason."""
    table = raw()
    gpus, models = _gpus(), load_table("models")
    rows, skipped = [], {}

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    seen = set()
    for _, run in table.iterrows():
        key = tuple(f"{run[column]:.4f}" if isinstance(run[column], float) else str(run[column]) for column in RUN_KEY)
        if key in seen:
            skip(REPEAT)
            continue
        seen.add(key)
        if run["mode"] != "agg":
            skip("disaggregated (prefill and decode pools)")
            continue
        model = MODELS.get(run["model_path"])
        if model is None:
            skip(f"model not in models.csv ({run['model_path']})")
            continue
        gpu = gpus.get(run["system"])
        if gpu is None:
            skip(f"GPU system {run['system']} not profiled")
            continue
        dp = attention_ranks(run)
        if dp is None or run[["tp_size", "pp_size", "moe_tp_size", "moe_ep_size", "batch_size"]].isna().any():
            skip("parallel layout or concurrency not given")
            continue
        if int(run["pp_size"]) != 1:
            skip("pipeline parallelism")
            continue
        tp, moe_tp, ep = (max(1, int(run[c])) for c in ("tp_size", "moe_tp_size", "moe_ep_size"))  # 0: none
        parallel = layout(tp, dp, moe_tp, ep, experts=int(models.loc[model, "experts"]) > 0)
        if parallel is None:
            skip(HYBRID)
            continue
        precision = CHECKPOINT_PRECISION.get(run["model_path"], "") if pd.isna(run["precision"]) else run["precision"]
        quant = _quant(precision, model, gpu)
        if not quant:
            skip("weight format not given")
            continue
        version = "" if pd.isna(run["backend_version"]) else str(run["backend_version"])
        clients = int(run["batch_size"])
        base = {"gpu": gpu, "tensor_parallel": tp * dp, "model": model, "quant": quant,
                "kv_quant": "fp8" if quant in ("fp8", "nvfp4") else "fp16",
                "batch": -(-clients // dp),  # on each data-parallel rank (measurements.csv's "dep" convention)
                "rate_per_s": 0.0, "requests": max(MIN_REQUESTS, ROUNDS * clients),
                "input_tokens": int(run["isl"]), "output_tokens": int(run["osl"]), "engine": ENGINES[run["backend"]],
                "engine_version": version, "document": SOURCE, "source": f"{SOURCE}: {run['id']}",
                "as_of": str(run["silicon_data_source"]).split(";")[0],
                "parallel": parallel,
                "run_version": version or "unknown"}
        for metric, column in (("ttft_mean_ms", "silicon_ttft_ms"), ("tpot_mean_ms", "silicon_tpot_ms")):
            if pd.notna(run[column]) and run[column] > 0:
                rows.append({"id": row_id(run["id"], metric), "metric": metric,
                             "measured": float(run[column]), **base})
    frame = pd.DataFrame(rows).set_index("id")
    return frame, skipped
