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

Every figure is named as in ``calibration.METRICS``. A file that is not one of these, or lacks what a replay
needs, raises ``ScenarioError`` naming the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from .caps import DEFAULT_CAPS, MIB
from .errors import ScenarioError, excerpt

# A detailed vllm result of 100,000 requests is about 20 MiB: a result file may be as large as an upload.
MAX_FILE_MIB = DEFAULT_CAPS.upload_mib
VLLM_STATISTICS = {"mean": "mean", "median": "median", "p99": "p99"}
VLLM_LATENCIES = {"ttft": "ttft", "tpot": "tpot", "e2e": "e2el"}
PERF_BLOCKS = {"ttft": "time_to_first_token", "tpot": "inter_token_latency", "e2e": "request_latency"}
PERF_STATISTICS = {"mean": "avg", "median": "p50", "p99": "p99"}
TIME_UNITS_MS = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "us": 0.001, "ns": 1e-6}


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


def _fail(name: str, what: str) -> ScenarioError:
    return ScenarioError(f"{name}: {what}")


def _number(data: dict, key: str, name: str, positive: bool = True) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or \
            (positive and value <= 0):
        raise _fail(name, f"{key} must be a positive number, got {excerpt(value)}")
    return float(value)


def _request_count(data: dict, key: str, name: str) -> int:
    """The whole number of requests ``data[key]`` gives, at most what one run simulates (checked before any
    array of that length is made: a tiny file must not claim a billion requests)."""
    count = int(_number(data, key, name))
    limit = DEFAULT_CAPS.requests_per_run
    if count > limit:
        raise _fail(name, f"{key} = {count:,} requests is more than one run simulates ({limit:,}, "
                          f"requests_per_run)")
    return count


def _lengths(values, name: str, key: str) -> np.ndarray:
    if not isinstance(values, list) or not values or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
        raise _fail(name, f"{key} must be a list of whole token counts of at least 1")
    return np.asarray(values, dtype=np.int64)


def _vllm(data: dict, name: str) -> BenchResult:
    measured = {"output_tokens_per_s": _number(data, "output_throughput", name)}
    completed = _request_count(data, "completed", name)
    if "input_lens" in data and "output_lens" in data:
        inputs, outputs = _lengths(data["input_lens"], name, "input_lens"), _lengths(data["output_lens"], name,
                                                                                    "output_lens")
        errors = data.get("errors") or [""] * len(inputs)
        if not len(inputs) == len(outputs) == len(errors):
            raise _fail(name, "input_lens, output_lens and errors must have one entry per request")
        ok = np.array([not e for e in errors])
        inputs, outputs = inputs[ok], outputs[ok]
    else:
        inputs = np.full(completed, max(1, round(_number(data, "total_input_tokens", name) / completed)), np.int64)
        outputs = np.full(completed, max(1, round(_number(data, "total_output_tokens", name) / completed)), np.int64)
    rate = data.get("request_rate", "inf")
    rate_per_s = math.inf if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)) else \
        _number(data, "request_rate", name)
    cap = data.get("max_concurrency")
    for key, field_name in VLLM_LATENCIES.items():
        if key == "e2e" and "best_of" in data:
            continue  # the old script wrote the mean and median end-to-end latency swapped
        for stat, prefix in VLLM_STATISTICS.items():
            value = data.get(f"{prefix}_{field_name}_ms")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                measured[f"{key}_{stat}_ms"] = float(value)
    return BenchResult(name, "vllm bench serve", str(data.get("model_id") or ""), inputs, outputs, rate_per_s,
                       int(cap) if isinstance(cap, int) and cap > 0 else None, measured)


def _block_ms(data: dict, block: str, stat: str, name: str) -> float | None:
    entry = data.get(block)
    if not isinstance(entry, dict) or stat not in entry:
        return None
    unit = entry.get("unit", "ms")
    if unit not in TIME_UNITS_MS:
        raise _fail(name, f"{block}.unit = {excerpt(unit)} is not a time unit (ms, s, us, ns)")
    return _number(entry, stat, f"{name}: {block}") * TIME_UNITS_MS[unit]


def _perf(data: dict, name: str, tool: str) -> BenchResult:
    config = data.get("input_config") if isinstance(data.get("input_config"), dict) else {}
    load = {**config, **(config.get("perf_analyzer") or {}).get("stimulus", {}), **(config.get("loadgen") or {})}
    count = _request_count(data.get("request_count") or {}, "avg", f"{name}: request_count")
    mean_in = _number(data.get("input_sequence_length") or {}, "avg", f"{name}: input_sequence_length")
    mean_out = _number(data.get("output_sequence_length") or {}, "avg", f"{name}: output_sequence_length")
    rate = load.get("request_rate")
    cap = load.get("concurrency")
    if not rate and not cap:
        raise _fail(name, "input_config gives neither a concurrency nor a request_rate, so the load cannot be replayed")
    measured = {"output_tokens_per_s": _number(data.get("output_token_throughput") or {}, "avg",
                                               f"{name}: output_token_throughput")}
    for key, block in PERF_BLOCKS.items():
        for stat, column in PERF_STATISTICS.items():
            value = _block_ms(data, block, column, name)
            if value is not None:
                measured[f"{key}_{stat}_ms"] = value
    models = config.get("model_names") or (config.get("endpoint") or {}).get("model_names") or [""]
    return BenchResult(name, tool, str(models[0]), np.full(count, max(1, round(mean_in)), np.int64),
                       np.full(count, max(1, round(mean_out)), np.int64),
                       float(rate) if rate else math.inf, int(cap) if cap else None, measured)


def read_result(content: bytes, name: str) -> BenchResult:
    """The benchmark result in ``content`` (the bytes of file ``name``); ``ScenarioError`` when it is not one."""
    if len(content) > MAX_FILE_MIB * MIB:
        raise _fail(name, f"{len(content) / MIB:,.0f} MiB is more than a result file's {MAX_FILE_MIB} MiB limit")
    try:
        data = json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(name, f"not JSON ({exc.__class__.__name__}); expected a vllm bench serve, GenAI-Perf or "
                          f"AIPerf result file") from None
    if not isinstance(data, dict):
        raise _fail(name, "the JSON is not an object; expected a vllm bench serve, GenAI-Perf or AIPerf result file")
    if "completed" in data and "output_throughput" in data:
        return _vllm(data, name)
    if isinstance(data.get("time_to_first_token"), dict):
        tool = "AIPerf" if "benchmark_duration" in data or "loadgen" in (data.get("input_config") or {}) \
            else "GenAI-Perf"
        return _perf(data, name, tool)
    raise _fail(name, "not a benchmark result: a vllm bench serve file has 'completed' and 'output_throughput', "
                      "a GenAI-Perf or AIPerf export has a 'time_to_first_token' block")
