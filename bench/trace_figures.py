"""The trace readers and stream statistics on the full public traces, against the figures published with them
(../shared/traces/README.md): rows, time span, mean lengths, rate, inter-arrival and per-minute burstiness and the
output p99. The tests check the same code on excerpts (tests/fixtures/traces); this checks the whole files.

    python bench/trace_figures.py [--traces ../shared/traces]

Prints one line per figure and exits 1 when one is off (2 when the traces are not there).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.sim.trace_stats import trace_statistics  # noqa: E402
from engine.sim.traces import read_trace  # noqa: E402

# file, format, then the published figures: rows, span (s), mean prompt and output tokens, rate (req/s),
# inter-arrival cv, per-minute cv, output p99 (tokens)
PUBLISHED = [
    ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", "azure", 8819, 3436, 2048, 27.9, 2.57, 13.15, 1.03, 251),
    ("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure", 19366, 3502, 1155, 211, 5.53, 1.09, 0.25, 601),
    ("mooncake_fast25/conversation_trace.jsonl", "mooncake", 12031, None, 12035, 343, 3.40, 3.03, 0.12, 1119),
    ("mooncake_fast25/synthetic_trace.jsonl", "mooncake", 3993, None, 15325, 149, None, None, None, None),
]
# How close each figure must be (absolute, or relative where marked): the published ones are rounded, and our
# minute windows drop the trailing partial minute where the published figure may not.
TOLERANCE = {"rows": (0, False), "span_s": (1.0, False), "prompt_mean": (0.001, True), "output_mean": (0.003, True),
             "rate_per_s": (0.01, False), "iat_cv": (0.01, False), "minute_cv": (0.05, False),
             "output_p99": (0.005, True)}


def check(folder: Path) -> list[tuple[str, str, float, float, bool]]:
    """(file, figure, published, ours, within tolerance) for every published figure."""
    lines = []
    for path, fmt, *published in PUBLISHED:
        trace = read_trace(folder / path, fmt)
        stats = trace_statistics(trace.arrival_s, trace.prompt_tokens, trace.output_tokens)
        ours = {"rows": len(trace.arrival_s), **stats}
        for name, value in zip(TOLERANCE, published):
            if value is None:
                continue
            bound, relative = TOLERANCE[name]
            ok = math.isclose(ours[name], value, rel_tol=bound) if relative else abs(ours[name] - value) <= bound
            lines.append((path, name, value, ours[name], ok))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces",
                        help="the folder holding the public traces (default: ../shared/traces beside the checkout)")
    folder = parser.parse_args().traces
    if not folder.is_dir():
        print(f"error: traces not found at {folder}: put them there or pass --traces FOLDER", file=sys.stderr)
        return 2
    lines = check(folder)
    for path, name, value, ours, ok in lines:
        print(f"{'ok ' if ok else 'OFF'} {path:50} {name:12} published {value:>10,g}  ours {ours:>12,.6g}")
    off = sum(not ok for *_, ok in lines)
    print(f"{len(lines) - off} of {len(lines)} figures match")
    return 1 if off else 0


if __name__ == "__main__":
    sys.exit(main())
