"""Fit the roofline's efficiency factors to the published measurements and write the calibration.

For each GPU family with at least 3 rows in data/hardware/measurements.csv, fit
``calibration.family_factors`` on that family's rows (all five factors from 10 rows, the shares of peak and
the overhead from 5, the shares of peak alone from 3), the others from the fit over all rows; a family with
fewer rows gets the fit over all rows, a family with none a conservative estimate (each factor at the
slowest value of the calibrated families). Also report a held-out error: for a family with its own fit,
each row predicted by a fit made without it (leave one out); for a family on the common fit, its rows
predicted by a fit of all the other families' rows (a GPU the fit has never seen). Writes
data/hardware/calibration.csv and the predicted-versus-measured table of the manual's simulator page
(docs/method.md, between the calibration markers), and prints how long each fit took.

Usage: python bench/calibrate.py
"""

from __future__ import annotations

import re
import sys
import time
from datetime import date
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.calibrate.calibration import (MIN_FAMILY_MEASUREMENTS, cases, conservative, error_pct, family_factors, fit,
                                          measurements)
from engine.calibrate.calibration_report import markdown_table  # noqa: E402
from engine.hardware.tables import load_table  # noqa: E402
from engine.scenario.table_names import DATA_DIR  # noqa: E402


def abs_errors_pct(rows: pd.DataFrame, efficiency) -> list[float]:
    """Absolute error of each row's prediction at ``efficiency``, in percent."""
    return [abs(error_pct(case.predict(efficiency)[row["metric"]], row["measured"]))
            for case, (_, row) in zip(cases(rows), rows.iterrows())]


def held_out_errors_pct(rows: pd.DataFrame, full_fit) -> list[float]:
    """Error of each row under a fit of the others (the same factors free), started from the fit on all of them."""
    return [abs_errors_pct(rows.loc[[key]], fit(cases(rows.drop(index=key)), start=full_fit, step=0.1,
                                                tolerance=0.02, factors=family_factors(len(rows))))[0]
            for key in rows.index]


def calibration_row(family, eff, own, source, errors, held_out) -> dict:
    return {"family": family, "compute_efficiency": round(float(eff.compute), 6),
            "bandwidth_efficiency": round(float(eff.bandwidth), 6),
            "iteration_overhead_ms": round(float(eff.overhead_ms), 6),
            "roofline_sharpness": round(float(eff.sharpness), 4),
            "allreduce_latency_factor": round(float(eff.allreduce_factor), 4),
            "measurements": len(own),
            "median_abs_error_pct": round(float(pd.Series(errors).median()), 1) if errors else None,
            "loo_median_abs_error_pct": round(float(pd.Series(held_out).median()), 1) if held_out else None,
            "source": source, "as_of": date.today().isoformat()}


def main() -> None:
    table = measurements()
    started = time.perf_counter()
    overall = fit(cases(table))
    print(f"all rows ({len(table)}): {overall} in {time.perf_counter() - started:.1f} s", flush=True)
    families = sorted(set(load_table("gpus")["family"]))
    own_fits = {}
    for family in families:
        own = table[table["family"] == family]
        if family_factors(len(own)):
            started = time.perf_counter()
            own_fits[family] = fit(cases(own), start=overall, factors=family_factors(len(own)))
            print(f"{family} ({len(own)} rows): {own_fits[family]} in {time.perf_counter() - started:.1f} s",
                  flush=True)
    estimate = conservative({family: eff for family, eff in own_fits.items()
                             if (table["family"] == family).sum() >= MIN_FAMILY_MEASUREMENTS})
    rows = []
    for family in families:
        own = table[table["family"] == family]
        held_out = []
        if family in own_fits:
            eff = own_fits[family]
            source = (f"fit by bench/calibrate.py on the {len(own)} {family} rows of measurements.csv "
                      f"({', '.join(family_factors(len(own)))}; the other factors from the fit over all rows)")
            held_out = held_out_errors_pct(own, eff)
        elif len(own):
            eff = overall
            source = (f"fit by bench/calibrate.py on all {len(table)} rows of measurements.csv ({len(own)} of this "
                      f"family, fewer than {MIN_FAMILY_MEASUREMENTS})")
            unseen = fit(cases(table[table["family"] != family]), start=overall, step=0.1, tolerance=0.02)
            held_out = abs_errors_pct(own, unseen)
        else:
            eff = estimate
            source = ("no measurement of this family: a conservative estimate, each factor at the slowest value "
                      f"of the calibrated families ({MIN_FAMILY_MEASUREMENTS} or more rows; bench/calibrate.py)")
        rows.append(calibration_row(family, eff, own, source, abs_errors_pct(own, eff) if len(own) else [],
                                    held_out))
        print(rows[-1], flush=True)
    pd.DataFrame(rows).to_csv(DATA_DIR / "calibration.csv", index=False)
    load_table.cache_clear()
    page = REPO / "docs" / "method.md"
    text = re.sub(r"(<!-- calibration:start -->\n).*?(<!-- calibration:end -->)",
                  lambda m: m.group(1) + markdown_table() + m.group(2), page.read_text(), flags=re.S)
    page.write_text(text)
    print(markdown_table())


if __name__ == "__main__":
    main()
