"""Run summaries shared by the app's processes on disk (``ui.shared_summaries``), as ``python -m ui.serve`` sets
them up: a summary another process ran is read, not run again; it reads back as the run gave it; a damaged file is
no summary; the folder keeps to its bound, dropping what was used longest ago."""

import json
import os

import pandas as pd
import pytest

from conftest import SCENARIOS
from engine.scenario.config import apply_overrides, read_toml
from engine.sim.simulate import run_summary
from engine.sim.sweep import tagged_frame
from ui import runner, shared_summaries
from ui.result_cache import ResultCache
from ui.shared_summaries import SHARED_DIR_ENV, SharedSummaries

SMALL = apply_overrides(read_toml(SCENARIOS / "example.toml"), {"workload.num_requests": 300, "seed": 9191})


def test_a_summary_reads_back_as_the_run_gave_it(tmp_path):
    store = SharedSummaries(tmp_path)
    summary = run_summary(SMALL)
    store.put(("scenario", ""), summary)
    kept = store.get(("scenario", ""))
    assert kept == summary and store.get(("another", "")) is None
    pd.testing.assert_frame_equal(tagged_frame([(kept, {"policy": "fifo"})]),
                                  tagged_frame([(summary, {"policy": "fifo"})]))
    assert [p.suffix for p in tmp_path.iterdir()] == [".json"]  # no temporary file left behind


def test_a_damaged_file_is_no_summary(tmp_path):
    store = SharedSummaries(tmp_path)
    store.put("key", {"a": 1})
    path = next(tmp_path.iterdir())
    for damaged in ("{not json", "[1, 2]", ""):
        path.write_text(damaged)
        assert store.get("key") is None


def test_the_folder_keeps_to_its_bound_dropping_what_was_used_longest_ago(tmp_path):
    store = SharedSummaries(tmp_path, max_bytes=3 * len(json.dumps({"x": "y" * 100})) + 10)
    for k in range(5):
        store.put(k, {"x": "y" * 100})
        os.utime(store._path(k), (1000 + k, 1000 + k))
    os.utime(store._path(0), (2000, 2000))  # read last: kept
    store.prune()
    assert [store.get(k) is not None for k in range(5)] == [True, False, False, True, True]


def test_no_folder_named_no_sharing(monkeypatch, tmp_path):
    monkeypatch.delenv(SHARED_DIR_ENV, raising=False)
    assert shared_summaries.from_environment() is None
    monkeypatch.setenv(SHARED_DIR_ENV, str(tmp_path / "gone"))
    assert shared_summaries.from_environment() is None
    monkeypatch.setenv(SHARED_DIR_ENV, str(tmp_path))
    assert shared_summaries.from_environment().root == tmp_path


def test_a_process_reads_what_another_ran_instead_of_running_it(monkeypatch, tmp_path):
    """Process A runs a summary and writes it; process B (its own empty cache) reads it: B runs nothing."""
    key = runner.canonical(SMALL)
    monkeypatch.setattr(runner, "_SHARED", SharedSummaries(tmp_path))
    monkeypatch.setattr(runner, "_SUMMARIES", ResultCache(2 ** 20, 60, runner._summary_bytes))
    ran = runner.summary(key)
    monkeypatch.setattr(runner, "_SUMMARIES", ResultCache(2 ** 20, 60, runner._summary_bytes))

    def must_not_run(*_):
        raise AssertionError("the summary was run again")

    monkeypatch.setattr(runner, "run_summary", must_not_run)
    assert runner.summary(key) == ran
    with pytest.raises(AssertionError):  # a scenario no process ran is run
        runner.summary(runner.canonical(apply_overrides(SMALL, {"seed": 9192})))
