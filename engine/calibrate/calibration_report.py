"""The predicted-versus-measured table as Markdown (the manual's simulator page and the Method page share it)."""

from __future__ import annotations

from .calibration import METRICS, prediction_table


def load_text(row) -> str:
    """A measurement's load in words."""
    if row["metric"] == "decode_step_ms":
        return f"one iteration of {int(row['batch'])} decodes"
    if row["metric"] == "prefill_step_ms":
        return "one prefill iteration"
    if row["rate_per_s"]:
        return f"Poisson {row['rate_per_s']:g}/s"
    if row["requests"] > row["batch"]:
        return f"{int(row['batch'])} clients, {int(row['requests'])} requests"
    return f"{int(row['batch'])} at once"


def markdown_table() -> str:
    """One line per measurement: set-up, load, measured, predicted, error; then the median error."""
    table = prediction_table()
    lines = ["| GPU | TP | model | weights/KV | load | in/out tokens | metric | measured | predicted | error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        load = load_text(r)
        lines.append(f"| {r['gpu']} | {int(r['tensor_parallel'])} | {r['model']} | {r['quant']}/{r['kv_quant']} | "
                     f"{load} | {int(r['input_tokens'])}/{int(r['output_tokens'])} | {METRICS[r['metric']]} | "
                     f"{r['measured']:,.1f} | {r['predicted']:,.1f} | {round(r['error_pct']) + 0:+d}% |")  # never "-0%"
    lines.append("")
    lines.append(f"Median absolute error {table['error_pct'].abs().median():.0f}% over {len(table)} measurements "
                 f"(largest {table['error_pct'].abs().max():.0f}%).")
    return "\n".join(lines) + "\n"
