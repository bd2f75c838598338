"""Fit a GPU's factors on the user's own benchmark results (``bench_results``) and compare them with the shipped ones.

``replay_case`` turns a ``bench_results.BenchResult`` into a calibration ``Case``: the benchmark's own requests
(their lengths, or the mean when the file gives no more), sent all at once or at its Poisson rate, at most
its concurrency in flight (a closed loop: latencies count from when a client sends a request, once its previous
one finished: ``calibration.closed_loop_sent_s``), on the given server. ``calibrate`` predicts every measured
figure with the shipped calibration, fits the GPU's factors on them (``FITTED_FACTORS``) and predicts again;
``calibration_store.save`` keeps the result under a name.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..hardware.calibration_store import UserCalibration
from ..hardware.roofline import efficiency_for
from ..hardware.tables import load_table
from ..scenario.config import Server, check_calibration_name, load_scenario
from ..scenario.errors import ScenarioError, excerpt
from ..sim.simulate import SIMULTANEOUS_RATE_PER_S, prepare
from ..sim.workload import RequestArrays
from .bench_results import BenchResult
from .calibration import FACTOR_WORDS, Case, at_bounds, error_pct, fit, one_class_scenario

FITTED_FACTORS = ("compute", "bandwidth", "overhead_ms")  # what one benchmark's figures pin down
SHAPE_FACTOR_FILES = 3  # from this many result files on, the roofline's sharpness is fitted too


SIZE_TOKEN = re.compile(r"(\d+x)?\d+(\.\d+)?[bm]")  # a parameter count: 8b, 0.5b, 8x7b, 125m


def _words(name: str, drop_minor: bool = False) -> tuple[str, ...]:
    """A model name (its last path part) as lower-case words, versions kept whole ("Qwen3-235B-A22B" -> qwen3,
    235b, a22b; "Kimi-K2.5" -> kimi, k2.5); ``drop_minor``: minor versions dropped (llama, 3.1 -> llama, 3)."""
    words = re.findall(r"[a-z0-9]+(?:\.[0-9]+)*", name.lower().rsplit("/", 1)[-1])
    return tuple(re.sub(r"(\d)\.\d+", r"\1", w) for w in words) if drop_minor else tuple(words)


def _contains(words: tuple[str, ...], part: tuple[str, ...]) -> bool:
    return any(words[i:i + len(part)] == part for i in range(len(words) - len(part) + 1))


def model_for(model_id: str) -> str:
    """The ``models.csv`` model a benchmark's model id names: the row whose words appear in it, versions and all
    (Qwen/Qwen3-235B-A22B-Instruct-2507 -> Qwen3-235B-A22B), the longest such; else a row with a parameter count
    whose words appear once minor versions are dropped (meta-llama/Llama-3.1-8B-Instruct -> Llama-3-8B: the same
    architecture and size). A row without a size never matches another version (GLM-4.5 is not glm-4-9b, Kimi-K2
    not Kimi-K2.5). ``ScenarioError`` naming ``--model`` when none matches."""
    models = load_table("models").index
    named, named_major = _words(model_id), _words(model_id, drop_minor=True)
    matches = [m for m in models if _contains(named, _words(m))] or \
        [m for m in models if any(SIZE_TOKEN.fullmatch(w) for w in _words(m))
         and _contains(named_major, _words(m, drop_minor=True))]
    if not matches:
        known = ", ".join(models)
        raise ScenarioError(f"the result file names model {excerpt(model_id)}, which matches no model of "
                            f"data/hardware/models.csv; give --model with one of {known}")
    return max(matches, key=lambda m: (len(_words(m)), len(m)))


REPLAY_SEED = 0  # of the replayed Poisson arrivals (a result file gives their rate, not their times)


def _replay_data(server: dict, requests: int, name: str) -> dict:
    """A scenario of ``requests`` on ``server``; its workload only sizes the run, the replay brings the requests."""
    return one_class_scenario(name, requests, 1.0, 1, 1, server, REPLAY_SEED)


def benchmarked_server(server: dict, overrides: list[str]) -> Server:
    """The server a benchmark ran on, from its keys and ``server.KEY=VALUE`` overrides (checked as a scenario's)."""
    return load_scenario(_replay_data(server, 1, "benchmarked server"), overrides=overrides).server


def replay_case(result: BenchResult, server: Server, kernel_tables: str = "off") -> Case:
    """The calibration case that replays ``result``'s load on ``server`` (seeded Poisson arrivals at its rate);
    ``kernel_tables`` "off" (a user's own fit calibrates the roofline) or "auto" (the product as users get it:
    measured operator tables where they cover the server)."""
    n = result.requests
    if math.isinf(result.rate_per_s):
        arrival_s = np.arange(n) / SIMULTANEOUS_RATE_PER_S
    else:
        arrival_s = np.cumsum(np.random.default_rng(REPLAY_SEED).exponential(1.0 / result.rate_per_s, n))
        arrival_s -= arrival_s[0]
    slots = min(server.max_batch_size, result.concurrency) if result.concurrency else server.max_batch_size
    scenario = load_scenario(_replay_data({**dataclasses.asdict(server), "max_batch_size": slots, "min_batch_size": 1,
                                           "kernel_tables": kernel_tables}, n, f"replay of {result.name}"))
    requests = RequestArrays(arrival_s, result.input_tokens.copy(), result.output_tokens.copy(),
                             np.zeros(n, np.int64), result.output_tokens.copy())
    return Case(prepare(scenario, requests=requests), scenario.server, dict(result.measured),
                clients=result.concurrency or 0)


@dataclass(frozen=True)
class Calibrated:
    """``calibrate``'s answer: the fitted calibration, one row per figure (measured, before, after), the fit's
    time and the factors that ended on a bound of the fit (``calibration.at_bounds``)."""

    calibration: UserCalibration
    table: pd.DataFrame
    fit_s: float
    at_bounds: tuple[str, ...]

    def warning(self) -> str | None:
        """One line when the fit ended on a bound (else None)."""
        if not self.at_bounds:
            return None
        words = [FACTOR_WORDS[f] for f in self.at_bounds]
        listed = ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0]
        return (f"The fit pushed {listed} to the end of its range: the replayed set-up (GPU, "
                f"model, formats, tensor parallelism, batch limits) is probably not the one benchmarked; check it "
                f"before saving")


def calibrate(results: list[BenchResult], server: Server, name: str) -> Calibrated:
    """Fit ``server.gpu``'s factors on every figure of ``results`` (replayed on ``server``)."""
    check_calibration_name(name)
    cases = [replay_case(r, server) for r in results]
    shipped = efficiency_for(server.gpu, engine=server.engine)
    # The user's runs are of one weight format: one compute share, fitted from the shipped share for that format.
    start = dataclasses.replace(shipped, compute=shipped.matmul_share(cases[0].peak.low_precision),
                                low_precision_compute=None)
    factors = FITTED_FACTORS + (("sharpness",) if len(results) >= SHAPE_FACTOR_FILES else ())
    started = time.perf_counter()
    fitted = fit(cases, start=start, factors=factors)
    fit_s = time.perf_counter() - started
    rows = []
    for i, (result, case) in enumerate(zip(results, cases)):
        before, after = case.predict(shipped), case.predict(fitted)
        # Each run against a fit of the other runs (from two runs on): how the fit does on a load it has not seen.
        others = fit(cases[:i] + cases[i + 1:], start=fitted, factors=factors) if len(cases) > 1 else None
        held_out = case.predict(others) if others else {}
        rows += [{"file": result.name, "metric": metric, "measured": measured, "shipped": before[metric],
                  "shipped_error_pct": error_pct(before[metric], measured), "fitted": after[metric],
                  "fitted_error_pct": error_pct(after[metric], measured),
                  "held_out_error_pct": error_pct(held_out[metric], measured) if held_out else None}
                 for metric, measured in case.measured.items()]
    table = pd.DataFrame(rows)
    held_out_errors = table["held_out_error_pct"].dropna().abs()
    calibration = UserCalibration(
        name=name, gpu=server.gpu,
        setup=(f"{server.tensor_parallel} x {server.gpu}, {server.model}, {server.quant} weights, {server.kv_quant} "
               f"KV, at most {server.max_batch_size} sequences and {server.max_batched_tokens} tokens per iteration"),
        efficiency=fitted, figures=len(table), files=tuple(r.name for r in results),
        median_abs_error_pct=float(table["fitted_error_pct"].abs().median()),
        held_out_median_abs_error_pct=float(held_out_errors.median()) if len(held_out_errors) else None,
        shipped_median_abs_error_pct=float(table["shipped_error_pct"].abs().median()),
        created=time.strftime("%Y-%m-%d"))
    return Calibrated(calibration, table, fit_s, tuple(at_bounds(fitted, factors)))
