"""Fit the step model's family and engine factors on the training part of the measurements and write the calibration.

The split and the method are ``engine.calibrate.joint_fit``'s: pages whose SHA-256 is 0 mod 3, and every
DeepSeek-V3/R1 run, are held out; the fit replays at most 8 runs of each training page. Writes
data/hardware/calibration.csv (per GPU family: shares of peak, sharpness, the runs fitted and the held-out runs
with their median error), data/hardware/engines.csv (per serving engine: overhead, all-reduce factor, the same
counts) and the held-out table of the manual (docs/method.md, between the calibration markers).

A family or engine without a held-out run says so; the badge in the app shows held-out error only.

Usage: python bench/calibrate.py [--workers N]   (takes 10 to 20 minutes on 2 cores)
       python bench/calibrate.py --predict-only   (keeps the shipped factors and re-predicts every run, after a
       change to the replay or the measurements that leaves the training sample as it is; about 3 minutes)
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import date
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.calibrate.calibration import cases, measurements  # noqa: E402
from engine.calibrate.calibration_report import (held_out_summary, markdown_table, prediction_table,  # noqa: E402
                                                 write_validation)
from engine.calibrate.joint_fit import FIT_ROWS_PER_DOCUMENT, fit_jointly, fit_sample, split  # noqa: E402
from engine.hardware.tables import load_table  # noqa: E402
from engine.scenario.table_names import DATA_DIR  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--predict-only", action="store_true", help="keep the shipped factors; re-predict every run")
    args = parser.parse_args()
    if args.predict_only:
        publish(load_table("calibration").copy(), load_table("engines").copy(), args.workers)
        return
    table = measurements()
    sample = fit_sample(table)
    print(f"{len(table)} runs, {int(split(table).sum())} held out; fitting on {len(sample)} "
          f"(at most {FIT_ROWS_PER_DOCUMENT} per training page)", flush=True)
    families = sorted(set(load_table("gpus")["family"]))
    engines = list(load_table("engines").index)
    started = time.perf_counter()
    factors = fit_jointly(cases(sample), families, engines, workers=args.workers,
                          log=lambda line: print(line, flush=True))
    print(f"fitted in {time.perf_counter() - started:.0f} s", flush=True)
    fitted_families = sample.groupby("family").size()
    fitted_engines = sample.groupby("engine").size()
    today = date.today().isoformat()
    rows = []
    for family in families:
        f, n = factors.families[family], int(fitted_families.get(family, 0))
        own = factors.fitted[family]
        source = (f"fit by bench/calibrate.py on {n} training runs of this family ({', '.join(own)}; "
                  f"the other factors the slowest of the families that fit them)" if own else
                  (f"{n} training runs of this family, too few to fit a factor: each factor the slowest of the "
                   f"fitted families, an estimate" if n else
                   "no training run of this family: each factor the slowest of the fitted families, an estimate"))
        rows.append({"family": family, "compute_efficiency": round(f["compute"], 6),
                     "low_precision_compute_efficiency": round(f["low_precision_compute"], 6),
                     "bandwidth_efficiency": round(f["bandwidth"], 6), "roofline_sharpness": round(f["sharpness"], 4),
                     "measurements": n, "fitted_factors": " ".join(own), "source": source, "as_of": today})
    calibration = pd.DataFrame(rows).set_index("family")
    engine_table = load_table("engines").astype({"fitted_factors": object, "source": object})
    for engine in engines:
        e = factors.engines[engine]
        engine_table.loc[engine, ["overhead_ms", "allreduce_latency_factor"]] = [round(e["overhead_ms"], 4),
                                                                                 round(e["allreduce_factor"], 4)]
        engine_table.loc[engine, "measurements"] = int(fitted_engines.get(engine, 0))
        own = factors.fitted[engine]
        engine_table.loc[engine, "fitted_factors"] = " ".join(own)
        engine_table.loc[engine, "source"] = (
            f"fit by bench/calibrate.py on {int(fitted_engines.get(engine, 0))} training runs ({', '.join(own)})"
            if own else "no training run of this engine: each factor the slowest of the fitted engines, an estimate")
        engine_table.loc[engine, "as_of"] = today
    write(calibration, engine_table)  # the factors first: the predictions read them
    publish(calibration, engine_table, args.workers)


def publish(calibration: pd.DataFrame, engine_table: pd.DataFrame, workers: int) -> None:
    """Predict every run with the written factors, then write ``validation.csv``, each family's and engine's held-out
    error and the manual's held-out table."""
    started = time.perf_counter()
    write_validation(prediction_table(workers=workers))
    print(f"every run predicted in {time.perf_counter() - started:.0f} s", flush=True)
    for frame, column in ((calibration, "family"), (engine_table, "engine")):
        errors = held_out_summary(column)
        frame["held_out_measurements"] = [errors.get(k, (0, None))[0] for k in frame.index]
        frame["held_out_median_abs_error_pct"] = [round(errors[k][1], 1) if k in errors else None
                                                  for k in frame.index]
    write(calibration, engine_table)
    page = REPO / "docs" / "method.md"
    text = re.sub(r"(<!-- calibration:start -->\n).*?(<!-- calibration:end -->)",
                  lambda m: m.group(1) + markdown_table() + m.group(2), page.read_text(), flags=re.S)
    page.write_text(text)
    print(markdown_table())


def write(calibration: pd.DataFrame, engines: pd.DataFrame) -> None:
    """Both tables, indexed by family and engine."""
    calibration.to_csv(DATA_DIR / "calibration.csv")
    engines.to_csv(DATA_DIR / "engines.csv")
    load_table.cache_clear()


if __name__ == "__main__":
    main()
