"""The AMD roofline's GEMM times against GEMMs measured on the cards: AMD's own tuned-GEMM tables (ROCm/aiter's
``aiter/configs``, MIT licence: one row per GEMM shape with the best kernel's time in microseconds, from AMD's tuner
on MI300X / MI325X (gfx942, 304 CUs) and MI355X (gfx950, 256 CUs)).

These are component measurements, not end-to-end runs: nothing is fitted on them here. The check prices each measured
GEMM (M x N x K, its operand bytes and its result in 16 bits) the way the roofline prices an iteration's matmuls:
FLOPs at the card's datasheet peak for the format times the GPU family's fitted compute share, bytes at its
bandwidth times the fitted bandwidth share, combined by the family's smooth maximum (``steptime.smooth_max_nb``);
the per-iteration overhead is not per GEMM and is left out. It prints, per GPU, format and row band, the median of
(roofline / measured - 1) and the measured share of the datasheet peak, so a reader sees whether the fitted shares
say what the card's kernels do.

Usage: python bench/amd_gemm_check.py --aiter PATH  (PATH: a copy of aiter/configs, e.g. from
       git archive HEAD aiter/configs of https://github.com/ROCm/aiter)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.hardware.steptime import smooth_max_nb  # noqa: E402
from engine.hardware.tables import calibration_row, gpu_row  # noqa: E402

ARCHES = {("gfx942", 304): "MI300X", ("gfx950", 256): "MI355X"}  # MI325X is gfx942 with 304 CUs too: MI300X's rows
# A table's operand format from its file name: (bits of the weights and activations, the datasheet peak's column)
FORMATS = (("a4w4", 4, "fp4_tflops"), ("a8w8", 8, "fp8_tflops"), ("bf16", 16, "fp16_tflops"))
SKIP = ("fmoe", "batched", "untuned")  # expert and batched GEMMs are other shapes; untuned rows have no time
ROW_BANDS = ((16, "1-16 rows"), (256, "17-256"), (4096, "257-4,096"), (10 ** 9, "over 4,096"))
RESULT_BYTES = 2  # the output in 16 bits


def tables(folder: Path) -> pd.DataFrame:
    """Every measured GEMM of the tuned tables under ``folder`` on the cards of ``ARCHES``: gpu, bits, peak column,
    M, N, K and the measured microseconds; one row per shape (the fastest where tables repeat one)."""
    frames = []
    for path in sorted(folder.rglob("*.csv")):
        name = path.name
        found = next(((bits, peak) for key, bits, peak in FORMATS if key in name), None)
        if found is None or any(word in name for word in SKIP):
            continue
        table = pd.read_csv(path)
        if not {"gfx", "cu_num", "M", "N", "K", "us"} <= set(table.columns):
            continue
        table["gpu"] = [ARCHES.get((g, int(c))) for g, c in zip(table["gfx"], table["cu_num"])]
        table = table[table["gpu"].notna() & (pd.to_numeric(table["us"], errors="coerce") > 0)]
        frames.append(table[["gpu", "M", "N", "K", "us"]].assign(bits=found[0], peak=found[1], file=name))
    rows = pd.concat(frames, ignore_index=True)
    return rows.sort_values("us").drop_duplicates(["gpu", "bits", "M", "N", "K"]).reset_index(drop=True)


def priced(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the roofline's time (``roofline_us``) at the family's fitted shares and the measured share of
    the datasheet peak (``peak_share``)."""
    out = []
    for (gpu, bits, peak), group in rows.groupby(["gpu", "bits", "peak"]):
        card, family = gpu_row(gpu), calibration_row(gpu)
        peak_flops = float(card[peak]) * 1e12
        if not np.isfinite(peak_flops) or peak_flops <= 0:
            continue
        share = float(family["compute_efficiency" if bits == 16 else "low_precision_compute_efficiency"])
        bytes_per_s = float(card["mem_bw_tb_s"]) * 1e12 * float(family["bandwidth_efficiency"])
        m, n, k = (group[c].to_numpy(float) for c in ("M", "N", "K"))
        flops = 2.0 * m * n * k
        moved = (m * k + k * n) * bits / 8.0 + m * n * RESULT_BYTES
        compute_s, memory_s = flops / (peak_flops * share), moved / bytes_per_s
        sharpness = float(family["roofline_sharpness"])
        roofline_us = [smooth_max_nb(c, b, sharpness) * 1e6 for c, b in zip(compute_s, memory_s)]
        out.append(group.assign(roofline_us=roofline_us, peak_share=flops / (group["us"].to_numpy() * 1e-6)
                                / peak_flops, family_share=share))
    return pd.concat(out, ignore_index=True)


def band(rows: int) -> str:
    return next(label for top, label in ROW_BANDS if rows <= top)


def report(table: pd.DataFrame) -> str:
    """Per GPU, format and row band: shapes, the median signed error of the roofline (+: it says slower than
    measured) and the median measured share of the datasheet peak, beside the family's fitted share."""
    table = table.assign(band=[band(int(m)) for m in table["M"]],
                         error_pct=(table["roofline_us"] / table["us"] - 1.0) * 100.0)
    lines = ["| GPU | Bits | Rows (M) | Shapes | Roofline vs measured, median | Measured share of peak, median "
             "| Fitted compute share |", "|---|---|---|---|---|---|---|"]
    order = {label: i for i, (_, label) in enumerate(ROW_BANDS)}
    for (gpu, bits, label), group in sorted(table.groupby(["gpu", "bits", "band"]),
                                            key=lambda item: (item[0][0], item[0][1], order[item[0][2]])):
        lines.append(f"| {gpu} | {bits} | {label} | {len(group):,} | {group['error_pct'].median():+.0f}% | "
                     f"{group['peak_share'].median():.0%} | {group['family_share'].iloc[0]:.0%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiter", required=True, help="a copy of aiter/configs (ROCm/aiter)")
    args = parser.parse_args()
    folder = Path(args.aiter)
    if not folder.is_dir():
        parser.error(f"--aiter {args.aiter}: no such folder")
    print(report(priced(tables(folder))))


if __name__ == "__main__":
    main()
