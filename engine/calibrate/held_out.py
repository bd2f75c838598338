"""Accuracy on held-out sources: every run predicted by both step models, summarised per configuration.

Two sets of runs are predicted: ``measurements.csv`` (published figures, each with its source: ``sources``) and the
``aiconfigurator-core`` silicon sample (``silicon_sample``, validation only). Each run is predicted twice, by the
calibrated roofline (``kernel_tables`` off, the shipped factors) and by the product as a user gets it (``auto``:
measured operator tables where they cover the run, the roofline elsewhere); ``priced_by`` says which one did.

What counts as held out: for the operator tables, every run (nothing of this project is fitted to them; their
kernels are micro-benchmarks, not these runs); for the roofline, runs of held-out sources that its shipped fit
did not replay (``fitted`` False in ``validation.csv``). ``configurations`` summarises the held-out errors per
(model, GPU, engine, step model): what a plan's confidence badge reads (``closest``).
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from ..hardware.roofline import efficiency_for
from ..hardware.tables import load_table
from ..scenario.table_names import DATA_DIR
from .calibration import Case, error_pct, replay_problem
from .calibration_report import each_row, metric_kind
from .silicon_sample import SOURCE as SILICON_SOURCE, run_ids
from .sources import by_source

CONFIGURATIONS_FILE = DATA_DIR / "validation_configurations.csv"
KINDS = {"gqa": "dense", "mla": "MLA MoE"}  # a model's kind: its attention, "MoE" where it has experts
TABLES, ROOFLINE = "operator tables", "roofline"
EXPERT_LAYOUTS = ("ep", "dep")  # a measurement's ``parallel`` with the experts split over the cards
TAIL = " p99"  # a p99 figure's kind: its metric's kind and this, reported apart from means and medians
# What one published run is: the figures of a document under one load (its metrics and statistics)
LOAD_COLUMNS = ["document", "gpu", "model", "quant", "engine", "engine_version", "tensor_parallel", "batch",
                "rate_per_s", "input_tokens", "output_tokens"]


def kind_of(row: pd.Series) -> str:
    """dense, MoE (grouped-query attention with experts) or MLA MoE (DeepSeek-style) of a ``models.csv`` row (or a
    user's shape, ``roofline.model_row``)."""
    if row["attention"] == "mla":
        return KINDS["mla"]
    return "MoE" if int(row["experts"]) else KINDS["gqa"]


def model_kind(model: str) -> str:
    """``kind_of`` the ``models.csv`` row of ``model``."""
    return kind_of(load_table("models").loc[model])


def _predict_both(row: pd.Series) -> tuple[float, float, str]:
    """(roofline, product, priced_by) of one run; NaN where it cannot be replayed as published."""
    if replay_problem(row):
        return float("nan"), float("nan"), ""
    roofline, product = Case.from_row(row, "off"), Case.from_row(row, "auto")
    efficiency = efficiency_for(row["gpu"], engine=row["engine"])
    metric = row["metric"]
    return (roofline.predict(efficiency)[metric], product.predict(efficiency)[metric],
            TABLES if product.kernel_key is not None else ROOFLINE)


def predictions(rows: pd.DataFrame, workers: int = 1) -> pd.DataFrame:
    """``rows`` (measurement-shaped, with ``document``) with both predictions, their errors (%), ``priced_by``,
    ``source`` and ``held_out_source``, the model's ``kind`` and the metric's."""
    results = each_row(_predict_both, rows, workers)
    roofline, product, priced = zip(*results) if results else ((), (), ())
    table = by_source(rows).assign(predicted_roofline=roofline, predicted=product, priced_by=priced)
    table["error_roofline_pct"] = error_pct(table["predicted_roofline"], table["measured"])
    table["error_pct"] = error_pct(table["predicted"], table["measured"])
    table["kind"] = table["model"].map(model_kind)
    table["metric_kind"] = table["metric"].map(figure_kind)
    return table.dropna(subset=["predicted"])


def figure_kind(metric: str) -> str:
    """What a measured figure is, for the report: its metric's kind (``metric_kind``), with ``TAIL`` for a p99, so
    that a tail is judged apart from the means and medians (a run's mean and median are one centre)."""
    return metric_kind(metric) + (TAIL if metric.endswith("_p99_ms") else "")


def layout_of(row: pd.Series) -> str:
    """TP n, TP n EP or DEP n."""
    parallel = row.get("parallel")
    if parallel == "dep":
        return f"DEP{int(row['tensor_parallel'])}"
    return f"TP{int(row['tensor_parallel'])}" + (" EP" if parallel == "ep" else "")


def run_count(table: pd.DataFrame) -> int:
    """The runs ``table``'s figures were measured on: a silicon-sample run gives two figures (time to first token
    and per output token: its id and its metric), a published run one or more (its load: mean, median and p99)."""
    silicon = table["document"] == SILICON_SOURCE
    loads = {tuple(map(str, load)) for load in table.loc[~silicon, LOAD_COLUMNS].itertuples(index=False)}
    return int(run_ids(table.index[silicon]).nunique()) + len(loads)


def summary(table: pd.DataFrame, by: list[str], error: str = "error_pct") -> pd.DataFrame:
    """Per group of ``by``: runs, median and largest absolute error (%) of ``error``, per metric kind, and the
    median signed error (+: predicted too long or too high) of time to first token (its centre and its p99), whose
    errors lean one way."""
    out = []
    for key, group in table.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        entry = dict(zip(by, key))
        entry["runs"] = run_count(group)
        for kind, rows in group.groupby("metric_kind"):
            errors = rows[error].abs()
            entry[f"{kind} median"] = float(errors.median())
            entry[f"{kind} max"] = float(errors.max())
            if kind.startswith("time to first token"):
                entry[f"{kind} signed median"] = float(rows[error].median())
        out.append(entry)
    return pd.DataFrame(out) if out else pd.DataFrame(columns=[*by, "runs"])


def _median(errors: pd.Series) -> float:
    """The median of ``errors``, to a tenth of a per cent (NaN when there are none)."""
    return round(float(errors.median()), 1) if len(errors) else np.nan


def configurations(table: pd.DataFrame) -> pd.DataFrame:
    """The held-out error of the product per (model, weight format, GPU, engine, priced_by, expert parallelism or
    not): runs, median absolute error of every metric, of time per output token and of time to first token, and
    both's median signed error (+: predicted too long), each of a run's centre (mean or median), and time to first
    token's p99 median absolute error where a source measured it (``confidence.closest_check`` reads them)."""
    rows = []
    table = table.assign(expert_parallel=table["parallel"].isin(EXPERT_LAYOUTS))
    for (model, quant, gpu, engine, priced, split), group in table.groupby(
            ["model", "quant", "gpu", "engine", "priced_by", "expert_parallel"], sort=True):
        tpot = group.loc[group["metric_kind"] == "time per output token", "error_pct"]
        ttft = group.loc[group["metric_kind"] == "time to first token", "error_pct"]
        ttft_p99 = group.loc[group["metric_kind"] == "time to first token" + TAIL, "error_pct"]
        rows.append({"model": model, "quant": quant, "gpu": gpu, "engine": engine, "priced_by": priced,
                     "kind": model_kind(model),
                     "expert_parallel": bool(split),
                     "runs": run_count(group), "sources": ", ".join(sorted(set(group["source"]))),
                     "median_abs_error_pct": round(float(group["error_pct"].abs().median()), 1),
                     "tpot_median_abs_error_pct": _median(tpot.abs()), "ttft_median_abs_error_pct": _median(ttft.abs()),
                     "tpot_median_signed_error_pct": _median(tpot), "ttft_median_signed_error_pct": _median(ttft),
                     "ttft_p99_median_abs_error_pct": _median(ttft_p99.abs())})
    return pd.DataFrame(rows)


@functools.lru_cache(maxsize=1)
def shipped_configurations() -> pd.DataFrame:
    """``validation_configurations.csv`` as ``bench/validate.py --write`` wrote it."""
    return pd.read_csv(CONFIGURATIONS_FILE)
