"""Fuzzing: Hypothesis-drawn scenarios, trace files and links (valid, at the limits, hostile) through the
command line and the app. Each ends in success or in one clear line, within a time budget, with the
process's address space capped (``RLIMIT_AS``) so that a run asking for too much memory fails the test.

The command line runs in this process (``engine.cli.main``) with lowered limits (``--limit``), so that
runs at the limits stay short; the limits' arithmetic is the same at any value.
"""

from __future__ import annotations

import base64
import copy
import json
import math
import re
import resource
import time
import zlib
from contextlib import contextmanager

import pytest
import tomli_w
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from conftest import REPO, SCENARIOS, config_fields, shown
from engine.scenario.caps import MIB, caps_with
from engine.scenario.config import WEIGHT_RANGE, apply_overrides, field_bounds, read_toml
from engine.scenario.table_names import names
from engine.sim.memory import KEY_TERMS
from test_bench_files import hostile_files
from test_safety import cli
from ui import state

EXAMPLE = read_toml(SCENARIOS / "example.toml")
FUZZ_LIMITS = ("--limit", "requests_per_run=3000", "--limit", "wall_clock_s=2", "--limit", "waiting_requests=5000")
EXAMPLE_BUDGET_S = 30.0   # one example; the run itself stops at 2 s of wall clock
ADDRESS_SPACE_HEADROOM = 3 * 1024 * MIB  # beyond what the test process already maps


@contextmanager
def memory_capped():
    """Cap this process's address space at what it maps now plus ``ADDRESS_SPACE_HEADROOM`` (soft limit,
    restored afterwards): an input that makes the engine allocate more fails with MemoryError."""
    with open("/proc/self/status") as fh:
        mapped_kib = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = mapped_kib * 1024 + ADDRESS_SPACE_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def not_json(constant: str):
    raise AssertionError(f"{constant} is not JSON")


def check_outcome(code: int, out: str, err: str, seconds: float) -> None:
    """Success with a consistent report, or exit 2 with one line; never an internal error or a hang."""
    assert seconds < EXAMPLE_BUDGET_S, f"took {seconds:.1f} s"
    assert "Traceback" not in err and "out of memory" not in err
    event("ran" if code == 0 else "refused: " + err.split(": ")[-1][:50])
    if code == 0:
        report = json.loads(out, parse_constant=not_json)  # strict JSON: no NaN or Infinity
        overall = report["overall"]
        assert overall["arrived"] == overall["completed"] + overall["timed_out"] + overall["unfinished"]
        return
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)


# --------------------------------------------------------------------------- strategies

FIELDS = config_fields()
FUZZ_CAPS = caps_with([a for a in FUZZ_LIMITS if a != "--limit"])


def _limits(meta: dict) -> tuple[float | None, float | None]:
    high = getattr(FUZZ_CAPS, meta["cap"]) if "cap" in meta else meta.get("le")
    return meta.get("ge", meta.get("gt")), high


def valid_value(tp: type, meta: dict) -> st.SearchStrategy:
    """A value the key accepts (mostly small: runs stay short)."""
    if "choices" in meta:
        return st.sampled_from(list(meta["choices"]))
    if tp is bool:
        return st.booleans()
    if "table" in meta:
        return st.sampled_from(names(meta["table"]))
    if tp is str:
        return st.text(min_size=1, max_size=12)
    low, high = _limits(meta)
    low = 0 if low is None else low
    high = low + 1000 if high is None else min(high, low + 1000)
    if tp is int:
        return st.integers(int(math.ceil(low)), int(high))
    return st.floats(float(low), float(high), exclude_min="gt" in meta)


def boundary_value(tp: type, meta: dict) -> st.SearchStrategy:
    """A value at one end of what the key accepts, or just beyond it."""
    ends = [v for v in _limits(meta) if v is not None]
    if tp is int:
        return st.sampled_from([int(v) + d for v in ends for d in (-1, 0, 1)] or [0, -1, 2 ** 63 - 1, 2 ** 63])
    if tp is float:
        return st.sampled_from([v * f for v in ends for f in (1 - 1e-9, 1.0, 1 + 1e-9)] + [math.nan, math.inf])
    if tp is str and "cap" in meta:
        n = getattr(FUZZ_CAPS, meta["cap"])
        return st.sampled_from(["x" * n, "x" * (n + 1)])
    return hostile


hostile = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70), st.floats(),
              st.sampled_from([1e-300, 1e300, -0.0]), st.text(max_size=30),
              st.sampled_from(["/etc/hostname", "../../x.csv", "![x](http://h/i.png)", "\x00" * 5])),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)


@st.composite
def scenarios(draw) -> dict:
    """The example scenario (300 requests) with 1-4 keys set to a valid, boundary or hostile value."""
    data = copy.deepcopy(EXAMPLE)
    data["workload"]["num_requests"] = 300
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(sorted(FIELDS) + ["workload.bogus", "policy.weights.interactive"]))
        tp, meta = FIELDS.get(key, (float, {}))
        kind = draw(st.sampled_from(["valid", "valid", "boundary", "hostile"]))
        value = draw({"valid": valid_value, "boundary": boundary_value}[kind](tp, meta) if kind != "hostile"
                     else hostile)
        event(f"{kind} value")
        data = apply_overrides(data, {key: value}) if _settable(data, key) else data
    return data


def _settable(data: dict, key: str) -> bool:
    """True when every table on the way to ``key`` exists as a table (classes by index)."""
    node = data
    for part in key.split(".")[:-1]:
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                return False
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node.get(part, {})
        if not isinstance(node, (dict, list)):
            return False
    return True


def toml_text(data: dict) -> bytes:
    """The scenario as TOML (TOML has no null: keys and items set to None are left out)."""
    def strip(obj):
        if isinstance(obj, dict):
            return {str(k): strip(v) for k, v in obj.items() if v is not None}
        if isinstance(obj, list):
            return [strip(v) for v in obj if v is not None]
        return obj
    return tomli_w.dumps(strip(data)).encode()


csv_cells = st.one_of(st.sampled_from(["0", "1", "-1", "1.5", "1e19", "9223372036854775808", "10000000", "10000001",
                                       "nan", "inf", "", "x", "\x00", "2023-11-16 18:00:00+05:00"]),
                      st.text(max_size=10))


@st.composite
def trace_files(draw) -> tuple[str, bytes]:
    """(suffix, content) of a trace: mostly well-formed rows with drawn cells, or random bytes."""
    kind = draw(st.sampled_from(["csv", "azure", "mooncake", "bytes"]))
    rows = draw(st.lists(st.tuples(csv_cells, csv_cells, csv_cells), max_size=6)) if draw(st.booleans()) else []
    good = draw(st.integers(0, 50))
    if kind == "csv":
        lines = ["arrival_s,prompt_tokens,output_tokens"] + [f"{i * 0.1},{i % 90 + 1},{i % 7 + 1}"
                                                             for i in range(good)]
        lines += [",".join(r) for r in rows]
        return ".csv", "\n".join(lines).encode("utf-8", "surrogatepass")
    if kind == "azure":
        lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [f"2023-11-16 18:00:{i % 60:02d},{i + 1},{i % 5 + 1}"
                                                               for i in range(good)]
        lines += [",".join(r) for r in rows]
        return ".csv", "\n".join(lines).encode("utf-8", "surrogatepass")
    if kind == "mooncake":
        records = [json.dumps({"timestamp": i * 100, "input_length": i + 1, "output_length": 2}) for i in range(good)]
        records += [json.dumps(draw(hostile)) for _ in rows]
        records += draw(st.lists(st.text(max_size=40), max_size=2))
        return ".jsonl", "\n".join(records).encode("utf-8", "surrogatepass")
    return ".csv", draw(st.binary(max_size=2000))


TRACE_SCENARIO = {"workload": {"classes": [{"name": "chat", "share": 0.5}, {"name": "batch", "share": 0.5}]},
                  "server": {"step_model": "fixed", "step_time_ms": 5.0}}


@st.composite
def links(draw) -> str:
    """A ``?s=`` value: a drawn scenario encoded, damaged, truncated, a small bomb, or random text."""
    kind = draw(st.sampled_from(["scenario", "scenario", "truncated", "bomb", "text", "json"]))
    if kind == "text":
        return draw(st.text(max_size=200))
    if kind == "bomb":
        return base64.urlsafe_b64encode(zlib.compress(b"{" * draw(st.integers(MIB, 20 * MIB)), 9)).decode()
    if kind == "json":
        raw = json.dumps(draw(hostile)).encode()
        return base64.urlsafe_b64encode(zlib.compress(raw)).decode()
    link = state.encode(draw(scenarios()))
    return link[: draw(st.integers(1, len(link) - 1))] if kind == "truncated" else link


# --------------------------------------------------------------------------- command line

def fuzz(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Compile (or load) the simulator before memory is capped."""
    assert cli("run", str(SCENARIOS / "example.toml"), "--set", "workload.num_requests=50", "--json", "-")[0] == 0


@fuzz(100)
@given(data=scenarios())
def test_fuzzed_scenarios_through_the_command_line(tmp_path, data):
    path = tmp_path / "fuzz.toml"
    path.write_bytes(toml_text(data))
    with memory_capped():
        check_outcome(*cli("run", str(path), "--json", "-", *FUZZ_LIMITS))


@fuzz(60)
@given(trace=trace_files(), fmt=st.sampled_from([None, "csv", "azure", "mooncake"]),
       cut=st.sampled_from([None, 5, 3000]))
def test_fuzzed_trace_files_through_the_command_line(tmp_path, trace, fmt, cut):
    suffix, content = trace
    path = tmp_path / f"trace{suffix}"
    path.write_bytes(content)
    scenario = tmp_path / "replay.toml"
    scenario.write_text(tomli_w.dumps(TRACE_SCENARIO))
    args = ["run", str(scenario), "--trace", str(path), "--json", "-", *FUZZ_LIMITS]
    if cut:
        args += ["--set", f"workload.num_requests={cut}"]
    if fmt:
        args += ["--trace-format", fmt]
    with memory_capped():
        check_outcome(*cli(*args))


# --------------------------------------------------------------------------- the app


def lab_with(link: str) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    at.query_params[state.QUERY_KEY] = link
    return at.run()


@fuzz(25)
@given(link=links())
def test_fuzzed_links_through_the_app(link):
    started = time.perf_counter()
    with memory_capped():
        at = lab_with(link)
    assert time.perf_counter() - started < 180
    assert not at.exception, at.exception
    assert all("\n" not in e for e in shown(at.error)), "every error is one line"
    assert [m for m in at.metric if m.label == "TTFT p99"], "results (the link's, or the default's) are shown"
    for block in at.metric:
        assert block.value is None or not isinstance(block.value, float) or math.isfinite(block.value)


# --------------------------------------------------------------------------- every key, every limit

TABLES_FOR = {  # what a key needs around it to be read at all
    "fleet.groups.": {"fleet": {"groups": [{"replicas": 1}, {"replicas": 1}]}},
    "fleet.prefill.": {"fleet": {"mode": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1}}},
    "fleet.decode.": {"fleet": {"mode": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1}}},
    "server.speculative.": {"server.speculative": {"draft_cost": 0.1}},
    "server.model_config.": {"server.step_model": "roofline", "server.model": "Mine", "server.model_config": {
        "name": "Mine", "layers": 4, "hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32, "intermediate": 512,
        "vocab": 1000, "experts": 8, "experts_per_token": 2, "expert_intermediate": 128, "sliding_window": 128,
        "sliding_layers": 2}},
    "workload.arrival.cv": {"workload.arrival.process": "gamma", "workload.arrival.cv": 1.0},
    "fleet.autoscale.": {"fleet.autoscale": {"max_replicas": 2}},
    "fleet.spot_": {"fleet.autoscale": {"max_replicas": 2}},
}
ROOFLINE_ONLY = ("server.gpu", "server.model", "server.quant", "server.kv_quant", "server.tensor_parallel",
                 ".gpu", ".quant", ".tensor_parallel", ".calibration", "draft_model")


def values_at_the_limits(key: str) -> tuple[list, list]:
    """(values to try, values that must be refused) of a key, from its own metadata (``config.opt``): its ends and
    its choices; just beyond its ends, an unknown name, a lone surrogate, and values not of its type."""
    tp, meta = FIELDS[key]
    wrong_type = [["not", key], {"x": 1}]
    if "choices" in meta:
        return list(meta["choices"]), ["no-such-choice", *wrong_type]
    if "table" in meta:
        return list(names(meta["table"])), ["no-such-row", "\ud800", *wrong_type]
    if tp is bool:
        return [True, False], wrong_type
    if tp is str:
        n = getattr(FUZZ_CAPS, meta["cap"]) if "cap" in meta else 80
        return ["x" * n], ["x" * (n + 1), "\ud800", *wrong_type]
    if tp in (int, float):
        low, high = field_bounds(meta)
        high = getattr(FUZZ_CAPS, meta["cap"]) if "cap" in meta else high
        step = 1 if tp is int else 1e-6
        tried = [tp(v) for v in (low, high) if v is not None and not (v == low and "gt" in meta)]
        beyond = ([tp(low) if "gt" in meta else tp(low) - step] if low is not None else []) + \
            ([tp(high) + (step if tp is int else abs(high) * step)] if high is not None else [])
        return tried, [*beyond, *(([math.nan, math.inf]) if tp is float else []), *wrong_type]
    classes = {c["name"]: 1.0 for c in EXAMPLE["workload"]["classes"]}  # a table of names (policy.weights)
    return [classes, {name: WEIGHT_RANGE[1] for name in classes}], [{}, {"\ud800": 1.0}, *wrong_type]


DIST_FOR = {"value": {"dist": "constant", "value": 100}, "low": {"dist": "uniform", "low": 10, "high": 100},
            "high": {"dist": "uniform", "low": 1, "high": 100}, "mean": {"dist": "lognormal", "mean": 100, "cv": 1.0},
            "cv": {"dist": "lognormal", "mean": 100, "cv": 1.0}}  # the distribution a parameter belongs to


def prepared_for(key: str, trace_path: str) -> dict:
    """The example (300 requests) with what ``key`` needs around it to be read (``TABLES_FOR``; the roofline model
    for the keys it alone reads; a token distribution the parameter belongs to; a trace to replay)."""
    data = copy.deepcopy(EXAMPLE)
    data["workload"]["num_requests"] = 300
    for prefix, needs in TABLES_FOR.items():
        if key.startswith(prefix):
            data = apply_overrides(data, needs)
    if any(part in key for part in ROOFLINE_ONLY):
        data = apply_overrides(data, {"server.step_model": "roofline", "server.model": "Llama-3-8B"})
    if key.endswith("draft_model"):
        data = apply_overrides(data, {"server.speculative": {"draft_model": "Llama-3.2-1B"}})
    table, _, parameter = key.rpartition(".")
    if table.endswith(("prompt_tokens", "output_tokens")) and parameter in DIST_FOR:
        data = apply_overrides(data, {table: DIST_FOR[parameter]})
    if key == "policy.weights":
        data = apply_overrides(data, {"policy.name": "wfq"})
    if key.startswith("workload.trace."):
        data["workload"]["trace"] = {"path": trace_path, "format": "csv"}
    return data


def one_line_or_a_strict_summary(data: dict) -> str:
    """Load and run ``data`` under the fuzz limits, memory capped: 'ran' (its summary strict JSON, arrivals all
    accounted for) or 'refused' (one ``ScenarioError`` line); anything else fails."""
    from engine.scenario.origin import Origin
    import engine

    started = time.perf_counter()
    with memory_capped():
        try:
            summary = engine.simulate(engine.load_scenario(data, origin=Origin(caps=FUZZ_CAPS))).summary
        except engine.ScenarioError as exc:
            assert "\n" not in str(exc) and str(exc).isprintable(), str(exc)
            return "refused"
    assert time.perf_counter() - started < EXAMPLE_BUDGET_S
    json.dumps(summary, allow_nan=False)  # no NaN or Infinity anywhere
    overall = summary["overall"]
    assert overall["arrived"] == overall["completed"] + overall["timed_out"] + overall["unfinished"]
    return "ran"


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("fuzz") / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.2},{50 + i},{5 + i % 7}\n"
                                                                        for i in range(200)))
    return str(path)


@pytest.mark.parametrize("key", sorted(FIELDS))
def test_every_key_at_its_limits_runs_or_is_one_line(key, small_trace):
    """Every key of every table (drawn from ``config.opt`` metadata: a key is fuzzed the day it is added) at each
    end of what it accepts and among its choices (a run, or one line), and just beyond, of the wrong type, an unknown
    name or text that is not Unicode (one line)."""
    tried, refused = values_at_the_limits(key)
    base = prepared_for(key, small_trace)
    bases = [base]
    if KEY_TERMS[re.sub(r"\.(\d+)\.", "[].", key)]:  # it sizes an array: also with the prefix arrays built
        bases.append(apply_overrides(base, {"server.prefix_caching": True}))
    for data in bases:
        for value in tried:
            one_line_or_a_strict_summary(apply_overrides(data, {key: value}))
    for value in refused:
        outcome = one_line_or_a_strict_summary(apply_overrides(base, {key: value}))
        assert outcome == "refused", f"{key} = {value!r} was accepted"


def test_every_key_that_sizes_an_array_at_its_largest_at_once_is_refused_in_one_line():
    """The keys that size the run's arrays, each at the largest value a link may give, with prefix caching and
    conversations on: refused before anything is drawn, in bounded memory (each alone: the test above)."""
    data = copy.deepcopy(EXAMPLE)
    data["server"]["prefix_caching"] = True
    largest = {"workload.num_requests": FUZZ_CAPS.requests_per_run, "fleet.replicas": FUZZ_CAPS.replicas,
               "server.block_size_tokens": 16, "server.max_batch_size": FUZZ_CAPS.batch_size,
               "server.max_batched_tokens": FUZZ_CAPS.batched_tokens,
               "limits.max_waiting_requests": FUZZ_CAPS.waiting_requests}
    for k in (0, 1):
        largest |= {f"workload.classes.{k}.shared_prefix_tokens": FUZZ_CAPS.tokens_per_request,
                    f"workload.classes.{k}.conversation_turns": 1000,
                    f"workload.classes.{k}.prompt_tokens": {"dist": "constant", "value": FUZZ_CAPS.tokens_per_request}}
    import engine

    started = time.perf_counter()
    with memory_capped(), pytest.raises(engine.ScenarioError, match="more than the limit of .* MiB "
                                                                      r"\(run_memory_mib\)"):
        engine.simulate(engine.load_scenario(apply_overrides(data, largest)))
    assert time.perf_counter() - started < 5.0


# --------------------------------------------------------------------------- uploads of every format


@st.composite
def uploads(draw) -> tuple[str, str, str, object]:
    """(page, uploader key, what, value) of one upload: a scenario (drawn, or random bytes), a trace of any format,
    or benchmark result files (hostile fields, or random bytes)."""
    kind = draw(st.sampled_from(["scenario", "trace", "benchmark"]))
    if kind == "scenario":
        content = toml_text(draw(scenarios())) if draw(st.booleans()) else draw(st.binary(max_size=2000))
        return "pages/lab.py", "upload_1", kind, ("fuzz.toml", content, "application/toml")
    if kind == "trace":
        suffix, content = draw(trace_files())
        return "pages/workload.py", "trace_upload", kind, (f"fuzz{suffix}", content, "text/csv")
    content = draw(hostile_files()) if draw(st.booleans()) else draw(st.binary(max_size=2000))
    return "pages/hardware.py", "bench_upload", kind, [("fuzz.json", content, "application/json")]


@fuzz(15)
@given(upload=uploads())
def test_fuzzed_uploads_of_every_format_through_the_app(upload):
    """A scenario, a trace and benchmark files, each drawn well-formed, hostile or random, uploaded on its page:
    the page shows it or one line per problem, within its time, in bounded memory."""
    page, key, kind, value = upload
    event(kind)
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    at = at.switch_page(page).run()
    started = time.perf_counter()
    with memory_capped():
        at.file_uploader(key=key).set_value(value).run()
    assert time.perf_counter() - started < 180
    assert not at.exception, at.exception
    assert all("\n" not in e for e in shown(at.error)), "every error is one line"
    assert not any("unexpected error" in e for e in shown(at.error)), shown(at.error)
