"""The roofline against published measurements, and the fit of its efficiency factors.

``data/hardware/measurements.csv`` holds measured serving figures (one row per figure, with source):
a GPU, model, weight and KV format and tensor-parallel degree; a load (``batch`` requests at once when
``rate_per_s`` is 0, else Poisson arrivals at that rate with up to ``batch`` in a batch); fixed input and
output lengths; and the metric measured (mean time per output token, mean time to first token, or
output tokens per second). ``predict`` runs that load through the simulator itself, so what is
calibrated is exactly what the Lab prints.

``fit`` chooses one ``Efficiency`` (compute share, bandwidth share, per-iteration overhead) for a set of
rows by a pattern search on the sum of squared log errors. ``bench/calibrate.py`` fits each GPU family
with at least ``MIN_FAMILY_MEASUREMENTS`` rows, and all rows together for the others, and writes
``data/hardware/calibration.csv``; the README's table of predicted versus measured is generated from it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .config import load_scenario
from .hardware import Efficiency, calibration_row, gpu_row, load_table
from .simulate import simulate

METRICS = {"tpot_mean_ms": ("tpot_ms", "mean"), "ttft_mean_ms": ("ttft_ms", "mean"),
           "output_tokens_per_s": ("output_tokens_per_s", None)}
MIN_FAMILY_MEASUREMENTS = 5
BOUNDS = {"compute": (0.05, 1.0), "bandwidth": (0.05, 1.0), "overhead_ms": (0.05, 50.0)}  # the fit's box
CHECK_FACTORS = (0.9, 1.1)  # a finished fit is no worse than any one factor moved by these
SIMULTANEOUS_RATE_PER_S = 1e9  # "all at once": arrivals a nanosecond apart


def measurement_scenario(row: pd.Series) -> dict:
    """The scenario that reproduces one measurement's load on the roofline model."""
    rate = float(row["rate_per_s"]) or SIMULTANEOUS_RATE_PER_S
    batch = int(row["batch"])
    return {
        "name": f"measurement {row.name}",
        "seed": 0,
        "workload": {"num_requests": int(row["requests"]), "arrival": {"process": "poisson", "rate_per_s": rate},
                     "classes": [{"name": "bench", "share": 1.0,
                                  "prompt_tokens": {"dist": "constant", "value": int(row["input_tokens"])},
                                  "output_tokens": {"dist": "constant", "value": int(row["output_tokens"])}}]},
        "server": {"step_model": "roofline", "gpu": row["gpu"], "model": row["model"], "quant": row["quant"],
                   "kv_quant": row["kv_quant"], "tensor_parallel": int(row["tensor_parallel"]),
                   "max_batch_size": batch, "max_batched_tokens": max(8192, batch)},
    }


def predict(row: pd.Series, efficiency: Efficiency | None = None) -> float:
    """The simulator's value of ``row``'s metric under its load."""
    summary = simulate(load_scenario(measurement_scenario(row)), efficiency=efficiency).summary["overall"]
    key, stat = METRICS[row["metric"]]
    return float(summary[key][stat] if stat else summary[key])


def error_pct(predicted, measured):
    """Signed error of a prediction against the measured value, in percent (numbers or arrays)."""
    return (predicted / measured - 1.0) * 100.0


def measurements() -> pd.DataFrame:
    """The measurements table with each row's GPU family."""
    table = load_table("measurements").copy()
    table["family"] = [gpu_row(g)["family"] for g in table["gpu"]]
    return table


def _loss(rows: pd.DataFrame, efficiency: Efficiency) -> float:
    return float(sum(math.log(predict(row, efficiency) / row["measured"]) ** 2 for _, row in rows.iterrows()))


def fit(rows: pd.DataFrame, start: Efficiency = Efficiency(0.7, 0.85, 2.0), step: float = 0.4,
        tolerance: float = 0.01) -> Efficiency:
    """Pattern search in log space: try each factor up and down by ``step``, keep improvements, halve the
    step when none helps, stop below ``tolerance``. Then check that no factor moved by ``CHECK_FACTORS``
    (x0.9, x1.1) does better, and if one does, search on from there. Each factor stays in its ``BOUNDS``
    (a fit that wants less overhead stops at the floor instead of creeping towards zero)."""
    lower, upper = (np.log([b[i] for b in BOUNDS.values()]) for i in (0, 1))
    x = np.clip(np.log([start.compute, start.bandwidth, start.overhead_ms]), lower, upper)

    def at(point):
        return Efficiency(*np.exp(point))

    def better_neighbour(point, loss, moves):
        """The first neighbour (one factor moved by one of ``moves``, in log) that lowers the loss."""
        for axis in range(3):
            for move in moves:
                trial = point.copy()
                trial[axis] = np.clip(trial[axis] + move, lower[axis], upper[axis])
                if trial[axis] != point[axis]:
                    trial_loss = _loss(rows, at(trial))
                    if trial_loss < loss - 1e-9:
                        return trial, trial_loss
        return None

    best = _loss(rows, at(x))
    checks = [math.log(f) for f in CHECK_FACTORS]
    while True:
        while step >= tolerance:
            found = better_neighbour(x, best, (step, -step))
            if found is None:
                step /= 2
            else:
                x, best = found
        found = better_neighbour(x, best, checks)
        if found is None:
            return at(x)
        (x, best), step = found, tolerance * 4


def prediction_table() -> pd.DataFrame:
    """Every measurement with the calibrated prediction and its error (%, predicted vs measured)."""
    table = measurements()
    table["predicted"] = [predict(row) for _, row in table.iterrows()]
    table["error_pct"] = error_pct(table["predicted"], table["measured"])
    return table


def badge(gpu: str) -> str:
    """One line on where ``gpu``'s step times come from."""
    row = calibration_row(gpu)
    n = int(row["measurements"])
    if n == 0:
        return (f"estimate only: no measurement of the {row.name} family; efficiencies from the fit over all "
                f"measured GPUs")
    if n < MIN_FAMILY_MEASUREMENTS:
        return (f"efficiencies from the fit over all measured GPUs; checked against {n} measurement(s) of the "
                f"{row.name} family, median error {row['median_abs_error_pct']:.0f}% "
                f"({row['loo_median_abs_error_pct']:.0f}% when the fit leaves them out)")
    return (f"calibrated against {n} measurements of the {row.name} family, median error "
            f"{row['median_abs_error_pct']:.0f}% ({row['loo_median_abs_error_pct']:.0f}% leaving each one out)")
