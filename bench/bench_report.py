"""Time of the report on the article preset: the plan (every GPU with an offer, fifo and priority, interactive TTFT
p99 at most 1 s and no offline wait over 60 s), then the HTML and the PDF (goal: the report under 10 s on 2 cores).

Usage: python bench/bench_report.py [--out FOLDER]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.decide.planner import Question, plan  # noqa: E402
from engine.decide.report import report_html, write_pdf  # noqa: E402
from engine.decide.targets import parse_target  # noqa: E402
from engine.scenario.config import read_toml  # noqa: E402
from engine.sim.parallel import cores  # noqa: E402
from engine.sim.simulate import warm_up  # noqa: E402

SCENARIO = REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="bench-report-")))
    args = parser.parse_args()
    warm_up()
    data = read_toml(SCENARIO)
    question = Question((parse_target("interactive.ttft_p99_ms=1000"), parse_target("offline.longest_wait_ms=60000")),
                        policies=("fifo", "priority"))
    started = time.perf_counter()
    answer = plan(data, question)
    planned = time.perf_counter()
    text = report_html(data, question, answer, None, time.strftime("%Y-%m-%d %H:%M %Z"))
    (args.out / "plan.html").write_text(text, encoding="utf-8")
    written = time.perf_counter()
    write_pdf(text, args.out / "plan.pdf")
    printed = time.perf_counter()
    print(f"{SCENARIO.name} on {cores()} cores: plan {planned - started:.1f} s "
          f"({answer['run']['evaluations']:,} runs), "
          f"HTML {written - planned:.2f} s ({len(text) / 2 ** 20:.1f} MiB), PDF {printed - written:.1f} s "
          f"({(args.out / 'plan.pdf').stat().st_size / 2 ** 10:,.0f} KiB); report {printed - planned:.1f} s; "
          f"files in {args.out}")


if __name__ == "__main__":
    main()
