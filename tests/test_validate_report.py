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
    runs = rows.index.str.rsplit("-", n=1).str[0]
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


def test_the_peer_answers_as_its_own_estimate_does_and_says_why_it_gives_none():
    """The package's aggregated estimate of DeepSeek-R1 FP8 on 8 x B200 with SGLang at 128 clients, 8k/1k tokens,
    with a context budget of one prompt (cli_estimate's default); a row labelling gpt-oss's MXFP4 experts NVFP4 is
    answered with the formats the package reads from the checkpoint, and an FP8 Llama on SGLang, whose FP8-KV dense
    attention the package lacks on H200, with the KV format it infers; 36 cards split 128 heads unevenly: none."""
    rows = silicon_sample.validation_rows()[0]
    figures, why = peer.row_estimate(rows.loc[PEER_RUNS["sglang"] + "-tpot"])
    assert why == "" and figures["ttft_mean_ms"] == pytest.approx(745.6, rel=1e-3)
    assert figures["tpot_mean_ms"] == pytest.approx(45.26, rel=1e-3)
    relabelled, why = peer.row_estimate(rows.loc[PEER_RUNS["gpt-oss labelled NVFP4"] + "-tpot"])
    assert why == "" and relabelled["tpot_mean_ms"] > 0
    assert peer.row_estimate(rows.loc[PEER_RUNS["FP8 KV"] + "-tpot"])[1] == ""
    assert peer.row_estimate(rows.loc[PEER_RUNS["TP36"] + "-tpot"]) == ({}, "the package refuses it (AssertionError)")


def test_the_report_sets_the_peers_error_beside_ours_on_the_same_runs():
    rows = silicon_sample.validation_rows()[0]
    chosen = rows[rows.index.str.rsplit("-", n=1).str[0].isin(PEER_RUNS.values())]
    table = chosen.assign(predicted=chosen["measured"] * 1.1, fitted=False, held_out_source=True,
                          source="aiconfigurator-core silicon sample", priced_by="operator tables",
                          error_roofline_pct=5.0, kind="MLA MoE", layout="TP8",
                          metric_kind=chosen["metric"].map({"ttft_mean_ms": "time to first token",
                                                            "tpot_mean_ms": "time per output token"}))
    table["error_pct"] = 10.0
    table = validate.with_peer(table)
    sglang = table.loc[[PEER_RUNS["sglang"] + "-ttft", PEER_RUNS["sglang"] + "-tpot"]]
    assert sglang["predicted_peer"].tolist() == pytest.approx([745.6, 45.26], rel=1e-3)  # each metric its own
    assert table.loc[PEER_RUNS["TP36"] + "-ttft", "peer_none"] == "the package refuses it (AssertionError)"
    text = validate.report(table)
    assert "- After, on the same runs: TPOT MoE/MLA 10% (max 10%, 3 runs); TTFT 10% (max 10%, 3 runs)" in text
    assert "- The peer gives no figure for 1 run (the package refuses it (AssertionError))" in text
    assert "peer time per output token median" in text
