"""The roofline against measurements, and the fit of its efficiency factors.

``data/hardware/measurements.csv`` holds published serving figures (one row per figure, with source): a
GPU, model, weight and KV format and tensor-parallel degree; a load; fixed input and output lengths; and
the metric measured. Loads: ``batch`` requests at once (``rate_per_s`` 0 and ``requests`` = ``batch``);
a closed loop of ``batch`` clients (``rate_per_s`` 0, more ``requests`` than ``batch``: the server holds at
most ``batch`` and each request's time to first token counts from when it is first scheduled, as a client
sends it only when a slot frees); or Poisson arrivals at ``rate_per_s``. Metrics: mean, median or p99 of
time to first token, time per output token and end-to-end latency, TGI's time per token (the whole request
from scheduling, over its output tokens), output tokens per second, and two
single iterations read from kernel profiles: ``decode_step_ms`` (``batch`` sequences holding
``input_tokens`` each) and ``prefill_step_ms`` (one prompt of ``input_tokens``).

A ``Case`` runs its load through the simulator itself (drawn and packed once, then re-run per candidate
at the cost of the compiled loop only), so what is calibrated is exactly what the Lab prints.

``fit`` chooses one ``Efficiency`` (compute share, bandwidth share, per-iteration overhead, sharpness of
the smooth roofline, all-reduce latency factor) for a set of cases by a pattern search on the sum of
squared log errors. ``bench/calibrate.py`` fits each GPU family with at least ``MIN_FAMILY_MEASUREMENTS``
rows and writes ``data/hardware/calibration.csv``; families with fewer rows use the fit over all rows,
families with none a deliberately conservative estimate (``conservative``).
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pandas as pd

from ..hardware.calibration_store import saved_for
from ..hardware.roofline import efficiency_for, peak_profile, roofline_step_params, with_efficiency
from ..hardware.steptime import decode_step_s_nb, prefill_s
from ..hardware.tables import Efficiency, calibration_row, gpu_row, is_slice, load_table
from ..scenario.config import Server, load_scenario
from ..scenario.labels import words
from ..sim.layout import F_ARRIVAL, F_FINISH, F_FIRST_SCHEDULED, F_FIRST_TOKEN, I_GENERATED, I_OUTPUT
from ..sim.metrics import latencies_ms, summary_stats
from ..sim.simulate import SIMULTANEOUS_RATE_PER_S, Prepared, execute, prepare

LATENCIES = {"ttft": "time to first token", "tpot": "time per output token", "e2e": "end-to-end latency"}
STATISTICS = {"mean": "mean", "median": "median", "p99": "p99"}
METRICS = {**{f"{key}_{stat}_ms": f"{stat} {name} (ms)" for key, name in LATENCIES.items() for stat in STATISTICS},
           "inference_per_token_mean_ms": "mean time per token from scheduling to the end (ms, TGI's x-time-per-token)",
           "output_tokens_per_s": "output tokens/s",
           "decode_step_ms": "one decode iteration (ms)", "prefill_step_ms": "one prefill iteration (ms)"}
ITERATION_METRICS = ("decode_step_ms", "prefill_step_ms")
MIN_FAMILY_MEASUREMENTS = 5  # a family with this many rows is "calibrated"
# How many of its own rows a family needs for each set of factors fitted on them alone (the others come from
# the fit over all rows): few rows tell the shares of peak apart, only many the shape of the roofline.
FAMILY_FACTORS = ((10, ("compute", "bandwidth", "overhead_ms", "sharpness", "allreduce_factor")),
                  (MIN_FAMILY_MEASUREMENTS, ("compute", "bandwidth", "overhead_ms")),
                  (3, ("compute", "bandwidth")))
FACTORS = tuple(f.name for f in fields(Efficiency))
BOUNDS = {"compute": (0.05, 1.0), "bandwidth": (0.05, 1.0), "overhead_ms": (0.05, 50.0),  # the fit's box
          "sharpness": (1.0, 32.0), "allreduce_factor": (0.5, 20.0)}
FACTOR_WORDS = {"compute": "the compute share of peak", "bandwidth": "the bandwidth share of peak",
                "overhead_ms": "the per-iteration overhead", "sharpness": "the roofline's sharpness",
                "allreduce_factor": "the all-reduce latency factor"}
START = Efficiency(0.7, 0.85, 2.0, 4.0, 1.0)
CHECK_FACTORS = (0.9, 1.1)  # a finished fit is no worse than any one factor moved by these


def one_class_scenario(name: str, requests: int, rate_per_s: float, prompt_tokens: int, output_tokens: int,
                       server: dict, seed: int = 0) -> dict:
    """Scenario data: ``requests`` of one class with constant lengths, Poisson at ``rate_per_s``, on ``server``
    (roofline)."""
    return {"name": name, "seed": seed,
            "workload": {"num_requests": requests, "arrival": {"process": "poisson", "rate_per_s": rate_per_s},
                         "classes": [{"name": "bench", "share": 1.0,
                                      "prompt_tokens": {"dist": "constant", "value": prompt_tokens},
                                      "output_tokens": {"dist": "constant", "value": output_tokens}}]},
            "server": {**server, "step_model": "roofline"}}


def measurement_scenario(row: pd.Series) -> dict:
    """The scenario that reproduces one measurement's load on the roofline model."""
    batch = int(row["batch"])
    return one_class_scenario(
        f"measurement {row.name}", int(row["requests"]), float(row["rate_per_s"]) or SIMULTANEOUS_RATE_PER_S,
        int(row["input_tokens"]), int(row["output_tokens"]),
        {"gpu": row["gpu"], "model": row["model"], "quant": row["quant"], "kv_quant": row["kv_quant"],
         "tensor_parallel": int(row["tensor_parallel"]), "max_batch_size": batch,
         "max_batched_tokens": max(8192, batch)})


STATISTIC_KEYS = {"mean": "mean", "median": "p50", "p99": "p99"}  # a metric's statistic -> summary_stats' key


class Case:
    """One load and the figures measured under it (``{metric: measured}``), predicted at any ``Efficiency``."""

    def __init__(self, prepared: Prepared | None, server: Server, measured: dict[str, float],
                 closed_loop: bool = False, batch: int = 1, tokens: int = 0):
        self.prepared, self.server, self.measured = prepared, server, measured
        self.closed_loop, self.batch, self.tokens = closed_loop, batch, tokens
        self.peak = peak_profile(server, server.tensor_parallel)

    @classmethod
    def from_row(cls, row: pd.Series) -> Case:
        """The case of one ``measurements.csv`` row."""
        scenario = load_scenario(measurement_scenario(row))
        measured = {row["metric"]: float(row["measured"])}
        if row["metric"] in ITERATION_METRICS:
            return cls(None, scenario.server, measured, batch=int(row["batch"]), tokens=int(row["input_tokens"]))
        closed = float(row["rate_per_s"]) == 0 and int(row["requests"]) > int(row["batch"])
        return cls(prepare(scenario), scenario.server, measured, closed_loop=closed)

    def predict(self, efficiency: Efficiency) -> dict[str, float]:
        """Every measured metric as the simulator gives it at ``efficiency``."""
        step = roofline_step_params(with_efficiency(self.peak, efficiency))
        if self.prepared is None:
            return {"decode_step_ms": decode_step_s_nb(step, self.batch, self.tokens) * 1e3,
                    "prefill_step_ms": prefill_s(step, self.tokens) * 1e3}
        run = execute(self.prepared, step)
        completed, ttft_ms, tpot_ms = latencies_ms(run.ints, run.floats)
        if self.closed_loop:  # a closed-loop client sends a request when a slot frees: TTFT from scheduling
            ttft_ms = (run.floats[:, F_FIRST_TOKEN] - run.floats[:, F_FIRST_SCHEDULED]) * 1e3
        arrays = {"ttft": ttft_ms[completed], "tpot": tpot_ms[completed],
                  "e2e": (run.floats[completed, F_FINISH] - run.floats[completed, F_ARRIVAL]) * 1e3}
        values = {}
        for metric in self.measured:
            if metric == "output_tokens_per_s":
                values[metric] = float(run.ints[:, I_GENERATED].sum() / run.sim_time_s)
            elif metric == "inference_per_token_mean_ms":
                inference_ms = (run.floats[completed, F_FINISH] - run.floats[completed, F_FIRST_SCHEDULED]) * 1e3
                values[metric] = float((inference_ms / run.ints[completed, I_OUTPUT]).mean())
            else:
                key, stat, _ = metric.split("_")
                values[metric] = summary_stats(arrays[key])[STATISTIC_KEYS[stat]]
        return values

    def log_errors(self, efficiency: Efficiency) -> list[float]:
        predicted = self.predict(efficiency)
        return [math.log(predicted[m] / v) for m, v in self.measured.items()]


def error_pct(predicted, measured):
    """Signed error of a prediction against the measured value, in percent (numbers or arrays)."""
    return (predicted / measured - 1.0) * 100.0


def measurements() -> pd.DataFrame:
    """The measurements table with each row's GPU family."""
    table = load_table("measurements").copy()
    table["family"] = [gpu_row(g)["family"] for g in table["gpu"]]
    return table


def cases(rows: pd.DataFrame) -> list[Case]:
    return [Case.from_row(row) for _, row in rows.iterrows()]


def predict(row: pd.Series, efficiency: Efficiency | None = None) -> float:
    """The simulator's value of ``row``'s metric under its load (default: its GPU family's calibration)."""
    return Case.from_row(row).predict(efficiency or efficiency_for(row["gpu"]))[row["metric"]]


def loss(fitted: list[Case], efficiency: Efficiency) -> float:
    """Sum of squared log errors of every measured figure of ``fitted``."""
    return float(sum(e ** 2 for case in fitted for e in case.log_errors(efficiency)))


def free_factors(fitted: list[Case]) -> tuple[str, ...]:
    """The factors the cases can tell apart: the all-reduce factor only when some case uses tensor parallelism."""
    parallel = any(c.server.tensor_parallel > 1 for c in fitted)
    return tuple(f for f in FACTORS if parallel or f != "allreduce_factor")


def family_factors(rows: int) -> tuple[str, ...]:
    """The factors a family with ``rows`` measurements fits on its own rows (none below 3)."""
    return next((factors for least, factors in FAMILY_FACTORS if rows >= least), ())


def fit(fitted: list[Case], start: Efficiency = START, step: float = 0.4, tolerance: float = 0.01,
        factors: tuple[str, ...] = FACTORS) -> Efficiency:
    """Pattern search in log space over ``factors`` (those of ``free_factors``): try each factor up and down by
    ``step``, keep improvements, halve the step when none helps, stop below ``tolerance``. Then check that no
    factor moved by ``CHECK_FACTORS`` (x0.9, x1.1) does better, and if one does, search on from there. Each factor
    stays in its ``BOUNDS`` (a fit that wants less overhead stops at the floor instead of creeping towards zero).
    A start without a sharpness (``HARD_MAX``) starts at the sharpest the fit allows."""
    free = [f for f in free_factors(fitted) if f in factors]
    lower = np.log([BOUNDS[f][0] for f in FACTORS])
    upper = np.log([BOUNDS[f][1] for f in FACTORS])
    x = np.clip(np.log([getattr(start, f) or BOUNDS[f][1] for f in FACTORS]), lower, upper)
    axes = [FACTORS.index(f) for f in free]

    def at(point):
        return Efficiency(*np.exp(point))

    def better_neighbour(point, best_loss, moves):
        """The first neighbour (one free factor moved by one of ``moves``, in log) that lowers the loss."""
        for axis in axes:
            for move in moves:
                trial = point.copy()
                trial[axis] = np.clip(trial[axis] + move, lower[axis], upper[axis])
                if trial[axis] != point[axis]:
                    trial_loss = loss(fitted, at(trial))
                    if trial_loss < best_loss - 1e-9:
                        return trial, trial_loss
        return None

    best = loss(fitted, at(x))
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


def at_bounds(efficiency: Efficiency, factors: tuple[str, ...] = FACTORS) -> list[str]:
    """The fitted ``factors`` that ended on a bound of the fit's box: a sign that the replayed set-up (GPU, model,
    server limits) is not the one measured, or that the model lacks what the figures show."""
    return [f for f in factors if any(math.isclose(getattr(efficiency, f), b, rel_tol=1e-6) for b in BOUNDS[f])]


def conservative(fitted: dict[str, Efficiency]) -> Efficiency:
    """For a GPU family without measurements: each factor at the slowest value of the ``fitted`` (calibrated)
    families (lowest shares of peak, highest overhead, softest roofline, slowest all-reduce)."""
    effs = list(fitted.values())
    return Efficiency(min(e.compute for e in effs), min(e.bandwidth for e in effs),
                      max(e.overhead_ms for e in effs), min(e.sharpness for e in effs),
                      max(e.allreduce_factor for e in effs))


def prediction_table() -> pd.DataFrame:
    """Every measurement with the calibrated prediction and its error (%, predicted vs measured)."""
    table = measurements()
    table["predicted"] = [predict(row) for _, row in table.iterrows()]
    table["error_pct"] = error_pct(table["predicted"], table["measured"])
    return table


def status(gpu: str) -> str:
    """A few words for tables: 'calibrated (N measurements)', 'N measurements only' or 'estimate only'."""
    n = int(calibration_row(gpu)["measurements"])
    if n >= MIN_FAMILY_MEASUREMENTS:
        return f"calibrated ({n} measurements)"
    return f"{n} measurement{'s' if n > 1 else ''} only" if n else "estimate only"


def badge(gpu: str, calibration: str = "") -> str:
    """One line on where ``gpu``'s step times come from (``calibration``: a saved calibration's name); a slice
    says that it is timed as its share of the card, which no measurement checks."""
    text = (saved_for(calibration, gpu).badge() if calibration else
            _shipped_badge(gpu))
    if is_slice(gpu):
        text += f"; {gpu} is timed as its share of a whole {gpu_row(gpu)['parent']}, not measured itself"
    return text


def _shipped_badge(gpu: str) -> str:
    row = calibration_row(gpu)
    n = int(row["measurements"])
    family = words("gpu_family", row.name)
    if n == 0:
        return (f"estimate only: no measurement of the {family} family; each factor at the slowest value of "
                f"the measured families (a conservative estimate)")
    if n < MIN_FAMILY_MEASUREMENTS:
        fitted = family_factors(n)
        how = ("shares of peak fitted to them, the rest from the fit over all measured GPUs" if fitted else
               "efficiencies from the fit over all measured GPUs")
        return (f"{how}; only {n} measurement(s) of the {family} family, median error "
                f"{row['median_abs_error_pct']:.1f}% ({row['loo_median_abs_error_pct']:.1f}% when the fit leaves "
                f"each out): too few to call it calibrated")
    return (f"calibrated against {n} measurements of the {family} family, median error "
            f"{row['median_abs_error_pct']:.0f}% ({row['loo_median_abs_error_pct']:.0f}% leaving each one out)")
