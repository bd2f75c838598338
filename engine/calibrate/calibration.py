"""The roofline against measurements: replaying a published run, and the fit of a user's own runs.

``data/hardware/measurements.csv`` holds published serving figures (one row per figure, with its page
(``document``), source and serving engine): a GPU, model, weight and KV format and tensor-parallel degree (with
``parallel`` "dep": that many GPUs as data-parallel attention and expert parallelism); a load;
fixed input and output lengths; and the metric measured. Loads: ``batch`` requests at once (``rate_per_s`` 0 and
``requests`` = ``batch``); a closed loop of ``batch`` clients (``rate_per_s`` 0, more ``requests`` than ``batch``:
the server holds at most ``batch``, and each request's time to first token and end-to-end latency count from when
a client sends it, once its previous request finished: ``closed_loop_sent_s``); or Poisson arrivals at ``rate_per_s``.
Metrics: mean, median or p99 of time to first token, time per output token and end-to-end latency, TGI's time
per token (the whole request from scheduling, over its output tokens), output tokens per second, and two single
iterations read from kernel profiles: ``decode_step_ms`` (``batch`` sequences holding ``input_tokens`` each) and
``prefill_step_ms`` (one prompt of ``input_tokens``).

A ``Case`` runs its load through the simulator itself (drawn and packed once, then re-run per candidate at the
cost of the compiled loop only), on the run's serving engine with that engine's admission rule, so what is
calibrated is exactly what the Lab prints.

The shipped factors are fitted by ``joint_fit`` (families and engines together, on a training split). ``fit`` here
chooses one ``Efficiency`` for a user's own runs of one set-up (``user_calibration``) by a pattern search on the
sum of squared log errors.
"""

from __future__ import annotations

import math
import numpy as np
import pandas as pd

from ..hardware.calibration_store import saved_for
from ..hardware.kernel_tables import client_fixed_ms, coverage, table_step
from ..hardware.roofline import (efficiency_for, kv_capacity_tokens, peak_profile, roofline_profile,
                                 roofline_step_params, with_efficiency)
from ..hardware.steptime import decode_step_s_nb, prefill_s
from ..hardware.tables import (Efficiency, calibration_row, default_batched_tokens, engine_row, gpu_row, is_slice,
                               load_table)
from ..scenario.caps import Caps
from ..scenario.config import Limits, Server, load_scenario
from ..scenario.errors import ScenarioError
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
REPLAY_REQUESTS_MIN, REPLAY_BATCHES = 2000, 4  # a replay sends at most max(2000, 4 x batch) of a run's requests
MIN_FAMILY_MEASUREMENTS = 5  # a family fitted on this many runs is "calibrated"
FACTORS = ("compute", "bandwidth", "overhead_ms", "sharpness", "allreduce_factor")  # what a user's own fit moves
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


def replayed_requests(row: pd.Series) -> int:
    """How many of a measurement's requests the replay sends: all of them up to ``max(2000, 4 x batch)`` (a long
    benchmark's steady state is reached well before), that many when the source does not say (0)."""
    cap = max(REPLAY_REQUESTS_MIN, REPLAY_BATCHES * int(row["batch"]))
    return min(int(row["requests"]) or cap, cap)


def measurement_scenario(row: pd.Series, kernel_tables: str = "off") -> dict:
    """The scenario that reproduces one measurement's load on the roofline model (``kernel_tables`` "auto": timed by
    measured operator tables where they cover it), on its serving engine with the engine's admission and batching
    rules and the token budget it starts with on that card (``default_batched_tokens``; at least the batch)
    (``parallel`` "dep": attention data-parallel and experts split over the GPUs, each rank holding ``batch``; "ep":
    experts split over the tensor-parallel GPUs). The replay may queue all its requests and drain for as long as
    they take (a benchmark sends them all)."""
    batch, requests = int(row["batch"]), replayed_requests(row)
    layout = PARALLEL_KEYS.get(row.get("parallel"), {})
    ranks = int(row["tensor_parallel"]) if layout.get("attention_data_parallel") else 1  # ``Server.ranks``
    scenario = one_class_scenario(
        f"measurement {row.name}"[:Caps.name_chars], requests, float(row["rate_per_s"]) or SIMULTANEOUS_RATE_PER_S,
        int(row["input_tokens"]), int(row["output_tokens"]),
        {"gpu": row["gpu"], "model": row["model"], "quant": row["quant"], "kv_quant": row["kv_quant"],
         "tensor_parallel": int(row["tensor_parallel"]), "max_batch_size": batch,
         **engine_start_keys(row["engine"], row["gpu"], ranks, batch), "kernel_tables": kernel_tables,
         **layout})
    scenario["limits"] = {"max_waiting_requests": max(requests, Limits.max_waiting_requests),
                          "max_drain_s": Caps.drain_s}
    return scenario


def engine_start_keys(engine: str, gpu: str, ranks: int = 1, at_least_tokens: int = 1) -> dict:
    """The server keys ``engine`` starts with on ``gpu`` when a benchmark sets none: its admission and batching
    rules and its token budget per iteration for each of ``ranks`` (``default_batched_tokens``; at least
    ``at_least_tokens``, a whole batch of decodes)."""
    row = engine_row(engine)
    return {"engine": engine, "admission": row["admission"], "batching": row["batching"],
            "max_batched_tokens": max(default_batched_tokens(engine, gpu, ranks), at_least_tokens)}


def replay_problem(row: pd.Series) -> str | None:
    """Why a measurement cannot be replayed as published (its model does not fit the cards as this simulator
    budgets memory, say), or None when it can."""
    try:
        server = load_scenario(measurement_scenario(row)).server
        kv_capacity_tokens(server, roofline_profile(server))
    except ScenarioError as exc:
        return str(exc)
    return None


# A measurement's ``parallel`` -> the server keys that lay it out (none: tensor parallelism alone).
PARALLEL_KEYS = {"dep": {"expert_parallel": True, "attention_data_parallel": True}, "ep": {"expert_parallel": True}}
STATISTIC_KEYS = {"mean": "mean", "median": "p50", "p99": "p99"}  # a metric's statistic -> summary_stats' key


class Case:
    """One load and the figures measured under it (``{metric: measured}``), predicted at any ``Efficiency``."""

    def __init__(self, prepared: Prepared | None, server: Server, measured: dict[str, float],
                 clients: int = 0, batch: int = 1, tokens: int = 0):
        self.prepared, self.server, self.measured = prepared, server, measured
        self.clients, self.batch, self.tokens = clients, batch, tokens  # clients: a closed loop's (0: open)
        self.peak = peak_profile(server, server.tensor_parallel)
        self.family = gpu_row(server.gpu)["family"]
        self.kernel_key = coverage(server).key  # None: the roofline times it (always so with kernel_tables off)

    @classmethod
    def from_row(cls, row: pd.Series, kernel_tables: str = "off") -> Case:
        """The case of one ``measurements.csv`` row (``kernel_tables`` as ``measurement_scenario``'s)."""
        scenario = load_scenario(measurement_scenario(row, kernel_tables))
        measured = {row["metric"]: float(row["measured"])}
        if row["metric"] in ITERATION_METRICS:
            return cls(None, scenario.server, measured, batch=int(row["batch"]), tokens=int(row["input_tokens"]))
        clients = int(row["batch"]) * scenario.server.ranks  # "dep": ``batch`` on each data-parallel rank
        closed = float(row["rate_per_s"]) == 0 and replayed_requests(row) > clients
        return cls(prepare(scenario), scenario.server, measured, clients=clients if closed else 0)

    def predict(self, efficiency: Efficiency) -> dict[str, float]:
        """Every measured metric as the simulator gives it at ``efficiency``."""
        step = roofline_step_params(with_efficiency(self.peak, efficiency))
        if self.kernel_key is not None:
            step = table_step(step, self.kernel_key, self.server.engine)
        if self.prepared is None:
            return {"decode_step_ms": decode_step_s_nb(step, self.batch, self.tokens) * 1e3,
                    "prefill_step_ms": prefill_s(step, self.tokens) * 1e3}
        run = execute(self.prepared, step)
        fixed_ms = client_fixed_ms(self.server)
        completed, ttft_ms, tpot_ms = latencies_ms(run.ints, run.floats, fixed_ms)
        sent = run.floats[:, F_ARRIVAL]
        if self.clients:  # a closed-loop client sends its next request when its last one finishes
            sent = closed_loop_sent_s(sent, run.floats[:, F_FINISH], self.clients)
            ttft_ms = (run.floats[:, F_FIRST_TOKEN] - sent) * 1e3 + fixed_ms
        arrays = {"ttft": ttft_ms[completed], "tpot": tpot_ms[completed],
                  "e2e": (run.floats[completed, F_FINISH] - sent[completed]) * 1e3 + fixed_ms}
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


def closed_loop_sent_s(arrival_s: np.ndarray, finish_s: np.ndarray, clients: int) -> np.ndarray:
    """When each request of a closed loop of ``clients`` is sent: the first ``clients`` at their arrival, request n
    (in arrival order) once it has arrived and the (n - clients)-th request to finish (0-based, in finishing order)
    has freed a client: max(arrival_n, T_(n - clients)). The server then may still queue it (its memory full), and
    that wait counts, as the client measures it. NaN where the freeing request never finished."""
    order = np.argsort(arrival_s, kind="stable")
    finished = np.sort(finish_s[np.isfinite(finish_s)])
    freed = np.full(len(arrival_s), np.nan)
    freed[order[:clients]] = -np.inf
    later = np.arange(clients, len(order))
    known = later - clients < len(finished)
    freed[order[later[known]]] = finished[later[known] - clients]
    return np.maximum(arrival_s, freed)


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


def predict(row: pd.Series, efficiency: Efficiency | None = None, kernel_tables: str = "off") -> float:
    """The simulator's value of ``row``'s metric under its load (default: its GPU family's calibration; with
    ``kernel_tables`` "auto", timed by measured operator tables where they cover it)."""
    case = Case.from_row(row, kernel_tables)
    return case.predict(efficiency or efficiency_for(row["gpu"], engine=row["engine"]))[row["metric"]]


def loss(fitted: list[Case], efficiency: Efficiency) -> float:
    """Sum of squared log errors of every measured figure of ``fitted``."""
    return float(sum(e ** 2 for case in fitted for e in case.log_errors(efficiency)))


def free_factors(fitted: list[Case]) -> tuple[str, ...]:
    """The factors the cases can tell apart: the all-reduce factor only when some case uses tensor parallelism."""
    parallel = any(c.server.tensor_parallel > 1 for c in fitted)
    return tuple(f for f in FACTORS if parallel or f != "allreduce_factor")


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


def status(gpu: str) -> str:
    """A few words for tables: 'calibrated (N runs, X% off held out)', 'N measurements only' or 'estimate only'."""
    row = calibration_row(gpu)
    n = int(row["measurements"])
    if n >= MIN_FAMILY_MEASUREMENTS:
        return f"calibrated ({n} runs, {_held_out_words(row, short=True)})"
    return f"{n} measurement{'s' if n > 1 else ''} only" if n else "estimate only"


def _held_out_words(row: pd.Series, short: bool = False) -> str:
    """The held-out check of a family or engine row: runs it was not fitted on and their median error."""
    held = int(row["held_out_measurements"])
    if not held:
        return "none held out" if short else "no run of it was held out to check the fit"
    error = float(row["held_out_median_abs_error_pct"])
    if short:
        return f"{error:.0f}% off on {held} held out"
    return f"median error {error:.0f}% on {held} runs the fit never saw"


def badge(gpu: str, calibration: str = "", engine: str = Server.engine) -> str:
    """One line on where ``gpu``'s step times under ``engine`` come from (``calibration``: a saved calibration's
    name); a slice says that it is timed as its share of the card, which no measurement checks."""
    text = (saved_for(calibration, gpu).badge() if calibration else
            _shipped_badge(gpu, engine))
    return text + slice_note(gpu)


def slice_note(gpu: str) -> str:
    """"; X is timed as its share of a whole Y, not measured itself" for a GPU slice, else ""."""
    return f"; {gpu} is timed as its share of a whole {gpu_row(gpu)['parent']}, not measured itself" if is_slice(
        gpu) else ""


def _shipped_badge(gpu: str, engine: str) -> str:
    row = calibration_row(gpu)
    n = int(row["measurements"])
    family = words("gpu_family", row.name)
    served, name = engine_row(engine), words("engine", engine)
    engine_text = (f"{name}'s overhead fitted on {int(served['measurements'])} runs, "
                   f"{_held_out_words(served)}" if int(served["measurements"]) else
                   f"{name} has no measured run: its overhead is the slowest fitted engine's, an estimate")
    if n == 0:
        return (f"estimate only: no measurement of the {family} family; each factor at the slowest value of "
                f"the measured families (a conservative estimate); {engine_text}")
    if n < MIN_FAMILY_MEASUREMENTS:
        return (f"only {n} measurement(s) of the {family} family, too few to call it calibrated; the factors they "
                f"cannot fix are the slowest fitted families'; {_held_out_words(row)}; {engine_text}")
    return f"calibrated against {n} measured runs of the {family} family, {_held_out_words(row)}; {engine_text}"
