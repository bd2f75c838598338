"""The app's long work stops when nobody waits for it: a page's job ends with its visitor's session, and every job
with the server.

``page_job`` runs a block as an ``engine.sim.stopping`` job whose ``alive`` test asks Streamlit whether the session that
started it is still connected (a closed tab disconnects it at once), so the runs it started on every core stop
within a slice of the compiled loop after the visitor leaves. ``watch_server`` starts, once per server process, a
thread that marks the process as stopping (``stopping.stop_everything``) as soon as Streamlit's runtime begins to
stop (SIGTERM, SIGINT): every job and every run then ends at its next check. It also asks Python to end the process
right after its other exit handlers, without its own teardown (freeing every cached result, one object at a time,
took a second and more): nothing is left to save (results are caches; uploads and calibrations are written whole
before they are named). That exit still waited for every page thread to reach its next stop point (4.6-7.3 s with 40
busy sessions), so a stop signal also calls ``stop_soon`` (``ui.start``): the process ends ``STOP_WITHIN_S`` after the
signal at the latest, whatever it was running.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from typing import Callable, Iterator

from streamlit import runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from engine.sim import stopping

WATCH_EVERY_S = 0.1  # how often the watcher looks at the runtime's state
STOP_WITHIN_S = 0.5  # from a stop signal to the process's end, at the latest
_watching = threading.Lock()  # held for good once this process's watcher has started


def _server():
    """Streamlit's runtime when this process serves the app; None otherwise (a test's AppTest stands a mock in its
    place, whose state is no ``RuntimeState``)."""
    if not runtime.exists():
        return None
    server = runtime.get_instance()
    return server if isinstance(server.state, runtime.RuntimeState) else None


def session_alive() -> Callable[[], bool] | None:
    """A test that this page's session is still connected; None outside a running server."""
    ctx, server = get_script_run_ctx(suppress_warning=True), _server()
    if ctx is None or server is None:
        return None
    session_id = ctx.session_id
    return lambda: server.is_active_session(session_id)


@contextlib.contextmanager
def page_job(what: str) -> Iterator[stopping.Job]:
    """The block as a job (``stopping.job``) that stops when this page's session goes."""
    with stopping.job(what, alive=session_alive()) as job:
        yield job


@contextlib.contextmanager
def page_run() -> Iterator[stopping.Job]:
    """One run of a page's script as a job (stopping with its visitor's session), cancelled when the run ends: the
    work it started and did not wait for (``runner.run_ahead``) stops then, at its next check, also when the
    visitor's next change ends the run early. Every job the page makes is its child."""
    with stopping.job("this page", alive=session_alive()) as job:
        try:
            yield job
        finally:
            job.cancel("the page changed before it was done")


def _exit_now() -> None:
    """End the process at once, before the exit handlers registered earlier and Python's teardown (the one that
    matters, logging's, runs here)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _watch(server) -> None:
    """When the runtime starts to stop: mark the process as stopping, and skip Python's teardown at its exit."""
    while server.state not in (runtime.RuntimeState.STOPPING, runtime.RuntimeState.STOPPED):
        time.sleep(WATCH_EVERY_S)
    stopping.stop_everything()
    atexit.register(_exit_now)  # exit handlers run last registered first


def watch_server() -> bool:
    """Start the watcher of this server process (once: a module's state, which no visitor's message can clear);
    False outside a running server."""
    server = _server()
    if server is None:
        return False
    if _watching.acquire(blocking=False):
        threading.Thread(target=_watch, args=(server,), name="stop-watcher", daemon=True).start()
    return True


def stop_soon() -> None:
    """A stop signal came: every job and run stops at its next check, and the process ends ``STOP_WITHIN_S`` from
    now whatever is still running (``_exit_now``), unless it has ended before."""
    stopping.stop_everything()
    timer = threading.Timer(STOP_WITHIN_S, _exit_now)
    timer.daemon = True
    timer.start()
