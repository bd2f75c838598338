"""The report ``bench/validate.py`` writes: every run it leaves out is counted with its reason, the silicon sample's
skipped runs and the runs that cannot be replayed as published alike, so no run drops out of the figures unseen; and
the operator-table peer's own answer (``engine.calibrate.peer``) beside ours on the same runs."""

import importlib.util
import sys

import pytest

from conftest import REPO
from engine.calibrate import peer, silicon_sample
from engine.calibrate.calibration import replay_problem

sys.path.insert(0, str(REPO / "bench"))  # the script imports its neighbours as a script would
SPEC = importlib.util.spec_from_file_location("validate", REPO / "bench" / "validate.py")
validate = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(validate)


def test_the_report_counts_every_run_it_leaves_out_with_its_reason():
    rows = silicon_sample.validation_rows()[0]
    runs = silicon_sample.run_ids(rows.index)
    unreplayable = next(run for run in dict.fromkeys(runs) if replay_problem(rows[runs == run].iloc[0]))
    replayable = next(run for run in dict.fromkeys(runs) if not replay_problem(rows[runs == run].iloc[0]))
    chosen = rows[runs.isin([unreplayable, replayable])]
    predicted = chosen[chosen.index.str.startswith(replayable)]
    text = validate.left_out(chosen, predicted, {"disaggregated (prefill and decode pools)": 3})
    assert "- disaggregated (prefill and decode pools): 3" in text
    assert "- cannot be replayed as published: server.tensor_parallel = n is not allowed" in text
    assert text.count("cannot be replayed") == 1 and text.rstrip().endswith(": 1")  # one run, not its two metrics
    assert validate.left_out(predicted, predicted, {}) == ""


PEER_RUNS = {"sglang": "2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c128_tp8_0_ep1_0_280",
             "gpt-oss labelled NVFP4": "2026_03_25_gpt_oss_120b_b200_sxm_vllm_fp4_agg_1024x8192_c4_tp4_0_ep1_0_612",
             "TP36": "2026_04_06_deepseek_r1_gb200_trtllm_fp4_agg_1024x1024_c32_tp36_ep1_11",
             "FP8 KV": "meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h200_sxm_sglang_agg_1000x100_"
                       "c160_tp1_epnone_1"}


def test_the_peer_answers_each_run_and_says_why_it_gives_none():
    """The package's aggregated estimate of DeepSeek-R1 FP8 on 8 x B200 with SGLang at 128 clients, 8k/1k tokens: a
    first token after more than one output token's time, each output token within a factor of two of the measured
    one; a row labelling gpt-oss's MXFP4 experts NVFP4 is answered with the formats the package reads from the
    checkpoint, and an FP8 Llama on SGLang, whose FP8-KV dense attention the package lacks on H200, with the KV format
    it infers; 36 cards split 128 heads unevenly: none."""
    rows = silicon_sample.validation_rows()[0]
    run = rows.loc[PEER_RUNS["sglang"] + "-tpot"]
    figures, why = peer.row_estimate(run)
    assert why == "" and figures["ttft_mean_ms"] > figures["tpot_mean_ms"] > 0
    assert 0.5 < figures["tpot_mean_ms"] / run["measured"] < 2
    relabelled, why = peer.row_estimate(rows.loc[PEER_RUNS["gpt-oss labelled NVFP4"] + "-tpot"])
    assert why == "" and relabelled["tpot_mean_ms"] > 0
    assert peer.row_estimate(rows.loc[PEER_RUNS["FP8 KV"] + "-tpot"])[1] == ""
    assert peer.row_estimate(rows.loc[PEER_RUNS["TP36"] + "-tpot"]) == ({}, "the package refuses it (AssertionError)")


def test_the_peer_tries_the_files_formats_first_then_the_kv_format_then_all_it_infers(monkeypatch):
    """The order ``peer.estimate`` promises, on a bundled checkpoint whose formats the package refuses twice: the
    file's weight formats with the replay's KV format, then with the KV format inferred, then every format inferred;
    a first answer that does not fit the cards ends the search with that reason."""
    from aiconfigurator_core.sdk import common

    asked = []

    def refuse_twice(run, version, model_path, gemm, moe, kv):
        asked.append((gemm, moe, kv))
        if len(asked) < 3:
            raise KeyError("no kernel data")
        return {"ttft": 100.0, "tpot": 10.0}

    monkeypatch.setattr(peer, "_run_agg", refuse_twice)
    peer.estimate.cache_clear()
    rows = silicon_sample.validation_rows()[0]
    run = rows.loc[PEER_RUNS["sglang"] + "-tpot"]
    assert peer.row_estimate(run) == ({"ttft_mean_ms": 100.0, "tpot_mean_ms": 10.0}, "")
    fp8 = (common.GEMMQuantMode.fp8, common.MoEQuantMode.fp8_block)  # the file's labels
    assert asked == [(*fp8, common.KVCacheQuantMode.fp8), (*fp8, None), (None, None, None)]
    monkeypatch.setattr(peer, "_run_agg", lambda *args: None)
    peer.estimate.cache_clear()
    assert peer.row_estimate(run) == ({}, "does not fit the cards as the package budgets memory")
    peer.estimate.cache_clear()


def test_the_report_sets_the_peers_error_beside_ours_on_the_same_runs():
    rows = silicon_sample.validation_rows()[0]
    chosen = rows[silicon_sample.run_ids(rows.index).isin(PEER_RUNS.values())]
    table = chosen.assign(predicted=chosen["measured"] * 1.1, fitted=False, held_out_source=True,
                          source="aiconfigurator-core silicon sample", priced_by="operator tables",
                          error_roofline_pct=5.0, kind="MLA MoE", layout="TP8",
                          metric_kind=chosen["metric"].map({"ttft_mean_ms": "time to first token",
                                                            "tpot_mean_ms": "time per output token"}))
    table["error_pct"] = 10.0
    table = validate.with_peer(table)
    sglang = table.loc[[PEER_RUNS["sglang"] + "-ttft", PEER_RUNS["sglang"] + "-tpot"]]
    figures = peer.row_estimate(chosen.loc[PEER_RUNS["sglang"] + "-tpot"])[0]
    assert sglang["predicted_peer"].tolist() == [figures["ttft_mean_ms"], figures["tpot_mean_ms"]]  # each its own
    assert table.loc[PEER_RUNS["TP36"] + "-ttft", "peer_none"] == "the package refuses it (AssertionError)"
    text = validate.report(table)
    assert "- After, on the same runs: TPOT MoE/MLA 10% (max 10%, 3 runs); TTFT 10% (max 10%, 3 runs)" in text
    assert "- The peer gives no figure for 1 run (the package refuses it (AssertionError))" in text
    assert "peer time per output token median" in text


def test_time_to_first_token_is_reported_by_engine_and_clients_and_by_lengths_with_its_sign():
    """Runs fall in the concurrency band of their clients (an open-loop run in its own), and the report gives the
    median signed error of time to first token beside the absolute one: one run 50% long and two 10% short have an
    absolute median of 10% and a signed one of -10%."""
    assert [validate.clients_band(b, 0.0) for b in (1, 8, 9, 32, 64, 128, 129)] == \
        ["1-8", "1-8", "9-32", "9-32", "33-128", "33-128", "129 and more"]
    assert validate.clients_band(1, 2.5) == "at a rate"
    from engine.calibrate.held_out import LOAD_COLUMNS, summary
    import pandas as pd
    table = pd.DataFrame({"engine": ["sglang"] * 3, "clients": ["1-8"] * 3, "metric_kind": ["time to first token"] * 3,
                          "error_pct": [50.0, -10.0, -10.0], "document": [silicon_sample.SOURCE] * 3},
                         index=["a-ttft", "b-ttft", "c-ttft"]).assign(**{c: 0 for c in LOAD_COLUMNS if c != "engine"})
    row = summary(table, ["engine", "clients"]).iloc[0]
    assert row["time to first token median"] == 10.0 and row["time to first token signed median"] == -10.0
    assert ["engine", "clients"] in validate.GROUPS and ["lengths"] in validate.GROUPS


def test_a_p99_is_judged_apart_from_the_means_and_medians_of_the_same_runs():
    """A run's mean and median are one centre; its p99 is its own figure, with its own median error and sign, in the
    headline and in every table: a mean 10% long and a p99 40% short give a TTFT of 10% and a TTFT p99 of 40%."""
    import pandas as pd
    from engine.calibrate.held_out import LOAD_COLUMNS, TAIL, configurations, figure_kind, summary
    assert figure_kind("ttft_p99_ms") == "time to first token" + TAIL
    assert figure_kind("ttft_median_ms") == figure_kind("ttft_mean_ms") == "time to first token"
    assert figure_kind("tpot_p99_ms") == "time per output token" + TAIL
    table = pd.DataFrame({"engine": ["vllm"] * 3, "metric": ["ttft_mean_ms", "ttft_p99_ms", "tpot_p99_ms"],
                          "error_pct": [10.0, -40.0, 5.0], "document": ["a page"] * 3, "model": ["Llama-3.1-8B"] * 3,
                          "gpu": ["H100-80G"] * 3, "priced_by": ["roofline"] * 3, "parallel": [None] * 3,
                          "source": ["dstack"] * 3, "kind": ["dense"] * 3},
                         index=["m", "p", "t"]).assign(**{c: 0 for c in LOAD_COLUMNS
                                                          if c not in ("engine", "document", "model", "gpu")})
    table["metric_kind"] = table["metric"].map(figure_kind)
    row = summary(table, ["engine"]).iloc[0]
    assert row["time to first token median"] == 10.0 and row["time to first token p99 median"] == 40.0
    assert row["time to first token p99 signed median"] == -40.0
    assert "time per output token p99 signed median" not in row
    assert "TTFT 10% (max 10%, 1 runs); TTFT p99 40% (max 40%, 1 runs); TPOT p99 5%" in validate._medians(
        table, "error_pct")
    (shipped,) = configurations(table).to_dict("records")
    assert shipped["ttft_median_abs_error_pct"] == 10.0 and shipped["ttft_p99_median_abs_error_pct"] == 40.0
    assert shipped["tpot_median_abs_error_pct"] != shipped["tpot_median_abs_error_pct"]  # NaN: no centre measured
