"""How fast the app server answers many sessions at once, without browsers rendering the pages.

``bench_browser.py --sessions N`` runs N Chromium pages on the same cores as the server, and on a 2-core
machine the browsers take most of the CPU (it reports both). This script speaks Streamlit's own protocol
instead (``tests/streamlit_client.py``, as the browser does) from N light clients, so that the figures are the
server's: N sessions open the Lab at once, each on the default preset
at its own arrival rate (the same rates as ``bench_browser.py``), then all move their rate slider one step
up at once; it reports the p50 and the slowest seconds until each script run finished, and the CPU seconds
the server used.

Usage: python bench/bench_sessions.py [--sessions 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from conftest import app_server  # noqa: E402
from engine.scenario.config import apply_overrides  # noqa: E402
from streamlit_client import Session, all_at_once, open_page  # noqa: E402
from ui import state  # noqa: E402

RATE_LABEL = "Arrival rate (req/s)"


def session_rate(base_rate: float, k: int) -> float:
    """The arrival rate session ``k`` opens on (as ``bench_browser.py`` does)."""
    return round(base_rate * (0.6 + 0.04 * k), 2)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its finished children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def command_cpu_s(word: str) -> float:
    """CPU seconds of every running process whose command line contains ``word`` (a browser's processes)."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if word.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                total += process_cpu_s(int(pid))
        except OSError:  # the process ended meanwhile
            pass
    return total


def measure(url: str, sessions: int) -> dict:
    base = state.default_data()
    rate = base["workload"]["arrival"]["rate_per_s"]
    clients = [Session(url) for _ in range(sessions)]
    rates = [session_rate(rate, k) for k in range(sessions)]
    queries = [f"{state.QUERY_KEY}={state.encode(apply_overrides(base, {'workload.arrival.rate_per_s': r}))}"
               for r in rates]
    loads = all_at_once([lambda c=c, q=q: c.run(q)[0] for c, q in zip(clients, queries)])
    changes = all_at_once([lambda c=c: c.step_slider(RATE_LABEL) for c in clients])
    for client in clients:
        client.close()
    return {"sessions": sessions, "load_p50_s": statistics.median(loads), "load_max_s": max(loads),
            "change_p50_s": statistics.median(changes), "change_max_s": max(changes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    with app_server(Path("/tmp/bench_sessions_streamlit.log")) as (url, process):
        first_s = open_page(url)[0]  # the server's first page (loads the compiled simulator)
        cpu_before = process_cpu_s(process.pid)
        s = measure(url, args.sessions)
        s["server_cpu_s"], s["first_page_s"] = process_cpu_s(process.pid) - cpu_before, first_s
    print(f"The server's first page: {s['first_page_s']:.1f} s. {s['sessions']} sessions at once, no browser: page "
          f"load p50 {s['load_p50_s']:.1f} s (slowest {s['load_max_s']:.1f} s); a rate change p50 "
          f"{s['change_p50_s']:.1f} s (slowest {s['change_max_s']:.1f} s); the server used "
          f"{s['server_cpu_s']:.1f} CPU s "
          f"on {os.cpu_count()} cores")
    if args.json:
        Path(args.json).write_text(json.dumps(s, indent=2))


if __name__ == "__main__":
    main()
