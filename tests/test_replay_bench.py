"""``python -m engine replay-bench``: a benchmark client's command read as the client reads it (its defaults, its
length draws to the token, its rate and concurrency), replayed on a server and set beside the client's measured
figures; every command it cannot read is one line."""

import json
import math

import numpy as np
import pytest

from conftest import REPO
from engine import cli
from engine.calibrate.bench_command import SGLANG, VLLM, read_command, sglang_lengths, vllm_lengths
from engine.scenario.errors import ScenarioError

MEASURED = REPO / "tests" / "fixtures" / "vllm_bench_serve_detailed.json"


def test_vllm_draws_its_lengths_from_its_seeded_generator_within_its_ranges():
    """vLLM 0.24.0: prompt lengths over [floor((L - s)(1 - r)), ceil((L - s)(1 + r))] plus the s special tokens the
    server's tokenizer adds back, outputs over [floor(L(1 - r)), ceil(L(1 + r))], prompts drawn first from
    default_rng(seed); a dict ratio sets each apart."""
    inputs, outputs = vllm_lengths(5000, 1000, 200, (0.1, 0.5), seed=7, special_tokens=1)
    rng = np.random.default_rng(7)
    assert (inputs - 1).tolist() == rng.integers(899, 1099 + 1, size=5000).tolist()
    assert outputs.tolist() == rng.integers(100, 300 + 1, size=5000).tolist()
    assert inputs.min() == 900 and inputs.max() == 1100 and outputs.min() == 100 and outputs.max() == 300
    fixed = read_command(["vllm", "bench", "serve", "--random-input-len", "512", "--num-prompts", "10"])
    assert fixed.load.input_tokens.tolist() == [512] * 10 and fixed.load.output_tokens.tolist() == [128] * 10
    split = read_command(["vllm", "bench", "serve", "--random-range-ratio", '{"input": 0.5, "output": 0.0}'])
    assert split.load.input_tokens.min() < 1024 and set(split.load.output_tokens.tolist()) == {128}


def test_sglang_draws_as_its_module_generator_does_from_its_ratio_to_the_full_length():
    """SGLang 0.5.14: randint(max(int(L r), 1), L + 1) after seeding numpy with its seed (42 by default), prompts
    first; ratio 0 draws from 1 to L; outputs run to their length (ignore_eos) and one warm-up is sent."""
    inputs, outputs = sglang_lengths(3000, 1024, 256, 0.0, 42)
    np.random.seed(42)
    assert inputs.tolist() == np.random.randint(1, 1025, size=3000).tolist()
    assert outputs.tolist() == np.random.randint(1, 257, size=3000).tolist()
    command = read_command(["python3", "-m", "sglang.bench_serving", "--dataset-name", "random", "--num-prompts",
                            "3000", "--random-output-len", "256"])
    assert command.client is SGLANG and command.warmups == 1 and command.ignore_eos
    assert command.load.input_tokens.tolist() == inputs.tolist()


def test_the_clients_rate_and_concurrency_reach_the_load():
    command = read_command(["python", "benchmarks/benchmark_serving.py", "--request-rate", "4.5",
                            "--max-concurrency", "16", "--num-warmups", "3", "--model", "m", "--backend", "vllm"])
    assert command.client is VLLM and command.load.rate_per_s == 4.5 and command.load.concurrency == 16
    assert command.warmups == 3 and not command.ignore_eos and command.load.model_id == "m"
    assert math.isinf(read_command(["vllm", "bench", "serve"]).load.rate_per_s)


@pytest.mark.parametrize("words, said", [
    (["curl", "http://x"], "runs no client the replay reads"),
    (["python", "-m", "sglang.bench_serving"], "--dataset-name 'sharegpt': the replay draws the random"),
    (["vllm", "bench", "serve", "--random-range-ratio", "1.5"], "each ratio must be at least 0 and below 1"),
    (["vllm", "bench", "serve", "--random-range-ratio", "{\"input\": 0.1}"], "is not a number or"),
    (["vllm", "bench", "serve", "--num-prompts", "0"], "--num-prompts = 0"),
    (["vllm", "bench", "serve", "--num-prompts", "many"], "invalid int value"),
    (["vllm", "bench", "serve", "--request-rate", "0"], "--request-rate = 0"),
    (["vllm", "bench", "serve", "--random-prefix-len", "64"], "a shared prefix is not replayed"),
])
def test_a_command_the_replay_cannot_read_is_one_line(words, said):
    with pytest.raises(ScenarioError) as error:
        read_command(words)
    assert said in str(error.value) and "\n" not in str(error.value)


def test_the_command_line_sets_the_simulated_figures_beside_the_measured_ones(capsys):
    """The fixture's run (64 requests, 8 in flight) replayed from its command: every figure the client reports,
    simulated, measured and the signed error; the same as JSON; a file of another run is named as such."""
    base = ["replay-bench", "--gpu", "H100-80G", "--model", "Llama-3.1-8B", "--measured", str(MEASURED)]
    client = ["--", "vllm", "bench", "serve", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--num-prompts", "64",
              "--max-concurrency", "8", "--random-input-len", "684", "--random-output-len", "109"]
    assert cli.main(base + ["--json", "-"] + client) == 0
    answer = json.loads(capsys.readouterr().out)
    figures = {f["figure"]: f for f in answer["figures"]}
    ttft = figures["mean time to first token (ms)"]
    assert ttft["measured"] == 45.705 and ttft["simulated"] > 0
    assert ttft["error_pct"] == pytest.approx((ttft["simulated"] / 45.705 - 1) * 100)
    assert len(figures) == 10 and not any("warning" in n for n in answer["notes"])
    assert any("without --ignore-eos" in n for n in answer["notes"])
    assert cli.main(base + client[:-4] + ["--max-concurrency", "4"]) == 0
    text = capsys.readouterr().out
    assert "warning: the measured file ran concurrency = 8, the command --max-concurrency gives 4" in text
    assert "error %" in text and "p99 time to first token (ms)" in text


def test_without_a_command_or_with_a_bad_one_the_command_line_says_one_line(capsys):
    assert cli.main(["replay-bench", "--gpu", "H100-80G", "--model", "Llama-3.1-8B"]) == 2
    assert "give the client's command after --" in capsys.readouterr().err
    assert cli.main(["replay-bench", "--gpu", "H100-80G", "--model", "Llama-3.1-8B", "--", "vllm", "bench",
                     "serve", "--dataset-name", "sharegpt"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dataset-name 'sharegpt'" in err
