"""Shared helpers: scenario builders and the location of the team's trace files."""

from __future__ import annotations

import atexit
import copy
import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
import time
import typing
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import pytest

# The app's trace store for this test session (read by ui.trace_store at import, and by the app servers
# the browser tests start): never the machine's shared one.
if "SCHEDULER_LAB_TRACE_STORE" not in os.environ:
    os.environ["SCHEDULER_LAB_TRACE_STORE"] = tempfile.mkdtemp(prefix="scheduler-lab-test-store-")
    atexit.register(shutil.rmtree, os.environ["SCHEDULER_LAB_TRACE_STORE"], ignore_errors=True)

import engine  # noqa: E402
from ui.serve import free_port, streamlit_command  # noqa: E402,F401 - free_port: the tests' too
from engine.scenario.config import Scenario, unwrap_optional  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "data" / "scenarios"
# Excerpts of public traces (their first rows, with source and licence in the folder's README): the full traces
# are for the benchmarks (bench/trace_figures.py).
TRACES = REPO / "tests" / "fixtures" / "traces"
AZURE_CONV = TRACES / "azure_conv_2023_first2000.csv"
AZURE_CODE = TRACES / "azure_code_2023_first1000.csv"
MOONCAKE_CONVERSATION = TRACES / "mooncake_conversation_first1500.jsonl"
MOONCAKE_SYNTHETIC = TRACES / "mooncake_synthetic_first500.jsonl"

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
    """The text of Markdown elements (errors, captions...) as a reader sees it: backslash escapes and the
    invisible word joiners of ``ui.text.plain`` removed."""
    return [re.sub(r"\\(.)", r"\1", e.value).replace("\u2060", "") for e in elements]


def pytest_configure(config):
    """Every skipped test is listed with its reason in the summary (pytest's -rs), so none goes unnoticed."""
    if "s" not in config.option.reportchars and "a" not in config.option.reportchars:
        config.option.reportchars += "s"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Expose each phase's report on the test item (the browser test screenshots failed runs)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@contextmanager
def app_server(log_path: Path, repo: Path = REPO, command: Callable[[int], list[str]] = streamlit_command,
               preexec_fn: Callable[[], None] | None = None, healthy_within_s: float = 90.0):
    """The app server ``command(port)`` starts (default: ``streamlit run app.py`` of checkout ``repo``) on a free
    local port until healthy: yields (url, process); stops it after. ``preexec_fn`` runs in the child (pinning it to
    cores, say)."""
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command(port), cwd=repo, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + healthy_within_s
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"streamlit did not become healthy; see {log_path}")
            time.sleep(0.5)
        try:
            yield url, proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def config_fields(cls: type = Scenario, prefix: str = "") -> dict[str, tuple[type, dict]]:
    """Every scenario key (the first two classes by index) with its type and validation metadata."""
    found = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        tp, _ = unwrap_optional(hints[f.name])
        inner = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else tp
        if dataclasses.is_dataclass(inner):
            for index in ((0, 1) if inner is not tp else (None,)):
                found.update(config_fields(inner, f"{prefix}{f.name}." + ("" if index is None else f"{index}.")))
        else:
            found[prefix + f.name] = (tp, dict(f.metadata))
    return found
