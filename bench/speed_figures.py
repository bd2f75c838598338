"""The speed figures the manual shows as its latest, measured again in one go and written to docs/speed_figures.md.

Runs, one after the other on this machine (nothing else should run meanwhile): the engine (``bench_engine.py``,
10,000 and 100,000 requests of the example scenario), a fully cached Lab page (``bench_lab_rerun.py``), one
visitor's changes (``bench_changes.py``) and ``--sessions`` protocol sessions changing their rate at once
(``bench_sessions.py``), with one server process and with ``python -m ui.serve`` on every core. The page it writes
names the date, the commit (with "+ uncommitted changes" when the checkout has any) and the machine's cores, so a
figure is never read without when and on what it was measured. Takes about two minutes on 2 cores.

Usage: python bench/speed_figures.py [--sessions 30] [--out docs/speed_figures.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "speed_figures.md"


def bench(script: str, *args: str) -> dict | list:
    """Run ``bench/<script>`` with ``args`` and ``--json``: what it wrote."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "figures.json"
        subprocess.run([sys.executable, str(REPO / "bench" / script), *args, "--json", str(out)], cwd=REPO,
                       check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def commit() -> str:
    """The checkout's commit, and whether it has uncommitted changes."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.strip()
    return f"{head} + uncommitted changes" if dirty else head


def page(figures: dict, when: str, where: str, cores: int) -> str:
    """The Markdown page of ``figures`` (the benches' JSON, by name)."""
    engine_rows = "\n".join(f"| {r['requests']:,} | {r['wall_s']:.3f} | {r['requests_per_s']:,.0f} |"
                            for r in figures["engine"]["sizes"])
    change_rows = "\n".join(f"| {r['change']} | {r['cards_s']:.2f} | {r['full_cards_s']:.2f} | {r['page_s']:.2f} |"
                            for r in figures["changes"])
    session_rows = "\n".join(
        f"| {label} | {s['load_p50_s']:.1f} | {s['load_max_s']:.1f} | {s['change_p50_s']:.1f} | "
        f"{s['change_max_s']:.1f} | {s['server_cpu_s']:.1f} |" for label, s in figures["sessions"])
    rerun = figures["rerun"]
    sessions = figures["sessions"][0][1]["sessions"]
    return f"""# Speed: the latest figures

Written by `python bench/speed_figures.py` on {when}, commit {where}, on a machine with {cores} usable cores, each
benchmark after the other. How each is measured, and the goals: [Speed](speed.md).

## The engine

`bench/bench_engine.py`: 10,000 and 100,000 requests of `data/scenarios/example.toml`, `simulate()` whole, best
of three (goal for 100,000: under 0.2 s).

| requests | wall (s) | requests/s |
|---:|---:|---:|
{engine_rows}

## A cached Lab page

`bench/bench_lab_rerun.py`: the server's time for a Lab page whose runs are all cached (AppTest, the default
preset): best {rerun['best_s']:.3f} s, median {rerun['median_s']:.3f} s of {len(rerun['reruns_s'])} reruns (goal:
under 0.15 s).

## One visitor's changes

`bench/bench_changes.py`: one protocol session, the Lab on the default preset (goals: cards under 0.3 s, the page
under 1 s).

| change | first KPI cards (s) | the full run's cards (s) | whole page (s) |
|---|---:|---:|---:|
{change_rows}

## {sessions} sessions at once

`bench/bench_sessions.py --sessions {sessions}`: protocol sessions open the Lab at once, then all move their rate
one step (goal for a rate change: p50 under 3 s on 2 cores, under 1 s on 8).

| server | page load p50 (s) | slowest (s) | rate change p50 (s) | slowest (s) | CPU s: server |
|---|---:|---:|---:|---:|---:|
{session_rows}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    figures = {"engine": bench("bench_engine.py", "--sizes", "10000", "100000"),
               "rerun": bench("bench_lab_rerun.py"),
               "changes": bench("bench_changes.py")}
    figures["sessions"] = [("one `streamlit run`", bench("bench_sessions.py", "--sessions", str(args.sessions)))]
    if cores > 1:
        figures["sessions"].append((f"`python -m ui.serve`, {cores} processes", bench(
            "bench_sessions.py", "--sessions", str(args.sessions), "--processes", str(cores))))
    when = datetime.date.today().isoformat()
    args.out.write_text(page(figures, when, commit(), cores))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
