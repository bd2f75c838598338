"""Server time of a fully cached Lab page: the rerun cost a visitor pays when nothing needs simulating.

Opens the Lab (pages/lab.py) on the default scenario with ``streamlit.testing.v1.AppTest`` (as tests/test_app.py
does), runs it once (simulations, comparisons and curves fill their caches), then times ``--reruns`` further runs
with nothing changed and reports the best and the median in seconds. With ``--profile`` one more rerun runs under
cProfile and the top rows by cumulative and by own time are listed, our own modules (ui/, pages/, engine/) first,
then everything.

AppTest runs the script in this process, so the figures are the server's script time (widgets, caches, figure
building and serialisation), without the websocket or the browser. AppTest compiles the scripts again on every run
(a new ``ScriptCache`` each time) where a server compiles them once; this script shares one compiled copy across
runs as the server does (``--fresh-bytecode``: AppTest's own way, a few hundredths of a second more per run).

Usage: python bench/bench_lab_rerun.py [--reruns 7] [--profile] [--top 25] [--fresh-bytecode] [--json PATH]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import conftest  # noqa: E402,F401 - sets the test trace store before the app imports ui.trace_store
import streamlit.testing.v1.app_test as app_test  # noqa: E402
import streamlit.testing.v1.local_script_runner as local_script_runner  # noqa: E402
from streamlit.runtime.scriptrunner.script_cache import ScriptCache  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402
from streamlit.testing.v1.local_script_runner import LocalScriptRunner  # noqa: E402

OWN = ("/ui/", "/pages/", "/engine/")


def share_compiled_scripts() -> None:
    """Every AppTest run reads the scripts' bytecode from one cache, as a server's runs do."""
    shared = ScriptCache()
    app_test.ScriptCache = local_script_runner.ScriptCache = lambda: shared


def opened_lab() -> AppTest:
    """The Lab on the default scenario, run once so that every cache holds this page's results."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=600)
    at.run()
    assert not at.exception, at.exception
    return at


def rerun_times(at: AppTest, reruns: int) -> list[float]:
    """Seconds of each of ``reruns`` runs with nothing changed."""
    times = []
    for _ in range(reruns):
        start = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - start)
        assert not at.exception, at.exception
    return times


def own_rows(stats: pstats.Stats, sort: str, top: int) -> str:
    """The ``top`` rows of ``stats`` by ``sort`` whose file is one of ours."""
    out = io.StringIO()
    stats.stream = out
    stats.sort_stats(sort).print_stats("|".join(OWN), top)
    return out.getvalue()


def profiled_run(at: AppTest) -> cProfile.Profile:
    """One rerun with cProfile on in the script's own thread (AppTest runs the page in a thread of its own, which a
    profiler enabled here would not see)."""
    prof = cProfile.Profile()
    original = LocalScriptRunner._run_script_thread

    def run_profiled(runner):
        prof.enable()
        try:
            original(runner)
        finally:
            prof.disable()

    LocalScriptRunner._run_script_thread = run_profiled
    try:
        at.run()
    finally:
        LocalScriptRunner._run_script_thread = original
    return prof


def profile(at: AppTest, top: int) -> None:
    """One more rerun under cProfile: our modules' top rows by cumulative and by own time, then everyone's."""
    prof = profiled_run(at)
    for sort in ("cumulative", "tottime"):
        print(f"--- our modules, top {top} by {sort} ---")
        print(own_rows(pstats.Stats(prof), sort, top))
    for sort in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(sort).print_stats(top)
        print(f"--- everything, top {top} by {sort} ---")
        print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reruns", type=int, default=7)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--fresh-bytecode", action="store_true", help="compile the scripts on every run (AppTest)")
    parser.add_argument("--json", help="also write the rerun times to this file")
    args = parser.parse_args()
    if not args.fresh_bytecode:
        share_compiled_scripts()
    at = opened_lab()
    times = rerun_times(at, args.reruns)
    print(f"fully cached Lab rerun, {args.reruns} runs: best {min(times):.3f} s, median "
          f"{statistics.median(times):.3f} s ({', '.join(f'{t:.3f}' for t in times)})")
    if args.json:
        Path(args.json).write_text(json.dumps({"reruns_s": times, "best_s": min(times),
                                               "median_s": statistics.median(times)}, indent=2))
    if args.profile:
        profile(at, args.top)


if __name__ == "__main__":
    main()
