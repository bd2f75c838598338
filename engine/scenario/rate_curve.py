"""An arrival rate that changes over time: a piecewise-linear curve of (time, rate) points, repeating when it has a
period, and the time change that turns arrivals at rate 1 into arrivals at the curve's rate.

The expected number of arrivals up to ``t`` is the curve's integral ``L(t)`` (piecewise quadratic). Arrivals of a
renewal process at rate 1 at the points ``u_1 < u_2 < ...`` become arrivals at the curve's rate at
``t_i = L^-1(u_i)`` (the time-rescaling theorem: for Poisson arrivals exactly a non-homogeneous Poisson process of
that rate; for gamma gaps the burstiness is kept in the rescaled time). Equal times in a row make a step.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass

import numpy as np

from .table_names import DATA_DIR

SHAPES_FILE = "traffic_shapes.csv"  # named shapes of a day or a week (bench/traffic_shapes.py derives them)
DEFAULT_SHAPE = "servegen-language-small-day"  # the shape offered first: a day of chat traffic, a night trough and an
# evening peak


@dataclass(frozen=True)
class RateCurve:
    """Points ``(times_s[k], rates_per_s[k])`` joined by straight lines; ``times_s[0]`` is 0 and times never
    decrease. With ``period_s`` the curve repeats (the line from the last point goes back to the first rate at
    ``period_s``); without, the last rate holds for ever."""

    times_s: np.ndarray
    rates_per_s: np.ndarray
    period_s: float | None

    @classmethod
    def from_points(cls, points, period_s: float | None = None) -> "RateCurve":
        """A curve through ``points`` ([[t_s, rate_per_s], ...], checked by the scenario: first time 0, times not
        decreasing, rates >= 0), repeating every ``period_s`` when given (at least the last time)."""
        array = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        times, rates = array[:, 0].copy(), array[:, 1].copy()
        if period_s is not None:
            times, rates = np.append(times, period_s), np.append(rates, rates[0])
        return cls(times, rates, None if period_s is None else float(period_s))

    def span_s(self) -> float:
        """The time the mean is taken over: the period, else from 0 to the last point."""
        return self.period_s if self.period_s is not None else float(self.times_s[-1])

    def _areas(self) -> np.ndarray:
        """Expected arrivals from 0 to each point (the integral at the points)."""
        pieces = np.diff(self.times_s) * (self.rates_per_s[:-1] + self.rates_per_s[1:]) / 2.0
        return np.concatenate(([0.0], np.cumsum(pieces)))

    def mean_per_s(self) -> float:
        """The mean rate over ``span_s`` (a single point: its rate)."""
        span = self.span_s()
        return float(self._areas()[-1] / span) if span > 0 else float(self.rates_per_s[0])

    def scaled(self, factor: float) -> "RateCurve":
        """The same shape with every rate times ``factor``."""
        return RateCurve(self.times_s, self.rates_per_s * factor, self.period_s)

    def rate_at(self, t_s) -> np.ndarray:
        """The rate at times ``t_s`` (a step takes its later rate)."""
        t = np.asarray(t_s, dtype=np.float64)
        if self.period_s is not None:
            t = np.mod(t, self.period_s)
        k = np.clip(np.searchsorted(self.times_s, t, side="right") - 1, 0, len(self.times_s) - 1)
        nxt = np.minimum(k + 1, len(self.times_s) - 1)
        width = self.times_s[nxt] - self.times_s[k]
        slope = np.divide(self.rates_per_s[nxt] - self.rates_per_s[k], width, out=np.zeros_like(width),
                          where=width > 0)
        return self.rates_per_s[k] + slope * (t - self.times_s[k])

    def cumulative(self, t_s) -> np.ndarray:
        """Expected arrivals from 0 to ``t_s`` (``L``)."""
        t = np.asarray(t_s, dtype=np.float64)
        areas = self._areas()
        whole = np.zeros_like(t)
        if self.period_s is not None:
            whole = np.floor(t / self.period_s) * areas[-1]
            t = t - np.floor(t / self.period_s) * self.period_s
        k = np.clip(np.searchsorted(self.times_s, t, side="right") - 1, 0, len(self.times_s) - 1)
        s = t - self.times_s[k]
        return whole + areas[k] + s * (self.rates_per_s[k] + self.rate_at(t)) / 2.0

    def inverse(self, u) -> np.ndarray:
        """The time at which ``u`` arrivals are expected (``L^-1``; a stretch at rate 0 is passed over). Within a
        piece of rate ``a + b s``: ``a s + b s^2 / 2 = d``, solved as ``s = 2 d / (a + sqrt(a^2 + 2 b d))`` (no
        cancellation, and b = 0 needs no case of its own)."""
        u = np.asarray(u, dtype=np.float64)
        areas = self._areas()
        offset = np.zeros_like(u)
        last = len(self.times_s) - 1
        if self.period_s is not None:
            turns = np.floor(u / areas[-1])
            offset = turns * self.period_s
            u = u - turns * areas[-1]
            last -= 1  # the piece that closes the period is the last one
        k = np.clip(np.searchsorted(areas, u, side="right") - 1, 0, last)
        nxt = np.minimum(k + 1, len(self.times_s) - 1)
        width = self.times_s[nxt] - self.times_s[k]
        a = self.rates_per_s[k]
        b = np.divide(self.rates_per_s[nxt] - a, width, out=np.zeros_like(width), where=(width > 0) & (nxt > k))
        d = u - areas[k]
        root = a + np.sqrt(np.maximum(a * a + 2.0 * b * d, 0.0))
        s = np.divide(2.0 * d, root, out=np.zeros_like(d), where=root > 0)
        s = np.where(nxt > k, np.minimum(s, width), s)
        return offset + self.times_s[k] + s

    def busiest_start_s(self, requests: float, starts: int = 2000) -> float:
        """Where the stretch holding ``requests`` expected arrivals in the least time begins (the busiest such
        stretch), to within the span over ``starts``: what a short run of a long curve should replay."""
        t = np.linspace(0.0, self.span_s(), starts, endpoint=self.period_s is None)
        lasts = self.inverse(self.cumulative(t) + requests) - t
        return float(t[int(np.argmin(lasts))])

    def window_means(self, edges_s) -> np.ndarray:
        """The mean rate over each window ``[edges_s[i], edges_s[i + 1])``."""
        edges = np.asarray(edges_s, dtype=np.float64)
        return np.diff(self.cumulative(edges)) / np.diff(edges)


@functools.lru_cache(maxsize=None)
def _shapes() -> dict[str, tuple[tuple[tuple[float, float], ...], float]]:
    """Every named shape of ``SHAPES_FILE``: its points (time, rate factor) and its period."""
    shapes: dict[str, tuple[list, float]] = {}
    with (DATA_DIR / SHAPES_FILE).open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            points, _ = shapes.setdefault(row["shape"], ([], float(row["period_s"])))
            points.append((float(row["t_s"]), float(row["rate_factor"])))
    return {name: (tuple(points), period) for name, (points, period) in shapes.items()}


def shape_curve(name: str) -> RateCurve:
    """The named shape (a row group of ``SHAPES_FILE``, checked by the scenario), its factors as rates."""
    points, period_s = _shapes()[name]
    return RateCurve.from_points(points, period_s)


def shape_source(name: str) -> str:
    """Where the named shape comes from (its first row's ``source``)."""
    with (DATA_DIR / SHAPES_FILE).open(newline="", encoding="utf-8") as fh:
        return next(row["source"] for row in csv.DictReader(fh) if row["shape"] == name)
