"""Scheduler Lab engine: an iteration-level simulator of an LLM inference server.

Importable without Streamlit. Main entry points::

    scenario = load_scenario("data/scenarios/example.toml", overrides=["policy.name=priority"])
    result = simulate(scenario)
    result.summary, result.requests, result.timeseries
"""

from .sim._numba_cache import ensure_cache_dir

ensure_cache_dir()

from .scenario.config import Scenario, apply_overrides, load_scenario, scenario_to_dict  # noqa: E402
from .scenario.errors import ScenarioError, TraceError  # noqa: E402
from .sim.simulate import Result, simulate  # noqa: E402

__all__ = ["Scenario", "Result", "ScenarioError", "TraceError", "apply_overrides", "load_scenario",
           "scenario_to_dict", "simulate"]
