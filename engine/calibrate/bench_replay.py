"""Replay a benchmark client's command on a server and set each figure the client reports beside the measured one
(``python -m engine replay-bench``): the load as the client sends it (``bench_command``), the server as the user
describes it with its engine's start-up budget, and the product as users get it (measured operator tables where
they cover the server, the shipped calibration of its GPU and engine)."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd

from ..hardware.roofline import efficiency_for
from ..scenario.config import Server
from ..scenario.errors import ScenarioError
from .bench_command import BenchCommand
from .bench_results import BenchResult
from .calibration import METRICS, engine_start_keys, error_pct
from .user_calibration import benchmarked_server, replay_case

# What a client reports for one run, in the order it prints them (``calibration.METRICS`` names).
REPORTED = ("ttft_mean_ms", "ttft_median_ms", "ttft_p99_ms", "tpot_mean_ms", "tpot_median_ms", "tpot_p99_ms",
            "e2e_mean_ms", "e2e_median_ms", "e2e_p99_ms", "output_tokens_per_s")
LOAD_CHECKS = {"requests": "--num-prompts", "concurrency": "--max-concurrency"}


def replay_server(keys: dict, engine: str, overrides: list[str]) -> Server:
    """The benchmarked server: ``keys`` (GPU, model, formats, parallelism) on ``engine`` with its admission,
    batching and start-up token budget on that card, then the user's ``server.KEY=VALUE`` overrides."""
    return benchmarked_server({**keys, **engine_start_keys(engine, keys["gpu"])}, overrides)


def load_mismatch(command: BenchCommand, measured: BenchResult) -> str | None:
    """One line when the measured file's load is not the command's (another request count or concurrency), else
    None: the figures would then describe another run."""
    ours, theirs = command.load, measured
    for field, flag in LOAD_CHECKS.items():
        if getattr(ours, field) != getattr(theirs, field):
            return (f"the measured file ran {field} = {getattr(theirs, field)}, the command {flag} gives "
                    f"{getattr(ours, field)}: is it this command's result?")
    if math.isinf(ours.rate_per_s) != math.isinf(theirs.rate_per_s):
        return "the measured file and the command send at different rates: is it this command's result?"
    return None


def replay(command: BenchCommand, server: Server, measured: BenchResult | None = None) -> pd.DataFrame:
    """One row per figure the client reports: the simulator's, and where ``measured`` gives it, the measured one
    and the signed error (+: predicted too long or too high)."""
    figures = dict.fromkeys(REPORTED, math.nan)
    if measured is not None:
        figures.update({k: v for k, v in measured.measured.items() if k in figures})
    case = replay_case(dataclasses.replace(command.load, measured=figures), server, kernel_tables="auto")
    predicted = case.predict(efficiency_for(server.gpu, server.calibration, server.engine))
    if not all(math.isfinite(predicted[k]) for k in REPORTED):
        raise ScenarioError("the replay finished no request: the server cannot serve this load; check its memory "
                            "with python -m engine hardware")
    return pd.DataFrame([{"figure": METRICS[k], "simulated": predicted[k], "measured": figures[k],
                          "error %": error_pct(predicted[k], figures[k])} for k in REPORTED])
