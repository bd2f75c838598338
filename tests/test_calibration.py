"""Calibration: the measurements table, the split kept for validation, the replay of a run, the joint fit of family and
engine factors, the shipped predictions and the held-out table of the manual (docs/method.md)."""

import hashlib
import math

import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from engine.calibrate import silicon_sample
from engine.calibrate.calibration import (METRICS, Case, badge, closed_loop_sent_s, measurement_scenario, measurements,
                                          predict, replay_problem, replayed_requests, status)
from engine.calibrate.calibration_report import expressed, markdown_table, validation
from engine.calibrate.joint_fit import (FIT_ROWS_PER_DOCUMENT, FIT_TOKEN_BUDGET, Factors, _fill_unfitted,
                                        fit_jointly, fit_sample, held_out, shipped_fit_date, split)
from engine.hardware.roofline import efficiency_for, roofline_profile, roofline_step_params, with_efficiency
from engine.hardware.steptime import step_time_s_nb
from engine.hardware.tables import ENGINE_FACTORS, FAMILY_FACTORS, Efficiency, load_table
from engine.scenario.config import Server, load_scenario
from engine.scenario.table_names import DATA_DIR
from engine.sim.layout import F_ARRIVAL, F_FINISH, F_FIRST_SCHEDULED, F_FIRST_TOKEN
from engine.sim.simulate import execute


def test_measurements_name_known_hardware_an_engine_and_a_source():
    table = pd.read_csv(DATA_DIR / "measurements.csv")
    assert table["id"].is_unique and table["source"].str.len().min() > 20
    assert set(table["metric"]) <= set(METRICS)
    assert set(table["gpu"]) <= set(load_table("gpus").index)
    assert set(table["model"]) <= set(load_table("models").index)
    assert set(table["quant"]) <= set(load_table("quant").index)
    assert set(table["kv_quant"]) <= set(load_table("kv_quant").index)
    assert set(table["engine"]) <= set(load_table("engines").index)
    assert table["document"].str.len().min() > 10
    assert (table["measured"] > 0).all() and (table["batch"] >= 1).all() and (table["requests"] >= 0).all()


def test_the_split_keeps_whole_pages_and_every_mla_run_apart():
    """Held out: the pages whose SHA-256 is 0 mod 3, and DeepSeek (MLA) whatever its page."""
    table = measurements()
    held = split(table)
    for document, rows in table.groupby("document"):
        page_held = int(hashlib.sha256(document.encode()).hexdigest(), 16) % 3 == 0
        dense = rows[rows["model"] != "DeepSeek-V3"]
        assert (held[dense.index] == page_held).all(), document
    assert held[table["model"] == "DeepSeek-V3"].all()
    for page in ("a", "b", "c", "d"):
        assert held_out(page, "DeepSeek-V3")
        assert held_out(page, "Llama-3-8B") == (int(hashlib.sha256(page.encode()).hexdigest(), 16) % 3 == 0)
    assert 0 < held.sum() < len(table)


def test_the_fit_replays_a_capped_sample_of_the_training_runs():
    """At most 24 runs a training page, each within the token budget and replayable, the lowest hashes first."""
    table = measurements()
    sample = fit_sample(table)
    assert not split(table)[sample.index].any()
    assert sample.groupby("document").size().max() == FIT_ROWS_PER_DOCUMENT
    for _, row in sample.iterrows():
        assert replayed_requests(row) * row["output_tokens"] <= FIT_TOKEN_BUDGET
    page = sample.groupby("document").size().idxmax()
    held = split(table)  # a training page's DeepSeek runs are held out all the same
    eligible = [key for key, row in table[table["document"] == page].iterrows()
                if replayed_requests(row) * row["output_tokens"] <= FIT_TOKEN_BUDGET and not replay_problem(row)
                and not held[key]]
    lowest = sorted(eligible, key=lambda key: int(hashlib.sha256(key.encode()).hexdigest(), 16))
    assert len(eligible) > FIT_ROWS_PER_DOCUMENT
    assert set(sample.index[sample["document"] == page]) == set(lowest[:FIT_ROWS_PER_DOCUMENT])


def test_every_gpu_family_and_engine_has_factors_and_counts():
    calibration, engines = load_table("calibration"), load_table("engines")
    assert set(load_table("gpus")["family"]) == set(calibration.index)
    shares = calibration[["compute_efficiency", "low_precision_compute_efficiency", "bandwidth_efficiency"]]
    assert shares.gt(0).all().all() and shares.le(1).all().all()
    sample, table = fit_sample(measurements(), shipped_fit_date()), validation()  # later rows: for the next fit
    for frame, column in ((calibration, "family"), (engines, "engine")):
        fitted = sample.groupby(column).size()
        held = table[table["held_out"] & expressed(table)].groupby(column).size()  # DeepSeek's runs apart
        for key, row in frame.iterrows():
            assert row["measurements"] == fitted.get(key, 0), key
            assert row["held_out_measurements"] == held.get(key, 0), key


def test_a_replay_runs_on_its_engine_with_its_admission_and_caps_its_requests():
    table = measurements()
    row = table[(table["engine"] == "tensorrt-llm") & (table["requests"] > 8192)].iloc[0]
    scenario = load_scenario(measurement_scenario(row))
    assert scenario.server.engine == "tensorrt-llm" and scenario.server.admission == "reserve-full"
    assert scenario.workload.num_requests == max(2000, 4 * int(row["batch"]))
    assert scenario.limits.max_waiting_requests >= scenario.workload.num_requests


def test_a_replay_runs_with_the_token_budget_its_engine_starts_with_on_that_card():
    """SGLang's chunk on a B200 (180 GiB) is 16,384 tokens, split over its data-parallel attention ranks; vLLM keeps
    8,192 on each rank; the budget is never below the batch."""
    row = measurements().iloc[0].copy()
    row[["gpu", "model", "quant", "kv_quant", "tensor_parallel", "batch", "requests", "rate_per_s"]] = \
        ["B200", "DeepSeek-R1", "fp8", "fp8", 8, 16, 64, 0.0]

    def budget(engine: str, parallel: str = "", batch: int = 16) -> int:
        row[["engine", "parallel", "batch"]] = [engine, parallel, batch]
        return load_scenario(measurement_scenario(row)).server.max_batched_tokens

    assert budget("sglang") == 16384 and budget("sglang", "dep") == 2048 and budget("sglang", "ep") == 16384
    assert budget("vllm") == 8192 and budget("vllm", "dep") == 8192 and budget("tensorrt-llm") == 8192
    assert budget("sglang", "dep", batch=4096) == 4096


@pytest.mark.parametrize("sizes, experts, parallel", [
    ((4, 1, 4, 1), True, ""), ((4, 1, 1, 4), True, "ep"), ((1, 4, 1, 4), True, "dep"), ((8, 1, 1, 1), False, ""),
    ((2, 2, 1, 4), True, None), ((1, 4, 2, 2), True, None), ((4, 1, 2, 2), True, None), ((1, 4, 4, 1), True, None),
    ((2, 2, 1, 1), False, None)])
def test_a_silicon_run_is_replayed_in_its_own_layout_or_left_out(sizes, experts, parallel):
    """(tensor, attention data, expert tensor, expert parallel sizes) -> the replay's layout; a hybrid (attention
    tensor-parallel inside data-parallel ranks, experts split both ways) is left out, never replayed as another."""
    assert silicon_sample.layout(*sizes, experts=experts) == parallel


def test_the_silicon_sample_counts_the_runs_it_leaves_out_by_reason():
    rows, skipped = silicon_sample.validation_rows()
    raw = silicon_sample.raw()
    assert sum(skipped.values()) + rows["source"].nunique() == len(raw)
    assert skipped[silicon_sample.HYBRID] > 0
    hybrid = raw[(raw["mode"] == "agg") & (raw["tp_size"] > 1) & (raw["attention_dp_size"] > 1)]
    assert not rows["source"].str.split(": ").str[-1].isin(hybrid["id"]).any()


def test_a_silicon_run_listed_twice_counts_once():
    """The file repeats runs (one DeepSeek run as DeepSeek-V3 and as DeepSeek-R1): each is validated once."""
    rows, skipped = silicon_sample.validation_rows()
    raw = silicon_sample.raw().set_index("id")
    assert skipped[silicon_sample.REPEAT] > 0
    kept = rows["source"].str.split(": ").str[-1]
    same_run = ["2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c128_tp8_0_ep1_0_280",
                "2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c128_tp8_ep1_1744"]
    assert raw.loc[same_run, ["silicon_ttft_ms", "silicon_tpot_ms"]].nunique().eq(1).all()
    assert kept.isin(same_run).sum() == 2  # one run, its two metrics
    settings = ["gpu", "engine", "engine_version", "quant", "tensor_parallel", "parallel", "batch", "input_tokens",
                "output_tokens", "metric", "measured"]
    assert not rows.duplicated(settings).any()


@pytest.mark.parametrize("dp, clients, batch, ranks", [
    (4.0, "224", 56.0, 4), (0.0, "16", 16.0, 1), (float("nan"), "16", 16.0, 1), (float("nan"), "224", 56.0, None),
    (float("nan"), None, 16.0, None)])
def test_a_silicon_run_without_its_attention_ranks_has_one_where_its_clients_are_its_batch(dp, clients, batch, ranks):
    source = "source_file=x.csv" + (f"; silicon_concurrency={clients}" if clients else "")
    run = pd.Series({"attention_dp_size": dp, "silicon_data_source": source, "batch_size": batch})
    assert silicon_sample.attention_ranks(run) == ranks


def test_a_silicon_run_that_gives_no_precision_runs_its_checkpoints_own_weights():
    rows = silicon_sample.validation_rows()[0]
    raw = silicon_sample.raw()
    unnamed = raw[raw["precision"].isna() & (raw["mode"] == "agg")]
    assert set(unnamed["model_path"]) == set(silicon_sample.CHECKPOINT_PRECISION)
    kept = rows[rows["source"].str.split(": ").str[-1].isin(unnamed["id"])]
    assert set(kept["quant"]) == {"bf16"} and set(kept["model"]) == {"Qwen3-32B", "Llama-3.1-8B"}


def test_batch_one_decode_prediction_by_hand():
    """One request, prompt 128, 128 outputs: TPOT = mean of the decode steps at contexts 128..254, each
    (weights + KV x (context + 1)) / bandwidth + overhead (memory-bound at batch 1)."""
    row = measurements().loc["lmdeploy-a100-7b-b1-tpot"]
    eff = Efficiency(0.6, 0.7, 1.5)
    p = roofline_profile(Server(step_model="roofline", gpu="A100-80G", model="Llama-2-7B"), efficiency=eff)
    steps = [(p.weight_bytes + p.kv_bytes_per_token * (ctx + 1)) / p.effective_bytes_per_s + p.iteration_overhead_s
             for ctx in range(128, 128 + 127)]
    assert predict(row, eff) == pytest.approx(sum(steps) / len(steps) * 1e3, rel=1e-9)


def test_smooth_roofline_by_hand():
    """Sharpness 2: an iteration takes sqrt(compute^2 + memory^2) + all-reduces + overhead; at the hard maximum, the
    larger. 128 tokens over TP2 take the one-shot all-reduce (one latency, one message per card)."""
    server = Server(step_model="roofline", gpu="A100-80G", model="Llama-2-70B", tensor_parallel=2)
    tokens, pairs, reads = 128, 128 * 600, 128 * 600
    times = {}
    for k in (0.0, 2.0):
        p = roofline_profile(server, efficiency=Efficiency(0.6, 0.7, 1.5, k, 1.0))
        flops = p.matmul_flops_per_token * tokens + p.attention_flops_per_context_token * pairs
        compute_s = flops / p.effective_flops_per_s
        memory_s = (p.weight_bytes + p.kv_bytes_per_token * (reads + tokens)) / p.effective_bytes_per_s
        comm_s = p.comm_fixed_s + p.comm_one_shot_s_per_token * tokens
        assert comm_s < 2 * p.comm_fixed_s + p.comm_s_per_token * tokens
        times[k] = step_time_s_nb(roofline_step_params(p), tokens, pairs, reads)
        combined = max(compute_s, memory_s) if k == 0 else (compute_s ** 2 + memory_s ** 2) ** 0.5
        assert times[k] == pytest.approx(combined + comm_s + 0.0015, rel=1e-12)
    assert times[2.0] > times[0.0] * 1.2  # near the ridge the smooth maximum is well above the hard one


def test_a_closed_loop_sends_each_request_when_a_client_is_free():
    """Two clients: requests 0 and 1 go at once; request 2 when the first request to finish (at 3 s) frees its
    client, request 3 at the second finish (4 s), request 4 at the third (5 s), whichever request it was. With
    arrivals of their own (a rate and a concurrency limit), a request also waits for its arrival."""
    finish = np.array([5.0, 3.0, 9.0, 4.0, 10.0])
    assert list(closed_loop_sent_s(np.zeros(5), finish, 2)) == [0.0, 0.0, 3.0, 4.0, 5.0]
    assert list(closed_loop_sent_s(np.array([0.0, 1.0, 2.0, 6.0, 7.0]), finish, 2)) == [0.0, 1.0, 3.0, 6.0, 7.0]
    assert np.isnan(closed_loop_sent_s(np.zeros(3), np.array([1.0, np.nan, np.nan]), 1)[2])  # never freed


@pytest.mark.parametrize("metric", ["ttft_mean_ms", "e2e_mean_ms"])
def test_closed_loop_latencies_count_from_when_a_client_sends(metric):
    """Two clients, four requests (the engines of 2023-24 start one prompt an iteration): requests 0 and 1 are sent
    at once, and request 1's wait for the server counts; requests 2 and 3 are sent only when 0 and 1 finish, so
    their earlier wait in the replay's queue does not."""
    row = measurements().iloc[0].copy()
    row[["batch", "requests", "rate_per_s", "input_tokens", "output_tokens"]] = [2, 4, 0, 10, 3]
    row["metric"] = metric
    case = Case.from_row(row)
    assert case.clients == 2
    eff = Efficiency(0.6, 0.7, 1.5)
    opened = Case(case.prepared, case.server, case.measured).predict(eff)[metric]
    run = execute(case.prepared, roofline_step_params(with_efficiency(case.peak, eff)))
    finish = run.floats[:, F_FINISH]
    arrival = run.floats[:, F_ARRIVAL]  # a simultaneous load arrives a few nanoseconds apart
    sent = np.maximum(arrival, [-np.inf, -np.inf, *np.sort(finish)[:2]])
    done = run.floats[:, F_FIRST_TOKEN if metric.startswith("ttft") else F_FINISH]
    assert run.floats[1, F_FIRST_SCHEDULED] > 0.0  # request 1 did wait for the server
    assert case.predict(eff)[metric] == pytest.approx(((done - sent) * 1e3).mean(), rel=1e-12)
    assert case.predict(eff)[metric] < opened / 1.3


def _synthetic_cases(truth: Factors) -> list[Case]:
    """Short runs on two families and two engines whose 'measured' figures are the simulator's at ``truth``."""
    table = measurements()
    base = table.loc["lmdeploy-a100-7b-b1-tpot"].copy()
    rows = []
    for gpu, quant in (("A100-80G", "fp16"), ("H100-80G", "fp16"), ("H100-80G", "fp8")):
        for engine in ("vllm", "tensorrt-llm"):
            for batch, prompt, tp in ((1, 64, 1), (16, 1024, 2), (4, 2048, 1), (32, 256, 2)):
                row = base.copy()
                row[["gpu", "quant", "engine", "batch", "requests", "input_tokens", "output_tokens",
                     "tensor_parallel", "metric"]] = [gpu, quant, engine, batch, batch, prompt, 16, tp,
                                                      "e2e_mean_ms"]
                rows.append(row)
    cases = [Case.from_row(r) for r in rows]
    for case in cases:
        case.measured = case.predict(truth.efficiency(case.family, case.server.engine))
    return cases


def test_the_joint_fit_recovers_known_family_and_engine_factors():
    truth = Factors({"ampere": {"compute": 0.55, "low_precision_compute": 0.4, "bandwidth": 0.7, "sharpness": 2.0},
                     "hopper": {"compute": 0.65, "low_precision_compute": 0.45, "bandwidth": 0.8, "sharpness": 2.0}},
                    {"vllm": {"overhead_ms": 3.0, "allreduce_factor": 1.0},
                     "tensorrt-llm": {"overhead_ms": 1.0, "allreduce_factor": 1.0}}, {})
    fitted = fit_jointly(_synthetic_cases(truth), ["ampere", "hopper"], ["vllm", "tensorrt-llm"], workers=1,
                         log=lambda line: None)
    assert fitted.fitted["hopper"] == ("compute", "low_precision_compute", "bandwidth", "sharpness")
    assert "low_precision_compute" not in fitted.fitted["ampere"]  # no 8-bit run of it
    for engine in ("vllm", "tensorrt-llm"):
        assert fitted.engines[engine]["overhead_ms"] == pytest.approx(truth.engines[engine]["overhead_ms"], rel=0.1)
    assert fitted.families["hopper"]["bandwidth"] == pytest.approx(0.8, rel=0.1)
    assert fitted.families["hopper"]["low_precision_compute"] == pytest.approx(0.45, rel=0.2)


def test_a_factor_no_run_fixes_is_the_slowest_fitted_value():
    factors = Factors({"a": {"compute": 0.6, "low_precision_compute": 0.5, "bandwidth": 0.8, "sharpness": 2.0},
                       "b": {"compute": 0.5, "low_precision_compute": 0.1, "bandwidth": 0.9, "sharpness": 1.5},
                       "c": dict.fromkeys(FAMILY_FACTORS, 0.0)},
                      {"x": {"overhead_ms": 1.0, "allreduce_factor": 3.0}, "y": {"overhead_ms": 2.0,
                                                                               "allreduce_factor": 1.0},
                       "z": dict.fromkeys(ENGINE_FACTORS, 0.0)},
                      {"a": FAMILY_FACTORS, "b": ("compute", "bandwidth", "sharpness"), "c": (),
                       "x": ENGINE_FACTORS, "y": ENGINE_FACTORS, "z": ()})
    _fill_unfitted(factors)
    assert factors.families["c"] == {"compute": 0.5, "low_precision_compute": 0.5, "bandwidth": 0.8, "sharpness": 1.5}
    assert factors.families["b"]["low_precision_compute"] == 0.5  # the only family that fits it
    assert factors.engines["z"] == {"overhead_ms": 2.0, "allreduce_factor": 3.0}


def test_the_shipped_predictions_and_the_manuals_table_are_current():
    """validation.csv holds each run's prediction at the shipped factors (five cheap runs recomputed here), and the
    manual shows its summary."""
    table = validation()
    cheap = table[(table["requests"] <= 64) & (table["output_tokens"] <= 512)].head(5)
    for key, row in cheap.iterrows():
        assert predict(row) == pytest.approx(row["predicted"], rel=1e-3), key
    page = (REPO / "docs" / "method.md").read_text()
    start, end = page.index("<!-- calibration:start -->\n"), page.index("<!-- calibration:end -->")
    assert page[start + len("<!-- calibration:start -->\n"):end] == markdown_table(), \
        "docs/method.md calibration table is stale: run python bench/calibrate.py"


def test_badge_says_calibrated_or_estimate_with_held_out_error():
    calibration = load_table("calibration")
    assert badge("H100-80G").startswith("calibrated against")
    assert "runs the fit never saw" in badge("H100-80G") or "no run of it was held out" in badge("H100-80G")
    assert badge("T4").startswith("estimate only")
    assert status("T4") == "estimate only"
    assert status("H100-80G").startswith(f"calibrated ({int(calibration.loc['hopper', 'measurements'])} runs")
    assert "SGLang has no measured run" in badge("H100-80G", engine="sglang")
    assert math.isfinite(efficiency_for("H100-80G-MIG-1g.10gb").compute)  # a slice uses its card's family
