"""The command line's smaller holes, closed: a path naming a FIFO or a device, a write that fails, a figure that is
not finite; each is one line (exit 2) in bounded time and memory, and what it writes is strict JSON."""

from __future__ import annotations

import errno
import json
import math
import os
import time
import tracemalloc

import pytest

from conftest import SCENARIOS
from engine.scenario.caps import MIB
from engine.scenario.json_out import strict_json
from test_safety import cli, one_line_error

EXAMPLE = str(SCENARIOS / "example.toml")


def refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


def test_a_fifo_given_as_a_trace_is_refused_at_once(fifo):
    one_line_error(*cli("run", EXAMPLE, "--trace", fifo), "is a FIFO (named pipe), not a regular file")


def test_a_fifo_given_as_a_scenario_is_refused_at_once(fifo):
    one_line_error(*cli("run", fifo), f"scenario file '{fifo}' is a FIFO (named pipe), not a regular file")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_named_for_what_it_is_and_never_read(device):
    """``calibrate /dev/zero`` read 9.3 GB before its size check; now nothing is read."""
    tracemalloc.start()
    try:
        result = cli("calibrate", device, "--gpu", "H100-80G")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    one_line_error(*result, f"result file '{device}' is a character device, not a regular file")
    assert peak < 16 * MIB
    one_line_error(*cli("run", EXAMPLE, "--trace", device), f"'{device}' is a character device")


def test_a_result_file_larger_than_its_limit_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.json"
    with path.open("wb") as fh:
        fh.truncate(33 * MIB)  # sparse: costs no disk
    started = time.perf_counter()
    one_line_error(*cli("calibrate", str(path), "--gpu", "H100-80G"), "has 34,603,008 bytes, more than the limit "
                   "of 33,554,432 bytes (result_file_mib)")
    assert time.perf_counter() - started < 5.0


def test_a_write_that_fails_says_which_option_and_why():
    one_line_error(*cli("run", EXAMPLE, "--set", "workload.num_requests=50", "--json", "/dev/full"),
                   "--json '/dev/full' could not be written (No space left on device)")


def test_an_operating_system_error_without_a_file_names_no_file(monkeypatch):
    from engine import cli as cli_module

    def failing(scenario, **_):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(cli_module, "simulate", failing)
    code, out, err, seconds = cli("run", EXAMPLE)
    one_line_error(code, out, err, seconds)
    assert err.strip() == "error: Input/output error"


def test_weights_that_overflowed_to_not_a_number_are_refused():
    """``policy.prefill_token_weight = 1e308`` made the service shares NaN and wrote them into --json."""
    one_line_error(*cli("run", EXAMPLE, "--set", "policy.prefill_token_weight=1e308"),
                   "policy.prefill_token_weight = 1e+308 must be <= 1,000,000")


def test_the_largest_weights_give_strict_json():
    code, out, err, _ = cli("run", EXAMPLE, "--set", "workload.num_requests=300", "--set", "policy.name=dynamic",
                            *[arg for key in ("prefill_token_weight", "alpha", "beta", "gamma", "margin", "aging_per_s")
                              for arg in ("--set", f"policy.{key}=1000000")], "--json", "-")
    assert code == 0, err
    assert "RuntimeWarning" not in err
    json.loads(out, parse_constant=refuse_constant)


def test_figures_that_are_not_finite_are_written_as_null():
    text = strict_json({"share": math.nan, "load": [math.inf, -math.inf, 1.5], "name": "x", "n": 3})
    assert json.loads(text, parse_constant=refuse_constant) == {"share": None, "load": [None, None, 1.5],
                                                                  "name": "x", "n": 3}


PLAN = ("plan", str(SCENARIOS / "article_mixed_8xa100.toml"), "--target", "interactive.ttft_p99_ms=1000",
        "--gpus", "H100-80G", "--requests", "300", "--seeds", "2")


@pytest.mark.parametrize("option, value, words", [
    ("--workers", "100000", "--workers 100000 must be a whole number from 1 to 256"),
    ("--workers", "0", "--workers 0 must be a whole number from 1 to 256"),
    ("--scheduler", "tls://127.0.0.1:8786", "only tcp://"),
    ("--scheduler", "ucx://127.0.0.1:8786", "only tcp://"),
    ("--scheduler", "tcp://host", "tcp://HOST:PORT"),
    ("--scheduler", "x" * 10_000, "more than the limit of 200 (scheduler_address_chars)"),
])
def test_a_cluster_option_out_of_its_range_is_one_line_before_anything_starts(option, value, words):
    code, out, err, seconds = cli(*PLAN, option, value)
    one_line_error(code, out, err, seconds, words)
    assert seconds < 5.0


def test_a_plan_cut_short_answers_with_exit_code_3_and_says_so(tmp_path):
    out_path = tmp_path / "plan.json"
    code, out, err, _ = cli("plan", str(SCENARIOS / "article_mixed_8xa100.toml"), "--target",
                            "interactive.ttft_p99_ms=1000", "--gpus", "A100-80G,H100-80G", "--policies",
                            "fifo,priority,sjf,srpt,edf,wfq,dynamic", "--requests", "3000", "--limit", "plan_s=1",
                            "--json", str(out_path))
    assert code == 3, err
    assert err.strip().splitlines()[-1] == ("warning: cut short: the plan's time limit of 1 s (plan_s) ran out; the "
                                            "answer covers what was searched by then (--limit plan_s=N raises it)")
    assert json.loads(out_path.read_text())["run"]["cut"] == "the plan's time limit of 1 s (plan_s) ran out"
    assert "CUT: Cut short" in out
