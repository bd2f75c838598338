"""A burst of sessions from a process of its own: ``SESSIONS`` websocket sessions (Streamlit's protocol) open
the Lab at the same moment, each on its own arrival rate so that no two share a cached result, hold their
connections ``HOLD_S`` seconds, then all leave at once (the process ends, and the system closes every connection).

Its own process and one thread (asyncio), at a lower CPU priority (``CLIENT_NICENESS``), so that the visitor timed
beside it (the test, the benchmark) shares neither an interpreter nor much of the cores with the burst's clients:
what is measured is the server. Prints ``opened N`` once every
session has asked for its page (N of them connected), then ``left`` as it ends.

Beside it, ``visit`` times a normal visitor and ``Probe`` the health check (the burst test and
``bench/bench_burst.py``).

Usage: python tests/burst_client.py URL SESSIONS HOLD_S [--no-read]  (``--no-read``: the sessions never read what
the server sends them, as a hostile client may do); python tests/burst_client.py --probe URL (``Probe``'s process)
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, when run as a script

from engine.scenario.config import apply_overrides  # noqa: E402
from streamlit_client import Session, first_element, rerun_message  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402
from ui import state  # noqa: E402

OPEN_TIMEOUT_S = 60.0
VISITOR_EVERY_S = 3.0  # how often a visitor arrives beside the burst
VISITOR_RATE_PER_S = 0.5  # the visitor's own scenario: one no session of the burst asks for
HEALTH_EVERY_S = 0.25
GIVE_UP_S = 60.0  # a visitor's step that takes longer is recorded as this
# The burst's process runs at this much lower CPU priority: on this machine its clients share the server's cores (a
# hostile visitor's would not), and connecting 200 of them took about a core for two seconds.
CLIENT_NICENESS = 10


def lab_query(rate_per_s: float) -> str:
    """The Lab's link for the default scenario at ``rate_per_s``."""
    data = apply_overrides(state.default_data(), {"workload.arrival.rate_per_s": rate_per_s})
    return f"{state.QUERY_KEY}={state.encode(data)}"


def session_rate(k: int) -> float:
    """Session ``k``'s arrival rate: each its own, all near the default's."""
    return round(state.default_data()["workload"]["arrival"]["rate_per_s"] * (0.6 + 0.002 * k), 3)


def open_burst(url: str, sessions: int, read: bool) -> list[Session]:
    """``sessions`` sessions asking for the Lab at once, not waiting for their pages."""
    opened: list[Session | None] = [None] * sessions

    def one(k: int) -> None:
        try:
            opened[k] = Session(url, open_timeout_s=OPEN_TIMEOUT_S)
            opened[k].run(lab_query(session_rate(k)), wait=False)
            if read:
                opened[k].drain()
        except Exception:  # noqa: BLE001 - a refused or timed-out session is counted, not fatal
            pass

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [s for s in opened if s is not None]


def timed_get(url: str, timeout_s: float = GIVE_UP_S) -> float:
    """Seconds until ``url`` answered (``timeout_s`` when it did not)."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            response.read()
    except OSError:
        return timeout_s
    return time.monotonic() - started


def visit(url: str) -> dict:
    """One normal visitor: the page's HTML, its websocket, its first element (seconds from arriving)."""
    started = time.monotonic()
    html_s = timed_get(url + "/")
    try:
        session = Session(url, open_timeout_s=GIVE_UP_S)
    except Exception:  # noqa: BLE001 - no websocket at all within the time: that is the figure
        return {"html_s": html_s, "websocket_s": GIVE_UP_S, "first_element_s": GIVE_UP_S}
    websocket_s = time.monotonic() - started
    try:
        element_s = first_element(session, lab_query(VISITOR_RATE_PER_S), GIVE_UP_S)
        first_s = (time.monotonic() - started) if element_s is not None else GIVE_UP_S
    finally:
        session.close()
    return {"html_s": html_s, "websocket_s": websocket_s, "first_element_s": first_s}


class Probe:
    """Asks the health check every ``HEALTH_EVERY_S`` from a small process of its own (``--probe URL``), so that the
    test process's own pauses (its garbage collection over a whole suite's objects, the visitor it times beside)
    never count against the server; keeps (time, seconds) of each answer, on the machine's monotonic clock."""

    def __init__(self, url: str):
        self.url, self.answers, self.process = url, [], None

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--probe", self.url],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def stop(self) -> None:
        """Ends the probe and reads every answer it gave."""
        self.process.terminate()
        out, _ = self.process.communicate(timeout=30)
        self.answers = [(float(t), float(s)) for t, s in (line.split() for line in out.splitlines() if line)]

    def between(self, start: float, end: float) -> list[float]:
        return [s for t, s in self.answers if start <= t <= end]


def probe_forever(url: str) -> None:
    """The probe's process: one line "time seconds" per health check, until it is ended."""
    while True:
        asked = time.monotonic()
        print(asked, timed_get(url + "/_stcore/health"), flush=True)
        time.sleep(HEALTH_EVERY_S)


@contextmanager
def burst(url: str, sessions: int, hold_s: float, read: bool = True) -> Iterator[subprocess.Popen]:
    """The burst (``tests/burst_client.py``) under way; waits until it has left."""
    process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), url, str(sessions),
                                str(hold_s), *([] if read else ["--no-read"])], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, preexec_fn=lambda: os.nice(CLIENT_NICENESS))
    try:
        yield process
    finally:
        process.wait(timeout=hold_s + 120)


async def hold_burst(url: str, sessions: int, hold_s: float, read: bool) -> None:
    """The burst itself, on one thread (asyncio): a light client, so that the cores it shares with the server on this
    machine go to the server (200 threads of the blocking client took most of a core as they connected)."""
    started = time.monotonic()
    stream = url.replace("http", "ws", 1) + "/_stcore/stream"
    asks = [rerun_message(lab_query(session_rate(k))).SerializeToString() for k in range(sessions)]  # made first

    async def one(k: int):
        try:
            socket = await connect(stream, subprotocols=["streamlit"], max_size=None, open_timeout=OPEN_TIMEOUT_S,
                                   ping_interval=None)
            await socket.send(asks[k])
        except Exception:  # noqa: BLE001 - a refused or timed-out session is counted, not fatal
            return None
        return socket

    async def drain(socket) -> None:
        async for _ in socket:
            pass

    opened = [s for s in await asyncio.gather(*(one(k) for k in range(sessions))) if s is not None]
    print(f"opened {len(opened)}", flush=True)
    readers = [asyncio.create_task(drain(s)) for s in opened] if read else []
    await asyncio.sleep(max(0.0, hold_s - (time.monotonic() - started)))
    print("left", flush=True)
    del readers
    os._exit(0)  # every connection closed at once by the system, as a burst of tabs closing


def main(argv: list[str]) -> None:
    if argv[:1] == ["--probe"]:
        probe_forever(argv[1])
        return
    asyncio.run(hold_burst(argv[0], int(argv[1]), float(argv[2]), read="--no-read" not in argv))


if __name__ == "__main__":
    main(sys.argv[1:])
