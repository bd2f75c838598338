"""Fit the roofline's efficiency factors to the published measurements and write the calibration.

For each GPU family with at least ``MIN_FAMILY_MEASUREMENTS`` rows in data/hardware/measurements.csv,
fit (compute share, bandwidth share, per-iteration overhead) on that family's rows; every other family
gets the fit over all rows. Also report a held-out error: for a family with its own fit, each row
predicted by a fit made without it (leave one out); for a family on the common fit, its rows predicted
by a fit of all the other families' rows (a GPU the fit has never seen). Writes
data/hardware/calibration.csv and the README's predicted-versus-measured table
(between the calibration markers). Takes about six minutes on two cores.

Usage: python bench/calibrate.py
"""

from __future__ import annotations

import re
import sys
from datetime import date
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.calibration import MIN_FAMILY_MEASUREMENTS, error_pct, fit, measurements, predict  # noqa: E402
from engine.hardware import DATA_DIR, load_table  # noqa: E402
from engine.calibration_report import markdown_table  # noqa: E402


def abs_errors_pct(rows: pd.DataFrame, efficiency) -> list[float]:
    """Absolute error of each row's prediction at ``efficiency``, in percent."""
    return [abs(error_pct(predict(row, efficiency), row["measured"])) for _, row in rows.iterrows()]


def held_out_errors_pct(rows: pd.DataFrame, full_fit) -> list[float]:
    """Error of each row under a fit of the others, started from the fit on all of them."""
    return [abs_errors_pct(rows.loc[[key]], fit(rows.drop(index=key), start=full_fit, step=0.1, tolerance=0.02))[0]
            for key in rows.index]


def main() -> None:
    table = measurements()
    overall = fit(table)
    print(f"all rows ({len(table)}): {overall}", flush=True)
    rows = []
    for family in sorted(set(load_table("gpus")["family"])):
        own = table[table["family"] == family]
        if len(own) >= MIN_FAMILY_MEASUREMENTS:
            eff = fit(own, start=overall)
            source = f"fit by bench/calibrate.py on the {len(own)} {family} rows of measurements.csv"
        else:
            eff = overall
            source = (f"fit by bench/calibrate.py on all {len(table)} rows of measurements.csv"
                      + (f" ({len(own)} of this family, fewer than {MIN_FAMILY_MEASUREMENTS})" if len(own) else
                         "; no measurement of this family: an estimate"))
        errors = abs_errors_pct(own, eff)
        if len(own) >= MIN_FAMILY_MEASUREMENTS:
            held_out = held_out_errors_pct(own, eff)
        elif len(own):
            unseen = fit(table[table["family"] != family], start=overall, step=0.1, tolerance=0.02)
            held_out = abs_errors_pct(own, unseen)
        rows.append({"family": family, "compute_efficiency": round(float(eff.compute), 6),
                     "bandwidth_efficiency": round(float(eff.bandwidth), 6),
                     "iteration_overhead_ms": round(float(eff.overhead_ms), 6),
                     "measurements": len(own),
                     "median_abs_error_pct": round(float(pd.Series(errors).median()), 1) if errors else None,
                     "loo_median_abs_error_pct": round(float(pd.Series(held_out).median()), 1) if errors else None,
                     "source": source, "as_of": date.today().isoformat()})
        print(rows[-1], flush=True)
    pd.DataFrame(rows).to_csv(DATA_DIR / "calibration.csv", index=False)
    load_table.cache_clear()
    readme = REPO / "README.md"
    text = re.sub(r"(<!-- calibration:start -->\n).*?(<!-- calibration:end -->)",
                  lambda m: m.group(1) + markdown_table() + m.group(2), readme.read_text(), flags=re.S)
    readme.write_text(text)
    print(markdown_table())


if __name__ == "__main__":
    main()
