"""Shared helpers: scenario builders and the location of the team's trace files."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

import engine

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "data" / "scenarios"
TRACES = REPO.parent / "shared" / "traces"

ONE_CLASS = [{"name": "only", "share": 1.0}]


def trace_scenario(tmp_path: Path, rows: list[tuple], server: dict, policy: dict | None = None,
                   classes: list[dict] | None = None, fleet: dict | None = None) -> engine.Scenario:
    """A scenario replaying ``rows`` of (arrival_s, prompt_tokens, output_tokens[, class]) exactly."""
    with_class = any(len(r) == 4 for r in rows)
    lines = ["arrival_s,prompt_tokens,output_tokens" + (",class" if with_class else "")]
    lines += [",".join(str(v) for v in row) for row in rows]
    path = tmp_path / "trace.csv"
    path.write_text("\n".join(lines) + "\n")
    data = {
        "workload": {"classes": copy.deepcopy(classes or ONE_CLASS), "trace": {"path": str(path)}},
        "server": {"step_model": "fixed", "step_time_ms": 10.0, **server},
        "policy": policy or {"name": "fifo"},
        "fleet": fleet or {},
    }
    return engine.load_scenario(data)


def synthetic(classes: list[dict], rate_per_s: float, num_requests: int, seed: int = 0, server: dict | None = None,
              policy: dict | None = None, arrival: dict | None = None) -> engine.Scenario:
    """A synthetic scenario on the fixed step model."""
    data = {
        "seed": seed,
        "workload": {"num_requests": num_requests, "classes": copy.deepcopy(classes),
                     "arrival": arrival or {"process": "poisson", "rate_per_s": rate_per_s}},
        "server": {"step_model": "fixed", "step_time_ms": 10.0, **(server or {})},
        "policy": policy or {"name": "fifo"},
    }
    return engine.load_scenario(data)


def shown(elements) -> list[str]:
    """The text of Markdown elements (errors, captions...) as a reader sees it: backslash escapes removed."""
    return [re.sub(r"\\(.)", r"\1", e.value) for e in elements]


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip(f"team traces not found at {TRACES} (the checkout's ../shared/traces)")
    return TRACES


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Expose each phase's report on the test item (the browser test screenshots failed runs)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
