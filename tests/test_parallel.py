"""Runs on all cores give the results of running them one after another; a cache key asked for by many
threads at once is computed once."""

import os
import threading
import time

import pytest

from engine.scenario.config import apply_overrides
from engine.scenario.errors import ScenarioError
from engine.sim import parallel, stopping
from engine.sim.simulate import run_summary
from engine.sim.sweep import compare_policies, policy_variants
from ui.result_cache import ResultCache


def example_data() -> dict:
    """Two classes near full load on a KV cache that fills: the policies give different results."""
    return {"seed": 3, "workload": {"num_requests": 400, "arrival": {"process": "poisson", "rate_per_s": 40.0},
                                    "classes": [{"name": "a", "share": 0.6, "priority": 0, "sla_ttft_ms": 200,
                                                 "prompt_tokens": {"dist": "uniform", "low": 10, "high": 300},
                                                 "output_tokens": {"dist": "geometric", "mean": 40, "max": 200}},
                                                {"name": "b", "share": 0.4, "priority": 2,
                                                 "prompt_tokens": {"dist": "constant", "value": 500},
                                                 "output_tokens": {"dist": "constant", "value": 120}}]},
            "server": {"step_model": "fixed", "step_time_ms": 20.0, "max_batch_size": 16,
                       "kv_capacity_tokens": 8000}}


def test_policy_comparison_on_all_cores_equals_the_runs_one_by_one():
    data = example_data()
    policies = ["fifo", "priority", "wfq", "dynamic", "srpt"]
    together = compare_policies(data, policies=policies)
    alone = [run_summary(apply_overrides(data, overrides)) for overrides, _ in policy_variants(policies)]
    assert parallel.cores() >= 1 and parallel.pool()._max_workers == parallel.cores()
    for (policy, rows), summary in zip(together.groupby("policy", sort=False), alone):
        overall = rows[rows["class"] == "overall"].iloc[0]
        assert overall["ttft_p99_ms"] == summary["overall"]["ttft_ms"]["p99"], policy
        assert overall["completed"] == summary["overall"]["completed"], policy


def test_run_all_keeps_the_order_reports_progress_and_stops_with_its_callers_job():
    seen = []
    assert parallel.run_all(lambda x: x * x, [3, 1, 2], lambda done, total: seen.append((done, total))) == [9, 1, 4]
    assert seen[-1] == (3, 3) and [d for d, _ in seen] == sorted(d for d, _ in seen)

    def slow(x):
        time.sleep(x)
        return x

    started = time.monotonic()
    with stopping.job("the section", 0.3):
        results = parallel.run_all(slow, [0.0] + [1.0] * 8)
    assert time.monotonic() - started < 0.9 and results[0] == 0.0 and results.count(None) == 8


def test_run_all_raises_a_runs_error():
    def fail(x):
        if x == 2:
            raise ScenarioError("server.gpu: no such GPU")
        return x

    with pytest.raises(ScenarioError, match="no such GPU"):
        parallel.run_all(fail, [1, 2, 3])


def test_a_key_computed_by_one_thread_is_waited_for_by_the_others():
    cache = ResultCache(10 ** 6, 60.0, lambda v: 8)
    calls = []

    def compute():
        calls.append(1)
        time.sleep(0.2)
        return 42

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_compute("k", compute))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [42] * 6 and len(calls) == 1


def test_when_the_computing_thread_fails_each_waiter_computes_itself():
    cache = ResultCache(10 ** 6, 60.0, lambda v: 8)
    first = threading.Event()

    def failing():
        first.set()
        time.sleep(0.2)
        raise RuntimeError("stopped by its session")

    errors = []

    def owner():
        try:
            cache.get_or_compute("k", failing)
        except RuntimeError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=owner)
    thread.start()
    first.wait()
    assert cache.get_or_compute("k", lambda: 7) == 7
    thread.join()
    assert errors == ["stopped by its session"] and cache.get("k") == 7


def test_pool_threads_run_at_a_lower_cpu_priority_than_the_threads_that_start_their_runs():
    """With more runs than cores, the page's own run and its drawing go first (``parallel._yield_cpu``)."""
    caller = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = parallel.run_all(lambda _: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), [0, 1, 2])
    assert seen == [min(19, caller + parallel.POOL_NICENESS)] * 3
