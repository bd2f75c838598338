"""Scale-out on Dask (engine.parallel.dask_cluster): a real ``dask scheduler`` and two ``dask worker`` processes on
localhost run the planner's and the tuner's simulations, and the answers equal the local ones, bit for bit; the
command line plans through them; an unreachable scheduler is one clear line."""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, SCENARIOS, free_port
from engine.config import apply_overrides, read_toml
from engine.errors import ScenarioError
from engine.parallel import dask_cluster, where, workers
from engine.planner import Question, plan
from engine.targets import Target
from engine.tuner import Objective, TuneQuestion, tune

ARTICLE = read_toml(SCENARIOS / "article_mixed_8xa100.toml")
QUESTION = Question((Target("interactive", "ttft_p99_ms", 1000.0),), gpus=("A100-80G", "H100-80G"), seeds=2,
                    requests=500)
TUNING = TuneQuestion(Objective("interactive", "ttft_p99_ms"), candidates=16, seeds=1, requests=800)
BUSY = apply_overrides(ARTICLE, {"server.max_batch_size": 64, "workload.arrival.rate_per_s": 45.0})


def without_timing(answer: dict) -> dict:
    return {k: v for k, v in answer.items() if k not in ("run", "wall_s", "workers")}


@pytest.fixture(scope="module")
def scheduler():
    """``dask scheduler`` and two one-thread ``dask worker`` processes on localhost, the checkout importable."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    dask = [sys.executable, "-m", "dask"]
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    time.sleep(1.0)
    procs += [subprocess.Popen([*dask, "worker", address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard"],
                               cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for _ in range(2)]
    try:
        from distributed import Client
        with Client(address, timeout="60s", set_as_default=False) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def ran_on_workers(address: str) -> int:
    """How many ``run_summary`` tasks the scheduler's workers have finished so far."""
    from distributed import Client
    with Client(address, timeout="30s", set_as_default=False) as client:
        return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.task_prefixes["run_summary"]
                                       .state_counts["memory"] if "run_summary" in dask_scheduler.task_prefixes
                                       else 0)


def test_a_plan_through_a_dask_scheduler_equals_the_local_one(scheduler):
    local = plan(ARTICLE, QUESTION)
    before = ran_on_workers(scheduler)
    with dask_cluster(scheduler):
        assert workers() == 2 and "2 worker threads of the Dask scheduler at" in where()
        remote = plan(ARTICLE, QUESTION)
    assert ran_on_workers(scheduler) - before == local["run"]["evaluations"], "every run went to the workers"
    assert remote["run"]["workers"] == 2 and remote["run"]["evaluations"] == local["run"]["evaluations"]
    assert without_timing(remote) == without_timing(local)


def test_a_tuning_through_a_dask_scheduler_equals_the_local_one(scheduler):
    local = tune(BUSY, TUNING)
    with dask_cluster(scheduler):
        remote = tune(BUSY, TUNING)
    assert remote["workers"] == 2 and without_timing(remote) == without_timing(local)


def test_the_command_line_plans_through_the_scheduler(scheduler):
    done = subprocess.run([sys.executable, "-m", "engine", "plan", str(SCENARIOS / "article_mixed_8xa100.toml"),
                           "--target", "interactive.ttft_p99_ms=1000", "--gpus", "H100-80G", "--seeds", "2",
                           "--requests", "500", "--scheduler", scheduler, "--json", "-"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run"]["workers"] == 2


def test_the_planner_page_plans_on_the_operators_cluster(scheduler, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from ui import cluster, state, view
    monkeypatch.setenv(cluster.DASK_ENV, scheduler)
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.query_params[state.QUERY_KEY] = state.encode(ARTICLE)
    at.query_params[view.QUERY_KEY] = state.encode({"plan_gpus": ["H100-80G"], "plan_seeds": 2, "plan_requests": 500})
    at.run()
    at.switch_page("pages/planner.py").run()
    assert at.toggle(key="plan_on_dask").value, "on by default when the operator set a scheduler"
    before = ran_on_workers(scheduler)
    next(b for b in at.button if b.label == "Plan").click().run()
    assert not at.exception and not at.error
    assert ran_on_workers(scheduler) > before
    assert any(f"on 2 worker threads of the Dask scheduler at {scheduler}" in c.value for c in at.caption)


def test_an_unreachable_scheduler_is_one_clear_line():
    with pytest.raises(ScenarioError, match=r"could not reach the Dask scheduler at 'tcp://127.0.0.1:\d+' with a "
                                            r"worker within"):
        with dask_cluster(f"tcp://127.0.0.1:{free_port()}", connect_timeout_s=2):
            pass
    assert workers() >= 1 and "local cores" in where(), "nothing stays in use after a failure"
