"""Independent simulations on all local cores: the runs behind one page (policy comparison, load curves,
heatmaps, fleet shapes, the sizing search) and the CLI's sweeps.

Threads, not processes: the compiled loop releases the interpreter (``kernel.run_nb`` is ``nogil``), so runs
overlap there, and the Python around each run (drawing the requests, summarising them) takes turns. One pool
per process, as many threads as the cores this process may use, shared by every caller (each session of the
app queues its runs on the same cores, none oversubscribes them). Each run is deterministic and shares
nothing with the others, so the results are those of running them one after another, in the order asked.
Never call ``run_all`` from inside a pooled task (it would wait on the pool it occupies).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable, Optional, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_lock = threading.Lock()
_pool: Optional[ThreadPoolExecutor] = None


def cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def pool() -> ThreadPoolExecutor:
    """The process's shared pool of ``cores()`` threads (made on first use)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=cores(), thread_name_prefix="simulate")
        return _pool


def run_all(fn: Callable[[T], R], items: Sequence[T], progress: Callable[[int, int], None] | None = None,
            timeout_s: float | None = None) -> list[Optional[R]]:
    """``[fn(item) for item in items]`` on the pool, in the order of ``items``. ``progress(done, total)`` is
    called in the caller's thread as runs finish. After ``timeout_s`` the runs not yet started are cancelled
    and those not finished are left to finish in the background: their places hold None. A run that raises
    raises here (after the others are cancelled)."""
    futures: list[Future] = [pool().submit(fn, item) for item in items]
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pending = set(futures)
    try:
        while pending:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            finished, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
            for future in finished:
                future.result()  # raise a run's error now
            if progress is not None and finished:
                progress(len(futures) - len(pending), len(futures))
    finally:
        for future in pending:
            future.cancel()
    return [f.result() if f.done() and not f.cancelled() else None for f in futures]
