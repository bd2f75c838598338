"""How fast the app server answers many sessions at once, without browsers rendering the pages.

``bench_browser.py --sessions N`` runs N Chromium pages on the same cores as the server, and on a 2-core
machine the browsers take most of the CPU (it reports both). This script speaks Streamlit's own protocol
instead (``tests/streamlit_client.py``, as the browser does) from N light clients, so that the figures are the
server's: N sessions open the Lab at once, each on the default preset
at its own arrival rate (the same rates as ``bench_browser.py``), then all move their rate slider one step
up at once; it reports the p50 and the slowest seconds until each script run finished, and the CPU seconds
the server used.

``--processes N`` serves the app with ``python -m ui.serve --processes N`` (N Streamlit processes behind one
address, sticky by cookie) instead of one ``streamlit run``; each protocol session keeps its own cookie, as a
browser does. ``--cores K`` pins the server (and every process it starts) to cores 0..K-1 with
``os.sched_setaffinity``, so that 2 and 8 cores can be compared on one machine (the clients are not pinned).

Usage: python bench/bench_sessions.py [--sessions 20] [--processes N] [--cores K] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from conftest import app_server  # noqa: E402
from engine.scenario.config import apply_overrides  # noqa: E402
from streamlit_client import Session, all_at_once, open_page  # noqa: E402
from ui import state  # noqa: E402
from ui.serve import COOKIE, streamlit_command  # noqa: E402

RATE_LABEL = "Arrival rate (req/s)"
LOG_PATH = Path("/tmp/bench_sessions_streamlit.log")
HEALTHY_WITHIN_S = 180.0


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


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and all its descendants (the launcher and its Streamlit processes)."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:  # the process ended meanwhile
            continue
        children.setdefault(parent, []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += process_cpu_s(current)
        except OSError:
            continue
        todo += children.get(current, [])
    return total


def browser_cookies(url: str) -> dict[str, str]:
    """The cookies a new browser gets on its first request (behind ui.serve: the process it is pinned to)."""
    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=30) as response:
        pairs = [line.split(";", 1)[0] for line in response.headers.get_all("Set-Cookie") or []]
    return {"Cookie": "; ".join(pairs)} if pairs else {}


def pin_to(cores: int | None):
    """A ``preexec_fn`` that pins the child to cores 0..cores-1 (None: no pinning)."""
    return None if cores is None else (lambda: os.sched_setaffinity(0, range(cores)))


@contextmanager
def pinned_server(processes: int | None, cores: int | None):
    """The server under test: (url, pid) of ``ui.serve --processes N`` or of one ``streamlit run app.py``, both
    pinned to ``cores`` when given."""
    def launcher(port: int) -> list[str]:
        return [sys.executable, "-m", "ui.serve", "--processes", str(processes), "--port", str(port),
                "--address", "127.0.0.1"]

    with app_server(LOG_PATH, command=streamlit_command if processes is None else launcher,
                    preexec_fn=pin_to(cores), healthy_within_s=HEALTHY_WITHIN_S) as (url, process):
        yield url, process.pid


def first_pages_s(url: str, processes: int | None) -> float:
    """Open one page on every server process (each loads the compiled simulator once): the first one's seconds."""
    if processes is None:
        return open_page(url)[0]
    return [open_page(url, headers={"Cookie": f"{COOKIE}={i}"})[0] for i in range(processes)][0]


def measure(url: str, sessions: int) -> dict:
    base = state.default_data()
    rate = base["workload"]["arrival"]["rate_per_s"]
    clients = [Session(url, headers=browser_cookies(url)) for _ in range(sessions)]
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
    parser.add_argument("--processes", type=int, help="serve with python -m ui.serve --processes N")
    parser.add_argument("--cores", type=int, help="pin the server to cores 0..K-1 (os.sched_setaffinity)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    with pinned_server(args.processes, args.cores) as (url, pid):
        first_s = first_pages_s(url, args.processes)  # each process's first page (loads the compiled simulator)
        cpu_before = tree_cpu_s(pid)
        s = measure(url, args.sessions)
        s["server_cpu_s"], s["first_page_s"] = tree_cpu_s(pid) - cpu_before, first_s
    s["processes"], s["server_cores"] = args.processes or 1, args.cores or os.cpu_count()
    how = (f"python -m ui.serve, {s['processes']} processes" if args.processes else "one streamlit run")
    pinned = (f"pinned to cores 0-{args.cores - 1} by os.sched_setaffinity" if args.cores
              else f"on all {os.cpu_count()} cores")
    print(f"Server: {how}, {pinned}. The server's first page: {s['first_page_s']:.1f} s. {s['sessions']} sessions "
          f"at once, no browser: page load p50 {s['load_p50_s']:.1f} s (slowest {s['load_max_s']:.1f} s); a rate "
          f"change p50 {s['change_p50_s']:.1f} s (slowest {s['change_max_s']:.1f} s); the server used "
          f"{s['server_cpu_s']:.1f} CPU s")
    if args.json:
        Path(args.json).write_text(json.dumps(s, indent=2))


if __name__ == "__main__":
    main()
