"""Safety limits: how much one run, one file or one link may ask of the machine.

A scenario can come from someone else (a shared link, an uploaded scenario or trace), so everything
that costs time or memory has a limit here, with its unit: requests, classes, batch and token sizes,
distribution parameters, simulated and wall-clock time, trace and scenario sizes, the link, uploads
and the app's result cache. Scenario keys name the limit they are checked against (``cap=`` in
``config.opt``); a value beyond one is a ``ScenarioError`` naming the field, the value and the limit.

``DEFAULT_CAPS`` holds for the app, always. The command line may raise a limit explicitly
(``--limit NAME=VALUE``, which builds a ``Caps`` with ``from_cli = True`` so errors say how).
The manual's limits table (docs/safety.md) is generated from this class (``caps_markdown``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .errors import ScenarioError

MIB = 1024 * 1024
_SIZED = (str, bytes, list, tuple, dict)  # checked by their length


def _limit(default: Any, unit: str, help: str) -> Any:
    return field(default=default, metadata={"unit": unit, "help": help})


@dataclass(frozen=True)
class Caps:
    """Every safety limit, with its unit (field metadata) and what it bounds."""

    requests_per_run: int = _limit(1_000_000, "requests", "requests one run simulates (workload.num_requests, "
                                   "synthetic arrivals within duration_s, trace rows replayed)")
    classes: int = _limit(32, "classes", "request classes in one scenario")
    curve_points: int = _limit(10_000, "points", "points of workload.arrival.rate_curve")
    name_chars: int = _limit(80, "characters", "a scenario or class name")
    path_chars: int = _limit(1024, "characters", "workload.trace.path")
    batch_size: int = _limit(8192, "sequences", "server.max_batch_size and min_batch_size")
    batched_tokens: int = _limit(1_048_576, "tokens", "server.max_batched_tokens")
    tokens_per_request: int = _limit(10_000_000, "tokens", "prompt or output tokens of one request: distribution "
                                     "values, means and max, every draw (clipped) and trace row; also "
                                     "server.max_seq_len and block_size_tokens")
    kv_tokens: int = _limit(1_000_000_000_000, "tokens", "server.kv_capacity_tokens")
    length_cv: float = _limit(100.0, "", "coefficient of variation of a token distribution or of gamma arrivals")
    replicas: int = _limit(64, "servers", "fleet.replicas")
    waiting_requests: int = _limit(100_000, "requests", "limits.max_waiting_requests")
    drain_s: float = _limit(86_400.0, "s", "limits.max_drain_s")
    simulated_s: float = _limit(2_592_000.0, "s", "time of the last arrival (30 days): workload.duration_s, "
                                "synthetic and replayed arrivals")
    run_memory_mib: int = _limit(2048, "MiB", "memory one run may take, estimated from the scenario before it runs "
                                 "(engine/sim/memory.py: requests, prefix blocks, prefix caches, replica lists, time "
                                 "series, trace); a run estimated above it is refused, naming its largest part")
    wall_clock_s: float = _limit(60.0, "s", "wall-clock time of one simulation; a run that reaches it stops and "
                                 "is reported as cut (stop reason wall_clock)")
    section_s: float = _limit(90.0, "s", "wall-clock time one section of an app page (policy comparison, load "
                              "curves, alpha-gamma map, shapes, sizing search) may spend on runs not yet cached; the "
                              "runs left are skipped and the page says so")
    plan_s: float = _limit(300.0, "s", "wall-clock time of one plan (the planner): when it runs out, the "
                           "configurations not sized yet are listed as such and the answer says it was cut")
    tune_s: float = _limit(300.0, "s", "wall-clock time of one tuning: when it runs out, the best candidate found "
                           "so far is the answer and it says it was cut")
    trace_bytes: int = _limit(256 * MIB, "bytes", "bytes read from one trace file (reading stops at the "
                              "requests cut)")
    trace_line_bytes: int = _limit(1 * MIB, "bytes", "one line of a trace (a JSONL record, a CSV header or row)")
    scenario_bytes: int = _limit(1 * MIB, "bytes", "a scenario file or uploaded scenario")
    scheduler_address_chars: int = _limit(200, "characters", "a Dask scheduler address (--scheduler, "
                                          "$SCHEDULER_LAB_DASK_SCHEDULER)")
    link_chars: int = _limit(65_536, "characters", "the scenario in a shared link (?s=...)")
    link_bytes: int = _limit(1 * MIB, "bytes", "the link's scenario once decompressed")
    upload_mib: int = _limit(64, "MiB", "an uploaded trace (server.maxUploadSize in .streamlit/config.toml)")
    result_file_mib: int = _limit(32, "MiB", "a benchmark result file (python -m engine calibrate, the Hardware & Cost "
                                  "page; a detailed vllm result of 100,000 requests is about 20 MiB): reading JSON "
                                  "takes up to 30 times its size in memory")
    app_calibrations: int = _limit(100, "calibrations", "saved calibrations the app may hold to save one more "
                                   "(Hardware & Cost); the command line is not bounded by it")
    upload_store_mib: int = _limit(1024, "MiB", "uploaded traces kept on the server (least recently used "
                                   "removed first)")
    upload_store_s: float = _limit(7 * 86_400.0, "s", "time after its last use at which an uploaded trace is "
                                   "removed")
    kernel_cache_entries: int = _limit(2048, "entries", "measured-kernel operator tables (3.3 KiB each) and model "
                                       "folders kept on disk for the models of models.csv and those the "
                                       "aiconfigurator-core package bundles, in any GPU, engine, format and layout "
                                       "(the least recently used removed first); the app and the command line alike")
    kernel_cache_own_entries: int = _limit(256, "entries", "the same for users' own model shapes "
                                           "(server.model_config), kept apart so that any number of shapes sent "
                                           "through links never pushes out the shipped models' tables")
    kernel_cache_bytes: int = _limit(16 * MIB, "bytes", "the whole measured-kernel disk cache (own shapes' "
                                     "entries removed first); the two limits above keep it under 8 MiB")
    kernel_cache_s: float = _limit(30 * 86_400.0, "s", "time after its last use at which a kept operator table or "
                                   "model folder is removed")
    large_run_mib: int = _limit(64, "MiB", "in the app, runs whose estimated memory (run_memory_mib's estimate) is "
                                "above this take turns (large_runs_at_once at a time), so that many sessions asking "
                                "for the largest scenario cannot exhaust the server's memory")
    large_runs_at_once: int = _limit(1, "runs", "large runs the app simulates at the same time")
    result_cache_mib: int = _limit(2048, "MiB", "simulation results the app keeps in memory for all sessions")
    result_cache_s: float = _limit(3600.0, "s", "age after which a kept result is dropped")
    sessions_per_process: int = _limit(256, "sessions", "browser sessions one app server process holds at once; "
                                       "one more is refused at its connection and its browser tries again")
    page_runs_per_s: int = _limit(150, "runs/s", "page runs (a page opened or changed) one app server process "
                                  "starts a second, all sessions together, after a first 10 at once; more wait their "
                                  "turn for a moment, so that a burst of sessions leaves the server time to answer "
                                  "everyone else")
    uploads_per_session_mib: int = _limit(160, "MiB", "uploaded files one browser session holds at once (a trace "
                                          "of upload_mib with room to replace it, and the small files); an upload "
                                          "beyond it is refused before its body is read")
    uploads_held_mib: int = _limit(1024, "MiB", "uploaded files all sessions of one app server process hold at "
                                   "once; an upload beyond it is refused before its body is read")
    from_cli: bool = field(default=False, metadata={"internal": True})

    def check(self, name: str, path: str, value: Any, measure: str = "") -> None:
        """Raise ``ScenarioError`` when ``value`` (or, for text and lists, its length) is above limit ``name``."""
        limit = getattr(self, name)
        size = len(value) if isinstance(value, _SIZED) else value
        if size > limit:
            raise ScenarioError(self.beyond(name, path, value, measure))

    def raise_hint(self, name: str) -> str:
        """How to raise limit ``name``: only the command line can (``--limit``), so only it says so."""
        return f" (python -m engine ... --limit {name}=N raises it)" if self.from_cli else ""

    def beyond(self, name: str, path: str, value: Any, measure: str = "") -> str:
        """The one-line message for ``value`` of ``path`` above limit ``name``."""
        unit = limits_fields()[name].metadata["unit"]
        limit = f"{number_text(getattr(self, name))} {unit}".rstrip()
        hint = self.raise_hint(name)
        if isinstance(value, _SIZED):
            return f"{path} has {len(value):,} {unit}, more than the limit of {limit}{hint}"
        return f"{path} = {number_text(value)}{measure} is above the limit of {limit}{hint}"


def number_text(value: Any) -> str:
    """A limit or a value as text: thousands separated, whole floats without decimals."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"


def limits_fields() -> dict[str, dataclasses.Field]:
    """The public limits, by name."""
    return {f.name: f for f in dataclasses.fields(Caps) if not f.metadata.get("internal")}


DEFAULT_CAPS = Caps()


def caps_with(overrides: list[str]) -> Caps:
    """``DEFAULT_CAPS`` with ``NAME=VALUE`` overrides (the CLI's ``--limit``); marked as from the CLI."""
    fields = limits_fields()
    changes: dict[str, Any] = {}
    for item in overrides:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or name not in fields:
            raise ScenarioError(f"--limit {item!r} must be NAME=VALUE with NAME one of {', '.join(fields)}")
        kind = type(fields[name].default)
        try:
            value = kind(text.strip())
        except ValueError:
            kind_text = "an integer" if kind is int else "a number"
            raise ScenarioError(f"--limit {name} = {text.strip()!r} must be {kind_text}") from None
        if not 0 < value < float("inf"):  # also refuses NaN
            raise ScenarioError(f"--limit {name} = {text.strip()!r} must be a finite number > 0")
        changes[name] = value
    return dataclasses.replace(DEFAULT_CAPS, from_cli=True, **changes)


def caps_markdown() -> str:
    """The limits as a Markdown table (the manual's limits table is generated from it)."""
    lines = ["| limit | value | unit | bounds |", "|---|---:|---|---|"]
    for name, f in limits_fields().items():
        lines.append(f"| `{name}` | {number_text(f.default)} | {f.metadata['unit']} | {f.metadata['help']} |")
    return "\n".join(lines) + "\n"
