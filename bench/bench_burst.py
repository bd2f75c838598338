"""A burst of sessions on one server process, and what a normal visitor gets beside it.

``--sessions N`` websocket sessions open the Lab at the same moment from a process of their own
(``tests/burst_client.py``: Streamlit's own protocol, as a browser speaks it; each session on its own arrival rate, so
that no two share a cached result), hold their connections ``--hold-s`` seconds, then all leave at once. Meanwhile,
from this process, a visitor arrives every ``VISITOR_EVERY_S``: the seconds until the page's HTML came back, until
its websocket was open, and until its page drew its first element (the page, or the line saying it waits for its
turn: ``first_element_s``); and the health check is asked four times a second. After the burst has left, visitors
keep arriving: ``recovered_s`` is how long after the burst left a visitor's whole Lab page (its script finished)
took no more than ``RECOVERED_FACTOR`` times the page before the burst, plus a second (each on a scenario nobody asked
for yet, so that both are computed).

The server starts as the README says (``python -m ui.start``, its settings from ``.streamlit/config.toml``);
``--processes N``: ``python -m ui.serve --processes N`` instead.

Usage: python bench/bench_burst.py [--sessions 200] [--hold-s 60] [--no-read] [--processes N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from burst_client import VISITOR_EVERY_S, VISITOR_RATE_PER_S, Probe, burst, lab_query, visit  # noqa: E402
from conftest import app_server  # noqa: E402
from streamlit_client import open_page  # noqa: E402

LOG_PATH = Path("/tmp/bench_burst_streamlit.log")
HEALTHY_WITHIN_S = 180.0
RECOVERED_FACTOR = 1.5
AFTER_S = 120.0  # how long visitors keep coming after the burst left, at most


def as_started(processes: int | None):
    """The server as its README starts it: ``python -m ui.start`` with nothing but a port (the settings of
    ``.streamlit/config.toml``), or ``python -m ui.serve --processes N``."""
    def command(port: int) -> list[str]:
        if processes is None:
            return [sys.executable, "-m", "ui.start", f"--server.port={port}", "--server.address=127.0.0.1"]
        return [sys.executable, "-m", "ui.serve", "--processes", str(processes), "--port", str(port),
                "--address", "127.0.0.1"]
    return command


def fresh_page_s(url: str, k: int) -> float:
    """Seconds a whole Lab page takes on a scenario nobody asked for yet (the ``k``-th such page)."""
    return open_page(url, lab_query(round(0.3 + 0.01 * k, 2)))[0]


def measure(url: str, sessions: int, hold_s: float, read: bool = True) -> dict:
    fresh_page_s(url, 0)  # the simulator loaded, the pages' code imported
    normal_page_s = fresh_page_s(url, 1)  # a page with nobody else
    probe = Probe(url)
    probe.start()
    started = time.monotonic()
    during = []
    with burst(url, sessions, hold_s, read) as crowd:
        opened = crowd.stdout.readline().split()
        opened_s = time.monotonic() - started
        while time.monotonic() - started < hold_s - VISITOR_EVERY_S:
            during.append(visit(url))
            time.sleep(VISITOR_EVERY_S)
    left = time.monotonic()
    recovered_s, k = None, 2
    while time.monotonic() - left < AFTER_S:
        asked_s = time.monotonic() - left
        page_s, k = fresh_page_s(url, k), k + 1
        if page_s <= RECOVERED_FACTOR * normal_page_s + 1.0:
            recovered_s = asked_s
            break
    probe.stop()
    health = probe.between(started, left)
    return {"sessions": sessions, "sessions_open": int(opened[-1]) if opened else 0, "burst_open_s": opened_s,
            "hold_s": hold_s, "normal_page_s": normal_page_s, "visitors": len(during),
            "visitor_html_s_max": max(v["html_s"] for v in during),
            "visitor_websocket_s_max": max(v["websocket_s"] for v in during),
            "visitor_first_element_s": {"median": statistics.median(v["first_element_s"] for v in during),
                                        "max": max(v["first_element_s"] for v in during)},
            "health_s": {"median": statistics.median(health), "max": max(health)},
            "health_slow_at_s": [round(t - started, 1) for t, s in probe.answers if s > 1.0],
            "recovered_s": recovered_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--hold-s", type=float, default=60.0)
    parser.add_argument("--no-read", action="store_true", help="the burst's sessions never read their messages")
    parser.add_argument("--processes", type=int, help="serve with python -m ui.serve --processes N")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    with app_server(LOG_PATH, command=as_started(args.processes), healthy_within_s=HEALTHY_WITHIN_S) as (url, _):
        figures = measure(url, args.sessions, args.hold_s, not args.no_read)
    figures["processes"] = args.processes or 1
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
