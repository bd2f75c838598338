"""Benchmark result files users already have, read into one shape: the load that was run and what was measured.

Formats (detected from the keys):

- ``vllm bench serve`` / ``benchmarks/benchmark_serving.py --save-result`` JSON: ``completed``,
  ``total_input_tokens``, ``total_output_tokens``, ``request_rate`` (a number or ``"inf"``: all at once),
  ``max_concurrency`` (absent or null: none), ``output_throughput`` (tokens/s), ``mean_/median_/p99_`` +
  ``ttft_ms``, ``tpot_ms``, ``e2el_ms``; per request (``--save-detailed`` in newer versions) ``input_lens``,
  ``output_lens`` and ``errors`` ("" when the request succeeded). Files of the old script (those with
  ``best_of``) swap the mean and median end-to-end latency, so theirs are not read.
- GenAI-Perf ``profile_export_genai_perf.json`` and AIPerf ``profile_export_aiperf.json``: one block per metric
  with its ``unit`` and ``avg``/``p50``/``p99`` (``time_to_first_token``, ``inter_token_latency``,
  ``request_latency``, ``output_token_throughput``, ``request_count``, ``input_sequence_length``,
  ``output_sequence_length``); the load in ``input_config``: ``concurrency`` or ``request_rate`` at its top
  (GenAI-Perf before 2025), under ``perf_analyzer.stimulus`` (GenAI-Perf since) or ``loadgen`` (AIPerf).
  These files give mean lengths only, so every request replays at the mean.

Every figure is named as in ``calibration.METRICS``. A result file may come from anyone (an upload, a command-line
argument), so every field is checked where it is read: its type, and its range against the safety limits
(``caps.DEFAULT_CAPS``: requests, tokens per request, simulated time), so that what ``read_result`` returns
replays. A file that is not one of these, lacks what a replay needs or holds a value out of range raises one
``ScenarioError`` line naming the file, the field's path (``input_config.loadgen.concurrency``) and what is
allowed; it quotes the file only through ``_shown`` (a list or an object by its kind, never its content).
A measured figure that is absent, null or 0 (vllm writes 0 when it measured nothing) is not compared; NaN or
Infinity in a field read is refused, except the rate Infinity, which vllm means as "all at once".
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..scenario.caps import DEFAULT_CAPS, MIB, limits_fields, number_text
from ..scenario.config import Arrival
from ..scenario.errors import ScenarioError, excerpt, printable

MAX_FILE_MIB = DEFAULT_CAPS.result_file_mib
# A result's name (its file's) as kept, shown and saved: its replay scenario, "replay of NAME", stays within
# the limit of a scenario name.
RESULT_NAME_CHARS = DEFAULT_CAPS.name_chars - 16
# A replayed Poisson rate obeys a scenario's arrival rate bound (req/s).
MAX_RATE_PER_S = {f.name: f for f in dataclasses.fields(Arrival)}["rate_per_s"].metadata["le"]
MAX_LATENCY_MS = DEFAULT_CAPS.simulated_s * 1000.0  # a measured latency longer than a run may last is no latency
LIMIT_WORDS = {"requests_per_run": "one run simulates", "tokens_per_request": "one request may hold"}
VLLM_STATISTICS = {"mean": "mean", "median": "median", "p99": "p99"}
VLLM_LATENCIES = {"ttft": "ttft", "tpot": "tpot", "e2e": "e2el"}
PERF_BLOCKS = {"ttft": "time_to_first_token", "tpot": "inter_token_latency", "e2e": "request_latency"}
PERF_STATISTICS = {"mean": "avg", "median": "p50", "p99": "p99"}
TIME_UNITS_MS = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "us": 0.001, "ns": 1e-6}
PERF_LOAD_SOURCES = ("perf_analyzer.stimulus", "loadgen")  # where newer tools put the load, below input_config


@dataclass(frozen=True)
class BenchResult:
    """One benchmark run: the load (requests with their lengths; Poisson rate or all at once; concurrency cap)
    and the measured figures."""

    name: str
    tool: str
    model_id: str
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    rate_per_s: float               # math.inf: all requests sent at once
    concurrency: int | None         # clients in flight at most (closed loop), None: no cap
    measured: dict[str, float] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return len(self.input_tokens)

    def load_text(self) -> str:
        rate = "all at once" if math.isinf(self.rate_per_s) else f"Poisson {self.rate_per_s:g} req/s"
        cap = f", at most {self.concurrency} in flight" if self.concurrency else ""
        return (f"{self.requests:,} requests ({rate}{cap}), prompts {self.input_tokens.mean():,.0f} and outputs "
                f"{self.output_tokens.mean():,.0f} tokens on average")


# --------------------------------------------------------------------------- checked fields


def _fail(name: str, what: str) -> ScenarioError:
    return ScenarioError(f"{name}: {what}")


def _shown(value: Any) -> str:
    """``value`` for an error line: a list or an object by its kind only (its repr could be huge or nested deeper
    than ``repr`` recurses), text and numbers as a short excerpt (whose cost, a copy of the text, is below what
    parsing the file took)."""
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    return excerpt(value)


def _real(value: Any) -> float | None:
    """A JSON number as a float (an integer too large for one: infinite, signed); None for anything else, true and
    false included."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _absent(value: Any) -> bool:
    """Whether a field means "not given": absent, null or 0 (the tools write 0 for a figure or a setting they do
    not have)."""
    return value is None or _real(value) == 0


def _object(data: dict, key: str, path: str, name: str) -> dict:
    """``data[key]`` when it is an object; {} when it is absent or null; else ``ScenarioError`` naming ``path``."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(name, f"{path} must be an object ({{...}}), got {_shown(value)}")
    return value


def _text(value: Any, path: str, name: str) -> str:
    """``value`` when it is text; "" when absent or null."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _fail(name, f"{path} must be text, got {_shown(value)}")
    return value


def _positive(value: Any, path: str, name: str) -> float:
    """``value`` when it is a finite number > 0 (NaN and Infinity refused)."""
    number = _real(value)
    if number is None or not 0 < number < math.inf:
        raise _fail(name, f"{path} must be a positive number, got {_shown(value)}")
    return number


def _at_most(number: float, path: str, name: str, limit_name: str) -> None:
    """Refuse ``number`` (of ``path``) above safety limit ``limit_name`` of ``DEFAULT_CAPS``."""
    limit = getattr(DEFAULT_CAPS, limit_name)
    if number > limit:
        unit = limits_fields()[limit_name].metadata["unit"]
        raise _fail(name, f"{path} = {number_text(number)} {unit} is more than {LIMIT_WORDS[limit_name]} "
                          f"({number_text(limit)}, {limit_name})")


def _count(value: Any, path: str, name: str, limit_name: str) -> int:
    """``value`` when it is a whole number from 1 up to safety limit ``limit_name`` (checked before an array that
    long is made: a tiny file must not claim a billion requests)."""
    number = _real(value)
    if number is None or not number >= 1:
        raise _fail(name, f"{path} must be a whole number of at least 1, got {_shown(value)}")
    _at_most(number, path, name, limit_name)
    if not number.is_integer():
        raise _fail(name, f"{path} must be a whole number, got {_shown(value)}")
    return int(number)


def _mean_tokens(value: Any, path: str, name: str) -> int:
    """A mean token count (> 0, at most ``tokens_per_request``), rounded to a whole count of at least 1."""
    mean = _positive(value, path, name)
    _at_most(mean, path, name, "tokens_per_request")
    return max(1, round(mean))


def _lengths(values: Any, path: str, name: str) -> np.ndarray:
    """Per-request token counts: a non-empty list, at most ``requests_per_run`` long, of whole numbers from 1 to
    ``tokens_per_request`` (checked before the array is made: an integer beyond int64 must not reach numpy)."""
    limit = DEFAULT_CAPS.tokens_per_request
    allowed = f"a list of whole token counts from 1 to {limit:,} (tokens_per_request)"
    if not isinstance(values, list) or not values:
        raise _fail(name, f"{path} must be {allowed}, got {_shown(values)}")
    if len(values) > DEFAULT_CAPS.requests_per_run:
        raise _fail(name, DEFAULT_CAPS.beyond("requests_per_run", path, values))
    for i, v in enumerate(values):
        if type(v) is not int or not 1 <= v <= limit:
            raise _fail(name, f"{path} must be {allowed}; {path}[{i}] is {_shown(v)}")
    return np.asarray(values, dtype=np.int64)


def _rate_per_s(value: Any, path: str, requests: int, name: str) -> float:
    """A Poisson rate: a finite number of requests per second > 0 and at most ``MAX_RATE_PER_S``, slow enough
    that ``requests`` arrive within the simulated time one run may span (``simulated_s``)."""
    rate = _real(value)
    if rate is None or not 0 < rate <= MAX_RATE_PER_S:
        raise _fail(name, f"{path} must be a rate in requests per second above 0 and at most "
                          f"{number_text(MAX_RATE_PER_S)}, got {_shown(value)}")
    span_s, limit_s = requests / rate, DEFAULT_CAPS.simulated_s
    if span_s > limit_s:
        raise _fail(name, f"{path} = {number_text(rate)} req/s spreads the {requests:,} requests over "
                          f"{number_text(span_s)} s, longer than one run may last ({number_text(limit_s)} s, "
                          f"simulated_s)")
    return rate


def _concurrency(value: Any, path: str, name: str) -> int | None:
    """A cap on requests in flight: None when not given (absent, null or 0), else a whole number from 1 to
    ``requests_per_run`` (a cap above the requests sent caps nothing, as in the benchmark)."""
    return None if _absent(value) else _count(value, path, name, "requests_per_run")


def _latency_ms(value: Any, ms_per_unit: float, path: str, unit: str, name: str) -> float:
    """A measured latency in milliseconds: finite, > 0, at most the simulated time one run may span."""
    number = _positive(value, path, name)
    if number * ms_per_unit > MAX_LATENCY_MS:
        raise _fail(name, f"{path} = {number_text(number)} {unit} is longer than one run may last "
                          f"({number_text(DEFAULT_CAPS.simulated_s)} s, simulated_s)")
    return number * ms_per_unit


# --------------------------------------------------------------------------- vllm bench serve


def _vllm_lengths(data: dict, completed: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Each successful request's prompt and output tokens: per request when the file has them, else the means."""
    if "input_lens" not in data or "output_lens" not in data:
        mean_in = _positive(data.get("total_input_tokens"), "total_input_tokens", name) / completed
        mean_out = _positive(data.get("total_output_tokens"), "total_output_tokens", name) / completed
        return (np.full(completed, _mean_tokens(mean_in, "total_input_tokens / completed", name), np.int64),
                np.full(completed, _mean_tokens(mean_out, "total_output_tokens / completed", name), np.int64))
    inputs = _lengths(data["input_lens"], "input_lens", name)
    outputs = _lengths(data["output_lens"], "output_lens", name)
    errors = data.get("errors")
    errors = [""] * len(inputs) if errors is None else errors
    if not isinstance(errors, list) or not len(inputs) == len(outputs) == len(errors):
        raise _fail(name, "input_lens, output_lens and errors must have one entry per request")
    if not all(e is None or isinstance(e, str) for e in errors):
        raise _fail(name, "errors must be a list of texts, \"\" (or null) for a request that succeeded")
    ok = np.array([not e for e in errors])
    if not ok.any():
        raise _fail(name, "every request failed (errors), so there is nothing to replay")
    return inputs[ok], outputs[ok]


def _vllm_rate_per_s(value: Any, requests: int, name: str) -> float:
    """vllm's ``request_rate``: "inf", Infinity, absent or null for all at once, else a Poisson rate."""
    if value in ("inf", None) or (isinstance(value, float) and value == math.inf):
        return math.inf
    return _rate_per_s(value, "request_rate", requests, name)


def _vllm_latencies(data: dict, name: str) -> dict[str, float]:
    """The latencies measured (those the file gives, not 0), in ms."""
    measured = {}
    for key, field_name in VLLM_LATENCIES.items():
        if key == "e2e" and "best_of" in data:
            continue  # the old script wrote the mean and median end-to-end latency swapped
        for stat, prefix in VLLM_STATISTICS.items():
            path = f"{prefix}_{field_name}_ms"
            if not _absent(data.get(path)):
                measured[f"{key}_{stat}_ms"] = _latency_ms(data[path], 1.0, path, "ms", name)
    return measured


def _vllm(data: dict, name: str) -> BenchResult:
    """A ``vllm bench serve`` result: its successful requests, their rate and cap, and its figures."""
    measured = {"output_tokens_per_s": _positive(data.get("output_throughput"), "output_throughput", name),
                **_vllm_latencies(data, name)}
    completed = _count(data.get("completed"), "completed", name, "requests_per_run")
    inputs, outputs = _vllm_lengths(data, completed, name)
    return BenchResult(name, "vllm bench serve", _text(data.get("model_id"), "model_id", name), inputs, outputs,
                       _vllm_rate_per_s(data.get("request_rate"), len(inputs), name),
                       _concurrency(data.get("max_concurrency"), "max_concurrency", name), measured)


# --------------------------------------------------------------------------- GenAI-Perf and AIPerf


def _block_ms(block: dict, path: str, stat: str, name: str) -> float | None:
    """Statistic ``stat`` of latency block ``block`` (at ``path``) in ms; None when the block does not give it."""
    if _absent(block.get(stat)):
        return None
    unit = block.get("unit", "ms")
    if not isinstance(unit, str) or unit not in TIME_UNITS_MS:
        raise _fail(name, f"{path}.unit must be a time unit ({', '.join(TIME_UNITS_MS)}), got {_shown(unit)}")
    return _latency_ms(block[stat], TIME_UNITS_MS[unit], f"{path}.{stat}", unit, name)


def _perf_latencies(data: dict, name: str) -> dict[str, float]:
    """The latencies measured (the statistics each block gives, not 0), in ms."""
    measured = {}
    for key, block_name in PERF_BLOCKS.items():
        block = _object(data, block_name, block_name, name)
        for stat, column in PERF_STATISTICS.items():
            value = _block_ms(block, block_name, column, name)
            if value is not None:
                measured[f"{key}_{stat}_ms"] = value
    return measured


def _perf_load_value(config: dict, key: str, name: str) -> tuple[str, Any]:
    """(path, value) of load setting ``key``: the last place that gives it of ``input_config``'s top and
    ``PERF_LOAD_SOURCES``; ("", None) when none does."""
    found = ("", None)
    for source in ("", *PERF_LOAD_SOURCES):
        where, path = config, "input_config"
        for part in source.split(".") if source else ():
            path = f"{path}.{part}"
            where = _object(where, part, path, name)
        if not _absent(where.get(key)):
            found = (f"{path}.{key}", where[key])
    return found


def _perf_load(config: dict, requests: int, name: str) -> tuple[float, int | None]:
    """The run's (rate per s, concurrency cap) from ``input_config``; one of them must be given."""
    rate_path, rate = _perf_load_value(config, "request_rate", name)
    cap_path, cap = _perf_load_value(config, "concurrency", name)
    if rate is None and cap is None:
        raise _fail(name, "input_config gives neither a concurrency nor a request_rate, so the load cannot be replayed")
    rate_per_s = math.inf if rate is None else _rate_per_s(rate, rate_path, requests, name)
    return rate_per_s, _concurrency(cap, cap_path, name)


def _perf_model_id(config: dict, name: str) -> str:
    """The first model name of ``input_config.model_names`` or, failing that, of its ``endpoint``'s; "" if none."""
    endpoint = _object(config, "endpoint", "input_config.endpoint", name)
    for path, names in (("input_config.model_names", config.get("model_names")),
                        ("input_config.endpoint.model_names", endpoint.get("model_names"))):
        if names is None or names == []:
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _fail(name, f"{path} must be a list of model names (texts), got {_shown(names)}")
        return names[0]
    return ""


def _perf(data: dict, name: str) -> BenchResult:
    """A GenAI-Perf or AIPerf export: its request count at the mean lengths, its load and its figures."""
    config = _object(data, "input_config", "input_config", name)
    tool = "AIPerf" if "benchmark_duration" in data or "loadgen" in config else "GenAI-Perf"
    count = _count(_object(data, "request_count", "request_count", name).get("avg"), "request_count.avg", name,
                   "requests_per_run")
    mean_in, mean_out = (_mean_tokens(_object(data, block, block, name).get("avg"), f"{block}.avg", name)
                         for block in ("input_sequence_length", "output_sequence_length"))
    rate_per_s, concurrency = _perf_load(config, count, name)
    throughput = _object(data, "output_token_throughput", "output_token_throughput", name).get("avg")
    measured = {"output_tokens_per_s": _positive(throughput, "output_token_throughput.avg", name),
                **_perf_latencies(data, name)}
    return BenchResult(name, tool, _perf_model_id(config, name), np.full(count, mean_in, np.int64),
                       np.full(count, mean_out, np.int64), rate_per_s, concurrency, measured)


# --------------------------------------------------------------------------- the file


def _parsed(content: bytes, name: str) -> Any:
    """The JSON document in ``content``; one line when it is not JSON, is nested deeper than the parser recurses
    or holds an integer longer than Python converts."""
    try:
        return json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(name, f"not JSON ({exc.__class__.__name__}); expected a vllm bench serve, GenAI-Perf or "
                          f"AIPerf result file") from None
    except RecursionError:
        raise _fail(name, "lists or objects are nested too deeply to read; expected a vllm bench serve, GenAI-Perf "
                          "or AIPerf result file") from None
    except ValueError:  # an integer of more digits than int() converts (sys.get_int_max_str_digits())
        raise _fail(name, "holds a number with too many digits to read; expected a vllm bench serve, GenAI-Perf or "
                          "AIPerf result file") from None


def read_result(content: bytes, name: str) -> BenchResult:
    """The benchmark result in ``content`` (the bytes of file ``name``); ``ScenarioError`` when it is not one.
    ``name`` is kept printable and short (``RESULT_NAME_CHARS``)."""
    name = printable(name, RESULT_NAME_CHARS)
    if len(content) > MAX_FILE_MIB * MIB:
        raise _fail(name, f"{len(content) / MIB:,.0f} MiB is more than a result file's {MAX_FILE_MIB} MiB limit")
    data = _parsed(content, name)
    if not isinstance(data, dict):
        raise _fail(name, "the JSON is not an object; expected a vllm bench serve, GenAI-Perf or AIPerf result file")
    if "completed" in data and "output_throughput" in data:
        return _vllm(data, name)
    if isinstance(data.get("time_to_first_token"), dict):
        return _perf(data, name)
    raise _fail(name, "not a benchmark result: a vllm bench serve file has 'completed' and 'output_throughput', "
                      "a GenAI-Perf or AIPerf export has a 'time_to_first_token' block")
