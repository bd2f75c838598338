"""Trace readers on the team's real trace files, and clear errors on malformed ones."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import engine
from conftest import REPO
from engine.scenario.errors import TraceError
from engine.sim.traces import guess_trace_format, read_trace

CLASSES = [{"name": "chat", "share": 0.6}, {"name": "batch", "share": 0.4}]


def replay(path, fmt, tmp_path=None, **workload):
    data = {"seed": 3, "workload": {"classes": CLASSES, "trace": {"path": str(path), "format": fmt}, **workload},
            "server": {"step_model": "fixed", "step_time_ms": 1.0, "max_batch_size": 256}}
    return engine.load_scenario(data)


@pytest.mark.parametrize("name, rows, span_s, mean_in, mean_out", [
    ("AzureLLMInferenceTrace_code.csv", 8819, 3436, 2048, 27.9),
    ("AzureLLMInferenceTrace_conv.csv", 19366, 3502, 1155, 211),
])
def test_azure_2023(traces_dir, name, rows, span_s, mean_in, mean_out):
    path = traces_dir / "azure_llm_2023" / name
    assert guess_trace_format(path) == "azure"
    trace = read_trace(path, "azure")
    assert len(trace.arrival_s) == rows and trace.class_names is None
    assert trace.arrival_s[0] == 0.0 and np.all(np.diff(trace.arrival_s) >= 0)
    assert trace.arrival_s[-1] == pytest.approx(span_s, abs=1.0)
    assert trace.prompt_tokens.mean() == pytest.approx(mean_in, rel=0.001)
    assert trace.output_tokens.mean() == pytest.approx(mean_out, rel=0.002)


@pytest.mark.parametrize("name, rows, mean_in, mean_out", [
    ("conversation_trace.jsonl", 12031, 12035, 343), ("synthetic_trace.jsonl", 3993, 15325, 149)])
def test_mooncake(traces_dir, name, rows, mean_in, mean_out):
    path = traces_dir / "mooncake_fast25" / name
    assert guess_trace_format(path) == "mooncake"
    trace = read_trace(path, "mooncake")
    assert len(trace.arrival_s) == rows
    assert trace.prompt_tokens.mean() == pytest.approx(mean_in, rel=0.001)
    assert trace.output_tokens.mean() == pytest.approx(mean_out, rel=0.003)


def test_replay_spreads_classes_by_share_and_cuts_by_count(traces_dir):
    scenario = replay(traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv", "azure",
                      num_requests=5000)
    frame = engine.simulate(scenario).requests
    assert len(frame) == 5000
    assert (frame["class"] == "chat").mean() == pytest.approx(0.6, abs=0.03)
    again = engine.simulate(scenario).requests
    assert (frame["class"] == again["class"]).all()


def test_mooncake_jitter_spreads_quantised_timestamps(traces_dir):
    path = traces_dir / "mooncake_fast25" / "conversation_trace.jsonl"
    plain = read_trace(path, "mooncake")
    assert np.mean(np.diff(plain.arrival_s) == 0) > 0.5
    data = {"workload": {"classes": CLASSES, "num_requests": 2000,
                         "trace": {"path": str(path), "format": "mooncake", "jitter_ms": 3000}},
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


@pytest.mark.parametrize("text, message", [
    ("arrival_s,prompt_tokens\n0,5\n", "missing column 'output_tokens'"),
    ("arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,x,3\n", r"line 3: prompt_tokens = 'x' must be an integer from 1 to 10,000,000"),
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


def test_a_missing_trace_folder_is_named_in_the_test_summary(tmp_path):
    """Tests that need the team's traces skip with the folder and the fix in pytest's summary, never silently."""
    env = {**os.environ, "SCHEDULER_LAB_TRACES": str(tmp_path / "nowhere")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(REPO / "tests" / "test_trace_stats.py")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert re.search(r"SKIPPED \[\d+\] .*team traces not found at .*nowhere: put them at \.\./shared/traces",
                     done.stdout), done.stdout[-2000:]
