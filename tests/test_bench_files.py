"""Benchmark result files from anyone (an upload, a command-line argument): every field read is checked where it
is read, so a malformed file ends in one ``ScenarioError`` line naming the file, the field and what is allowed,
in bounded time and memory (never an internal error), and whatever ``read_result`` returns replays."""

from __future__ import annotations

import copy
import json
import math
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import engine
from conftest import REPO
from engine.calibrate.bench_results import MAX_RATE_PER_S, RESULT_NAME_CHARS, BenchResult, read_result
from engine.calibrate.user_calibration import replay_case
from engine.scenario.caps import DEFAULT_CAPS, MIB
from engine.scenario.config import Server
from test_safety import HANG_S, cli, one_line_error

FIXTURES = REPO / "tests" / "fixtures"
VLLM, GENAI, AIPERF = (json.loads((FIXTURES / f).read_text()) for f in (
    "vllm_bench_serve_detailed.json", "genai_perf_profile_export.json", "aiperf_profile_export.json"))
VLLM_TOTALS = {k: v for k, v in VLLM.items() if k not in ("input_lens", "output_lens", "errors")}  # means only
H100 = Server(step_model="roofline", gpu="H100-80G", model="Llama-3-8B", quant="bf16", kv_quant="bf16")
DEEP = 100_000            # nested lists in the hostile tester's file
PEAK_MIB = 16             # Python allocations of reading one hostile file of at most a few hundred KiB
RAW = "@raw@"             # stands for a value written as raw JSON text (nesting, NaN, long integers)


def changed(base: dict, path: str, value) -> dict:
    """A copy of ``base`` with the field at dotted ``path`` set to ``value`` (missing parents created)."""
    data = copy.deepcopy(base)
    *parents, key = path.split(".")
    where = data
    for part in parents:
        where = where.setdefault(part, {})
    where[key] = value
    return data


def dumped(data: dict, raw: str = "") -> bytes:
    """``data`` as a file, each ``RAW`` value written as the JSON text ``raw``."""
    return json.dumps(data).replace(json.dumps(RAW), raw).encode()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# --------------------------------------------------------------------------- the hostile tester's files

PROBES = [
    pytest.param(nested(DEEP).encode(), ("nested too deeply",), id="100000-nested-lists"),
    pytest.param(dumped(changed(VLLM, "completed", RAW), nested(DEEP)), ("nested too deeply",), id="nested-field"),
    pytest.param(dumped(changed(GENAI, "input_config.perf_analyzer", [1])),
                 ("input_config.perf_analyzer must be an object", "got a list"), id="perf_analyzer-list"),
    pytest.param(dumped(changed(AIPERF, "input_config.loadgen", "fast")),
                 ("input_config.loadgen must be an object", "'fast'"), id="loadgen-text"),
    pytest.param(dumped(changed(GENAI, "input_config.model_names", 7)),
                 ("input_config.model_names must be a list of model names", "got 7"), id="model_names-integer"),
    pytest.param(dumped(changed(AIPERF, "input_config.loadgen.concurrency", "abc")),
                 ("input_config.loadgen.concurrency must be a whole number of at least 1", "'abc'"),
                 id="concurrency-text"),
    pytest.param(dumped(changed(GENAI, "input_config.perf_analyzer.stimulus", {"request_rate": -2})),
                 ("input_config.perf_analyzer.stimulus.request_rate must be a rate", "above 0", "got -2"),
                 id="negative-rate"),
    pytest.param(dumped(changed(GENAI, "input_sequence_length.avg", 1e300)),
                 ("input_sequence_length.avg = 1e+300 tokens", "tokens_per_request"), id="mean-input-1e300"),
    pytest.param(dumped(changed(AIPERF, "output_sequence_length.avg", 1e30)),
                 ("output_sequence_length.avg = 1e+30 tokens", "tokens_per_request"), id="mean-output-1e30"),
    pytest.param(dumped(changed(VLLM_TOTALS, "total_input_tokens", 1e300)),
                 ("total_input_tokens / completed", "tokens_per_request"), id="total-input-1e300"),
    pytest.param(dumped(changed(VLLM, "input_lens", [10 ** 30] * 64)),
                 ("input_lens must be a list of whole token counts", "input_lens[0] is 1000000"),
                 id="request-input-10**30"),
    pytest.param(dumped(changed(VLLM, "output_lens", [5] * 63 + [10 ** 300])),
                 ("output_lens[63] is 1000000", "tokens_per_request"), id="request-output-10**300"),
    pytest.param(dumped(changed(GENAI, "time_to_first_token.unit", ["ms"])),
                 ("time_to_first_token.unit must be a time unit", "got a list"), id="unit-list"),
]


@pytest.mark.parametrize("content, words", PROBES)
def test_a_hostile_file_is_one_line_naming_the_field(content, words):
    started = time.perf_counter()
    tracemalloc.start()
    try:
        with pytest.raises(engine.ScenarioError) as caught:
            read_result(content, "bad.json")
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert message.startswith("bad.json: ") and "\n" not in message and all(w in message for w in words), message
    assert time.perf_counter() - started < HANG_S and peak_bytes < PEAK_MIB * MIB


@pytest.mark.parametrize("content, words", PROBES)
def test_the_command_line_refuses_a_hostile_file_in_one_line(tmp_path, content, words):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    one_line_error(*cli("calibrate", str(path), "--gpu", "H100-80G"), "bad.json: ", *words)


# --------------------------------------------------------------------------- each check, refused and accepted

REFUSED = [
    pytest.param(dumped(changed(VLLM, "output_throughput", RAW), "NaN"),
                 "output_throughput must be a positive number, got nan", id="NaN"),
    pytest.param(dumped(changed(VLLM, "output_throughput", {"a": 1})),
                 "output_throughput must be a positive number, got an object", id="object"),
    pytest.param(dumped(changed(VLLM, "output_throughput", RAW), nested(500)),
                 "output_throughput must be a positive number, got a list", id="nested-500"),
    pytest.param(dumped(changed(VLLM, "output_throughput", RAW), "Infinity"),
                 "output_throughput must be a positive number, got inf", id="Infinity"),
    pytest.param(dumped(changed(VLLM, "request_rate", RAW), "-Infinity"), "request_rate must be a rate", id="-inf"),
    pytest.param(dumped(changed(VLLM, "request_rate", "fast")), "request_rate must be a rate", id="rate-text"),
    pytest.param(dumped(changed(VLLM, "request_rate", 2 * MAX_RATE_PER_S)), "at most 1,000,000,000, got 2",
                 id="rate-too-high"),
    pytest.param(dumped(changed(VLLM, "request_rate", 1e-9)),
                 "request_rate = 1e-09 req/s spreads the 64 requests over 6.4e+10 s, longer than one run may last "
                 "(2,592,000 s, simulated_s)", id="rate-too-slow"),
    pytest.param(dumped(changed(VLLM, "completed", RAW), "9" * 5000), "too many digits", id="5000-digits"),
    pytest.param(dumped(changed(VLLM, "completed", RAW), "9" * 400),
                 "completed = inf requests is more than one run simulates", id="400-digits"),
    pytest.param(dumped(changed(VLLM, "completed", RAW), "-" + "9" * 400),
                 "completed must be a whole number of at least 1", id="-400-digits"),
    pytest.param(dumped(changed(VLLM, "max_concurrency", 2_000_000)),
                 "max_concurrency = 2,000,000 requests is more than one run simulates (1,000,000, requests_per_run)",
                 id="concurrency-too-high"),
    pytest.param(dumped(changed(AIPERF, "input_config.loadgen.concurrency", 2.5)),
                 "input_config.loadgen.concurrency must be a whole number, got 2.5", id="concurrency-2.5"),
    pytest.param(dumped(changed(AIPERF, "input_config.loadgen.concurrency", True)),
                 "input_config.loadgen.concurrency must be a whole number of at least 1, got True", id="true"),
    pytest.param(dumped(changed(VLLM, "p99_ttft_ms", -1)), "p99_ttft_ms must be a positive number", id="latency<0"),
    pytest.param(dumped(changed(GENAI, "request_latency", {"unit": "s", "avg": 1e7})),
                 "request_latency.avg = 10,000,000 s is longer than one run may last", id="latency-too-long"),
    pytest.param(dumped(changed(GENAI, "inter_token_latency", [1])), "inter_token_latency must be an object",
                 id="block-list"),
    pytest.param(dumped(changed(GENAI, "time_to_first_token.unit", None)),
                 "time_to_first_token.unit must be a time unit (ms, s, sec, us, ns), got None", id="unit-null"),
    pytest.param(dumped(changed(GENAI, "input_config", [1])), "input_config must be an object", id="config-list"),
    pytest.param(dumped(changed(GENAI, "input_config", None)), "neither a concurrency nor", id="config-null"),
    pytest.param(dumped(changed(AIPERF, "input_config.endpoint", "x")), "input_config.endpoint must be an object",
                 id="endpoint-text"),
    pytest.param(dumped(changed(AIPERF, "input_config.endpoint.model_names", [1])),
                 "input_config.endpoint.model_names must be a list of model names", id="model-names-ints"),
    pytest.param(dumped(changed(VLLM, "model_id", ["x"])), "model_id must be text, got a list", id="model_id-list"),
    pytest.param(dumped(changed(GENAI, "request_count", [40])), "request_count must be an object", id="count-list"),
    pytest.param(dumped(changed(GENAI, "output_token_throughput", None)),
                 "output_token_throughput.avg must be a positive number, got None", id="no-throughput"),
    pytest.param(dumped(changed(VLLM_TOTALS, "total_output_tokens", "many")),
                 "total_output_tokens must be a positive number", id="total-text"),
    pytest.param(dumped(changed(VLLM, "input_lens", [True] * 64)), "input_lens[0] is True", id="length-true"),
    pytest.param(dumped(changed(VLLM, "input_lens", [])), "input_lens must be a list of whole token counts",
                 id="lengths-empty"),
    pytest.param(dumped({"completed": 1, "output_throughput": 1.0, "input_lens": [1] * 1_000_001,
                         "output_lens": [1] * 1_000_001}),
                 "input_lens has 1,000,001 requests, more than the limit of 1,000,000 requests", id="lengths-long"),
    pytest.param(dumped(changed(VLLM, "errors", 5)), "one entry per request", id="errors-number"),
    pytest.param(dumped(changed(VLLM, "errors", [{}] * 64)), "errors must be a list of texts", id="errors-objects"),
    pytest.param(dumped(changed(VLLM, "errors", ["HTTP 500"] * 64)), "every request failed", id="all-failed"),
]


@pytest.mark.parametrize("content, words", REFUSED)
def test_each_field_is_checked_where_it_is_read(content, words):
    with pytest.raises(engine.ScenarioError) as caught:
        read_result(content, "bad.json")
    assert str(caught.value).startswith("bad.json: ") and words in str(caught.value), str(caught.value)


def test_an_error_line_quotes_a_long_value_and_a_strange_file_name_short_and_printable():
    content = dumped(changed(AIPERF, "input_config.loadgen.concurrency", "x" * 100_000))
    with pytest.raises(engine.ScenarioError) as caught:
        read_result(content, "\x1b[31m" + "y" * 500 + ".json")
    message = str(caught.value)
    assert len(message) < 250 and message.isprintable() and message.startswith("?[31myyy"), message


def test_a_long_strange_file_name_is_kept_short_and_printable_and_replays():
    result = read_result(dumped(VLLM), "\x07" + "z" * 300 + ".json")
    assert result.name.isprintable() and len(result.name) == RESULT_NAME_CHARS and result.name.startswith("?zz")
    assert replay_case(result, H100).measured == result.measured


def test_infinity_absent_and_inf_mean_all_at_once_and_a_rate_is_poisson():
    assert math.isinf(read_result(dumped(changed(VLLM, "request_rate", RAW), "Infinity"), "a.json").rate_per_s)
    assert math.isinf(read_result(dumped({k: v for k, v in VLLM.items() if k != "request_rate"}), "a.json").rate_per_s)
    poisson = read_result(dumped({**VLLM, "request_rate": 8, "max_concurrency": 0}), "a.json")
    assert poisson.rate_per_s == 8.0 and poisson.concurrency is None


def test_errors_absent_mean_every_request_succeeded():
    result = read_result(dumped({k: v for k, v in VLLM.items() if k != "errors"}), "a.json")
    assert list(result.input_tokens) == VLLM["input_lens"]


def test_a_zero_or_missing_figure_is_not_compared():
    vllm = read_result(dumped({**VLLM, "mean_tpot_ms": 0, "p99_tpot_ms": None}), "a.json").measured
    assert "tpot_mean_ms" not in vllm and "tpot_p99_ms" not in vllm and "tpot_median_ms" in vllm
    genai = read_result(dumped(changed(GENAI, "time_to_first_token", {"avg": 0.5, "p50": 0})), "a.json").measured
    assert genai["ttft_mean_ms"] == 0.5 and "ttft_median_ms" not in genai and "ttft_p99_ms" not in genai


def test_means_round_to_whole_tokens_of_at_least_one():
    result = read_result(dumped({**VLLM_TOTALS, "total_input_tokens": 10, "total_output_tokens": 6400}), "a.json")
    assert set(result.input_tokens) == {1} and set(result.output_tokens) == {100} and result.requests == 64


def test_the_load_is_the_last_one_given_and_zero_means_not_given():
    config = {**GENAI["input_config"], "concurrency": 2, "request_rate": 3.0,
              "perf_analyzer": {"stimulus": {"concurrency": 4, "request_rate": 0}}}
    result = read_result(dumped({**GENAI, "input_config": config}), "a.json")
    assert result.concurrency == 4 and result.rate_per_s == 3.0


def test_the_model_is_the_first_name_given():
    assert read_result(dumped(AIPERF), "a.json").model_id == "meta-llama/Llama-3.1-8B-Instruct"  # endpoint's
    moved = changed(changed(GENAI, "input_config.model_names", []), "input_config.endpoint.model_names", ["m", "n"])
    assert read_result(dumped(moved), "a.json").model_id == "m"
    assert read_result(dumped(changed(GENAI, "input_config.model_names", None)), "a.json").model_id == ""
    assert read_result(dumped({**VLLM, "model_id": None}), "a.json").model_id == ""


def test_the_tool_is_told_by_its_duration_or_its_loadgen_and_concurrency_alone_means_all_at_once():
    no_duration = read_result(dumped({k: v for k, v in AIPERF.items() if k != "benchmark_duration"}), "a.json")
    assert no_duration.tool == "AIPerf" and no_duration.concurrency == 4 and math.isinf(no_duration.rate_per_s)
    assert read_result(dumped({**GENAI, "benchmark_duration": {"avg": 10.0}}), "a.json").tool == "AIPerf"
    assert read_result(dumped(GENAI), "a.json").tool == "GenAI-Perf"


def test_the_limits_themselves_are_read_and_replay():
    slowest = len(VLLM["input_lens"]) / DEFAULT_CAPS.simulated_s
    for rate in (slowest, MAX_RATE_PER_S):
        result = read_result(dumped({**VLLM, "request_rate": rate, "max_concurrency": 1_000_000}), "a.json")
        assert result.rate_per_s == rate and result.concurrency == 1_000_000
        replay_case(result, H100)
    longest = changed(GENAI, "request_latency", {"unit": "s", "avg": DEFAULT_CAPS.simulated_s})
    assert read_result(dumped(longest), "a.json").measured["e2e_mean_ms"] == DEFAULT_CAPS.simulated_s * 1000


# --------------------------------------------------------------------------- fuzzing

FIELDS = {
    "vllm": (VLLM, ("completed", "output_throughput", "request_rate", "max_concurrency", "model_id", "input_lens",
                    "output_lens", "errors", "total_input_tokens", "total_output_tokens", "mean_ttft_ms",
                    "p99_tpot_ms", "median_e2el_ms", "best_of")),
    "vllm totals": (VLLM_TOTALS, ("completed", "total_input_tokens", "total_output_tokens", "request_rate",
                                  "max_concurrency", "output_throughput")),
    "genai": (GENAI, ("input_config", "input_config.model_names", "input_config.endpoint",
                      "input_config.perf_analyzer", "input_config.perf_analyzer.stimulus",
                      "input_config.perf_analyzer.stimulus.concurrency",
                      "input_config.perf_analyzer.stimulus.request_rate", "input_config.concurrency",
                      "input_config.request_rate", "request_count", "request_count.avg", "input_sequence_length.avg",
                      "output_sequence_length", "output_token_throughput.avg", "time_to_first_token.unit",
                      "time_to_first_token.p99", "inter_token_latency", "request_latency.avg")),
    "aiperf": (AIPERF, ("input_config.loadgen", "input_config.loadgen.concurrency", "input_config.loadgen.request_rate",
                        "input_config.endpoint", "input_config.endpoint.model_names", "request_count.avg",
                        "input_sequence_length", "output_sequence_length.avg", "inter_token_latency.unit",
                        "inter_token_latency.avg", "benchmark_duration")),
}
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 5000), st.integers(-10 ** 40, 10 ** 40),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, 1, 1e-12, 1e9, 2e9, 1e30, 1e300, 2 ** 63, "inf", "ms", "s", "abc", ""]),
                    st.text(max_size=12))
HOSTILE = st.one_of(
    st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                        max_size=3), max_leaves=8),
    st.lists(st.one_of(st.integers(-2, 2 * 10 ** 7), st.integers(1, 2000), st.floats(), st.text(max_size=3)),
             max_size=70),
    st.sampled_from([1, 10, 5000]).map(lambda depth: (RAW, nested(depth))),
    st.sampled_from(["NaN", "Infinity", "-Infinity", "9" * 400]).map(lambda text: (RAW, text)))


@st.composite
def hostile_files(draw) -> bytes:
    """A valid vllm, GenAI-Perf or AIPerf file with one to four of the fields it is read by replaced by hostile
    values (wrong types, NaN, huge numbers, nesting); a replacement below a field already replaced by a non-object
    is left out."""
    base, paths = FIELDS[draw(st.sampled_from(sorted(FIELDS)))]
    data, raw = copy.deepcopy(base), RAW
    for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=4, unique=True)):
        value = draw(HOSTILE)
        if isinstance(value, tuple):
            value, raw = value
        *parents, key = path.split(".")
        where = data
        for part in parents:
            where = where.setdefault(part, {}) if isinstance(where, dict) else None
        if isinstance(where, dict):
            where[key] = value
    return dumped(data, raw)


def check_replays(result: BenchResult) -> None:
    """What ``read_result`` returns is within the limits and replays (or the server cannot hold a request: one
    line)."""
    lengths = np.concatenate([result.input_tokens, result.output_tokens])
    assert result.requests >= 1 and len(result.output_tokens) == result.requests
    assert lengths.dtype == np.int64 and lengths.min() >= 1 and lengths.max() <= DEFAULT_CAPS.tokens_per_request
    assert math.isinf(result.rate_per_s) or 0 < result.rate_per_s <= MAX_RATE_PER_S
    assert result.concurrency is None or 1 <= result.concurrency <= DEFAULT_CAPS.requests_per_run
    assert all(0 < v < math.inf for v in result.measured.values())
    try:
        replay_case(result, H100)
        event("replayed")
    except engine.ScenarioError as exc:
        assert "\n" not in str(exc) and "KV" in str(exc), str(exc)
        event("replay refused: the KV cache cannot hold a request")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_files())
def test_fuzzed_files_are_read_or_refused_in_one_line(content):
    started = time.perf_counter()
    try:
        result = read_result(content, "fuzz.json")
    except engine.ScenarioError as exc:
        assert str(exc).startswith("fuzz.json: ") and "\n" not in str(exc), str(exc)
        event("refused: " + str(exc).split(": ")[1].split(" ")[0])
    else:
        check_replays(result)
    assert time.perf_counter() - started < HANG_S
