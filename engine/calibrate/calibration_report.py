"""The step model against every measurement: per-run predictions (``data/hardware/validation.csv``, written by
``bench/calibrate.py``) and their summary as Markdown (the manual's Method page and ``bench/validate.py``).

Held-out runs (``joint_fit.split``) are what accuracy is read from; the training runs' errors are in-sample and
shown apart, for reference only.
"""

from __future__ import annotations

import multiprocessing

import pandas as pd

from ..hardware.tables import load_table
from ..scenario.labels import words
from ..scenario.table_names import DATA_DIR
from .calibration import error_pct, measurements, predict, replay_problem
from .joint_fit import NEVER_FITTED_ATTENTION, fit_sample, shipped_fit_date, split

VALIDATION_FILE = DATA_DIR / "validation.csv"
METRIC_KINDS = {"ttft": "time to first token", "tpot": "time per output token", "e2e": "end-to-end latency",
                "inference": "time per output token", "output": "throughput", "decode": "one iteration",
                "prefill": "one iteration"}


def metric_kind(metric: str) -> str:
    """What a metric measures, in words shared by its mean, median and p99 (``METRIC_KINDS``)."""
    return METRIC_KINDS[metric.split("_")[0]]


def _prediction(row: pd.Series) -> float:
    """The shipped calibration's value of a run's metric; NaN for a run that cannot be replayed as published."""
    return float("nan") if replay_problem(row) else predict(row)


def each_row(function, rows: pd.DataFrame, workers: int = 1) -> list:
    """``function`` of every row of ``rows``, in order; ``workers`` forked processes share them (replays are
    independent)."""
    jobs = [row for _, row in rows.iterrows()]
    if workers <= 1:
        return [function(row) for row in jobs]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return pool.map(function, jobs, chunksize=1)


def prediction_table(rows: pd.DataFrame | None = None, workers: int = 1) -> pd.DataFrame:
    """``rows`` of the measurements (default: all) with the shipped calibration's prediction, its error (%,
    predicted vs measured), whether the run is held out and whether the fit replayed it; ``workers`` forked
    processes share the replays."""
    table = measurements() if rows is None else rows
    table = table.assign(predicted=each_row(_prediction, table, workers))
    table["error_pct"] = error_pct(table["predicted"], table["measured"])
    table["held_out"] = split(table)
    table["fitted"] = table.index.isin(fit_sample(measurements(), shipped_fit_date()).index)
    return table


def write_validation(table: pd.DataFrame) -> None:
    """The per-run predictions ``bench/calibrate.py`` ships."""
    table[["predicted", "error_pct", "held_out", "fitted"]].round(4).to_csv(VALIDATION_FILE)


def validation() -> pd.DataFrame:
    """The measurements with the shipped per-run predictions."""
    return measurements().join(pd.read_csv(VALIDATION_FILE, index_col=0))


def _summary(rows: pd.DataFrame, by: str, heading: str, label) -> list[str]:
    lines = [f"| {heading} | runs | median error | largest error | median signed error |", "|---|---|---|---|---|"]
    for key, group in rows.groupby(by, sort=True):
        errors = group["error_pct"]
        lines.append(f"| {label(key)} | {len(group)} | {errors.abs().median():.1f}% | {errors.abs().max():.0f}% | "
                     f"{errors.median():+.1f}% |")
    return lines


def expressed(table: pd.DataFrame) -> pd.Series:
    """True for runs of models the step model expresses (not multi-head latent attention: ``joint_fit``)."""
    attention = load_table("models")["attention"]
    return ~table["model"].map(attention).isin(NEVER_FITTED_ATTENTION)


def markdown_table(table: pd.DataFrame | None = None) -> str:
    """Held-out error per GPU family, engine, model, tensor-parallel degree and metric over the runs of models the
    step model expresses; the DeepSeek (MLA) runs apart; then the in-sample error of the fitted runs, marked as
    such."""
    table = validation() if table is None else table
    table = table.assign(kind=[metric_kind(m) for m in table["metric"]])
    held = table[table["held_out"]]
    dense, latent = held[expressed(held)], held[~expressed(held)]
    lines = [f"Held out: {len(dense)} runs of {dense['model'].nunique()} models from "
             f"{dense['document'].nunique()} pages the fit never saw; median absolute error "
             f"{dense['error_pct'].abs().median():.1f}%.", ""]
    for by, heading, label in (("family", "GPU family", lambda k: words("gpu_family", k)),
                               ("engine", "Serving engine", lambda k: words("engine", k)), ("model", "Model", str),
                               ("tensor_parallel", "Tensor parallel", lambda k: f"TP{k}"), ("kind", "Metric", str)):
        lines += _summary(dense, by, heading, label) + [""]
    if len(latent):
        lines += [f"DeepSeek-V3/R1 (multi-head latent attention, never fitted; most are TP8 runs of vLLM 0.7 and "
                  f"SGLang 0.4 of early 2025): {len(latent)} runs, median absolute error "
                  f"{latent['error_pct'].abs().median():.0f}%.", ""]
        lines += _summary(latent, "kind", "Metric", str) + [""]
    fitted = table[table["fitted"]]
    if len(fitted):
        lines.append(f"In sample, for reference only (not accuracy): the {len(fitted)} runs the fit replayed, median "
                     f"absolute error {fitted['error_pct'].abs().median():.1f}%.")
    return "\n".join(lines) + "\n"


def held_out_summary(column: str) -> dict[str, tuple[int, float]]:
    """Per value of ``column`` (family or engine): held-out runs of models the step model expresses and their median
    absolute error, in percent."""
    held = validation()
    held = held[held["held_out"] & expressed(held)]
    return {key: (len(rows), float(rows["error_pct"].abs().median())) for key, rows in held.groupby(column)}

