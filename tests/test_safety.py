"""Hostile or careless input to the engine and the command line: every case ends in one clear line
(exit code 2) or a bounded, correct result, and no file outside what the input may name is opened."""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import sys
import threading
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout

import numpy as np
import pytest
import tomli_w

import engine
from conftest import SCENARIOS
from engine.cli import main
from engine.scenario.caps import DEFAULT_CAPS, Caps, caps_with
from engine.scenario.origin import Origin, stored_trace_name
from engine.sim.traces import read_trace, read_trace_bytes

EXAMPLE = str(SCENARIOS / "example.toml")
SIMULATE = importlib.import_module("engine.sim.simulate")  # the module (``engine.simulate`` is the function)
HANG_S = 20.0  # a case that takes longer than this is hanging, not slow


# --------------------------------------------------------------------------- helpers

_OPENED: list[str] = []
_WATCHING = threading.Event()


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _WATCHING.is_set():
        _OPENED.append(str(args[0]))


sys.addaudithook(_audit)  # audit hooks cannot be removed; this one records only while watching


@contextmanager
def opened_files():
    """Every path opened (Python's ``open`` audit event) inside the block."""
    _OPENED.clear()
    _WATCHING.set()
    try:
        yield _OPENED
    finally:
        _WATCHING.clear()


def cli(*args: str) -> tuple[int, str, str, float]:
    """Run the command line in this process: (exit code, stdout, stderr, seconds)."""
    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse
            code = exc.code
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - started


def one_line_error(code: int, out: str, err: str, seconds: float, *words: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(w in lines[0] for w in words), lines[0]
    assert seconds < HANG_S


def base(**workload) -> dict:
    return {"workload": {"num_requests": 200, "arrival": {"process": "poisson", "rate_per_s": 5.0},
                         "classes": [{"name": "a", "share": 1.0, "prompt_tokens": {"dist": "constant", "value": 8},
                                      "output_tokens": {"dist": "constant", "value": 4}}], **workload},
            "server": {"step_model": "fixed", "step_time_ms": 10.0}}


def store_origin(tmp_path, caps: Caps = DEFAULT_CAPS) -> Origin:
    return Origin(trace_dir=str(tmp_path), trace_names_only=True, caps=caps)


# --------------------------------------------------------------------------- 1. no file reads from links


@pytest.mark.parametrize("path", ["/etc/hostname", "/proc/self/environ", "../../../etc/passwd", "traces/x.csv",
                                  "0123456789abcdef0123456789abcdef.toml", "0" * 33 + ".csv", ""])
def test_a_scenario_from_a_link_cannot_name_a_file_and_nothing_is_opened(tmp_path, path):
    data = base(trace={"path": path})
    with opened_files() as opened:
        with pytest.raises(engine.ScenarioError, match=r"^workload\.trace\.path = .* is not a trace this app holds"):
            engine.load_scenario(data, origin=store_origin(tmp_path))
    assert not [p for p in opened if "hostname" in p or "environ" in p or "passwd" in p or "x.csv" in p]


def test_a_stored_trace_replays_and_a_missing_one_is_named(tmp_path):
    content = b"arrival_s,prompt_tokens,output_tokens\n0,5,3\n0.5,7,2\n"
    name = stored_trace_name(content, ".csv")
    data = base(trace={"path": name}, num_requests=None)
    with pytest.raises(engine.ScenarioError, match="is no longer on this server"):
        engine.load_scenario(data, origin=store_origin(tmp_path))
    (tmp_path / name).write_bytes(content)
    summary = engine.simulate(engine.load_scenario(data, origin=store_origin(tmp_path))).summary
    assert summary["overall"]["completed"] == 2


def test_error_lines_quote_at_most_a_short_printable_excerpt(tmp_path):
    secret = "PATH=/usr/bin\0" * 5 + "HOME=/root\0" * 50  # the excerpt (40 characters) ends before HOME
    path = tmp_path / "t.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,{secret},3\n")
    with pytest.raises(engine.TraceError) as caught:
        read_trace(path, "csv")
    message = str(caught.value)
    assert "HOME=/root" not in message and "\0" not in message and message.isprintable()
    path.write_text(f"{secret},b,c\n1,2,3\n")
    with pytest.raises(engine.TraceError, match="missing column") as caught:
        read_trace(path, "csv")
    assert len(str(caught.value)) < len(str(path)) + 200 and "HOME=/root" not in str(caught.value)


# --------------------------------------------------------------------------- 2-3. limits


@pytest.mark.parametrize("override, words", [
    ("workload.num_requests=100000000", "workload.num_requests = 100,000,000 requests is above the limit of 1,000,000"),
    ("workload.num_requests=9223372036854775807", "above the limit of 1,000,000 requests"),
    ("server.max_batch_size=1000000000000", "server.max_batch_size = 1,000,000,000,000 sequences is above the limit"),
    ("server.max_batched_tokens=100000000", "server.max_batched_tokens"),
    ("workload.duration_s=1e12", "workload.duration_s = 1,000,000,000,000 s is above the limit of 2,592,000 s"),
    ("limits.max_waiting_requests=1000000", "limits.max_waiting_requests = 1,000,000 requests is above the limit"),
    ("limits.max_drain_s=1e9", "limits.max_drain_s"),
    ("fleet.replicas=65", "fleet.replicas = 65 servers is above the limit of 64 servers"),
    ('workload.classes.0.prompt_tokens={dist="lognormal", mean=512, cv=1e300}', "prompt_tokens.cv = 1e+300"),
    ('workload.classes.0.prompt_tokens={dist="lognormal", mean=1e300, cv=1}', "prompt_tokens.mean = 1e+300 tokens"),
    ('workload.classes.0.output_tokens={dist="constant", value=9223372036854775807}', "output_tokens.value"),
    ('workload.classes.0.prompt_tokens={dist="geometric", mean=1e300}', "prompt_tokens.mean"),
    ('workload.arrival={process="gamma", rate_per_s=2.5, cv=1e-300}', "workload.arrival.cv = 1e-300 must be >= 0.01"),
    ('workload.arrival={process="gamma", rate_per_s=2.5, cv=1e300}', "workload.arrival.cv = 1e+300 is above"),
    (f'name="{"x" * 500}"', "name has 500 characters, more than the limit of 80 characters"),
    ("seed=99999999999999999999", "seed = 99999999999999999999 must be <= 9,223,372,036,854,775,807"),
    ("name.x=1", "override name.x: name is 'example', not a table"),
    ("server.step_time_ms=1e300", "server.step_time_ms"),
])
def test_values_beyond_a_limit_are_one_line_naming_field_value_and_limit(override, words):
    one_line_error(*cli("run", EXAMPLE, "--set", override), words)


def test_thousands_of_classes_are_refused_before_they_are_read():
    classes = [{"name": f"c{i}", "share": 1 / 5000, "prompt_tokens": {"dist": "constant", "value": 1},
                "output_tokens": {"dist": "constant", "value": 1}} for i in range(5000)]
    started = time.perf_counter()
    with pytest.raises(engine.ScenarioError, match="workload.classes has 5,000 classes, more than the limit of 32"):
        engine.load_scenario(base(classes=classes))
    assert time.perf_counter() - started < HANG_S


def test_a_long_duration_is_refused_before_its_arrivals_are_drawn():
    data = base(num_requests=None, duration_s=2_000_000.0)
    with pytest.raises(engine.ScenarioError, match=r"duration_s = 2e\+06 s at 5 req/s brings more than 1,000,000"):
        engine.simulate(engine.load_scenario(data))


def test_arrivals_beyond_the_simulated_time_limit_are_refused():
    data = base(num_requests=1000)
    data["workload"]["arrival"]["rate_per_s"] = 1e-4  # one request every 10,000 s: 1e7 s in all
    with pytest.raises(engine.ScenarioError, match="the last request arrives at .* beyond the limit of 2,592,000 s"):
        engine.simulate(engine.load_scenario(data))


def test_heavy_tails_are_clipped_at_the_token_limit_never_wrapped():
    data = base()
    data["workload"]["classes"][0]["prompt_tokens"] = {"dist": "lognormal", "mean": 5_000_000.0, "cv": 100.0}
    requests = engine.sim.workload.build_requests(engine.load_scenario(data))
    assert requests.prompt_tokens.min() >= 1 and requests.prompt_tokens.max() == DEFAULT_CAPS.tokens_per_request


@pytest.mark.parametrize("value", ["1e19", "9223372036854775808", "9223372036854775807", "10000001"])
def test_trace_token_counts_beyond_the_limit_are_errors_not_wrapped(tmp_path, value):
    path = tmp_path / "t.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,{value},3\n")
    one_line_error(*cli("run", EXAMPLE, "--trace", str(path)), "line 3: prompt_tokens",
                   "must be an integer from 1 to 10,000,000")


def test_reading_stops_at_the_cut(tmp_path):
    """A trace far longer than the cut is read only up to it: with 1 MiB allowed, a 2.6 MB file replays its
    first 500 rows; without a cut, more rows than the limit per run is an error naming the fix."""
    path = tmp_path / "long.csv"
    rows = np.column_stack([np.arange(200_000) * 0.01, np.full(200_000, 7), np.full(200_000, 3)])
    np.savetxt(path, rows, fmt=["%.2f", "%d", "%d"], delimiter=",", header="arrival_s,prompt_tokens,output_tokens",
               comments="")
    caps = dataclasses.replace(DEFAULT_CAPS, trace_bytes=1024 * 1024, requests_per_run=1000)
    trace = read_trace(path, "csv", max_rows=500, caps=caps)
    assert len(trace.arrival_s) == 500 and trace.arrival_s[-1] == pytest.approx(4.99)
    with pytest.raises(engine.TraceError, match="more than 1,000 requests, the limit requests_per_run; set "
                                                "workload.num_requests"):
        read_trace(path, "csv", caps=dataclasses.replace(caps, trace_bytes=10 * 1024 * 1024))
    with pytest.raises(engine.TraceError, match="more than 1,048,576 bytes read before the requests cut"):
        read_trace(path, "csv", max_rows=150_000, caps=dataclasses.replace(caps, requests_per_run=1_000_000))


def test_a_single_endless_line_stops_at_the_byte_limit(tmp_path):
    caps = dataclasses.replace(DEFAULT_CAPS, trace_bytes=512 * 1024)
    for fmt, name in (("csv", "line.csv"), ("mooncake", "line.jsonl")):
        path = tmp_path / name
        path.write_bytes(b"x" * (3 * 1024 * 1024))
        with pytest.raises(engine.TraceError, match="more than 524,288 bytes read before the requests cut"):
            read_trace(path, fmt, caps=caps)


def test_a_trace_is_read_once_for_many_runs(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,6,3\n")
    scenario = engine.load_scenario(base(trace={"path": str(path)}, num_requests=None))
    engine.simulate(scenario)
    with opened_files() as opened:
        for name in ("fifo", "priority", "sjf"):
            engine.simulate(dataclasses.replace(scenario, policy=dataclasses.replace(scenario.policy, name=name)))
    assert str(path) not in opened and not [p for p in opened if p.endswith("t.csv")]


@pytest.mark.parametrize("line, words", [
    ('{"timestamp": 0, "input_length": ' + "[" * 100_000 + "]" * 100_000 + ', "output_length": 1}',
     "nested too deeply"),
    ('{"timestamp": 1e999999, "input_length": 5, "output_length": 2}', "timestamp"),
    ('{"timestamp": 0, "input_length": 99999999999999999999, "output_length": 2}', "input_length"),
    ('[1, 2, 3]', "timestamp must be a number"),
])
def test_hostile_jsonl_lines_are_one_line(tmp_path, line, words):
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    one_line_error(*cli("run", EXAMPLE, "--trace", str(path)), "line 1", words)


def test_azure_stamps_with_different_utc_offsets_become_one_time_line(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00+00:00,10,2\n"
                    "2023-11-16 19:00:01+01:00,10,2\n2023-11-16 18:00:03,10,2\n")
    trace = read_trace(path, "azure")
    assert list(trace.arrival_s) == [0.0, 1.0, 3.0]


# --------------------------------------------------------------------------- scenario files and the CLI


@pytest.mark.parametrize("content, words", [
    (bytes(range(256)) * 40, "is not a text file"),
    (("a = " + "[" * 100_000 + "]" * 100_000).encode(), "nested too deeply"),
    (b"x = 1\n" * 200_000, "has 1,200,000 bytes, more than the limit of 1,048,576 bytes (scenario_bytes)"),
    (b"name = = 3", "is not valid TOML"),
])
def test_hostile_scenario_files_are_one_line(tmp_path, content, words):
    path = tmp_path / "s.toml"
    path.write_bytes(content)
    one_line_error(*cli("run", str(path)), words)


@pytest.mark.parametrize("args, words", [
    (("--cny-per-usd", "nan"), "cny_per_usd = nan must be a number from 1 to 20"),
    (("--cny-per-usd", "-7"), "cny_per_usd = -7.0 must be a number from 1 to 20"),
    (("--limit", "bogus=1"), "--limit 'bogus=1' must be NAME=VALUE"),
    (("--limit", "requests_per_run=lots"), "--limit requests_per_run = 'lots' must be an integer"),
    (("--limit", "wall_clock_s=nan"), "must be a finite number > 0"),
])
def test_bad_command_line_options_are_one_line(args, words):
    one_line_error(*cli("run", str(SCENARIOS / "chat_and_batch_a100_8b.toml"), "--set", "workload.num_requests=50",
                        "--offer", "runpod-a100-sxm", *args), words)


def test_the_command_line_can_raise_a_limit_and_says_how():
    code, _, err, _ = cli("run", EXAMPLE, "--set", "fleet.replicas=80")
    assert code == 2 and "(python -m engine ... --limit replicas=N raises it)" in err
    code, out, err, _ = cli("run", EXAMPLE, "--set", "fleet.replicas=80", "--set", "workload.num_requests=300",
                            "--limit", "replicas=128", "--json", "-")
    assert code == 0, err
    assert len(json.loads(out)["system"]["replicas"]) == 80


def test_caps_from_the_command_line_only_change_what_is_named():
    caps = caps_with(["requests_per_run=5000000", "wall_clock_s=0.5"])
    assert caps.requests_per_run == 5_000_000 and caps.wall_clock_s == 0.5 and caps.from_cli
    assert dataclasses.replace(caps, requests_per_run=DEFAULT_CAPS.requests_per_run, wall_clock_s=60.0,
                               from_cli=False) == DEFAULT_CAPS


# --------------------------------------------------------------------------- bounded work


def heavy(caps: Caps) -> engine.Scenario:
    """An overloaded run whose waiting queue grows long (each decision scans it): about 25 s of wall time
    before the queue bound stops it."""
    data = base(num_requests=200_000)
    data["workload"]["arrival"]["rate_per_s"] = 400.0
    data["server"]["max_batch_size"] = 1
    data["limits"] = {"max_waiting_requests": 100_000, "max_drain_s": 86_400.0}
    return engine.load_scenario(data, origin=Origin(caps=caps))


def test_a_run_stops_at_its_wall_clock_limit_and_says_it_was_cut():
    caps = dataclasses.replace(DEFAULT_CAPS, wall_clock_s=0.5)
    shares = []
    started = time.perf_counter()
    result = engine.simulate(heavy(caps), progress=shares.append)
    assert time.perf_counter() - started < 0.5 + 10.0  # the cut comes at the limit, not at the end of the run
    system, overall = result.summary["system"], result.summary["overall"]
    assert system["stop_reason"] == "wall_clock" and system["unstable"]
    assert overall["arrived"] == overall["completed"] + overall["timed_out"] + overall["unfinished"]
    assert 0 < overall["arrived"] < 200_000
    assert shares and shares == sorted(shares) and 0 < shares[-1] < 1
    assert "Cut: the run reached its wall-clock limit of 0.5 s" in SIMULATE.stop_explanation(system, caps)


def test_the_compiled_loop_releases_the_interpreter(monkeypatch):
    """With the whole run in one call of the compiled loop, another thread still runs all along: its longest
    pause stays far below the call's length (holding the interpreter, the pause would be the whole call)."""
    engine.simulate(engine.load_scenario(EXAMPLE, overrides=["workload.num_requests=100"]))  # compiled before timing
    monkeypatch.setattr(SIMULATE, "SLICE_S", 1e9)
    scenario = engine.load_scenario(EXAMPLE, overrides=["workload.num_requests=500000"])  # a second or more
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.002)

    ticker = threading.Thread(target=tick)
    ticker.start()
    started = time.perf_counter()
    engine.simulate(scenario)
    elapsed = time.perf_counter() - started
    stop.set()
    ticker.join()
    assert elapsed > 0.5, "the run was too short to tell"
    assert np.diff(ticks).max() < 0.25 * elapsed


def test_slices_give_the_same_result_as_one_call(monkeypatch):
    scenario = engine.load_scenario(EXAMPLE, overrides=["workload.num_requests=3000", "policy.name=dynamic",
                                                        "fleet.replicas=2", "fleet.router=least-tokens"])
    whole = engine.simulate(scenario)
    monkeypatch.setattr(SIMULATE, "SLICE_S", 1e-6)  # a few events per call
    sliced = engine.simulate(scenario)
    assert whole.requests.equals(sliced.requests)
    assert whole.timeseries.equals(sliced.timeseries)
    assert whole.summary["system"] | {"wall_s": 0} == sliced.summary["system"] | {"wall_s": 0}


def test_a_burst_within_one_iteration_stops_at_the_queue_bound():
    """Arrivals pile up while one long iteration runs: the run stops at the bound as they arrive, before
    the waiting list outgrows what ``waiting_capacity`` reserved for it."""
    data = base(num_requests=500)
    data["server"].update(step_time_ms=60_000.0, max_batch_size=1)
    data["limits"] = {"max_waiting_requests": 5}
    summary = engine.simulate(engine.load_scenario(data)).summary
    assert summary["system"]["stop_reason"] == "queue_bound"
    assert summary["overall"]["unfinished"] == 5 + 1 + 1  # the bound, the arrival that passed it, the one running


def test_a_full_request_list_is_an_internal_error_not_a_silent_overwrite():
    from engine.sim import kernel
    scenario = engine.load_scenario(base(num_requests=50))
    requests = engine.sim.workload.build_requests(scenario)
    from engine.hardware.steptime import FIXED, step_params, step_rows
    from engine.sim.layout import pack_requests
    from engine.sim.policies import policy_inputs
    ints, floats = pack_requests(requests.arrival_s, requests.prompt_tokens, requests.output_tokens,
                                 requests.class_id, np.full(len(requests), np.inf), requests.output_tokens)
    policy, classes = policy_inputs(scenario)
    stats, outcome = kernel.start_outputs(1)
    scratch = list(kernel.work_arrays(50, 100, np.array([[2 ** 62, 1, 8192, kernel.COLOCATED]]), 16))
    scratch[0] = scratch[0][:, :2]  # a waiting list too short for this load
    srv = kernel.server_params(8192, 1, 0.0, 16, 0, 100, 1e9, 1, 0.0)
    with pytest.raises(RuntimeError, match="a request list is full"):
        kernel.run_nb(srv, step_rows([step_params(FIXED, step_time_s=10.0)]), policy, 0, kernel.route_rows(np.ones(1)),
                      classes[np.newaxis], ints, floats,
                      np.zeros(0, np.int64), kernel.prefix_caches(1, 0),
                      np.zeros((1, 64, len(kernel.SERIES_FIXED_COLUMNS) + 2)), stats, outcome, *scratch,
                      time.monotonic_ns() + 10 ** 10)


def test_replayed_arrivals_beyond_the_simulated_time_limit_are_refused(tmp_path):
    """A file spanning more than the limit is refused as it is read (so its per-minute statistics stay
    small); a slowed-down replay (rate_scale < 1) beyond it, before it runs."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,3\n3000000,5,3\n")
    one_line_error(*cli("run", EXAMPLE, "--trace", str(path)), "the arrivals span 3e+06 s, beyond the limit of "
                   "2,592,000 s of simulated time (simulated_s)")
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,3\n86400,5,3\n")
    data = base(trace={"path": str(path), "rate_scale": 0.01}, num_requests=None)
    with pytest.raises(engine.ScenarioError, match="workload.trace: the last request arrives at 8.64e\\+06 s"):
        engine.simulate(engine.load_scenario(data))


def test_a_header_wider_than_a_trace_is_refused_before_pandas_reads_it():
    content = b"arrival_s,prompt_tokens,output_tokens" + b",a" * 300_000 + b"\n0,1,1\n"
    started = time.perf_counter()
    with pytest.raises(engine.TraceError, match="line 1: 300,003 columns; a trace has at most 16"):
        read_trace_bytes(content, "csv", "wide.csv")
    assert time.perf_counter() - started < HANG_S
    with pytest.raises(engine.TraceError, match="line 1: longer than 1,048,576 bytes"):
        read_trace_bytes(b"a" * (2 * 1024 * 1024) + b"\n", "csv", "long.csv")


def test_a_jsonl_trace_stops_at_the_cut_and_refuses_endless_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": i, "input_length": 5, "output_length": 2}) + "\n"
                            for i in range(3000)))
    caps = dataclasses.replace(DEFAULT_CAPS, requests_per_run=1000)
    assert len(read_trace(path, "mooncake", max_rows=10, caps=caps).arrival_s) == 10
    with pytest.raises(engine.TraceError, match="more than 1,000 requests, the limit requests_per_run"):
        read_trace(path, "mooncake", caps=caps)
    path.write_bytes(b'{"timestamp": 0, "x": "' + b"y" * (2 * 1024 * 1024) + b'"}\n')
    with pytest.raises(engine.TraceError, match=r"line 1: longer than 1,048,576 bytes \(trace_line_bytes\)"):
        read_trace(path, "mooncake")


def test_an_internal_error_is_one_line_with_exit_code_1(monkeypatch):
    from engine import cli as cli_module

    def broken(scenario, **_):
        raise RuntimeError("something internal")

    monkeypatch.setattr(cli_module, "simulate", broken)
    code, _, err, _ = cli("run", EXAMPLE)
    assert code == 1 and err.strip() == ("error: internal error (RuntimeError: something internal); please report "
                                         "it with the command line")

    def hungry(scenario, **_):
        raise MemoryError

    monkeypatch.setattr(cli_module, "simulate", hungry)
    one_line_error(*cli("run", EXAMPLE), "out of memory")


@pytest.mark.parametrize("limits", [{"max_waiting_requests": 50}, {"max_drain_s": 5.0}])
def test_a_stopped_run_counts_only_the_elapsed_part_of_its_last_iteration(limits):
    """One-second iterations, stopped by a limit in the middle of one: busy time and KV use stay within
    the run (whole-iteration accounting would put the GPU busy above 100%)."""
    data = base(num_requests=3000)
    data["server"].update(step_time_ms=1000.0, max_batch_size=1, kv_capacity_tokens=64)
    data["limits"] = limits
    system = engine.simulate(engine.load_scenario(data)).summary["system"]
    assert system["stop_reason"] in ("queue_bound", "horizon")
    assert 0.9 < system["gpu_busy_frac"] <= 1.0 and system["kv_mean_frac"] <= system["kv_peak_frac"] <= 1.0


@pytest.mark.parametrize("override, words", [
    ('workload.classes.0.name="overall"', "workload.classes[0].name = 'overall' is reserved"),
    ('workload.classes.0.name="  "', "workload.classes[0].name is empty"),
    (f'server.gpu="{"X" * 200_000}"', "server.gpu has 200,000 characters, more than the limit of 80"),
    ("workload.arrival.rate_per_s=1e308", "workload.arrival.rate_per_s = 1e+308 must be <= 1,000,000,000 req/s"),
    ("workload.classes.0.sla_ttft_ms=2e-321", "sla_ttft_ms = 2e-321 must be >= 0.001 ms"),
    ("policy.default_sla_ms=2e-321", "policy.default_sla_ms = 2e-321 must be >= 0.001 ms"),
])
def test_names_and_tiny_or_huge_values_that_broke_pages_are_refused(override, words):
    code, out, err, seconds = cli("run", EXAMPLE, "--set", override)
    one_line_error(code, out, err, seconds, words)
    assert len(err) < 400


def test_a_class_named_like_a_fixed_series_column_keeps_its_own_column():
    data = base()
    data["workload"]["classes"][0]["name"] = "size"
    series = engine.simulate(engine.load_scenario(data)).timeseries
    assert series.columns.is_unique and "batch[size]" in series.columns and "batch_size" in series.columns


def test_the_command_line_prints_names_without_terminal_escapes(tmp_path):
    data = base()
    data["workload"]["classes"][0]["name"] = "\x1b[31mRED\x1b]0;pwned\x07"
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(data))
    code, out, _, _ = cli("run", str(path))
    assert code == 0 and "\x1b" not in out and "\x07" not in out and "?[31mRED?]0;pwned?" in out
