"""The operator-table peer's own answer for a run of the silicon sample: ``aiconfigurator-core``'s aggregated
(continuous-batching) estimate, the closed-form one its own accuracy tracking compares with these runs.

It is asked as that tracking asks it (``tools/accuracy_tracking/run_silicon.py`` and ``cli_estimate`` in the
aiconfigurator repository): the run's model, GPU system and engine, the engine version the run measured where the
package has its tables (else the newest), the parallel sizes, concurrency and weight formats the file gives, the KV
cache and attention formats the package infers from the checkpoint, and a context budget of one prompt
(``cli_estimate``'s default). A run the package cannot estimate (no kernel data for it, or the model does not fit
the cards as the package budgets memory) has no peer answer, and the report says how many.

Validation only, like the silicon sample: ``bench/validate.py`` sets the peer's error beside this project's on the
same runs, so the report says where this project is ahead of the peer and where it is not. Nothing here is fitted.
"""

from __future__ import annotations

import functools
import json
import logging

import pandas as pd

from ..hardware.kernel_tables import (bundled_models, bundled_name, kernel_name, model_config_json, model_folder,
                                      version_slots)
from ..hardware.tables import load_table
from .silicon_sample import attention_ranks, raw, run_of

METRICS = {"ttft_mean_ms": "ttft", "tpot_mean_ms": "tpot"}  # a silicon row's metric -> the estimate's key


@functools.lru_cache(maxsize=16)
def _database(system: str, backend: str, version: str):
    """The package's kernel data of one GPU system, engine and version (loaded once per process)."""
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)  # its loader warns of every fallback row
    from aiconfigurator_core.sdk.perf_database import get_database
    return get_database(system, backend, version)


@functools.lru_cache(maxsize=1)
def _runs() -> pd.DataFrame:
    return raw().set_index("id")


def _mode(enum, name) -> object | None:
    """The package's quantisation mode called ``name`` (None, for the package to infer it, when the file gives none)."""
    return None if pd.isna(name) else enum[str(name)]


def _model(model_path: str, model: str) -> str | None:
    """What the package reads the run's model from: the checkpoint the run served where the package bundles its
    config.json, else one of the same shape it bundles (``bundled_name``), else the config.json this project writes
    from ``models.csv`` (None when none expresses it). The package cannot download a config here."""
    if model_path in bundled_models():
        return model_path
    row = load_table("models").loc[model]
    config = bundled_name(row) or model_config_json(row)
    if isinstance(config, dict):
        return model_folder(json.dumps(config, sort_keys=True))
    return config if config in bundled_models() else None


@functools.lru_cache(maxsize=4096)
def estimate(run_id: str, model: str, kv_quant: str) -> tuple[dict[str, float], str]:
    """(figures, why): the peer's {"ttft_mean_ms", "tpot_mean_ms"} for the silicon-sample run ``run_id`` of ``model``
    (``models.csv``) and "", or ({}, why the package gives none) in a few words.

    The formats are tried in turn, the first the package has kernels for: the file's weight formats with the KV
    cache format the replay gives the run (``kv_quant``: FP8 for FP8 and NVFP4 weights, as the package infers it),
    then with the KV format the package infers from the checkpoint, then, for a checkpoint the package bundles,
    every format as it infers them (some rows label gpt-oss's MXFP4 experts NVFP4, which the package has no table
    for)."""
    from aiconfigurator_core.sdk import common

    run = _runs().loc[run_id]
    slots = version_slots(run["system"], run["backend"])
    if not slots:
        return {}, "no kernel data for the engine on the GPU"
    version = str(run["backend_version"])
    version = version if version in slots.values() else slots["current"]
    model_path = _model(run["model_path"], model)
    if model_path is None:
        return {}, "a model shape the package does not express"
    gemm, moe = _mode(common.GEMMQuantMode, run["gemm_quant_mode"]), _mode(common.MoEQuantMode, run["moe_quant_mode"])
    formats = [(gemm, moe, common.KVCacheQuantMode[kernel_name("kv_quant", kv_quant)]), (gemm, moe, None)]
    if model_path in bundled_models():
        formats.append((None, None, None))
    why = ""
    for modes in formats:
        try:
            result = _run_agg(run, version, model_path, *modes)
        except Exception as exc:  # the package refuses these formats (no kernel data for one of its operators)
            why = f"the package refuses it ({type(exc).__name__})"
            continue
        if result is None:
            return {}, "does not fit the cards as the package budgets memory"
        return {metric: float(result[key]) for metric, key in METRICS.items()}, ""
    return {}, why


def _run_agg(run: pd.Series, version: str, model_path: str, gemm, moe, kv) -> dict | None:
    """The package's aggregated estimate of ``run`` with these formats (None: the package infers it), as its
    ``cli_estimate`` makes it; None when the model does not fit the cards as the package budgets memory."""
    from aiconfigurator_core.sdk import config
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.models.helpers import resolve_context_fmha_by_data, resolve_nvfp4_for_system

    def size(column: str) -> int | None:
        return int(run[column]) if pd.notna(run[column]) and int(run[column]) > 0 else None

    database = _database(run["system"], run["backend"], version)
    model_config = config.ModelConfig(
        tp_size=size("tp_size") or 1, pp_size=size("pp_size") or 1, attention_dp_size=attention_ranks(run) or 1,
        moe_tp_size=size("moe_tp_size"), moe_ep_size=size("moe_ep_size"), gemm_quant_mode=gemm, moe_quant_mode=moe,
        kvcache_quant_mode=kv)
    resolve_context_fmha_by_data(model_config, model_path, database, run["backend"], is_context_role=True)
    resolve_nvfp4_for_system(model_config, run["system"], model_path)
    built = get_model(model_path, model_config, run["backend"])
    runtime = config.RuntimeConfig(isl=int(run["isl"]), osl=int(run["osl"]), batch_size=int(run["batch_size"]))
    summary = get_backend(run["backend"]).run_agg(built, database, runtime, ctx_tokens=int(run["isl"]))
    return None if summary.check_oom() else summary.get_result_dict()


def row_estimate(row: pd.Series) -> tuple[dict[str, float], str]:
    """``estimate`` of the run of one silicon row of ``validation_rows`` (its id is the run's and its metric's)."""
    return estimate(run_of(str(row.name)), row["model"], row["kv_quant"])
