"""The predicted-versus-measured table as Markdown (README and Method page share it)."""

from __future__ import annotations

from .calibration import prediction_table

UNITS = {"tpot_mean_ms": "ms/token", "ttft_mean_ms": "ms to first token", "output_tokens_per_s": "output tokens/s"}


def markdown_table() -> str:
    """One line per measurement: set-up, load, measured, predicted, error; then the median error."""
    table = prediction_table()
    lines = ["| GPU | TP | model | weights/KV | load | in/out tokens | metric | measured | predicted | error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        load = f"{int(r['batch'])} at once" if r["rate_per_s"] == 0 else f"Poisson {r['rate_per_s']:g}/s"
        lines.append(f"| {r['gpu']} | {int(r['tensor_parallel'])} | {r['model']} | {r['quant']}/{r['kv_quant']} | "
                     f"{load} | {int(r['input_tokens'])}/{int(r['output_tokens'])} | {UNITS[r['metric']]} | "
                     f"{r['measured']:,.1f} | {r['predicted']:,.1f} | {round(r['error_pct']) + 0:+d}% |")  # never "-0%"
    lines.append("")
    lines.append(f"Median absolute error {table['error_pct'].abs().median():.0f}% over {len(table)} measurements "
                 f"(largest {table['error_pct'].abs().max():.0f}%).")
    return "\n".join(lines) + "\n"
