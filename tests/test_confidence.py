"""The confidence beside a plan: the held-out error of the closest validated configuration (the same model, GPU,
engine and layout; else a model of the same kind there), never a GPU family's average; a mixture of experts, FP4
weights or expert parallelism without such a check is an estimate and may not win a ranking."""

import pandas as pd
import pytest

from engine.calibrate.confidence import closest_check, confidence, metric_words, step_badge
from engine.calibrate.held_out import CONFIGURATIONS_FILE, TABLES, model_kind
from engine.hardware.tables import calibration_row
from engine.scenario.config import Server

SHIPPED = pd.read_csv(CONFIGURATIONS_FILE)


def server(**keys) -> Server:
    return Server(step_model="roofline", **keys)


def shipped(model, gpu, engine, split=False, quant="fp8") -> pd.Series:
    rows = SHIPPED[(SHIPPED["model"] == model) & (SHIPPED["gpu"] == gpu) & (SHIPPED["engine"] == engine)
                   & (SHIPPED["priced_by"] == TABLES) & (SHIPPED["expert_parallel"] == split)
                   & (SHIPPED["quant"] == quant)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_a_plan_of_a_validated_configuration_shows_its_own_held_out_error_not_the_familys():
    row = shipped("Llama-3.1-70B", "H200", "tensorrt-llm")
    trust = confidence(server(gpu="H200", model="Llama-3.1-70B", quant="fp8", engine="tensorrt-llm",
                              tensor_parallel=4))
    assert trust.priced_by == TABLES and trust.trusted
    assert trust.error_pct == row["median_abs_error_pct"]
    assert trust.error_pct != calibration_row("H200")["held_out_median_abs_error_pct"]
    assert trust.check == (f"{row['median_abs_error_pct']:.0f}% off on {row['runs']} held-out runs of Llama-3.1-70B "
                           f"on H200{metric_words(pd.DataFrame([row]))}")
    assert trust.short.startswith("measured kernels (TensorRT-LLM ")


def test_a_validated_configuration_far_off_is_an_estimate():
    """DeepSeek-V3 in FP8 on H200 with SGLang is checked, but its held-out runs are far off (its time to first token
    much too long): a plan of it is an estimate, which cannot win a ranking ahead of a plan checked closer."""
    row = shipped("DeepSeek-V3", "H200", "sglang")
    trust = confidence(server(gpu="H200", model="DeepSeek-V3", quant="fp8", engine="sglang", tensor_parallel=8))
    assert row["median_abs_error_pct"] > 25 and trust.error_pct == row["median_abs_error_pct"]
    assert not trust.trusted and trust.check.startswith(f"estimate: {row['median_abs_error_pct']:.0f}% off on ")


def test_expert_parallelism_is_checked_on_runs_that_split_the_experts():
    """DeepSeek-R1's runs on B200 with SGLang, with its experts split (listed under DeepSeek-R1 only) and whole
    (under DeepSeek-R1 and DeepSeek-V3, one shape: their errors weighted by their runs)."""
    split = shipped("DeepSeek-R1", "B200", "sglang", True, quant="nvfp4")  # the only split runs: NVFP4
    whole = pd.DataFrame([shipped(model, "B200", "sglang") for model in ("DeepSeek-R1", "DeepSeek-V3")])
    base = dict(gpu="B200", model="DeepSeek-R1", quant="fp8", engine="sglang", tensor_parallel=8)
    assert confidence(server(**base, expert_parallel=True)).error_pct == split["median_abs_error_pct"]
    assert confidence(server(**base)).error_pct == pytest.approx(
        (whole["median_abs_error_pct"] * whole["runs"]).sum() / whole["runs"].sum())
    assert "on NVFP4 weights, not FP8 on B200 with its experts split over the cards" in confidence(
        server(**base, expert_parallel=True)).check


def test_a_model_without_its_own_check_takes_the_closest_of_its_kind_on_that_gpu_and_engine():
    words, error, runs = closest_check("Kimi-K2", model_kind("Kimi-K2"), "H200", "sglang", TABLES)
    alike = SHIPPED[(SHIPPED["gpu"] == "H200") & (SHIPPED["engine"] == "sglang") & (SHIPPED["priced_by"] == TABLES)
                    & (SHIPPED["kind"] == "MLA MoE") & ~SHIPPED["expert_parallel"] & (SHIPPED["runs"] >= 3)]
    assert runs == alike["runs"].sum()
    assert error == pytest.approx((alike["median_abs_error_pct"] * alike["runs"]).sum() / runs)
    assert words.startswith(f"{error:.0f}% off on {runs} held-out runs of MLA MoE models on H200"
                            f"{metric_words(alike)} (closest checked: ")


@pytest.mark.parametrize("keys, what", [
    (dict(gpu="L40S", model="Mixtral-8x7B", quant="fp8", engine="vllm", tensor_parallel=2), "mixture of experts"),
    (dict(gpu="B200", model="Llama-3.1-8B", quant="nvfp4", engine="sglang"), "FP4 weights"),
])
def test_an_unchecked_moe_or_fp4_plan_is_an_estimate_that_cannot_win(keys, what):
    trust = confidence(server(**keys))
    assert not trust.trusted and trust.error_pct is None
    assert trust.check == f"estimate: no held-out run of a configuration like it ({what})"
    assert trust.short.endswith(", estimate")


def test_an_unchecked_dense_plan_leans_on_its_gpu_familys_calibration_and_says_so():
    trust = confidence(server(gpu="H200", model="Llama-3.1-8B", engine="sglang"))  # no dense run checked there
    assert trust.trusted and trust.error_pct is None
    assert trust.check.startswith("not yet checked on a held-out run of this model, GPU and engine; its GPU "
                                  "family is calibrated (")


def test_a_slice_is_never_trusted_and_says_it_is_timed_as_its_share():
    badge = step_badge(server(gpu="H100-80G-MIG-3g.40gb", model="Llama-3.1-8B", engine="vllm"))
    assert badge.startswith("Roofline estimate (no measured operator tables for H100-80G-MIG-3g.40gb)")
    assert "is timed as its share of a whole H100-80G" in badge
    assert not confidence(server(gpu="H100-80G-MIG-3g.40gb", model="Llama-3.1-8B", engine="vllm")).trusted


def test_a_run_counts_once_whatever_figures_it_gave():
    """The runs a badge and the validation report count are runs: a published run's mean, median and p99 of its
    time to first token, per output token and end to end, and its output tokens a second, are one; so are a
    silicon-sample run's two figures."""
    from engine.calibrate import silicon_sample
    from engine.calibrate.calibration import measurements
    from engine.calibrate.held_out import run_count
    published = measurements()
    one_load = published[published.index.str.startswith("dstack-dsr1-mi300x-vllm-tp8-c128-3200-800-")]
    assert len(one_load) == 10 and run_count(one_load) == 1
    silicon = silicon_sample.validation_rows()[0].head(4)  # two runs, a time to first token and per output token each
    assert run_count(silicon) == 2 and run_count(pd.concat([one_load, silicon])) == 3


def test_a_model_of_the_very_same_shape_is_its_own_check():
    """DeepSeek-R1 is DeepSeek-V3's shape: where the held-out runs of that GPU and engine are listed under
    DeepSeek-V3 alone, a DeepSeek-R1 plan reads them, not an average over other models of its kind."""
    from engine.calibrate.confidence import same_shape
    assert same_shape("DeepSeek-R1") == ["DeepSeek-R1", "DeepSeek-V3"] and same_shape("mine") == ["mine"]
    row = shipped("DeepSeek-V3", "H200", "sglang")
    assert not len(SHIPPED[(SHIPPED["model"] == "DeepSeek-R1") & (SHIPPED["gpu"] == "H200")
                           & (SHIPPED["engine"] == "sglang") & ~SHIPPED["expert_parallel"]])
    words, error, runs = closest_check("DeepSeek-R1", "MLA MoE", "H200", "sglang", TABLES)
    assert (error, runs) == (row["median_abs_error_pct"], row["runs"])
    assert words == (f"{error:.0f}% off on {runs} held-out runs of DeepSeek-V3 (the same shape as DeepSeek-R1) on "
                     f"H200{metric_words(pd.DataFrame([row]))}")


def test_a_check_gives_each_metric_its_own_error_and_time_to_first_tokens_direction():
    """Time per output token and time to first token each with their own held-out error, weighted by runs over the
    configurations a check reads, and which way time to first token errs at the median; a configuration without a
    figure of one metric gives none of it."""
    rows = pd.DataFrame({"runs": [10, 30], "tpot_median_abs_error_pct": [10.0, 20.0],
                         "ttft_median_abs_error_pct": [40.0, float("nan")],
                         "ttft_median_signed_error_pct": [-30.0, float("nan")]})
    assert metric_words(rows) == (": time per output token 18% off, time to first token 40% off (too short by 30% at "
                                  "the median)")
    rows["ttft_median_signed_error_pct"] = [12.0, float("nan")]
    assert metric_words(rows).endswith("(too long by 12% at the median)")
    assert metric_words(rows.drop(columns=["ttft_median_abs_error_pct", "ttft_median_signed_error_pct"])) == \
        ": time per output token 18% off"
    assert metric_words(rows.drop(columns=["tpot_median_abs_error_pct", "ttft_median_abs_error_pct"])) == ""
    rows["ttft_p99_median_abs_error_pct"] = [float("nan"), 25.0]  # a p99 only where a source measured one
    assert metric_words(rows).endswith("(too long by 12% at the median), its p99 25% off")


def _checks(monkeypatch, rows: list[dict]) -> None:
    """The shipped configurations replaced by ``rows`` (one model, GPU and engine priced by the tables)."""
    from engine.calibrate import confidence as module
    base = {"model": "Llama-3.1-8B", "gpu": "H200", "engine": "vllm", "priced_by": TABLES, "kind": "dense",
            "expert_parallel": False, "sources": "x", "tpot_median_abs_error_pct": 10.0,
            "ttft_median_abs_error_pct": 30.0, "tpot_median_signed_error_pct": -8.0,
            "ttft_median_signed_error_pct": -30.0}
    monkeypatch.setattr(module, "shipped_configurations", lambda: pd.DataFrame([{**base, **r} for r in rows]))


def test_a_check_further_off_than_the_limit_is_an_estimate_that_cannot_win(monkeypatch):
    """The same check at 25% may win a ranking and at 26% may not: the plan is then an estimate, which the words
    say with the check itself, its metrics and their directions."""
    from engine.calibrate.confidence import TRUST_LIMIT_PCT
    plan = server(gpu="H200", model="Llama-3.1-8B", engine="vllm", quant="fp16")
    _checks(monkeypatch, [{"quant": "fp16", "runs": 10, "median_abs_error_pct": TRUST_LIMIT_PCT}])
    assert confidence(plan).trusted and confidence(plan).error_pct == 25.0
    _checks(monkeypatch, [{"quant": "fp16", "runs": 10, "median_abs_error_pct": 26.0}])
    trust = confidence(plan)
    assert not trust.trusted and trust.error_pct == 26.0
    assert trust.check == ("estimate: 26% off on 10 held-out runs of Llama-3.1-8B on H200: time per output token 10% "
                           "off (too short by 8% at the median), time to first token 30% off (too short by 30% at "
                           "the median); more than 25% off, so never recommended ahead of a plan checked closer")
    assert trust.short.endswith(", estimate (26% off on 10 held out)")


def test_a_check_is_read_in_the_plans_weight_format_where_one_was_run_and_names_the_formats_where_not(monkeypatch):
    _checks(monkeypatch, [{"quant": "fp8", "runs": 10, "median_abs_error_pct": 10.0},
                          {"quant": "nvfp4", "runs": 30, "median_abs_error_pct": 20.0}])
    fp8 = confidence(server(gpu="H200", model="Llama-3.1-8B", engine="vllm", quant="fp8"))
    assert (fp8.error_pct, fp8.check.split(":")[0]) == (10.0, "10% off on 10 held-out runs of Llama-3.1-8B on H200")
    fp16 = confidence(server(gpu="H200", model="Llama-3.1-8B", engine="vllm", quant="fp16"))
    assert fp16.error_pct == 17.5
    assert fp16.check.startswith("18% off on 40 held-out runs of Llama-3.1-8B on FP8 and NVFP4 weights, not FP16 on "
                                 "H200: ")
    _checks(monkeypatch, [{"quant": "bf16", "runs": 10, "median_abs_error_pct": 10.0},
                          {"quant": "fp8", "runs": 30, "median_abs_error_pct": 20.0}])
    same_math = confidence(server(gpu="H200", model="Llama-3.1-8B", engine="vllm", quant="fp16"))
    assert same_math.error_pct == 10.0 and " weights, not " not in same_math.check  # BF16 runs check an FP16 plan
