"""How far one server's step times can be trusted: what priced them and the held-out error of the closest validated
configuration, in the words a plan, the report and the Lab show.

What priced them: measured operator tables where they cover the server, else the calibrated roofline
(``kernel_tables.coverage``). The error: from ``validation_configurations.csv`` (``bench/validate.py --write``: held
out by source), the configuration closest to the server that the same step model priced: the same model (or one of
its very shape), GPU and engine; else a model of the same kind (dense, MoE, MLA MoE) on that GPU and engine. A
family's average is never shown as a model's error.

``trusted``: a plan may win a ranking (``planner.recommend``) when its step times rest on a close check: a
validated configuration as above at most ``TRUST_LIMIT_PCT`` off, or, for a dense model on the roofline without
expert parallelism, the GPU family's fitted calibration. A check further off, or a mixture of experts (MoE, MLA), FP4
weights or expert parallelism with no such check, is an estimate, said as such. A check is read in the plan's weight
format where one was run in it, else in the formats that were, named.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pandas as pd

from ..hardware.kernel_tables import coverage, shape_key
from ..hardware.roofline import model_row
from ..hardware.tables import is_slice, load_table
from ..scenario.config import Server
from ..scenario.labels import format_label
from .calibration import badge, slice_note, status
from .held_out import ROOFLINE, TABLES, kind_of, shipped_configurations

FP4_FORMATS = ("nvfp4", "mxfp4", "mxfp4-w4a16")
MIN_RUNS = 3  # a configuration checked on fewer held-out runs is no check
TRUST_LIMIT_PCT = 25.0  # a check further off than this (median absolute error) makes a plan an estimate


@dataclass(frozen=True)
class Confidence:
    """The step times of one server: ``priced_by`` (operator tables or roofline), the words of its ``source``, the
    closest check's words (``check``), its held-out median error (None: no check) and whether it may win a ranking
    (``trusted``)."""

    priced_by: str
    source: str
    check: str
    error_pct: float | None
    trusted: bool
    short: str = ""  # the same in a few words, for a table cell
    errors_pct: tuple = ()  # the check's held-out median absolute error per metric: ((``METRIC_ERRORS`` key, %), ...)

    @property
    def headline(self) -> str:
        """One line: what priced it, then the check or "estimate"."""
        return f"{self.source}; {self.check}"


def same_shape(model: str) -> list[str]:
    """``model`` and the ``models.csv`` models of its very shape (DeepSeek-V3 and DeepSeek-R1): a run of one is a
    check of the other (the silicon sample lists some DeepSeek runs under either name)."""
    models = load_table("models")
    if model not in models.index:
        return [model]
    shape = shape_key(models.loc[model])
    return [model, *(name for name, row in models.iterrows() if name != model and shape_key(row) == shape)]


@functools.lru_cache(maxsize=1)
def _arithmetic() -> dict[str, str]:
    """Each weight format's arithmetic (``quant.csv``'s ``compute``), read once: a check reads it for every row."""
    return {name: str(compute) for name, compute in load_table("quant")["compute"].items()}


def _math(quant: str) -> str:
    """The arithmetic a weight format runs in (``quant.csv``'s ``compute``: FP16 and BF16 are one), by which checks
    of one format stand for another; a name the table lacks stands for itself."""
    return _arithmetic().get(quant, quant)


def _of_format(rows: pd.DataFrame, quant: str) -> pd.DataFrame:
    """The rows measured in ``quant``'s arithmetic (``_math``) where there are any, else all of them (another
    format's check is the closest there is, and ``format_words`` says so)."""
    if not quant or "quant" not in rows:
        return rows
    alike = rows["quant"].map(_math) == _math(quant)
    return rows[alike] if alike.any() else rows


def format_words(rows: pd.DataFrame, quant: str) -> str:
    """' on FP8 and NVFP4 weights, not FP16' where the checked runs are of other arithmetic than ``quant``'s; ''
    where they are of its (or the table does not say)."""
    if not quant or "quant" not in rows or (rows["quant"].map(_math) == _math(quant)).all():
        return ""
    formats = dict.fromkeys(format_label(f) for f in rows["quant"])
    return f" on {' and '.join(formats)} weights, not {format_label(quant)}"


METRIC_ERRORS = {"ttft": "ttft_median_abs_error_pct", "tpot": "tpot_median_abs_error_pct",
                 "ttft_p99": "ttft_p99_median_abs_error_pct"}  # a check's error per metric: its table column
METRIC_ERROR_WORDS = {"ttft": "time to first token", "tpot": "time per output token",
                      "ttft_p99": "time to first token's p99"}  # the same metrics in words


def errors_of(rows: pd.DataFrame) -> tuple:
    """((metric, held-out median absolute error %), ...) of the checked configurations ``rows``, weighted by their
    runs, for each ``METRIC_ERRORS`` metric they measured."""
    return tuple((name, error) for name, column in METRIC_ERRORS.items()
                 if (error := _weighted(rows, column)) is not None)


def closest_check(model: str, kind: str, gpu: str, engine: str, priced_by: str, expert_parallel: bool = False,
                  quant: str = "") -> tuple[str, float | None, int]:
    """``closest_check_with_errors`` without the per-metric errors."""
    words, error, runs, _ = closest_check_with_errors(model, kind, gpu, engine, priced_by, expert_parallel, quant)
    return words, error, runs


def closest_check_with_errors(model: str, kind: str, gpu: str, engine: str, priced_by: str,
                              expert_parallel: bool = False, quant: str = "") -> tuple[str, float | None, int, tuple]:
    """(words, median absolute error %, runs) of the validated configuration closest to (model, GPU, engine) priced
    by ``priced_by``, with its experts split over the cards or not as ``expert_parallel`` says: the model itself (and
    a model of its very shape, ``same_shape``), else models of its ``kind`` (``held_out.kind_of``), each in weight
    format ``quant`` where it was checked in it, else in the formats it was checked in, said as such; ("", None, 0)
    when there is none."""
    table = shipped_configurations()
    table = table[(table["priced_by"] == priced_by) & (table["gpu"] == gpu) & (table["engine"] == engine)
                  & (table["expert_parallel"].astype(bool) == expert_parallel) & (table["runs"] >= MIN_RUNS)]
    layout = " with its experts split over the cards" if expert_parallel else ""
    same = _of_format(table[table["model"].isin(same_shape(model))], quant)
    if len(same):
        runs = int(same["runs"].sum())
        error = float((same["median_abs_error_pct"] * same["runs"]).sum() / runs)
        names = " and ".join(dict.fromkeys(same["model"]))  # a model checked in two weight formats is one name
        twin = ("" if set(same["model"]) == {model} else " (the same shape)" if model in set(same["model"])
                else f" (the same shape as {model})")
        return (f"{error:.0f}% off on {runs} held-out runs of {names}{twin}{format_words(same, quant)} on {gpu}"
                f"{layout}{metric_words(same)}", error, runs, errors_of(same))
    alike = _of_format(table[table["kind"] == kind], quant)
    if len(alike):
        runs = int(alike["runs"].sum())
        error = float((alike["median_abs_error_pct"] * alike["runs"]).sum() / runs)
        return (f"{error:.0f}% off on {runs} held-out runs of {kind} models{format_words(alike, quant)} on {gpu}"
                f"{layout}{metric_words(alike)} (closest checked: {', '.join(dict.fromkeys(alike['model']))})",
                error, runs, errors_of(alike))
    return "", None, 0, ()


def _weighted(rows: pd.DataFrame, column: str) -> float | None:
    """``column``'s errors weighted by the configurations' runs, over those that have it (None: none has)."""
    if column not in rows:
        return None
    have = rows[rows[column].notna()]
    return float((have[column] * have["runs"]).sum() / have["runs"].sum()) if len(have) else None


def _direction(signed: float | None) -> str:
    """' (too short by Z% at the median)' for a median signed error, '' for none or 0."""
    return f" (too {'short' if signed < 0 else 'long'} by {abs(signed):.0f}% at the median)" if signed else ""


def metric_words(rows: pd.DataFrame) -> str:
    """Each metric's part of a check: ": time per output token X% off (too long by V% at the median), time to first
    token Y% off (too short by Z% at the median), its p99 W% off", from the configurations' own figures weighted by
    their runs (a direction where the table gives one, the p99 only where a source measured one); "" when they have
    none."""
    tpot, ttft = _weighted(rows, "tpot_median_abs_error_pct"), _weighted(rows, "ttft_median_abs_error_pct")
    tail = _weighted(rows, "ttft_p99_median_abs_error_pct")
    words = METRIC_ERROR_WORDS
    parts = ([f"{words['tpot']} {tpot:.0f}% off{_direction(_weighted(rows, 'tpot_median_signed_error_pct'))}"]
             if tpot is not None else []) + (
        [f"{words['ttft']} {ttft:.0f}% off{_direction(_weighted(rows, 'ttft_median_signed_error_pct'))}"]
        if ttft is not None else []) + ([f"its p99 {tail:.0f}% off"] if tail is not None else [])
    return ": " + ", ".join(parts) if parts else ""


def confidence(server: Server) -> Confidence:
    """The ``Confidence`` of ``server``'s step times."""
    covered = coverage(server)
    if server.step_model != "roofline":
        return Confidence("fixed", covered.words, "set by the scenario, not measured", None, False, "fixed")
    priced_by = TABLES if covered.key is not None else ROOFLINE
    kind = kind_of(model_row(server))
    check, error, runs, errors = closest_check_with_errors(server.model, kind, server.gpu, server.engine, priced_by,
                                                           server.expert_parallel, server.quant)
    risky = kind != "dense" or server.quant in FP4_FORMATS or server.expert_parallel
    whole_card = not is_slice(server.gpu)
    if check and error > TRUST_LIMIT_PCT:
        return Confidence(priced_by, covered.words, f"estimate: {check}; more than {TRUST_LIMIT_PCT:.0f}% off, so "
                          f"never recommended ahead of a plan checked closer", error, False,
                          f"{covered.short}, estimate ({error:.0f}% off on {runs} held out)", errors)
    if check:
        return Confidence(priced_by, covered.words, check, error, whole_card,
                          f"{covered.short}, {error:.0f}% off on {runs} held out", errors)
    family = status(server.gpu)
    if not risky and family.startswith("calibrated"):
        words = (f"GPU family {family}" if priced_by == ROOFLINE else
                 f"not yet checked on a held-out run of this model, GPU and engine; its GPU family is "
                 f"{family}")
        return Confidence(priced_by, covered.words, words, None, whole_card, f"{covered.short}, family {family}")
    what = ", ".join(part for part, on in (("mixture of experts", kind != "dense"),
                                           ("FP4 weights", server.quant in FP4_FORMATS),
                                           ("expert parallelism", server.expert_parallel)) if on)
    return Confidence(priced_by, covered.words,
                      f"estimate: no held-out run of a configuration like it{f' ({what})' if what else ''}",
                      None, False, f"{covered.short}, estimate")


def step_badge(server: Server) -> str:
    """One line on where ``server``'s step times come from and how far they can be trusted (the Lab, the
    Hardware page, the report and the command line): a saved calibration's own check, else ``confidence``."""
    if server.calibration:
        return badge(server.gpu, server.calibration, server.engine)
    return confidence(server).headline + slice_note(server.gpu)
