"""Your own measurements: benchmark result files read, replayed, compared and fitted; calibrations saved under a
name and picked by a scenario. The fixtures follow the documented formats; their figures were produced by this
simulator at known factors (Efficiency(0.5, 0.6, 2.0, 1.6, 2.0) on one H100-80G with Llama-3.1-8B BF16), so a
fit must find factors that reproduce them."""

import dataclasses
import json
import math
import os

import pytest

import engine
from conftest import REPO
from engine.calibrate.bench_results import read_result
from engine.calibrate.user_calibration import calibrate, model_for
from engine.cli import main
from engine.decide.sizing import smallest_tensor_parallel
from engine.hardware.roofline import efficiency_for, roofline_profile
from engine.hardware.calibration_store import load, names, save, with_gpu
from engine.scenario.config import Server

FIXTURES = REPO / "tests" / "fixtures"
VLLM = FIXTURES / "vllm_bench_serve_detailed.json"
GENAI = FIXTURES / "genai_perf_profile_export.json"
AIPERF = FIXTURES / "aiperf_profile_export.json"
H100 = Server(step_model="roofline", gpu="H100-80G", model="Llama-3.1-8B", quant="bf16", kv_quant="bf16")


@pytest.fixture(autouse=True)
def private_store(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHEDULER_LAB_CALIBRATIONS", str(tmp_path / "calibrations"))


def test_vllm_result_gives_its_requests_load_and_figures():
    result = read_result(VLLM.read_bytes(), VLLM.name)
    data = json.loads(VLLM.read_text())
    assert result.tool == "vllm bench serve" and result.requests == 64
    assert list(result.input_tokens) == data["input_lens"] and list(result.output_tokens) == data["output_lens"]
    assert math.isinf(result.rate_per_s) and result.concurrency == 8
    assert result.measured["ttft_p99_ms"] == data["p99_ttft_ms"] and result.measured["e2e_mean_ms"] == \
        data["mean_e2el_ms"]
    assert result.measured["output_tokens_per_s"] == data["output_throughput"]


def test_failed_requests_are_not_replayed_and_old_files_lose_only_their_swapped_e2e():
    data = json.loads(VLLM.read_text())
    data["errors"][0] = "HTTP 500"
    data["best_of"] = 1  # the old benchmark_serving.py
    result = read_result(json.dumps(data).encode(), "old.json")
    assert result.requests == 63 and "e2e_mean_ms" not in result.measured and "ttft_mean_ms" in result.measured


@pytest.mark.parametrize("path, tool", [(GENAI, "GenAI-Perf"), (AIPERF, "AIPerf")])
def test_perf_exports_give_mean_lengths_and_concurrency(path, tool):
    result = read_result(path.read_bytes(), path.name)
    assert result.tool == tool and result.requests == 40 and result.concurrency == 4
    assert set(result.input_tokens) == {1024} and set(result.output_tokens) == {128}
    assert result.measured["tpot_mean_ms"] == json.loads(path.read_text())["inter_token_latency"]["avg"]


def test_seconds_are_converted_to_milliseconds():
    data = json.loads(GENAI.read_text())
    data["time_to_first_token"] = {"unit": "s", "avg": 0.5, "p50": 0.4, "p99": 0.9}
    assert read_result(json.dumps(data).encode(), "s.json").measured["ttft_mean_ms"] == 500.0


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not an object"),
    (b'{"a": 1}', "not a benchmark result"),
    (b'{"completed": 5, "output_throughput": -1}', "output_throughput must be a positive number"),
    (b'{"completed": 2, "output_throughput": 5, "input_lens": [1, 0], "output_lens": [1, 1]}',
     "input_lens must be a list of whole token counts"),
    (json.dumps({**json.loads(GENAI.read_text()), "input_config": {}}).encode(), "neither a concurrency nor"),
    # A small file claiming more requests than one run simulates is refused before anything that long is made.
    (json.dumps({**json.loads(GENAI.read_text()), "request_count": {"avg": 3e8}}).encode(),
     "300,000,000 requests is more than one run simulates"),
    (b'{"completed": 1e12, "output_throughput": 5, "total_input_tokens": 1e12, "total_output_tokens": 1e12}',
     "completed = 1,000,000,000,000 requests is more than one run simulates"),
])
def test_bad_files_are_one_line_naming_the_field(content, message):
    with pytest.raises(engine.ScenarioError, match=message):
        read_result(content, "bad.json")


def test_model_ids_map_to_the_same_architecture():
    assert model_for("meta-llama/Llama-3.1-8B-Instruct") == "Llama-3.1-8B"
    assert model_for("meta-llama/Meta-Llama-3-8B-Instruct") == "Llama-3-8B"
    assert model_for("meta-llama/Llama-3.3-70B-Instruct") == "Llama-3.3-70B"
    assert model_for("meta-llama/Llama-2-70b-hf") == "Llama-2-70B"
    assert model_for("Qwen/Qwen3-235B-A22B-Instruct-2507") == "Qwen3-235B-A22B"
    assert model_for("Qwen/Qwen3-30B-A3B") == "Qwen3-30B-A3B"
    assert model_for("Qwen/Qwen2.5-7B-Instruct") == "Qwen2.5-7B"
    assert model_for("mistralai/Mixtral-8x7B-Instruct-v0.1") == "Mixtral-8x7B"
    assert model_for("zai-org/GLM-4.5-Air-FP8") == "GLM-4.5-Air"
    assert model_for("moonshotai/Kimi-K2-Instruct") == "Kimi-K2"
    assert model_for("Qwen/Qwen2-7B") == "Qwen2.5-7B"  # the same shape: the versions differ by a minor number
    assert model_for("moonshotai/Kimi-K2.5") == "Kimi-K2.5" and model_for("zai-org/GLM-5-FP8") == "GLM-5"
    for other in ("acme/secret-model", "THUDM/glm-4-9b-chat", "moonshotai/Kimi-K3", "Qwen/Qwen3-4B"):
        with pytest.raises(engine.ScenarioError, match="give --model"):
            model_for(other)


def test_fit_recovers_what_produced_the_figures():
    results = [read_result(p.read_bytes(), p.name) for p in (VLLM, GENAI)]
    calibrated = calibrate(results, H100, "mine")
    table = calibrated.table
    assert len(table) == 20 and set(table["file"]) == {VLLM.name, GENAI.name}
    assert table["fitted_error_pct"].abs().median() < 1.0 < table["shipped_error_pct"].abs().median()
    # Decode-heavy loads trade bandwidth against per-iteration overhead (both scale every decode step), so only
    # the figures, not each factor, are pinned down; compute shows in the prefills.
    assert calibrated.calibration.efficiency.compute == pytest.approx(0.5, rel=0.15)
    assert table["fitted_error_pct"].abs().max() < 3.0


def test_saved_calibration_times_the_scenario_and_is_never_replaced_silently():
    calibrated = calibrate([read_result(VLLM.read_bytes(), VLLM.name)], H100, "mine")
    save(calibrated.calibration)
    assert names() == ["mine"] and load("mine").efficiency == calibrated.calibration.efficiency
    assert (os.stat(os.environ["SCHEDULER_LAB_CALIBRATIONS"]).st_mode & 0o777) == 0o700
    with pytest.raises(engine.ScenarioError, match="exists; choose another name or replace it"):
        save(calibrated.calibration)
    mine = Server(step_model="roofline", gpu="H100-80G", model="Llama-3.1-8B", quant="bf16", kv_quant="bf16",
                  calibration="mine")
    assert efficiency_for("H100-80G", "mine") == calibrated.calibration.efficiency
    assert roofline_profile(mine) == roofline_profile(H100, efficiency=calibrated.calibration.efficiency)
    assert efficiency_for("H100-80G") != calibrated.calibration.efficiency  # the shipped table is untouched
    with pytest.raises(engine.ScenarioError, match="fitted on H100-80G .hopper family. and cannot time A100-80G"):
        roofline_profile(Server(step_model="roofline", gpu="A100-80G", calibration="mine"))
    with pytest.raises(engine.ScenarioError, match="is not a saved calibration"):
        roofline_profile(Server(step_model="roofline", gpu="H100-80G", calibration="other"))
    with pytest.raises(engine.ScenarioError, match="server.calibration = '../x' is not a calibration name"):
        engine.load_scenario(REPO / "data/scenarios/example.toml", overrides=["server.calibration=../x"])


def test_cli_compares_fits_and_saves(capsys):
    assert main(["calibrate", str(VLLM), "--gpu", "H100-80G", "--save", "bench1"]) == 0
    out = capsys.readouterr().out
    assert "64 requests (all at once, at most 8 in flight)" in out and "ttft_p99_ms" in out
    assert "saved as calibration 'bench1'" in out and "median error" in out
    assert main(["calibrate", str(VLLM), "--gpu", "H100-80G", "--save", "bench1"]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["run", str(REPO / "data/scenarios/example.toml"), "--set", "server.step_model=roofline",
                 "--set", "server.gpu=H100-80G", "--set", "server.calibration=bench1"]) == 0
    assert main(["hardware", str(REPO / "data/scenarios/example.toml"), "--set", "server.step_model=roofline",
                 "--set", "server.gpu=H100-80G", "--set", "server.calibration=bench1"]) == 0
    assert "fitted on your 10 figures from 1 benchmark run ('bench1', measured on 1 x H100-80G" in \
        capsys.readouterr().out


def test_hardware_page_replays_fits_saves_and_uses_your_results():
    from test_app import hardware_page
    at = hardware_page()
    at.selectbox(key="hw_gpu_1").set_value("H100-80G").run()
    at.selectbox(key="hw_model_1").set_value("Llama-3.1-8B").run()  # the model the fixture measured
    at.file_uploader(key="bench_upload").set_value([(VLLM.name, VLLM.read_bytes(), "application/json")]).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    captions = " ".join(c.value for c in at.caption)
    assert "64 requests (all at once, at most 8 in flight)" in captions and "Replayed on 1 x H100-80G" in captions
    assert "in-sample; one run, so not checked on any other load (the shipped calibration:" in captions
    at.text_input(key="hw_calibration_name").set_value("page-fit").run()
    at.button(key="hw_calibration_save").click().run()
    assert not at.exception and names() == ["page-fit"]
    assert [b.value for b in at.selectbox if b.key and b.key.startswith("hw_calibration_")] == ["page-fit"]
    assert "fitted on your 10 figures from 1 benchmark run ('page-fit', measured on 1 x H100-80G" in \
        " ".join(c.value for c in at.caption)


def test_a_fit_that_ends_on_a_bound_warns_about_the_set_up(capsys):
    """The H100 figures replayed on an A100: the fit needs more than the A100's whole peak and says so."""
    assert main(["calibrate", str(VLLM), "--gpu", "A100-80G"]) == 0
    out = capsys.readouterr().out
    assert "warning: The fit pushed the compute share of peak" in out and "not the one benchmarked" in out
    assert calibrate([read_result(VLLM.read_bytes(), VLLM.name)], H100, "ok").warning() is None


def test_a_saved_calibration_of_another_gpu_family_is_dropped_with_a_notice():
    from test_app import hardware_page
    at = hardware_page()
    at.selectbox(key="hw_gpu_1").set_value("H100-80G").run()
    at.selectbox(key="hw_model_1").set_value("Llama-3.1-8B").run()
    at.file_uploader(key="bench_upload").set_value([(VLLM.name, VLLM.read_bytes(), "application/json")]).run()
    at.text_input(key="hw_calibration_name").set_value("h100-fit").run()
    at.button(key="hw_calibration_save").click().run()
    at.selectbox(key="hw_gpu_1").set_value("A100-80G").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("The calibration 'h100-fit' does not time A100-80G" in i.value for i in at.info)
    assert any(c.value.startswith("A100-80G: measured kernels: vLLM 0.14.0 on A100-80G") for c in at.caption)


def test_a_bad_file_is_named_and_the_good_ones_still_fitted_and_a_wrong_model_cannot_be_saved():
    from test_app import hardware_page, shown
    at = hardware_page()
    at.selectbox(key="hw_gpu_1").set_value("H100-80G").run()
    at.selectbox(key="hw_model_1").set_value("Llama-2-7B").run()
    at.file_uploader(key="bench_upload").set_value([(VLLM.name, VLLM.read_bytes(), "application/json"),
                                                    ("broken.json", b"not json", "application/json")]).run()
    assert not at.exception
    assert shown(at.error) == ["broken.json: not JSON (JSONDecodeError); expected a vllm bench serve, GenAI-Perf or "
                               "AIPerf result file"]
    assert any("is replayed with Llama-2-7B: set Model above to Llama-3.1-8B" in w.value for w in at.warning)
    at.text_input(key="hw_calibration_name").set_value("wrong").run()
    assert at.button(key="hw_calibration_save").disabled


def h100_scenario(name: str) -> dict:
    """A small roofline scenario on one H100-80G timed by the saved calibration ``name``."""
    data = engine.scenario.config.read_toml(REPO / "data/scenarios/example.toml")
    server = {"step_model": "roofline", "gpu": "H100-80G", "model": "Llama-3.1-8B", "quant": "bf16", "kv_quant": "bf16",
              "calibration": name, "max_batch_size": 8}
    return engine.scenario.config.apply_overrides({**data, "server": server}, {"workload.num_requests": 300})


def test_the_lab_drops_a_calibration_that_does_not_time_the_gpu_chosen():
    from test_app import lab
    save(calibrate([read_result(VLLM.read_bytes(), VLLM.name)], H100, "mine").calibration)
    at = lab(h100_scenario("mine")).run()
    assert not at.exception and any("fitted on your" in c.value for c in at.sidebar.caption)
    at.selectbox(key="server_gpu_1").set_value("A100-80G").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any("The calibration 'mine' does not time A100-80G" in i.value for i in at.sidebar.info)
    assert any(c.value.startswith("Step times: measured kernels: vLLM 0.14.0 on A100-80G") for c in at.sidebar.caption)


def test_a_search_over_gpus_times_the_other_families_with_the_shipped_calibration():
    save(calibrate([read_result(VLLM.read_bytes(), VLLM.name)], H100, "mine").calibration)
    data = h100_scenario("mine")
    assert with_gpu(data, "H200")["server"]["calibration"] == "mine"  # the same (hopper) family
    on_a100 = with_gpu(data, "A100-80G")
    assert "calibration" not in on_a100["server"] and on_a100["server"]["gpu"] == "A100-80G"
    assert smallest_tensor_parallel(on_a100) == 1


def test_replacing_a_saved_calibration_refreshes_the_cached_results():
    from ui import runner
    fitted = calibrate([read_result(VLLM.read_bytes(), VLLM.name)], H100, "mine").calibration
    save(fitted)
    key = runner.canonical(h100_scenario("mine"))
    before = runner.summary(key)["overall"]["tpot_ms"]["mean"]
    slower = dataclasses.replace(fitted.efficiency, bandwidth=fitted.efficiency.bandwidth / 4)
    save(dataclasses.replace(fitted, efficiency=slower), replace=True)
    assert runner.summary(key)["overall"]["tpot_ms"]["mean"] > 2 * before
