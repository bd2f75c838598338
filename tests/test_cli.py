"""The command line: table, JSON shape, CSV export, and one-line errors with exit code 2."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from conftest import REPO, SCENARIOS
from engine.cli import main

METRIC_KEYS = {"arrived", "completed", "timed_out", "unfinished", "ttft_ms", "tpot_ms", "e2e_ms", "queue_ms",
               "sla_attainment", "output_tokens_per_s"}
SYSTEM_KEYS = {"sim_time_s", "iterations", "mean_batch_size", "gpu_busy_frac", "kv_mean_frac", "kv_peak_frac",
               "preemptions"}


def cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_json_has_the_documented_shape(tmp_path):
    csv_path = tmp_path / "requests.csv"
    done = cli("run", str(SCENARIOS / "example.toml"), "--set", "workload.num_requests=500", "--seed", "3",
               "--json", "-", "--requests-csv", str(csv_path))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report) >= {"classes", "overall", "system", "run"}
    assert set(report["classes"]) == {"interactive", "offline"}
    for block in [report["overall"], *report["classes"].values()]:
        assert set(block) >= METRIC_KEYS
        assert set(block["ttft_ms"]) == {"mean", "p50", "p90", "p99"}
    assert set(report["system"]) >= SYSTEM_KEYS
    assert set(report["run"]) >= {"wall_s", "requests", "seed"} and report["run"]["seed"] == 3
    requests = pd.read_csv(csv_path)
    assert len(requests) == 500 and {"class", "state", "ttft_ms", "e2e_ms"} <= set(requests.columns)


def test_table_is_printed_by_default():
    done = cli("run", str(SCENARIOS / "example.toml"), "--set", "workload.num_requests=200")
    assert done.returncode == 0
    assert "interactive" in done.stdout and "overall" in done.stdout and "offered load" in done.stdout


def test_trace_option_replays_a_file(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,20,5\n")
    done = cli("run", str(SCENARIOS / "example.toml"), "--trace", str(trace), "--json", "-")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["overall"]["completed"] == 2
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i / 10},10,5\n" for i in range(30)))
    cut = cli("run", str(SCENARIOS / "example.toml"), "--trace", str(trace), "--set", "workload.num_requests=12",
              "--json", "-")
    assert cut.returncode == 0, cut.stderr
    run = json.loads(cut.stdout)["run"]
    assert (run["requests"], run["trace_requests"]) == (12, None), "cut: the rows past the cut are never read"
    assert "trace_requests" not in json.loads(cli("run", str(SCENARIOS / "example.toml"), "--set",
                                                  "workload.num_requests=50", "--json", "-").stdout)["run"]


@pytest.mark.parametrize("args, words", [
    (("run", "missing.toml"), "does not exist"),
    (("run", str(SCENARIOS / "example.toml"), "--set", "policy.name=lottery"), "policy.name"),
    (("run", str(SCENARIOS / "example.toml"), "--set", "server.kv_capacity_tokens=100"), "KV cache holds"),
    (("run", str(SCENARIOS / "example.toml"), "--trace", "nowhere.csv"), "does not exist"),
    (("run", str(SCENARIOS / "example.toml"), "--no-such-flag"), "unrecognized arguments"),
    (("run", str(SCENARIOS / "example.toml"), "--json", "/nonexistent-dir/out.json",
      "--set", "workload.num_requests=10"), "/nonexistent-dir/out.json"),
])
def test_invalid_input_gives_one_line_and_exit_code_2(args, words):
    done = cli(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_keys_prints_the_reference():
    done = cli("keys")
    assert done.returncode == 0 and "| `server.max_batch_size` | sequences | 256 |" in done.stdout


def test_run_prices_the_fleet_with_an_offer():
    done = cli("run", str(SCENARIOS / "chat_and_batch_a100_8b.toml"), "--set", "workload.num_requests=500",
               "--set", "fleet.replicas=3", "--offer", "runpod-a100-sxm", "--json", "-")
    assert done.returncode == 0, done.stderr
    cost = json.loads(done.stdout)["cost"]
    assert cost["cards"] == 3 and cost["units"] == 3 and cost["currency"] == "USD" and cost["estimate"]
    assert cost["per_hour"] == pytest.approx([3 * 1.39, 3 * 2.45])
    overall = json.loads(done.stdout)["overall"]
    assert cost["per_million_output_tokens"][0] == pytest.approx(3 * 1.39 / 3600 / overall["output_tokens_per_s"] * 1e6)
    wrong = cli("run", str(SCENARIOS / "chat_and_batch_a100_8b.toml"), "--offer", "ref-8x-h100-server")
    assert wrong.returncode == 2 and "does not rent A100-80G; offers for it: " in wrong.stderr


def test_shapes_compares_tensor_and_data_parallel_on_the_same_cards():
    done = cli("shapes", str(SCENARIOS / "chat_and_batch_a100_8b.toml"), "--set", "workload.num_requests=400",
               "--cards", "4", "--offer", "runpod-a100-sxm")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("4 x A100-80G, Llama-3-8B (fp16)")
    assert [line.split()[:3] for line in lines[2:]] == [["4", "x", "TP1"], ["2", "x", "TP2"], ["1", "x", "TP4"]]


def test_hardware_describes_memory_and_iterations():
    done = cli("hardware", str(SCENARIOS / "chat_and_batch_a100_8b.toml"))
    assert done.returncode == 0, done.stderr
    assert "one card (GiB): weights 15.0" in done.stdout and "KV cache:" in done.stdout
    assert "step times: measured kernels: vLLM 0.14.0 on A100-80G (aiconfigurator-core 0.12.0); " in done.stdout
    fixed = cli("hardware", str(SCENARIOS / "example.toml"))
    assert fixed.returncode == 2 and "roofline" in fixed.stderr


def test_plan_prints_the_recommendation_and_keeps_the_json_contract(tmp_path):
    scenario = str(SCENARIOS / "article_mixed_8xa100.toml")
    common = ("--target", "interactive.ttft_p99_ms=1000", "--gpus", "A100-80G,H100-80G", "--requests", "600",
              "--seeds", "2")
    done = cli("plan", scenario, *common, "--currency", "CNY", "--billing", "annual",
               "--json", str(tmp_path / "p.json"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Plan for Llama-3-70B at 50 req/s (from 'article") and \
        "targets: interactive TTFT p99 <= 1.00 s" in lines[0], "the model and rate asked, not only the preset's name"
    assert lines[1].startswith("Runs: 2 runs of at least 600 requests each, each lengthened until the fleet's queue "
                               "settles")
    first = next(k for k, line in enumerate(lines) if line.startswith("Recommendation: "))
    assert " CNY per month (" in " ".join(lines[first:first + 3])
    assert "nan" not in done.stdout.lower() and max(len(line) for line in lines) < 300
    answer = json.loads((tmp_path / "p.json").read_text())
    assert set(answer) >= {"recommendation", "alternatives", "diagnosis", "not_possible", "sensitivity", "run"}
    assert set(answer["run"]) == {"wall_s", "evaluations", "workers", "cut"} and answer["run"]["cut"] is None
    best = answer["recommendation"]
    assert set(best) >= {"offer", "gpu", "tensor_parallel", "replicas", "cards", "router", "policy", "calibrated",
                         "monthly_cost", "cost_per_1m_output_tokens", "energy", "headroom_rate_per_s", "metrics"}
    assert best["energy"]["kwh_per_1m_output_tokens_max"] > 0 and best["energy"]["card_power_w"] > 0
    assert best["cards"] == best["replicas"] * best["tensor_parallel"] and best["monthly_cost"]["currency"] == "CNY"
    assert set(best["metrics"]) == {"interactive", "offline", "overall"}
    assert set(best["metrics"]["interactive"]) >= {"ttft_ms", "sla_attainment", "output_tokens_per_s"}
    piped = cli("plan", scenario, *common, "--json", "-")
    assert piped.returncode == 0 and json.loads(piped.stdout)["recommendation"]["gpu"] == best["gpu"]
    for bad, message in ((("--target", "interactive.ttft_p99=1000"), "target metric 'ttft_p99' is not one of"),
                         (("--target", "vip.ttft_p99_ms=1000"), "target class 'vip' is not a class"),
                         (("--target", "interactive.ttft_p99_ms=1000", "--gpus", "A100"), "GPU 'A100' is not one of")):
        refused = cli("plan", scenario, *bad)
        assert refused.returncode == 2 and message in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_plan_takes_traffic_in_business_terms_and_a_budget():
    scenario = str(SCENARIOS / "article_mixed_8xa100.toml")
    common = ("--target", "interactive.ttft_p99_ms=1000", "--gpus", "H100-80G", "--requests", "500", "--seeds", "2")
    done = cli("plan", scenario, *common, "--users", "20000", "--requests-per-user-per-day", "30", "--peak-factor", "3",
               "--budget", "100", "--currency", "USD")
    assert done.returncode == 0, done.stderr
    assert "traffic: 20,000 users x 30 requests a day x peak factor 3 = 20.8 req/s at the peak" in done.stderr
    assert any(line.startswith("No fleet that meets every target fits the budget of 100 USD")
               for line in done.stdout.splitlines()[1:4])
    refused = cli("plan", scenario, *common, "--users", "20000")
    assert refused.returncode == 2 and "--users needs --requests-per-user-per-day" in refused.stderr


def test_report_writes_the_html_with_the_plans_recommendation(tmp_path):
    page = tmp_path / "plan.html"
    done = cli("report", str(SCENARIOS / "article_mixed_8xa100.toml"), "--target", "interactive.ttft_p99_ms=1000",
               "--gpus", "H100-80G", "--requests", "500", "--seeds", "2", "--html", str(page),
               "--app-url", "http://lab.example")
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()[0]
    assert said.startswith("Recommendation: ") and "H100-80G" in said
    assert said.removeprefix("Recommendation: ").replace("'", "&#x27;") in page.read_text()
    assert "http://lab.example/planner?s=" in page.read_text() and "wrote " in done.stdout
    assert "\r" not in done.stderr and "Sizing every configuration: " in done.stderr  # a pipe: whole lines
    assert len(done.stderr.splitlines()) <= 2 * 11, "at most a line per tenth of each stage, and its end"
    answer = tmp_path / "plan.json"
    again = cli("report", str(SCENARIOS / "article_mixed_8xa100.toml"), "--target", "interactive.ttft_p99_ms=1000",
                "--gpus", "H100-80G", "--requests", "500", "--seeds", "2", "--html", str(page), "--json", "-")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["recommendation"]["gpu"] == "H100-80G"  # stdout holds the JSON alone
    refused = cli("report", str(SCENARIOS / "article_mixed_8xa100.toml"), "--target", "interactive.ttft_p99_ms=1000")
    assert refused.returncode == 2 and "--html" in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_tune_prints_the_best_policy_and_keeps_the_json_contract(tmp_path):
    scenario = str(SCENARIOS / "article_mixed_8xa100.toml")
    common = ("--set", "server.max_batch_size=64", "--set", "workload.arrival.rate_per_s=45", "--requests", "1000",
              "--seeds", "1", "--candidates", "20", "--minimize", "interactive.ttft_p99_ms")
    written = tmp_path / "tuned.toml"
    done = cli("tune", scenario, *common, "--constraint", "*.longest_wait_ms<=60000", "--write", str(written))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Tuning 'article"), "a rate is not what the preset's name describes"
    assert "subject to interactive Longest wait <= 60.0 s; offline" in lines[0]
    assert lines[2].startswith("Best: ") and "[policy]" in lines and "nan" not in done.stdout.lower()
    piped = cli("tune", scenario, *common, "--json", "-")
    assert piped.returncode == 0, piped.stderr
    answer = json.loads(piped.stdout)
    assert set(answer) >= {"best", "evaluations", "wall_s"} and set(answer["best"]) >= {"policy", "metrics"}
    assert set(answer["best"]["metrics"]) == {"interactive", "offline", "overall"}
    tuned = cli("run", str(written), "--set", "workload.num_requests=200", "--json", "-")
    assert tuned.returncode == 0 and json.loads(tuned.stdout)["run"]["requests"] == 200
    assert 'name = "%s"' % answer["best"]["policy"]["name"] in written.read_text()
    for bad, message in ((("--minimize", "interactive.ttft_p99_ms", "--constraint", "interactive.ttft_p99_ms>=5"),
                          "bounded the other way"),
                         (("--minimize", "vip.ttft_p99_ms"), "target class 'vip' is not a class"),
                         (("--maximize", "interactive.ttft_p99_ms", "--policies", "fifo"),
                          "has no parameters to tune")):
        refused = cli("tune", scenario, *bad)
        assert refused.returncode == 2 and message in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_size_lists_offers_cheapest_first():
    done = cli("size", str(SCENARIOS / "article_mixed_8xa100.toml"), "--set", "workload.num_requests=800",
               "--target-class", "interactive", "--max-ms", "1000", "--currency", "USD")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cheapest fleet per offer with interactive TTFT p99 <= 1.00 s")
    bad = cli("size", str(SCENARIOS / "article_mixed_8xa100.toml"), "--target-class", "vip", "--max-ms", "10")
    assert bad.returncode == 2 and "target class 'vip' is not a class" in bad.stderr


def test_a_number_far_out_of_range_is_echoed_short(capsys):
    """A 400-digit seed: the error line shows an excerpt of it, not all 400 digits."""
    status = main(["run", str(SCENARIOS / "example.toml"), "--set", f"seed={'9' * 400}"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.startswith("error: seed = 99999") and "... must be <= 9,223,372,036,854,775,807" in err
    assert len(err) < 120
