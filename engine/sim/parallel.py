"""Independent simulations on all local cores, or on a Dask cluster when given one: the runs behind one page
(policy comparison, load curves, heatmaps, fleet shapes), the planner, the tuner and the CLI's sweeps.

Local: threads, not processes. The compiled loop releases the interpreter (``kernel.run_nb`` is ``nogil``), so
runs overlap there, and the Python around each run (drawing the requests, summarising them) takes turns. One
pool per process, as many threads as the cores this process may use, shared by every caller (each session of
the app queues its runs on the same cores, none oversubscribes them). Its threads run at a lower CPU priority than the
threads that start their runs, so a page's own run and its drawing go first.

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
import os
import queue
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar

from ..scenario.origin import Origin
from ..scenario.summary import Summary
from . import stopping
from .dask_connect import CONNECT_TIMEOUT_S, SCHEDULER_OPTION, close_quietly, open_client
from .simulate import run_summary

T = TypeVar("T")
R = TypeVar("R")

POOL_NICENESS = 5  # how much lower a pool thread's CPU priority is than its process's (``_yield_cpu``)
HEARTBEAT_S = 0.25  # how often ``run_all`` tells its caller how far it is while it waits

_lock = threading.Lock()
_pools: dict[bool, ThreadPoolExecutor] = {}  # background or not -> its pool


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
    """The pool of the current runs: the cluster's inside ``dask_cluster``, else one of the process's two pools of
    ``cores()`` threads each (made on first use): the background one in a background job (``stopping``: a
    search's hundreds of runs queue there, so that the runs a page asks for meanwhile do not wait behind them),
    else the interactive one."""
    cluster = _cluster.get()
    if cluster is not None:
        return cluster.pool
    background = stopping.in_background()
    with _lock:
        if background not in _pools:
            _pools[background] = ThreadPoolExecutor(max_workers=cores(), initializer=_yield_cpu, thread_name_prefix=(
                "background" if background else "simulate"))
        return _pools[background]


def _yield_cpu() -> None:
    """A pool thread runs at a lower CPU priority (nice +``POOL_NICENESS``) than the threads that start its runs:
    with more runs than cores, a page's own run and its drawing go first, and the pool takes the cores they leave."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + POOL_NICENESS)


def run_all(fn: Callable[[T], R], items: Sequence[T],
            progress: Callable[[int, int], None] | None = None) -> list[Optional[R]]:
    """``[fn(item) for item in items]`` on the pool, in the order of ``items`` (each in the caller's context, so a
    cluster in use stays in use). The runs form one job inside the caller's (``stopping``): once the caller's job
    must stop, the runs not started never start, those under way stop at their next check, and their places hold
    None; so do the places of runs that raised ``stopping.Stopped``. Any other error of a run
    raises here (after the others are stopped), and so does anything that interrupts the caller's thread.
    ``progress(done, total)`` is called in the caller's thread as runs finish, and every ``HEARTBEAT_S`` meanwhile:
    the app's progress bar is where Streamlit notices that the page was left or changed."""
    executor = pool()
    runs = stopping.Job("these runs", parent=stopping.current())
    futures: list[Future] = [executor.submit(contextvars.copy_context().run, stopping.in_job, runs, fn, item)
                             for item in items]
    pending = set(futures)
    try:
        while pending and runs.reason() is None:
            finished, pending = wait(pending, timeout=min(HEARTBEAT_S, max(runs.left_s(), 0.0)),
                                     return_when=FIRST_COMPLETED)
            for future in finished:
                error = future.exception()
                if error is not None and not isinstance(error, stopping.Stopped):
                    raise error
            if progress is not None:
                progress(len(futures) - len(pending), len(futures))
    finally:
        if pending:
            runs.cancel("its caller stopped waiting for it")
        for future in pending:
            future.cancel()
    return [f.result() if f.done() and not f.cancelled() and f.exception() is None else None for f in futures]


def simulate_summary(data: dict, origin: Origin = Origin()) -> Summary:
    """One run's summary, on a Dask worker inside ``dask_cluster``, else here; ``stopping.Stopped`` when the
    current job must stop first."""
    cluster = _cluster.get()
    if cluster is None:
        return run_summary(data, origin)
    return _cluster_results(cluster, [cluster.client.submit(run_summary, data, origin, pure=False)])[0]


def summaries(datas: Sequence[dict], origin: Origin = Origin(),
              progress: Callable[[int, int], None] | None = None) -> list[Summary]:
    """The summaries of many scenarios, in their order: on the local pool, or all at once on the cluster;
    ``stopping.Stopped`` (the runs not finished stopped) when the current job must stop first."""
    cluster = _cluster.get()
    if cluster is None:
        results = run_all(lambda data: run_summary(data, origin), datas, progress)
        if None in results:  # only a stopped run leaves its place empty
            stopping.check()
            raise stopping.Stopped("a run was stopped")
        return results
    futures = [cluster.client.submit(run_summary, data, origin, pure=False) for data in datas]
    return _cluster_results(cluster, futures, progress)


def _cluster_results(cluster: Cluster, futures: list, progress: Callable[[int, int], None] | None = None) -> list:
    """The results of Dask ``futures`` in their order, checking the current job every ``HEARTBEAT_S`` while they
    run; the ones not finished are cancelled on the cluster if the job stops or this thread is interrupted."""
    finished: queue.SimpleQueue = queue.SimpleQueue()
    for future in futures:
        future.add_done_callback(finished.put)
    done = 0
    try:
        while done < len(futures):
            stopping.check()
            with contextlib.suppress(queue.Empty):
                finished.get(timeout=HEARTBEAT_S)
                done += 1
            if progress is not None:
                progress(done, len(futures))
        return [f.result() for f in futures]
    except BaseException:
        cluster.client.cancel(futures)
        raise


@contextlib.contextmanager
def dask_cluster(scheduler: str | None = None, local_workers: int = 0, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 source: str = SCHEDULER_OPTION) -> Iterator[Optional[Cluster]]:
    """Send this context's runs to the Dask scheduler at ``scheduler`` (``tcp://host:8786``), or to an embedded
    cluster of ``local_workers`` worker processes (one thread each) started here and stopped after; with
    neither, the runs stay on the local cores. ``ScenarioError`` when the scheduler cannot be reached, within the
    time-outs of ``dask_connect.open_client`` whatever the other end does (its errors name ``source``: where the
    address came from)."""
    if not scheduler and not local_workers:
        yield None
        return
    client, local, what = open_client(scheduler, local_workers, connect_timeout_s, source)
    try:
        threads = sum(client.nthreads().values())
        cluster = Cluster(client, threads, f"{threads} worker threads of {what}",
                          ThreadPoolExecutor(max_workers=max(threads, cores()), thread_name_prefix="dask-driver"))
        token = _cluster.set(cluster)
        try:
            yield cluster
        finally:
            _cluster.reset(token)
            cluster.pool.shutdown(wait=False, cancel_futures=True)
    finally:
        close_quietly(client, local)
