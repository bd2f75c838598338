"""Derive the traffic shapes of ``data/hardware/traffic_shapes.csv`` from ServeGen's per-window arrival rates.

ServeGen (Alibaba Cloud Model Studio, arXiv 2505.09999; Apache-2.0) publishes, per client of a served model, the
arrival rate of every 600-s window: 14 days for its three language models, one day for DeepSeek-R1. A service's
rate is the sum over its clients. A day shape averages the days window by window into 30-minute points; a week
shape averages the two weeks into hourly points by day of week. Factors are scaled to a mean of 1 over the period
(the trapezoid rule of ``engine.scenario.rate_curve``, the same the simulator integrates), rounded to 4 decimals.
A shape's source is on its first row.
ServeGen does not publish the clock time of its first window: hour 0 of a shape is the trace's first hour.

Run: ``python bench/traffic_shapes.py [../shared/traces/servegen/servegen_arrival_traces.tar.gz]``.
"""

from __future__ import annotations

import csv
import io
import sys
import tarfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.scenario.rate_curve import RateCurve  # noqa: E402

TARBALL = ROOT.parent / "shared" / "traces" / "servegen" / "servegen_arrival_traces.tar.gz"
OUT = ROOT / "data" / "hardware" / "traffic_shapes.csv"
WINDOW_S = 600.0
DAY_S, WEEK_S = 86_400.0, 604_800.0
SOURCE = ("alibaba/ServeGen @ f891d1189eb3, data/{folder}/chunk-*-trace.csv: arrival rate per 600-s window summed "
          "over its {clients} clients, {days} days averaged; Apache-2.0; hour 0 = the trace's first hour (its clock "
          "time is not published)")
# shape -> (ServeGen folder, period, points per period)
SHAPES = {
    "servegen-language-small-day": ("language/m-small", DAY_S, 48),
    "servegen-language-mid-day": ("language/m-mid", DAY_S, 48),
    "servegen-language-large-day": ("language/m-large", DAY_S, 48),
    "servegen-reasoning-day": ("reason/deepseek-r1", DAY_S, 48),
    "servegen-language-small-week": ("language/m-small", WEEK_S, 168),
    "servegen-language-mid-week": ("language/m-mid", WEEK_S, 168),
    "servegen-language-large-week": ("language/m-large", WEEK_S, 168),
}


def service_rates(tar: tarfile.TarFile, folder: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Window starts (s) and the service's rate in each (req/s, summed over clients), and the clients' count."""
    total: dict[float, float] = {}
    clients = 0
    for member in tar.getmembers():
        if not (member.name.startswith(f"data/{folder}/chunk-") and member.name.endswith("-trace.csv")):
            continue
        clients += 1
        text = tar.extractfile(member).read().decode()
        for row in csv.reader(io.StringIO(text)):
            if row:
                total[float(row[0])] = total.get(float(row[0]), 0.0) + float(row[1])
    starts = np.array(sorted(total))
    return starts, np.array([total[s] for s in starts]), clients


def shape_points(starts: np.ndarray, rates: np.ndarray, period_s: float, points: int) -> np.ndarray:
    """Mean rate factor at each of ``points`` equal steps of the period, over every period the windows cover."""
    step_s = period_s / points
    slot = ((starts % period_s) // step_s).astype(int)
    means = np.array([rates[slot == k].mean() for k in range(points)])
    times = np.arange(points) * step_s
    mean = RateCurve.from_points(np.column_stack((times, means)), period_s).mean_per_s()
    return np.round(means / mean, 4)


def main(tarball: Path) -> None:
    rows = []
    with tarfile.open(tarball) as tar:
        for shape, (folder, period_s, points) in SHAPES.items():
            starts, rates, clients = service_rates(tar, folder)
            days = int(round((starts.max() + WINDOW_S) / DAY_S))
            factors = shape_points(starts, rates, period_s, points)
            source = SOURCE.format(folder=folder, clients=clients, days=days)
            rows += [(shape, f"{period_s:g}", f"{k * period_s / points:g}", f"{f:g}", "" if k else source)
                     for k, f in enumerate(factors)]
    with OUT.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(("shape", "period_s", "t_s", "rate_factor", "source"))
        writer.writerows(rows)
    print(f"wrote {len(rows)} points of {len(SHAPES)} shapes to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else TARBALL)
