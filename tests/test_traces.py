"""Trace readers on excerpts of public traces (tests/fixtures/traces), and clear errors on malformed ones."""

import csv
import json
from datetime import datetime

import numpy as np
import pytest

import engine
from conftest import AZURE_CODE, AZURE_CONV, MOONCAKE_CONVERSATION, MOONCAKE_SYNTHETIC, SCENARIOS
from engine.scenario.errors import TraceError
from engine.sim.traces import guess_trace_format, read_trace
from engine.sim.workload import unclassed_requests

CLASSES = [{"name": "chat", "share": 0.6}, {"name": "batch", "share": 0.4}]


def replay(path, fmt, tmp_path=None, **workload):
    data = {"seed": 3, "workload": {"classes": CLASSES, "trace": {"path": str(path), "format": fmt}, **workload},
            "server": {"step_model": "fixed", "step_time_ms": 1.0, "max_batch_size": 256}}
    return engine.load_scenario(data)


def azure_rows(path):
    """(seconds since the first request, prompt, output) of each row, read with the csv module."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    times = [datetime.strptime(r["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f") for r in rows]
    return [((t - times[0]).total_seconds(), int(r["ContextTokens"]), int(r["GeneratedTokens"]))
            for t, r in zip(times, rows)]


def mooncake_rows(path):
    """(seconds, prompt, output) of each line, read with the json module, in arrival order."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return sorted((r["timestamp"] / 1000.0, r["input_length"], r["output_length"]) for r in lines)


@pytest.mark.parametrize("path, rows", [(AZURE_CODE, 1000), (AZURE_CONV, 2000)])
def test_azure_2023(path, rows):
    """The reader against the rows counted here: every request, its arrival (100 ns resolution) and lengths."""
    assert guess_trace_format(path) == "azure"
    trace = read_trace(path, "azure")
    expected = azure_rows(path)
    assert len(trace.arrival_s) == len(expected) == rows and trace.class_names is None
    assert trace.arrival_s[0] == 0.0 and np.all(np.diff(trace.arrival_s) >= 0)
    assert trace.arrival_s == pytest.approx([r[0] for r in expected], abs=1e-6)
    assert list(trace.prompt_tokens) == [r[1] for r in expected]
    assert list(trace.output_tokens) == [r[2] for r in expected]


@pytest.mark.parametrize("path, rows", [(MOONCAKE_CONVERSATION, 1500), (MOONCAKE_SYNTHETIC, 500)])
def test_mooncake(path, rows):
    assert guess_trace_format(path) == "mooncake"
    trace = read_trace(path, "mooncake")
    expected = mooncake_rows(path)
    assert len(trace.arrival_s) == rows
    assert list(trace.arrival_s) == [r[0] - expected[0][0] for r in expected]
    assert sorted(zip(trace.prompt_tokens, trace.output_tokens)) == sorted((r[1], r[2]) for r in expected)


def test_replay_spreads_classes_by_share_and_cuts_by_count():
    scenario = replay(AZURE_CONV, "azure", num_requests=1500)
    frame = engine.simulate(scenario).requests
    assert len(frame) == 1500
    assert (frame["class"] == "chat").mean() == pytest.approx(0.6, abs=0.04)
    again = engine.simulate(scenario).requests
    assert (frame["class"] == again["class"]).all()


def test_mooncake_jitter_spreads_quantised_timestamps():
    plain = read_trace(MOONCAKE_CONVERSATION, "mooncake")
    assert np.mean(np.diff(plain.arrival_s) == 0) > 0.5
    data = {"workload": {"classes": CLASSES, "num_requests": 1500,
                         "trace": {"path": str(MOONCAKE_CONVERSATION), "format": "mooncake", "jitter_ms": 3000}},
            "server": {"max_batch_size": 512, "max_batched_tokens": 200_000}}
    arrivals = engine.simulate(engine.load_scenario(data)).requests["arrival_s"].to_numpy()
    assert np.all(np.diff(arrivals) >= 0) and np.mean(np.diff(arrivals) == 0) < 0.01


def test_own_csv_with_classes_and_rate_scale(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,class\n2.0,5,3,batch\n0.0,4,2,\n4.0,6,1,chat\n")
    trace = read_trace(path, "csv")
    assert list(trace.arrival_s) == [0.0, 2.0, 4.0] and list(trace.class_names) == [None, "batch", "chat"]
    data = {"workload": {"classes": CLASSES, "trace": {"path": str(path), "rate_scale": 2.0}}}
    frame = engine.simulate(engine.load_scenario(data)).requests
    assert list(frame["arrival_s"]) == [0.0, 1.0, 2.0]
    assert list(frame["class"])[1:] == ["batch", "chat"]
    assert unclassed_requests(engine.load_scenario(data)) == 1, "the row without a class gets one by the shares"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,4,2\n1,5,3\n")
    assert unclassed_requests(engine.load_scenario(data)) == 2, "no class column: every request"
    assert unclassed_requests(engine.load_scenario(SCENARIOS / "example.toml")) == 0, "no trace"


@pytest.mark.parametrize("text, message", [
    ("arrival_s,prompt_tokens\n0,5\n", "missing column 'output_tokens'"),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,x,3\n",
     r"line 3: prompt_tokens = 'x' must be an integer from 1 to 10,000,000"),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,0\n", r"line 2: output_tokens = '0' must be an integer from 1"),
    ("arrival_s,prompt_tokens,output_tokens\n-1,5,3\n", r"line 2: arrival_s = '-1' must be a number >= 0"),
    ("arrival_s,prompt_tokens,output_tokens\n", "has a header but no rows"),
    ("", "the file is empty"),
])
def test_malformed_csv_rows_are_named(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        read_trace(path, "csv")


@pytest.mark.parametrize("lines, message", [
    (['{"timestamp": 0, "input_length": 5, "output_length": 2}', "{oops"], "line 2: not valid JSON"),
    (['{"timestamp": 0, "input_length": 5}'], "line 1: missing field 'output_length'"),
    (['{"timestamp": 0, "input_length": 2.5, "output_length": 2}'], "line 1: input_length = 2.5 must be an integer"),
])
def test_malformed_mooncake_lines_are_named(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=message):
        read_trace(path, "mooncake")


def test_bad_azure_timestamp_and_unknown_class(tmp_path):
    azure = tmp_path / "a.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\nyesterday,1,1\n")
    with pytest.raises(TraceError, match="line 3: TIMESTAMP = 'yesterday' is not a date-time"):
        read_trace(azure, "azure")
    own = tmp_path / "c.csv"
    own.write_text("arrival_s,prompt_tokens,output_tokens,class\n0,5,3,vip\n")
    with pytest.raises(TraceError, match="class 'vip' .* known classes: chat, batch"):
        engine.simulate(engine.load_scenario({"workload": {"classes": CLASSES, "trace": {"path": str(own)}}}))
