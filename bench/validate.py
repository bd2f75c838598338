"""The step models' accuracy on held-out sources: the calibrated roofline against the product as a user gets it
(measured operator tables where they cover a run, the roofline elsewhere), per GPU, engine version, model kind and
parallel layout, on the published runs of held-out sources and on aiconfigurator-core's silicon sample (validation
only: nothing is fitted or tuned on it).

The split is by source (``data/hardware/validation_sources.csv``: a lab or a vendor's page series is one source, all
its versions on one side), written down before any fit. The roofline's held-out runs are those of held-out sources
its shipped fit did not replay; the operator tables are fitted on nothing here, so every run is held out for them.
On the silicon sample the operator-table peer's own answer (aiconfigurator-core's aggregated estimate,
``engine.calibrate.peer``) is set beside both, on the runs it estimates.

Usage: python bench/validate.py [--set all|measurements|silicon] [--per-group N] [--workers 2] [--csv FILE]
       [--write]   (--write: data/hardware/validation_configurations.csv, what the badges read, and
       docs/validation_by_source.md; about fifteen minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.calibrate.calibration import error_pct, measurements, replay_problem  # noqa: E402
from engine.calibrate.calibration_report import each_row  # noqa: E402
from engine.calibrate.calibration_report import VALIDATION_FILE  # noqa: E402
from engine.calibrate.peer import row_estimate  # noqa: E402
from engine.calibrate.held_out import (CONFIGURATIONS_FILE, TAIL, configurations, layout_of,  # noqa: E402
                                       predictions, run_count, summary)
from engine.calibrate.silicon_sample import SOURCE, run_ids, run_of, validation_rows  # noqa: E402
from engine.calibrate.sources import by_source  # noqa: E402
from engine.hardware.kernel_tables import package_version  # noqa: E402
from speed_figures import commit  # noqa: E402  (bench/, this script's folder)

DOC = REPO / "docs" / "validation_by_source.md"
GROUPS = (["gpu"], ["engine", "run_version"], ["engine", "clients"], ["lengths"], ["model"], ["kind"], ["layout"],
          ["kind", "layout"])
HEADINGS = {"gpu": "GPU", "engine": "Engine", "run_version": "Version measured", "model": "Model",
            "kind": "Model kind", "layout": "Layout", "clients": "Clients", "lengths": "Prompt / output tokens"}
# Concurrency bands of a closed-loop run (its clients); an open-loop run at a rate is its own band.
CLIENT_BANDS = ((8, "1-8"), (32, "9-32"), (128, "33-128"), (10 ** 9, "129 and more"))


def clients_band(batch: float, rate_per_s: float) -> str:
    """The concurrency band of a run: its clients' band, or "at a rate" for an open-loop run."""
    if rate_per_s > 0:
        return "at a rate"
    return next(label for top, label in CLIENT_BANDS if batch <= top)


def _rows(which: str, per_group: int) -> pd.DataFrame:
    """The runs to predict: measurements.csv rows of held-out sources (with the roofline's ``fitted`` flag) and the
    silicon sample, at most ``per_group`` runs of each (model, GPU, engine, layout, lengths, metric) (0: all)."""
    frames = []
    if which in ("all", "measurements"):
        table = measurements().join(pd.read_csv(VALIDATION_FILE, index_col=0)[["fitted"]])
        table["run_version"] = table["engine_version"].astype(str)
        frames.append(table)
    if which in ("all", "silicon"):
        frames.append(validation_rows()[0].assign(fitted=False))
    rows = by_source(pd.concat(frames))
    rows = rows[rows["held_out_source"]].drop(columns=["source", "held_out_source"])
    rows["layout"] = [layout_of(row) for _, row in rows.iterrows()]
    if per_group:
        keys = ["model", "gpu", "engine", "layout", "input_tokens", "output_tokens", "metric"]
        rows = rows.groupby(keys, group_keys=False, sort=False).head(per_group)
    return rows


def with_peer(table: pd.DataFrame, workers: int = 1) -> pd.DataFrame:
    """``table`` with the operator-table peer's answer for each silicon-sample run (``engine.calibrate.peer``):
    ``predicted_peer``, ``error_peer_pct`` and ``peer_none`` (why it gives none; "" where it does)."""
    silicon = table[table["document"] == SOURCE]
    runs = run_ids(silicon.index)
    firsts = silicon[~runs.duplicated()]
    answers = dict(zip(run_ids(firsts.index), each_row(row_estimate, firsts, workers)))
    figures = {name: answers[run] for name, run in zip(silicon.index, runs)}
    table = table.assign(
        predicted_peer=[figures[name][0].get(row["metric"], float("nan")) if name in figures else float("nan")
                        for name, row in table.iterrows()],
        peer_none=[figures[name][1] if name in figures else "" for name in table.index])
    table["error_peer_pct"] = error_pct(table["predicted_peer"], table["measured"])
    return table


def left_out(rows: pd.DataFrame, table: pd.DataFrame, skipped: dict[str, int]) -> str:
    """The runs the report leaves out, by reason: the silicon sample's runs its reader skips (``skipped``) and every
    run to predict (``rows``) that has no prediction in ``table``, with why it cannot be replayed as published."""
    reasons = dict(skipped)
    missing = rows[~rows.index.isin(table.index)]
    # one run per silicon-sample run (its two metrics are two rows), one per row of measurements.csv
    runs = [run_of(name) if row["document"] == SOURCE else name for name, row in missing.iterrows()]
    for _, row in missing[~pd.Index(runs).duplicated()].iterrows():
        reason = "cannot be replayed as published: " + re.sub(r"\d+", "n", replay_problem(row) or "no prediction")
        reasons[reason] = reasons.get(reason, 0) + 1
    if not reasons:
        return ""
    ordered = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    return "\n".join(["Runs left out, by reason:", ""] + [f"- {reason}: {count}" for reason, count in ordered]) + "\n"


def _markdown(frame: pd.DataFrame) -> str:
    """A summary frame as a Markdown table, errors rounded to whole per cent."""
    columns = list(frame.columns)
    lines = ["| " + " | ".join(HEADINGS.get(c, c) for c in columns) + " |", "|" + "---|" * len(columns)]
    for _, row in frame.iterrows():
        cells = ["—" if pd.isna(row[c]) else f"{row[c]:.0f}%" if c.endswith(("median", "max")) else
                 f"{row[c]:.0f}" if c.endswith("runs") else str(row[c]) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _medians(table: pd.DataFrame, error: str) -> str:
    """One line of headline medians: time per output token by model kind, time to first token, the p99s of both
    where a source measured them (judged apart: ``held_out.figure_kind``), throughput."""
    parts = []
    for label, rows in (("TPOT dense", table[(table["metric_kind"] == "time per output token")
                                             & (table["kind"] == "dense")]),
                        ("TPOT MoE/MLA", table[(table["metric_kind"] == "time per output token")
                                               & (table["kind"] != "dense")]),
                        ("TTFT", table[table["metric_kind"] == "time to first token"]),
                        ("TTFT p99", table[table["metric_kind"] == "time to first token" + TAIL]),
                        ("TPOT p99", table[table["metric_kind"] == "time per output token" + TAIL]),
                        ("throughput", table[table["metric_kind"] == "throughput"]),
                        ("one iteration", table[table["metric_kind"] == "one iteration"])):
        if len(rows):
            parts.append(f"{label} {rows[error].abs().median():.0f}% (max {rows[error].abs().max():.0f}%, "
                         f"{run_count(rows)} runs)")
    return "; ".join(parts)


def with_bands(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with each run's concurrency band (``clients_band``) and its prompt / output lengths, two more
    dimensions of the report."""
    return table.assign(clients=[clients_band(b, r) for b, r in zip(table["batch"], table["rate_per_s"])],
                        lengths=[f"{int(i)} / {int(o)}" for i, o in zip(table["input_tokens"], table["output_tokens"])])


def report(table: pd.DataFrame, left: str = "") -> str:
    """The whole report: the split, the runs left out (``left``), then per set of runs the headline medians and the
    tables by dimension."""
    table = with_bands(table)
    held = table[table["held_out_source"]]
    roofline_held = held[~held["fitted"].astype(bool)]
    lines = ["Split by source (data/hardware/validation_sources.csv); held-out sources: "
             + ", ".join(sorted(set(held["source"]))) + ".", ""] + ([left] if left else [])
    for source, rows in held.groupby("source"):
        roof = roofline_held[roofline_held["source"] == source]
        covered = rows[rows["priced_by"] == "operator tables"]
        lines += [f"## {source}", "",
                  f"{run_count(rows)} runs ({len(rows)} measured figures); priced by measured operator tables: "
                  f"{run_count(covered)}.", "",
                  f"- Before (calibrated roofline, {run_count(roof)} runs its fit never replayed): "
                  f"{_medians(roof, 'error_roofline_pct')}",
                  f"- After (operator tables where they cover, roofline elsewhere): {_medians(rows, 'error_pct')}",
                  f"- After, the runs the tables price: {_medians(covered, 'error_pct')}"]
        peer = rows[rows["error_peer_pct"].notna()] if "error_peer_pct" in rows else None
        if peer is not None and len(peer):
            refused = rows[rows["peer_none"] != ""].groupby("peer_none").apply(run_count).sort_values(ascending=False)
            lines += [f"- Peer (aiconfigurator-core's own aggregated estimate, `engine/calibrate/peer.py`; partly "
                      f"calibrated on this sample, see the manual's Validation page), on the runs it estimates: "
                      f"{_medians(peer, 'error_peer_pct')}",
                      f"- After, on the same runs: {_medians(peer, 'error_pct')}"]
            if len(refused):
                reasons = [f"{count} run{'s' * (count != 1)} ({why})" for why, count in refused.items()]
                lines += ["- The peer gives no figure for " + "; ".join(reasons)]
        else:
            peer = None
        lines += [""]
        for by in GROUPS:
            before = summary(roof, by, "error_roofline_pct").add_prefix("before ").rename(
                columns={f"before {b}": b for b in by})
            after = summary(rows, by, "error_pct").add_prefix("after ").rename(columns={f"after {b}": b for b in by})
            merged = after.merge(before, on=by, how="left")
            if peer is not None:
                merged = merged.merge(summary(peer, by, "error_peer_pct").add_prefix("peer ").rename(
                    columns={f"peer {b}": b for b in by}), on=by, how="left")
            keep = by + [c for c in merged.columns if c.endswith("runs") or re.search(
                r"(per output token|first token)( p99)? (signed )?median$", c)]
            lines += [_markdown(merged[keep]), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="all", choices=("all", "measurements", "silicon"))
    parser.add_argument("--per-group", type=int, default=0, help="at most this many runs of one configuration")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--csv", help="also write every run with both predictions to this file")
    parser.add_argument("--write", action="store_true", help="write the configurations table and the manual's page")
    args = parser.parse_args()
    rows = _rows(args.set, args.per_group)
    started = time.perf_counter()
    table = with_peer(predictions(rows, workers=args.workers), args.workers)
    print(f"{len(table)} measured figures of {run_count(table)} runs predicted twice in "
          f"{time.perf_counter() - started:.0f} s\n")
    if args.csv:
        table.to_csv(args.csv)
    skipped = validation_rows()[1] if args.set in ("all", "silicon") else {}
    text = report(table, left_out(rows, table, skipped))
    print(text)
    if args.write:
        held = table[table["held_out_source"]]
        configurations(held).to_csv(CONFIGURATIONS_FILE, index=False)
        DOC.write_text(f"# Validation by source\n\nWritten by `python bench/validate.py --write` on "
                       f"{datetime.date.today()} at commit {commit()} (aiconfigurator-core {package_version()}); "
                       f"errors are median absolute errors of held-out runs.\n\n{text}")


if __name__ == "__main__":
    main()
