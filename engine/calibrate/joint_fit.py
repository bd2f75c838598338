"""The shipped calibration: GPU-family and serving-engine factors fitted together on the training part of
``measurements.csv``, and the split that keeps the rest for validation.

The split is fixed before any fit and never looks at an error:

- a run is held out when the SHA-256 of its ``document`` (the page it is read from) is 0 mod 3, so a whole page,
  with every run its authors made the same way, goes one way;
- every run of a model with multi-head latent attention (DeepSeek-V3/R1) is held out whatever its page: the step
  model lacks MLA's prefill form, expert parallelism and the fused-MoE kernels, so fitting them would bend every
  other factor to make up for what is missing.

The fit uses a sample of the training part: of each page, at most ``FIT_ROWS_PER_DOCUMENT`` runs (the lowest
SHA-256 of their ids) among those that replay (``calibration.replay_problem``) within ``FIT_TOKEN_BUDGET`` output
tokens (replayed requests x output length). A replay takes from a millisecond to 17 s, and each is replayed about a
hundred times: the budget keeps one pass over the sample near 13 s of one core. The runs it leaves out are
still predicted, and counted in sample or held out, by ``bench/calibrate.py``.

Factors: per GPU family (``calibration.csv``) the 16-bit compute share, the 8- and 4-bit compute share, the bandwidth
share and the sharpness of the roofline; per serving engine (``engines.csv``) the per-iteration overhead and the
all-reduce latency factor. A group fits a factor only with ``OWN_ROWS`` of its sampled rows that inform it (16-bit
or low-precision runs, runs with tensor parallelism); otherwise a family takes the slowest value of the families
that fit it (lowest shares, softest roofline), an engine the slowest value of the engines that fit it
(highest overhead and all-reduce factor), so a guess never wins a comparison against a measured card. The blocks
are fitted in turn (each family with the engines fixed, then each engine with the families fixed, ``ROUNDS``
times), each by damped Gauss-Newton (Levenberg-Marquardt) on the logs of its factors with Cauchy weights: a figure
off by much more than ``ROBUST_SCALE`` (in log error, about 30%) pulls less, so the few runs the model cannot
express do not drag the rest.
"""

from __future__ import annotations

import hashlib
import multiprocessing
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..hardware.tables import ENGINE_FACTORS, FAMILY_FACTORS, Efficiency, load_table
from .calibration import Case, replay_problem, replayed_requests

HELD_OUT_MODULUS = 3
NEVER_FITTED_ATTENTION = ("mla",)
FIT_ROWS_PER_DOCUMENT = 24
FIT_TOKEN_BUDGET = 4_000_000
ROUNDS = 2
ROBUST_SCALE = 0.25
OWN_ROWS = 3  # rows of its own a group needs to fit a factor (sharpness: SHARPNESS_ROWS)
SHARPNESS_ROWS = 10
BOUNDS = {"compute": (0.05, 0.85), "low_precision_compute": (0.05, 0.85), "bandwidth": (0.05, 1.0),
          "sharpness": (1.0, 32.0), "overhead_ms": (0.05, 50.0), "allreduce_factor": (0.1, 20.0)}
START = {"compute": 0.6, "low_precision_compute": 0.45, "bandwidth": 0.8, "sharpness": 2.0, "overhead_ms": 2.0,
         "allreduce_factor": 1.0}
FD_STEP = 0.02  # finite-difference step of the Jacobian, in log factor


def _hash(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16)


def held_out(document: str, model: str) -> bool:
    """Whether a run read from ``document`` of ``model`` is kept for validation (the split in the docstring)."""
    attention = load_table("models").loc[model, "attention"]
    return _hash(document) % HELD_OUT_MODULUS == 0 or attention in NEVER_FITTED_ATTENTION


def split(table: pd.DataFrame) -> pd.Series:
    """True for each held-out row of a measurements table."""
    return pd.Series([held_out(d, m) for d, m in zip(table["document"], table["model"])], index=table.index)


def fit_sample(table: pd.DataFrame, collected_by: str | None = None) -> pd.DataFrame:
    """The training rows the fit replays (the docstring's rule); ``collected_by`` (an ISO date): among the rows
    collected (``as_of``) by then, the sample the fit of that date replayed (``shipped_fit_date``)."""
    if collected_by is not None:
        table = table[table["as_of"] <= collected_by]
    training = table[~split(table)]
    tokens = [replayed_requests(row) * int(row["output_tokens"]) for _, row in training.iterrows()]
    training = training[np.array(tokens) <= FIT_TOKEN_BUDGET]
    training = training[[replay_problem(row) is None for _, row in training.iterrows()]]
    order = training.index.map(_hash)
    ranked = training.assign(_rank=order).sort_values("_rank")
    return ranked.groupby("document", sort=False).head(FIT_ROWS_PER_DOCUMENT).drop(columns="_rank").sort_index()


def shipped_fit_date() -> str:
    """When the shipped factors were fitted (``calibration.csv``'s ``as_of``): rows collected later are unseen by it,
    whichever side of the split their page falls on."""
    return str(load_table("calibration")["as_of"].max())


@dataclass
class Factors:
    """Fitted values per family and per engine (``{group: {factor: value}}``) and which each group fitted itself."""

    families: dict[str, dict[str, float]]
    engines: dict[str, dict[str, float]]
    fitted: dict[str, tuple[str, ...]]

    def efficiency(self, family: str, engine: str) -> Efficiency:
        f, e = self.families[family], self.engines[engine]
        return Efficiency(f["compute"], f["bandwidth"], e["overhead_ms"], f["sharpness"], e["allreduce_factor"],
                          f["low_precision_compute"])


_CASES: list[Case] = []  # the cases of the current fit, shared with the forked workers


def _log_errors(job: tuple[int, Efficiency]) -> list[float]:
    index, efficiency = job
    return _CASES[index].log_errors(efficiency)


def informing_rows(cases: list[Case], factor: str) -> int:
    """How many of ``cases`` move when ``factor`` does."""
    if factor == "compute":
        return sum(not c.peak.low_precision for c in cases)
    if factor == "low_precision_compute":
        return sum(c.peak.low_precision for c in cases)
    if factor == "allreduce_factor":
        return sum(c.server.tensor_parallel > 1 for c in cases)
    if factor == "sharpness":
        return len(cases) if len(cases) >= SHARPNESS_ROWS else 0
    return len(cases)


class JointFit:
    """One fit over a list of cases, their errors computed on a pool of forked workers."""

    def __init__(self, cases: list[Case], workers: int):
        global _CASES
        _CASES = cases
        self.cases = cases
        self.pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool.join()

    def residuals(self, indices: list[int], efficiencies: list[Efficiency]) -> np.ndarray:
        jobs = list(zip(indices, efficiencies))
        rows = self.pool.map(_log_errors, jobs, chunksize=1) if self.pool else [_log_errors(j) for j in jobs]
        return np.array([e for row in rows for e in row])

    def fit_block(self, indices: list[int], free: list[str], compose, start: dict[str, float]) -> dict[str, float]:
        """Levenberg-Marquardt on the logs of the ``free`` factors, the cases' other factors fixed (``compose``:
        case, {factor: value} -> Efficiency)."""
        lower = np.log([BOUNDS[f][0] for f in free])
        upper = np.log([BOUNDS[f][1] for f in free])
        x = np.clip(np.log([start[f] for f in free]), lower, upper)

        def residual(point):
            values = dict(zip(free, np.exp(point)))
            return self.residuals(indices, [compose(self.cases[i], values) for i in indices])

        def cost(r):
            return float(np.sum(np.log1p((r / ROBUST_SCALE) ** 2)))

        r = residual(x)
        best, damping = cost(r), 1e-2
        for _ in range(12):
            jacobian = np.empty((len(r), len(free)))
            for j in range(len(free)):
                moved = x.copy()
                moved[j] += FD_STEP if moved[j] + FD_STEP <= upper[j] else -FD_STEP
                jacobian[:, j] = (residual(moved) - r) / (moved[j] - x[j])
            weights = 1.0 / (1.0 + (r / ROBUST_SCALE) ** 2)
            normal = jacobian.T @ (weights[:, None] * jacobian)
            gradient = jacobian.T @ (weights * r)
            while damping < 1e6:
                step = -np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-9), gradient)
                trial = np.clip(x + step, lower, upper)
                trial_r = residual(trial)
                if cost(trial_r) < best - 1e-9:
                    moved_by = np.max(np.abs(trial - x))
                    x, r, best, damping = trial, trial_r, cost(trial_r), damping / 3
                    break
                damping *= 4
            else:
                break
            if moved_by < 2e-3:
                break
        return dict(zip(free, np.exp(x)))


def fit_jointly(cases: list[Case], families: list[str], engines: list[str], workers: int = 2,
                log=print) -> Factors:
    """Family and engine factors fitted on ``cases`` (the docstring's method)."""
    factors = Factors({f: {k: START[k] for k in FAMILY_FACTORS} for f in families},
                      {e: {k: START[k] for k in ENGINE_FACTORS} for e in engines}, {})
    by_family = {f: [i for i, c in enumerate(cases) if c.family == f] for f in families}
    by_engine = {e: [i for i, c in enumerate(cases) if c.server.engine == e] for e in engines}
    for group, indices in (*by_family.items(), *by_engine.items()):
        own = [cases[i] for i in indices]
        names = FAMILY_FACTORS if group in by_family else ENGINE_FACTORS
        factors.fitted[group] = tuple(k for k in names if informing_rows(own, k) >= OWN_ROWS)
    runner = JointFit(cases, workers)
    try:
        for round_ in range(ROUNDS):
            _fill_unfitted(factors)
            for group, indices in (*by_family.items(), *by_engine.items()):
                free = list(factors.fitted[group])
                if not free:
                    continue
                values = factors.families[group] if group in by_family else factors.engines[group]

                def compose(case, trial, group=group):
                    family = factors.families[case.family] if group in by_engine else {}
                    engine = factors.engines[case.server.engine] if group in by_family else {}
                    return Efficiency(**{**family, **engine, **values, **trial})
                values.update(runner.fit_block(indices, free, compose, values))
                log(f"round {round_ + 1}, {group} ({len(indices)} runs): "
                    + ", ".join(f"{k} {v:.4g}" for k, v in values.items()))
        _fill_unfitted(factors)
    finally:
        runner.close()
    return factors


def _fill_unfitted(factors: Factors) -> None:
    """A factor a group cannot fit: the slowest value of the groups that fit it (START when none does): the lowest
    share or sharpness of a family, the highest overhead or all-reduce factor of an engine."""
    for groups, names, pick in ((factors.families, FAMILY_FACTORS, np.min),
                                (factors.engines, ENGINE_FACTORS, np.max)):
        for name in names:
            fitted = [groups[g][name] for g in groups if name in factors.fitted[g]]
            for group in groups:
                if name not in factors.fitted[group]:
                    groups[group][name] = float(pick(fitted)) if fitted else START[name]

