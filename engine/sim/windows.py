"""A run cut into windows of time: per window the requests that arrived, the load they offered, the mean queue
and each class's SLA attainment, so that a burst is seen where it happens instead of in the run's average.

A window's offered load is the run's estimate (``simulate.offered_load``) made of the window's own arrival rate
and its requests' own work (``simulate.window_loads``). Its mean queue is the time-average of the requests
arrived and not yet first scheduled, exact from the records (the integral of a counting function, below).
Attainment is of the requests that arrived in the window, judged as the run's (``metrics``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..scenario.config import Scenario
from ..scenario.summary import WindowRow
from .layout import COMPLETED, TIMED_OUT
from .steady import queued

# Window lengths a run is cut into: the shortest giving at most MAX_WINDOWS over the arrivals.
WINDOW_LENGTHS_S = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 14_400.0, 21_600.0,
                    43_200.0, 86_400.0)
MAX_WINDOWS = 96


def window_length_s(span_s: float) -> float:
    """The window length for arrivals over ``span_s`` seconds (``WINDOW_LENGTHS_S``; a day or more past the last)."""
    for length in WINDOW_LENGTHS_S:
        if span_s / length <= MAX_WINDOWS:
            return length
    return WINDOW_LENGTHS_S[-1] * math.ceil(span_s / WINDOW_LENGTHS_S[-1] / MAX_WINDOWS)


@dataclass(frozen=True)
class Cut:
    """A run's arrivals cut into windows of ``length_s`` from 0 to past the last arrival: ``edges_s`` (count + 1),
    each request's window (``slot``), and each window's time with arrivals (``widths_s``: the last ends at the last
    arrival), over which its rate is taken."""

    length_s: float
    edges_s: np.ndarray
    slot: np.ndarray
    widths_s: np.ndarray

    @property
    def count(self) -> int:
        return len(self.edges_s) - 1

    @classmethod
    def of(cls, arrival_s: np.ndarray) -> "Cut":
        last_s = float(arrival_s.max()) if len(arrival_s) else 0.0
        length_s = window_length_s(last_s)
        count = int(last_s // length_s) + 1
        edges = np.arange(count + 1) * length_s
        slot = np.minimum((arrival_s // length_s).astype(np.int64), count - 1)
        widths = np.minimum(edges[1:], last_s) - edges[:-1]
        return cls(length_s, edges, slot, np.where(widths > 0, widths, length_s))


def windows(scenario: Scenario, frame: pd.DataFrame, cut: Cut, loads: np.ndarray,
            replicas: np.ndarray) -> list[WindowRow]:
    """The run's windows (``WindowRow``) of ``cut``, their offered ``loads`` (``simulate.window_loads``) and the
    mean ``replicas`` billed in each."""
    if len(frame) == 0:
        return []
    count, edges, slot = cut.count, cut.edges_s, cut.slot
    arrived = np.bincount(slot, minlength=count)
    waiting = queued(frame["arrival_s"].to_numpy(), frame["first_scheduled_s"].to_numpy(),
                     frame["finish_s"].to_numpy(), edges)
    names = [c.name for c in scenario.workload.classes]
    codes = frame["class"].cat.codes.to_numpy()
    state = frame["state"].cat.codes.to_numpy()  # the categories are the state codes' names, in code order
    judged = frame["has_sla_target"].to_numpy() & ((state == COMPLETED) | (state == TIMED_OUT))
    met = frame["sla_met"].to_numpy() & judged
    judged_counts = [np.bincount(slot[judged & (codes == k)], minlength=count) for k in range(len(names))]
    met_counts = [np.bincount(slot[met & (codes == k)], minlength=count) for k in range(len(names))]
    return [{"start_s": float(edges[w]), "end_s": float(edges[w + 1]), "arrived": int(arrived[w]),
             "offered_load": float(loads[w]), "mean_waiting": float(max(waiting[w], 0.0)),
             "replicas": float(replicas[w]),
             "sla_attainment": {name: float(met_counts[k][w] / judged_counts[k][w]) if judged_counts[k][w] else None
                                for k, name in enumerate(names)},
             "sla_judged": {name: int(judged_counts[k][w]) for k, name in enumerate(names)},
             "sla_missed": {name: int(judged_counts[k][w] - met_counts[k][w]) for k, name in enumerate(names)}}
            for w in range(count)]
