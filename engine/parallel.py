"""Independent simulations on all local cores, or on a Dask cluster when given one: the runs behind one page
(policy comparison, load curves, heatmaps, fleet shapes), the planner, the tuner and the CLI's sweeps.

Local: threads, not processes. The compiled loop releases the interpreter (``kernel.run_nb`` is ``nogil``), so
runs overlap there, and the Python around each run (drawing the requests, summarising them) takes turns. One
pool per process, as many threads as the cores this process may use, shared by every caller (each session of
the app queues its runs on the same cores, none oversubscribes them).

Dask: inside ``dask_cluster(...)`` (an embedded ``LocalCluster`` of worker processes, or an existing scheduler's
workers) every simulation goes to a worker as ``simulate.run_summary(data, origin)``: plain data in, plain data
out. The searches around the runs (a planner's bisections, a tuner's batches) stay in this process, on a pool
as wide as the cluster's worker threads. The cluster is a context variable, so one page or command using it
leaves every other session on the local cores. Workers must see the same files as this process (the code, the
hardware tables, a replayed trace, a saved calibration): on one machine they do; on others, install the same
checkout at the same path.

Each run is deterministic and shares nothing with the others, so the results are those of running them one
after another, in the order asked, wherever they ran. Never call ``run_all`` from inside a pooled task (it
would wait on the pool it occupies).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar

from .errors import ScenarioError, excerpt
from .origin import Origin
from .simulate import run_summary
from .summary import Summary

T = TypeVar("T")
R = TypeVar("R")

CONNECT_TIMEOUT_S = 20  # to reach a scheduler and see its first worker
WORKERS_RANGE = (1, 256)  # worker processes of an embedded cluster

_lock = threading.Lock()
_pool: Optional[ThreadPoolExecutor] = None


@dataclass
class Cluster:
    """A Dask client in use: where its runs go, how many worker threads it has, and the pool that drives them."""

    client: Any
    threads: int
    where: str
    pool: ThreadPoolExecutor


_cluster: contextvars.ContextVar[Optional[Cluster]] = contextvars.ContextVar("cluster", default=None)


def cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def workers() -> int:
    """How many runs go at once: the cluster's worker threads inside ``dask_cluster``, else the local cores."""
    cluster = _cluster.get()
    return cluster.threads if cluster is not None else cores()


def where() -> str:
    """Where the runs go, in words."""
    cluster = _cluster.get()
    return cluster.where if cluster is not None else f"{cores()} local cores"


def pool() -> ThreadPoolExecutor:
    """The pool of the current runs: the cluster's inside ``dask_cluster``, else the process's shared pool of
    ``cores()`` threads (made on first use)."""
    global _pool
    cluster = _cluster.get()
    if cluster is not None:
        return cluster.pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=cores(), thread_name_prefix="simulate")
        return _pool


def run_all(fn: Callable[[T], R], items: Sequence[T], progress: Callable[[int, int], None] | None = None,
            timeout_s: float | None = None) -> list[Optional[R]]:
    """``[fn(item) for item in items]`` on the pool, in the order of ``items`` (each in the caller's context, so a
    cluster in use stays in use). ``progress(done, total)`` is called in the caller's thread as runs finish.
    After ``timeout_s`` the runs not yet started are cancelled and those not finished are left to finish in the
    background: their places hold None. A run that raises raises here (after the others are cancelled)."""
    executor = pool()
    futures: list[Future] = [executor.submit(contextvars.copy_context().run, fn, item) for item in items]
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


def simulate_summary(data: dict, origin: Origin = Origin()) -> Summary:
    """One run's summary, on a Dask worker inside ``dask_cluster`` (cancelled there if this thread is
    interrupted), else here."""
    cluster = _cluster.get()
    if cluster is None:
        return run_summary(data, origin)
    future = cluster.client.submit(run_summary, data, origin, pure=False)
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def summaries(datas: Sequence[dict], origin: Origin = Origin(),
              progress: Callable[[int, int], None] | None = None) -> list[Summary]:
    """The summaries of many scenarios, in their order: on the local pool, or all at once on the cluster (the
    ones not finished cancelled if this thread is interrupted)."""
    cluster = _cluster.get()
    if cluster is None:
        return run_all(lambda data: run_summary(data, origin), datas, progress)
    from distributed import as_completed
    futures = [cluster.client.submit(run_summary, data, origin, pure=False) for data in datas]
    try:
        for done, _ in enumerate(as_completed(futures, loop=cluster.client.loop), start=1):
            if progress is not None:
                progress(done, len(futures))
        return [f.result() for f in futures]
    except BaseException:
        cluster.client.cancel(futures)
        raise


@contextlib.contextmanager
def dask_cluster(scheduler: str | None = None, local_workers: int = 0,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S) -> Iterator[Optional[Cluster]]:
    """Send this context's runs to the Dask scheduler at ``scheduler`` (``tcp://host:8786``), or to an embedded
    cluster of ``local_workers`` worker processes (one thread each) started here and stopped after; with
    neither, the runs stay on the local cores. ``ScenarioError`` when the scheduler cannot be reached."""
    if not scheduler and not local_workers:
        yield None
        return
    from distributed import Client, LocalCluster
    local, client = None, None
    try:
        if scheduler:
            client = Client(scheduler, timeout=f"{connect_timeout_s}s", set_as_default=False)
            what = f"the Dask scheduler at {scheduler}"
        else:
            low, high = WORKERS_RANGE
            if not low <= local_workers <= high:
                raise ScenarioError(f"workers = {local_workers} must be from {low} to {high}")
            local = LocalCluster(n_workers=local_workers, threads_per_worker=1, processes=True,
                                 dashboard_address=None, silence_logs=logging.ERROR)
            client = Client(local, set_as_default=False)
            what = "an embedded Dask cluster"
        client.wait_for_workers(1, timeout=connect_timeout_s)
    except (OSError, TimeoutError, ValueError) as exc:
        if client is not None:
            client.close()
        if local is not None:
            local.close()
        target = f"the Dask scheduler at {excerpt(scheduler)}" if scheduler else "the embedded Dask cluster"
        raise ScenarioError(f"could not reach {target} with a worker within {connect_timeout_s:g} s "
                            f"({type(exc).__name__}); start one (dask scheduler, then dask worker ADDRESS) or leave "
                            "the option out") from None
    threads = sum(client.nthreads().values())
    cluster = Cluster(client, threads, f"{threads} worker threads of {what}",
                      ThreadPoolExecutor(max_workers=max(threads, cores()), thread_name_prefix="dask-driver"))
    token = _cluster.set(cluster)
    try:
        yield cluster
    finally:
        _cluster.reset(token)
        cluster.pool.shutdown(wait=False, cancel_futures=True)
        client.close()
        if local is not None:
            local.close()
