"""Scenario configuration: frozen, typed, validated on load.

A scenario is a TOML file (or a dict of the same shape). ``load_scenario``
turns it into a tree of frozen dataclasses; every field carries its unit,
default and help text in ``metadata`` so the same text documents the keys
(``python -m engine keys``) and explains errors. Validation happens in one
place: field-level checks come from the metadata (``ge``, ``gt``, ``le``,
``choices``), cross-field checks from each class's ``_check`` method. Every
error is a ``ScenarioError`` whose message starts with the dotted key.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import tomli_w

from .caps import DEFAULT_CAPS, Caps, caps_markdown, number_text
from .errors import ScenarioError, excerpt, key_text
from .files import quoted, read_regular
from .origin import Origin
from . import schedulers
from .registry import (ADMISSION_CODES, ARRIVAL_PROCESSES, BATCHING_CODES, FLEET_MODES, KERNEL_TABLE_MODES,
                       KV_ALLOCATIONS, LENGTH_DISTRIBUTIONS, POLICY_CODES, POOL_ROLES, PREEMPT_MODE_CODES,
                       ROUTER_CODES, SCALE_SIGNALS, STEP_MODEL_CODES, TP_DEGREES, TRACE_FORMATS)
from .rate_curve import RateCurve, shape_curve
from .table_names import check_name, names, where

_MISSING = dataclasses.MISSING
WEIGHT_MAX = 1e6  # a weight, a tier, a rate of aging: beyond it the policies' costs overflow to infinity
TIME_MS_MAX = 1e10  # an SLA target, a time-out or a wait (ms): about 116 days, past the longest simulated time


def opt(default: Any = _MISSING, help: str = "", unit: str = "", **checks: Any) -> Any:
    """A dataclass field with documentation and validation metadata.

    ``checks``: ``ge``, ``gt``, ``le`` (fixed bounds), ``choices``, ``cap``: the name of the safety limit
    (``caps.Caps``) the value, or a text's or list's length, must not exceed, and ``table``: the hardware table
    (``table_names.TABLES``) whose row a text names (an empty text too, unless the default is empty).
    """
    meta = {"help": help, "unit": unit, **checks}
    return field(default=default, metadata=meta)


# --------------------------------------------------------------------------- workload


@dataclass(frozen=True)
class TokenDist:
    """Distribution of a token count (prompt or output length), always >= 1."""

    dist: str = opt(help="distribution family", choices=LENGTH_DISTRIBUTIONS)
    value: Optional[int] = opt(None, "the constant (dist = constant)", "tokens", ge=1, cap="tokens_per_request")
    low: Optional[int] = opt(None, "smallest value, inclusive (dist = uniform)", "tokens", ge=1,
                             cap="tokens_per_request")
    high: Optional[int] = opt(None, "largest value, inclusive (dist = uniform)", "tokens", ge=1,
                              cap="tokens_per_request")
    mean: Optional[float] = opt(None, "mean before truncation (dist = geometric on {1,2,...}, or lognormal)",
                                "tokens", ge=1.0, cap="tokens_per_request")
    cv: Optional[float] = opt(None, "coefficient of variation std/mean (dist = lognormal)", "", ge=0.0,
                              cap="length_cv")
    max: Optional[int] = opt(None, "optional cap: larger draws are clipped to it (any dist; draws are always "
                                   "clipped to the limit tokens_per_request)", "tokens", ge=1,
                             cap="tokens_per_request")

    _PARAMS = {
        "constant": ("value",),
        "uniform": ("low", "high"),
        "geometric": ("mean",),
        "lognormal": ("mean", "cv"),
    }

    def _check(self, path: str) -> None:
        needed = self._PARAMS[self.dist]
        for name in ("value", "low", "high", "mean", "cv"):
            given = getattr(self, name) is not None
            if name in needed and not given:
                raise ScenarioError(f"{path}.{name} is required for dist = {self.dist!r} "
                                    f"(it takes {', '.join(needed)} and optional max)")
            if name not in needed and given:
                raise ScenarioError(f"{path}.{name} is not a parameter of dist = {self.dist!r} "
                                    f"(it takes {', '.join(needed)} and optional max)")
        if self.dist == "uniform" and self.low > self.high:
            raise ScenarioError(f"{path}: low = {self.low} is above high = {self.high}; swap them")

    def mean_bound(self) -> float:
        """The mean of what is drawn, from above: the law's mean, at most its cap (clipping only lowers it)."""
        if self.dist == "constant":
            mean = self.value
        elif self.dist == "uniform":
            mean = (self.low + self.high) / 2
        else:  # geometric, lognormal
            mean = self.mean
        return min(mean, self.max) if self.max is not None else mean

    def upper_bound(self) -> float:
        """Largest value a draw can take (``inf`` when unbounded)."""
        bound = {"constant": self.value, "uniform": self.high}.get(self.dist, math.inf)
        return min(bound, self.max) if self.max is not None else bound


@dataclass(frozen=True)
class Arrival:
    """Synthetic arrival process: a law of the gaps, at a constant rate or at a rate that changes over time."""

    process: str = opt(help="inter-arrival law: poisson (exponential gaps) or gamma (burstiness cv)",
                       choices=ARRIVAL_PROCESSES)
    rate_per_s: Optional[float] = opt(None, "mean arrival rate over all classes (required unless rate_curve gives "
                                            "it; with a curve or a shape, the curve is scaled to this mean)",
                                      "req/s", ge=0.0001, le=1e9)
    cv: Optional[float] = opt(None, "coefficient of variation of inter-arrival gaps (process = gamma; "
                                    "1 = Poisson, > 1 burstier)", "", ge=0.01, cap="length_cv")
    rate_curve: Optional[tuple[tuple[float, ...], ...]] = opt(
        None, "the rate over time: [[t_s, rate_per_s], ...], straight lines between the points, the first at t_s "
              "= 0, times never decreasing (two points at one time make a step); the last rate holds after the "
              "last point unless curve_period_s repeats the curve", "", cap="curve_points")
    shape: str = opt("", "a named shape of a day or a week (data/hardware/traffic_shapes.csv, mean 1) scaled to "
                         "rate_per_s, instead of rate_curve", table="traffic_shapes")
    curve_period_s: Optional[float] = opt(None, "rate_curve repeats with this period (86400 = a day; the line from "
                                                "the last point goes back to the first rate at the period)", "s",
                                          gt=0.0, cap="simulated_s")
    curve_start_s: float = opt(0.0, "the run starts at this time of the curve or shape (32400 = 09:00 of a day "
                                    "curve)", "s", ge=0.0, cap="simulated_s")

    def _check(self, path: str) -> None:
        if self.process == "gamma" and self.cv is None:
            raise ScenarioError(f"{path}.cv is required for process = 'gamma' (1.0 = Poisson-like)")
        if self.process == "poisson" and self.cv is not None:
            raise ScenarioError(f"{path}.cv is only used with process = 'gamma'; remove it")
        if self.rate_curve is not None and self.shape:
            raise ScenarioError(f"{path}.shape and {path}.rate_curve both give the rate over time; keep one")
        if self.rate_curve is None and not self.shape:
            for key in ("curve_period_s", "curve_start_s"):
                if getattr(self, key):
                    raise ScenarioError(f"{path}.{key} needs a rate_curve or a shape; remove it or add one")
        if self.shape and self.curve_period_s is not None:
            raise ScenarioError(f"{path}.curve_period_s is the shape's own ({path}.shape); remove it")
        if self.rate_curve is not None:
            mean = self._check_curve(path)
            if self.rate_per_s is None:
                object.__setattr__(self, "rate_per_s", mean)  # the curve's own mean: what every estimate reads
        elif self.rate_per_s is None:
            what = "the shape's mean rate" if self.shape else "a constant rate, or give rate_curve"
            raise ScenarioError(f"{path}.rate_per_s is required: {what} (req/s)")

    def _check_curve(self, path: str) -> float:
        """The curve's mean rate, once its points are checked."""
        key = f"{path}.rate_curve"
        if not self.rate_curve:
            raise ScenarioError(f"{key} is empty; give at least one [t_s, rate_per_s] point")
        before = 0.0
        for i, point in enumerate(self.rate_curve):
            if len(point) != 2:
                raise ScenarioError(f"{key}[{i}] must be two numbers [t_s, rate_per_s], got {len(point)}")
            t_s, rate = point
            if i == 0 and t_s != 0:
                raise ScenarioError(f"{key}[0] starts at t_s = {t_s:g}; the first point is at 0 s")
            if t_s < before:
                raise ScenarioError(f"{key}[{i}] is at {t_s:g} s, before the point ahead of it ({before:g} s); "
                                    f"order the points by time")
            if not 0.0 <= rate <= 1e9:
                raise ScenarioError(f"{key}[{i}] has rate {rate:g} req/s; a rate is between 0 and 1e9 req/s")
            before = t_s
        if self.curve_period_s is not None and self.curve_period_s < before:
            raise ScenarioError(f"{path}.curve_period_s = {self.curve_period_s:g} s is shorter than the curve "
                                f"({before:g} s); make it at least {before:g} s")
        if self.curve_period_s is None and self.rate_curve[-1][1] == 0:
            raise ScenarioError(f"{key} ends at rate 0 and does not repeat: no request would come after "
                                f"{before:g} s; end it above 0, or set curve_period_s")
        mean = RateCurve.from_points(self.rate_curve, self.curve_period_s).mean_per_s()
        if not mean >= 0.0001:
            raise ScenarioError(f"{key} has a mean rate of {mean:g} req/s; the mean must be at least 0.0001 req/s")
        return mean

    def curve(self) -> RateCurve | None:
        """The rate over time at the scenario's mean (``rate_per_s``), or None for a constant rate."""
        return raw_curve({"shape": self.shape, "rate_curve": self.rate_curve, "curve_period_s": self.curve_period_s,
                          "rate_per_s": self.rate_per_s})


def raw_rate_per_s(arrival: Mapping[str, Any]) -> float:
    """The mean rate of a checked scenario's raw ``workload.arrival`` table: its ``rate_per_s``, else its curve's
    mean (as ``Arrival`` fills it in)."""
    if arrival.get("rate_per_s") is not None:
        return float(arrival["rate_per_s"])
    if arrival.get("shape"):
        return shape_curve(arrival["shape"]).mean_per_s()
    return RateCurve.from_points(arrival["rate_curve"], arrival.get("curve_period_s")).mean_per_s()


def raw_curve(arrival: Mapping[str, Any]) -> RateCurve | None:
    """The rate over time of a raw ``workload.arrival`` table (its shape or its points, scaled to its mean rate),
    or None for a constant rate; ``ScenarioError`` for points that do not make a curve."""
    if arrival.get("shape"):
        base = shape_curve(arrival["shape"])
    elif arrival.get("rate_curve") is not None:
        base = RateCurve.from_points(arrival["rate_curve"], arrival.get("curve_period_s"))
    else:
        return None
    return base.scaled(raw_rate_per_s(arrival) / base.mean_per_s())


def curve_points(arrival: Mapping[str, Any]) -> tuple[list[list[float]], float | None]:
    """A raw ``workload.arrival`` that moves (a shape, or points) as the points of a curve at its mean rate, rates to
    four significant figures, and the period it repeats with (the period's return to the first rate left out): what
    the Workload page's grid starts from when a day's shape becomes points to edit."""
    curve = raw_curve(arrival)
    points = [[float(t), float(f"{r:.4g}")] for t, r in zip(curve.times_s, curve.rates_per_s)]
    if curve.period_s is not None and len(points) > 1 and points[-1][0] >= curve.period_s:
        points = points[:-1]
    return points, curve.period_s


@dataclass(frozen=True)
class Trace:
    """Replay of a recorded request trace instead of synthetic arrivals."""

    path: str = opt(help="trace file; a relative path is taken from the scenario file's folder (in the app: "
                         "the name of a trace uploaded on the Workload page)", cap="path_chars")
    format: str = opt("csv", "csv: arrival_s,prompt_tokens,output_tokens[,class]; azure: Azure LLM "
                             "inference 2023 CSV; mooncake: Mooncake FAST'25 JSONL",
                      choices=TRACE_FORMATS)
    rate_scale: float = opt(1.0, "speed-up factor: arrival times are divided by it", "", ge=0.001, le=1000.0)
    jitter_ms: float = opt(0.0, "add a seeded uniform offset in [0, jitter_ms) to every arrival "
                                "(spreads the quantised Mooncake timestamps)", "ms", ge=0.0, le=3_600_000.0)


OVERALL = "overall"  # the name of the whole-run figures beside the classes' (reserved for them)


@dataclass(frozen=True)
class RequestClass:
    """One class of traffic (interactive chat, offline batch, a tenant tier...)."""

    name: str = opt(help="class name, unique; trace rows may refer to it", cap="name_chars")
    share: float = opt(help="this class's part of the arrivals; shares are rescaled to sum to 1 (0.7 and 0.4 split "
                            "arrivals 64% / 36%)", gt=0.0, le=1.0)
    priority: int = opt(0, "priority level, 0 = most urgent (used by the priority policies)", "", ge=0,
                        le=1_000_000)
    tier_weight: float = opt(1.0, "tier weight (used by cost-based policies)", "", ge=0.0, le=WEIGHT_MAX)
    sla_ttft_ms: Optional[float] = opt(None, "SLA target on time to first token (none = no target)", "ms", ge=0.001,
                                       le=TIME_MS_MAX)
    sla_e2e_ms: Optional[float] = opt(None, "SLA target on end-to-end latency (none = no target)", "ms", ge=0.001,
                                      le=TIME_MS_MAX)
    timeout_ms: Optional[float] = opt(None, "client gives up if no first token by then (none = never)",
                                      "ms", ge=0.001, le=TIME_MS_MAX)
    prompt_tokens: Optional[TokenDist] = opt(None, "prompt length distribution (required without a trace)")
    output_tokens: Optional[TokenDist] = opt(None, "output length distribution (required without a trace)")
    shared_prefix_tokens: int = opt(0, "the first tokens of every prompt of this class are the same (a system "
                                       "prompt, few-shot examples): with server.prefix_caching they are computed "
                                       "once and reused (unless a trace brings its own block ids)",
                                    "tokens", ge=0, cap="tokens_per_request")
    conversation_turns: int = opt(1, "requests per conversation (synthetic arrivals): each after the first is a "
                                     "follow-up whose prompt is the previous turn's prompt and output plus new "
                                     "tokens (prompt_tokens draws the new ones), so with server.prefix_caching the "
                                     "previous prompt's blocks can be reused", "requests", ge=1, le=1000)
    turn_gap_s: float = opt(30.0, "time between two turns of a conversation (the reply and the user's think "
                                  "time): conversations in flight = this x the class's arrival rate, their turns "
                                  "interleaved (conversation_turns > 1)", "s", gt=0.0, le=86_400.0)

    def _check(self, path: str) -> None:
        if self.name == OVERALL:
            raise ScenarioError(f"{path}.name = {OVERALL!r} is reserved for the whole-run figures; choose another "
                                f"name")
        if not self.name.strip():
            raise ScenarioError(f"{path}.name is empty; give the class a name")


@dataclass(frozen=True)
class Workload:
    """What arrives: classes, lengths, arrival process or trace, and how many."""

    classes: tuple[RequestClass, ...] = opt(help="request classes ([[workload.classes]] tables)", cap="classes")
    num_requests: Optional[int] = opt(None, "stop generating after this many requests", "requests", ge=1,
                                      cap="requests_per_run")
    duration_s: Optional[float] = opt(None, "stop generating arrivals after this time", "s", gt=0.0,
                                      cap="simulated_s")
    arrival: Optional[Arrival] = opt(None, "synthetic arrival process (required without a trace)")
    trace: Optional[Trace] = opt(None, "replay a trace file instead of synthetic arrivals and lengths")

    def _check(self, path: str) -> None:
        if not self.classes:
            raise ScenarioError(f"{path}.classes: at least one [[workload.classes]] table is required")
        names = [c.name for c in self.classes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ScenarioError(f"{path}.classes: duplicate class name {dupes[0]!r}; names must be unique")
        total = sum(c.share for c in self.classes)
        if abs(total - 1.0) > 1e-9:  # one rule for the file, the command line and the pages: shares are relative
            object.__setattr__(self, "classes", tuple(dataclasses.replace(c, share=c.share / total)
                                                      for c in self.classes))
        if self.trace is not None:
            turns = next((i for i, c in enumerate(self.classes) if c.conversation_turns > 1), None)
            if turns is not None:
                raise ScenarioError(f"{path}.classes[{turns}].conversation_turns builds conversations from synthetic "
                                    f"arrivals; a replayed trace brings its own (a Mooncake trace's block ids)")
        if self.trace is None:
            if self.arrival is None:
                raise ScenarioError(f"{path}.arrival is required unless {path}.trace is given")
            if self.num_requests is None and self.duration_s is None:
                raise ScenarioError(f"{path}: give num_requests or duration_s (or both) to bound the run")
            for i, c in enumerate(self.classes):
                for key in ("prompt_tokens", "output_tokens"):
                    if getattr(c, key) is None:
                        raise ScenarioError(f"{path}.classes[{i}].{key} is required unless {path}.trace is given")


# --------------------------------------------------------------------------- server, policy, limits


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding: a draft model proposes ``draft_tokens`` tokens, the served model verifies them and
    one more in one pass; each draft token is accepted with probability ``acceptance`` while all before it were,
    so a decode iteration emits (1 - a^(k+1)) / (1 - a) tokens on average, and costs a verification of k + 1
    tokens per sequence plus k draft steps."""

    draft_tokens: int = opt(4, "tokens the draft proposes per decode iteration (k); the served model verifies "
                               "k + 1 per sequence", "tokens", ge=1, le=16)
    acceptance: float = opt(0.7, "chance that each draft token is accepted, given the ones before it were "
                                 "(measure it on your traffic: vLLM logs it as the draft acceptance rate)", "",
                            ge=0.0, le=1.0)
    draft_model: str = opt("", "draft model from data/hardware/models.csv (roofline): its weights sit beside the "
                               "served model's and one draft step costs their weight ratio of a plain decode "
                               "iteration; give it or draft_cost", cap="name_chars", table="models")
    draft_cost: Optional[float] = opt(None, "one draft step as a share of a plain decode iteration of the served "
                                            "model (without draft_model; 0 for a draft that is almost free, as "
                                            "n-gram lookup)", "", ge=0.0, le=1.0)

    @property
    def tokens_per_decode(self) -> float:
        """Expected tokens one decode iteration emits: 1 + a + a^2 + ... + a^k."""
        return expected_tokens_per_decode(self.draft_tokens, self.acceptance)

    def _check(self, path: str) -> None:
        if bool(self.draft_model) == (self.draft_cost is not None):
            raise ScenarioError(f"{path}: give draft_model (a model name) or draft_cost (a share of a decode "
                                f"iteration), one of the two")


@dataclass(frozen=True)
class ModelConfig:
    """A model of the user's own, given by its shape (``python -m engine ... --model-config config.json`` or the
    Hardware page read a Hugging Face ``config.json`` into these keys: ``hardware.model_config``). The fields are
    the columns of ``data/hardware/models.csv``; ``server.model`` names it."""

    name: str = opt(help="the model's name, which server.model gives (not a name of data/hardware/models.csv)",
                    cap="name_chars")
    layers: int = opt(help="decoder layers (num_hidden_layers)", unit="layers", ge=1, le=1024)
    hidden: int = opt(help="hidden size (hidden_size)", ge=1, le=131_072)
    heads: int = opt(help="attention heads (num_attention_heads)", unit="heads", ge=1, le=1024)
    kv_heads: int = opt(help="key/value heads (num_key_value_heads; = heads without grouped-query attention)",
                        unit="heads", ge=1, le=1024)
    head_dim: int = opt(help="dimension of one head (head_dim, else hidden / heads; qk_nope_head_dim for MLA)",
                        ge=1, le=4096)
    intermediate: int = opt(help="MLP width of a dense layer (intermediate_size)", ge=1, le=1_048_576)
    vocab: int = opt(help="vocabulary (vocab_size)", unit="tokens", ge=1, le=4_194_304)
    experts: int = opt(0, "routed experts per MoE layer (0: a dense model)", "experts", ge=0, le=4096)
    experts_per_token: int = opt(0, "routed experts one token uses (num_experts_per_tok)", "experts", ge=0, le=4096)
    expert_intermediate: int = opt(0, "MLP width of one expert (moe_intermediate_size)", "", ge=0, le=1_048_576)
    shared_experts: int = opt(0, "experts every token uses besides the routed ones (n_shared_experts)", "experts",
                              ge=0, le=64)
    dense_layers: int = opt(0, "layers of a MoE model with a dense MLP instead of experts", "layers", ge=0, le=1024)
    attention: str = opt("gqa", "gqa: grouped-query (or multi-head) attention; mla: multi-head latent attention "
                                "(DeepSeek-V3), which caches one compressed latent", choices=("gqa", "mla"))
    q_lora_rank: int = opt(0, "MLA: rank of the query compression (0: none)", "", ge=0, le=65_536)
    kv_lora_rank: int = opt(0, "MLA: rank of the cached key/value latent", "", ge=0, le=65_536)
    rope_head_dim: int = opt(0, "MLA: rotary part of a query/key head (qk_rope_head_dim)", "", ge=0, le=4096)
    v_head_dim: int = opt(0, "MLA: dimension of a value head", "", ge=0, le=4096)
    tied_embeddings: bool = opt(False, "the LM head reads the embedding table (tie_word_embeddings)")
    sliding_window: int = opt(0, "tokens a windowed layer attends to (sliding_window or attention_chunk_size; 0: "
                                 "none)", "tokens", ge=0, le=16_777_216)
    sliding_layers: int = opt(0, "layers that attend to the window only (the rest attend to the whole context)",
                              "layers", ge=0, le=1024)
    qk_norm_all_reduce: bool = opt(False, "queries and keys normalised over all heads at once (qk_norm_type "
                                          "per_layer: MiniMax-M2): tensor-parallel attention all-reduces their "
                                          "statistics in every layer")
    source: str = opt("", "where the shape comes from (a config.json's repository)", cap="name_chars")

    def _check(self, path: str) -> None:
        if self.kv_heads > self.heads or self.heads % self.kv_heads:
            raise ScenarioError(f"{path}.kv_heads = {self.kv_heads} must divide heads = {self.heads}; check "
                                f"num_key_value_heads")
        if self.experts_per_token > self.experts or (self.experts > 0) != (self.experts_per_token > 0):
            raise ScenarioError(f"{path}.experts_per_token = {self.experts_per_token} must be between 1 and experts "
                                f"= {self.experts} for a MoE model and 0 for a dense one")
        if self.experts and not self.expert_intermediate:
            raise ScenarioError(f"{path}.expert_intermediate must be > 0 for a MoE model (moe_intermediate_size)")
        if self.dense_layers > self.layers or self.sliding_layers > self.layers:
            raise ScenarioError(f"{path}: dense_layers = {self.dense_layers} and sliding_layers = "
                                f"{self.sliding_layers} must be at most layers = {self.layers}")
        if (self.sliding_window > 0) != (self.sliding_layers > 0):
            raise ScenarioError(f"{path}: give sliding_window and sliding_layers together (both 0: every layer "
                                f"attends to the whole context)")
        if self.attention == "mla" and not (self.kv_lora_rank and self.v_head_dim):
            raise ScenarioError(f"{path}: mla attention needs kv_lora_rank and v_head_dim > 0")
        if self.name in names("models"):
            raise ScenarioError(f"{path}.name = {excerpt(self.name)} is a model of {where('models')}; give your "
                                f"model another name")


def build_model_config(data: Mapping[str, Any]) -> ModelConfig:
    """``data`` as a checked ``ModelConfig``, with the errors a scenario's ``server.model_config`` would give."""
    return _build(ModelConfig, data, "server.model_config", DEFAULT_CAPS)


def expected_tokens_per_decode(draft_tokens: int, acceptance: float) -> float:
    """(1 - a^(k+1)) / (1 - a): the accepted prefix of k draft tokens, each kept with probability ``acceptance``
    while the ones before it were, plus the token the verification itself yields (k + 1 when a = 1)."""
    if acceptance >= 1.0:
        return float(draft_tokens + 1)
    return (1.0 - acceptance ** (draft_tokens + 1)) / (1.0 - acceptance)


VERSION_PATTERN = re.compile(r"[0-9][0-9A-Za-z.+-]{0,39}")  # an engine release: 0.24.0, 1.3.0rc20, 0.5.6.post2


@dataclass(frozen=True)
class Server:
    """One inference server: step-time model, batching limits and KV-cache memory."""

    step_model: str = opt("fixed", "fixed: constant iteration time; roofline: from GPU and model tables",
                          choices=tuple(STEP_MODEL_CODES))
    step_time_ms: float = opt(20.0, "iteration time (step_model = fixed)", "ms", ge=0.001, le=60_000.0)
    max_batch_size: int = opt(256, "most sequences in one iteration", "sequences", ge=1, cap="batch_size")
    max_batched_tokens: int = opt(8192, "token budget of one iteration (prefill tokens + one per decode); with "
                                        "mixed batching longer prompts are prefilled in chunks", "tokens", ge=1,
                                  cap="batched_tokens")
    min_batch_size: int = opt(1, "do not start an iteration with fewer ready requests, unless the oldest has waited "
                                 "wait_timeout_ms; with a wait of 0 (the default) it never holds an iteration back: "
                                 "set both", "requests", ge=1, cap="batch_size")
    wait_timeout_ms: float = opt(0.0, "how long the oldest ready request may wait for min_batch_size requests "
                                      "(0: start at once, so the minimum batch does nothing)", "ms", ge=0.0,
                                le=TIME_MS_MAX)
    kv_capacity_tokens: int = opt(0, "KV-cache capacity (step_model = fixed; 0 = unlimited)", "tokens", ge=0,
                                  cap="kv_tokens")
    block_size_tokens: int = opt(16, "KV-cache block (page) size", "tokens", ge=1, cap="tokens_per_request")
    kv_allocation: str = opt("paged", "paged: blocks allocated as a sequence grows; static: max_seq_len "
                                      "reserved per request on admission", choices=KV_ALLOCATIONS)
    max_seq_len: int = opt(0, "longest prompt + output allowed (0 = no limit; required > 0 for static)",
                           "tokens", ge=0, cap="tokens_per_request")
    batching: str = opt("mixed", "mixed: each iteration runs decodes and prefill chunks together (vLLM V1, "
                                 "TensorRT-LLM, SGLang with --enable-mixed-chunk); prefill-first: an iteration runs "
                                 "whole prompts only, pausing every decode, whenever a prompt can be admitted "
                                 "(vLLM before V1, TGI, SGLang's default)",
                        choices=tuple(BATCHING_CODES))
    admission: str = opt("optimistic", "optimistic: admit when the prompt's KV blocks fit, preempt when memory "
                                       "runs out (vLLM); reserve-full: admit only when the prompt and the whole "
                                       "output fit (the output length stands for the client's max_tokens), never "
                                       "preempt for memory (TensorRT-LLM GUARANTEED_NO_EVICT); new-token-ratio: "
                                       "admit when the prompt fits beside a share of what every running request "
                                       "may still add, 0.7 falling to 0.1 while nothing is preempted, preempt when "
                                       "memory runs out (SGLang)",
                         choices=tuple(ADMISSION_CODES))
    gpu: str = opt("A100-80G", "GPU name from data/hardware/gpus.csv or gpu_slices.csv (step_model = roofline)",
                   cap="name_chars", table="gpus")
    model: str = opt("Llama-3-8B", "model name from data/hardware/models.csv, or model_config's name (step_model = "
                                   "roofline)", cap="name_chars", table="models", defined_by="model_config")
    model_config: Optional[ModelConfig] = opt(None, "your own model's shape, served when server.model gives its "
                                                    "name (kept, unused, while server.model names a row of "
                                                    "data/hardware/models.csv); --model-config FILE reads a Hugging "
                                                    "Face config.json into it")
    quant: str = opt("fp16", "weight format from data/hardware/quant.csv (step_model = roofline)", cap="name_chars",
                     table="quant")
    kv_quant: str = opt("fp16", "KV-cache format from data/hardware/kv_quant.csv (sizes the cache and its "
                                "reads)", cap="name_chars", table="kv_quant")
    tensor_parallel: int = opt(1, "GPUs one server splits the model over (roofline; weights, KV, compute "
                                  "and bandwidth divide, two all-reduces per layer are added); at most the cards "
                                  "one link joins: 8, or 72 on a GB200 NVL72", "GPUs",
                               choices=TP_DEGREES)
    expert_parallel: bool = opt(False, "a mixture-of-experts model's experts split whole over the server's "
                                       "tensor_parallel cards (vLLM's --enable-expert-parallel, SGLang's --ep-size): "
                                       "an all-to-all dispatch and combine per MoE layer instead of an all-reduce, "
                                       "and the iteration waits for the card whose experts get the most tokens "
                                       "(expert_imbalance); an estimate, not yet fitted on a measured run")
    attention_data_parallel: bool = opt(False, "with expert_parallel: each card runs attention and the dense "
                                               "layers for its own share of the sequences (vLLM's "
                                               "--data-parallel-size, SGLang's --enable-dp-attention): no "
                                               "all-reduce, each card holds all non-expert weights, a latent "
                                               "(MLA) KV cache is held once instead of on every card, and "
                                               "max_batch_size and max_batched_tokens are each card's, as those "
                                               "engines' flags are")
    expert_imbalance: float = opt(1.3, "with expert_parallel: tokens the busiest card's experts get over the mean "
                                       "(1: perfectly balanced; uneven routing puts real traffic at about 1.2-1.8, "
                                       "and a load balancer with redundant experts, DeepSeek's EPLB, brings it "
                                       "towards 1)", "", ge=1.0, le=8.0)
    engine: str = opt("vllm", "serving engine from data/hardware/engines.csv: its per-iteration overhead, "
                              "all-reduce latency and memory budget (step_model = roofline)", cap="name_chars",
                      table="engines")
    engine_version: str = opt("", "the engine's release, e.g. 0.24.0 (vLLM), 0.5.14 (SGLang), 1.3.0rc20 "
                                  "(TensorRT-LLM): measured operator tables time its kernels where they have that "
                                  "version for the GPU; empty: the newest they have", cap="name_chars")
    scheduler_recv_interval: int = opt(1, "SGLang's --scheduler-recv-interval: new requests are read only when "
                                          "a counter reaches it, 1 a decode iteration and 1000 any other (so at "
                                          "once after a prefill); 1 reads them before every iteration (engine = "
                                          "sglang)", "iterations", ge=1, le=100_000)
    attention_dp_balance: bool = opt(False, "TensorRT-LLM's attention_dp_config.enable_balance: with "
                                            "attention_data_parallel, prompts wait until every rank has one "
                                            "(attention_dp_timeout_iters at most), and gather "
                                            "attention_dp_batching_wait_iters more iterations when every rank is "
                                            "generating (engine = tensorrt-llm)")
    attention_dp_batching_wait_iters: int = opt(10, "TensorRT-LLM's attention_dp_config.batching_wait_iters "
                                                    "(with attention_dp_balance)", "iterations", ge=0, le=100_000)
    attention_dp_timeout_iters: int = opt(50, "TensorRT-LLM's attention_dp_config.timeout_iters (with "
                                              "attention_dp_balance)", "iterations", ge=1, le=100_000)
    prefill_delayer: bool = opt(True, "AMD ATOM's PrefillDelayer (ATOM_ENABLE_PREFILL_DELAYER): with "
                                      "attention_data_parallel, prompts wait until every rank has one and together "
                                      "they fill prefill_delayer_target_fill of their budgets, stop growing, or have "
                                      "waited prefill_delayer_max_ticks turns (engine = atom)")
    prefill_delayer_target_fill: float = opt(0.9, "ATOM_PREFILL_DELAYER_TARGET_FILL: the share of the ranks' token "
                                                  "budgets their waiting prompts must fill to go (engine = atom)", "",
                                             gt=0.0, le=1.0)
    prefill_delayer_max_ticks: int = opt(200, "ATOM_PREFILL_DELAYER_TTFT_MAX_TICKS: the most turns prompts are held "
                                              "(engine = atom)", "iterations", ge=1, le=100_000)
    prefill_delayer_stall_ticks: int = opt(10, "ATOM_PREFILL_DELAYER_STALL_TICKS: prompts go once their tokens have "
                                               "not grown for this many turns (engine = atom)", "iterations", ge=1,
                                           le=100_000)
    prefill_delayer_kv_high: float = opt(0.9, "ATOM_PREFILL_DELAYER_KV_HIGH_WATERMARK: prompts go at once when this "
                                              "share of the KV cache is in use (engine = atom)", "", ge=0.0, le=1.0)
    request_fixed_ms: Optional[float] = opt(None, "time a client sees per request beyond the engine's iterations "
                                                  "(HTTP, tokenizing, hand-offs, the first chunk), added to its time "
                                                  "to first token and end-to-end latency; none: the engine's "
                                                  "measured figure (data/hardware/engine_costs.csv) where measured "
                                                  "operator tables time the server, else 0: the calibrated step "
                                                  "model's factors were fitted on runs measured at the client",
                                            "ms", ge=0.0, le=1e6)
    kernel_tables: str = opt("auto", "auto: iteration times from measured operator tables (aiconfigurator-core) "
                                     "where they cover the GPU, engine version, formats and model, else the "
                                     "roofline; off: always the roofline (step_model = roofline)",
                             choices=KERNEL_TABLE_MODES)
    calibration: str = opt("", "step-time factors fitted on your own benchmark results (python -m engine calibrate "
                               "FILE --gpu NAME --save NAME, or the Hardware page); empty: the shipped calibration "
                               "of the GPU's family", cap="name_chars")
    gpu_memory_utilization: float = opt(0.9, "share of GPU memory the server may use (roofline)", "",
                                        gt=0.0, le=1.0)
    activation_reserve_gib: Optional[float] = opt(None, "memory kept for activations (roofline; none = "
                                                        "estimated from the token budget)", "GiB", ge=0.0, le=1e6)
    host_link_gb_s: float = opt(25.0, "GPU-host bandwidth per direction for swapped KV (policy.preempt_mode = "
                                      "swap; PCIe Gen4 x16 peaks at 32); KV bytes per token come from "
                                      "server.model", "GB/s", ge=0.01, le=1e9)
    speculative: Optional[Speculative] = opt(None, "speculative decoding (none: one token per decode iteration)")
    prefix_caching: bool = opt(False, "keep the KV blocks of prompt prefixes after their request leaves and reuse "
                                      "them for a prompt that starts the same way (vLLM's enable_prefix_caching, "
                                      "SGLang's radix cache): shared blocks counted once, evicted least recently "
                                      "used first; the prefixes come from a trace's block ids or the classes' "
                                      "shared_prefix_tokens")

    @property
    def own_model(self) -> Optional[ModelConfig]:
        """The user's model when ``model`` names it (it is then served), else None (a row of models.csv is)."""
        return self.model_config if self.model_config is not None and self.model_config.name == self.model else None

    @property
    def ranks(self) -> int:
        """Schedulers the server runs together: each card its own under data-parallel attention (vLLM's and SGLang's
        DP ranks), so max_batch_size and max_batched_tokens are each rank's and the server holds that many times
        more; else one."""
        return self.tensor_parallel if self.attention_data_parallel else 1

    @property
    def total_batch_size(self) -> int:
        """Sequences the whole server may run in one iteration (max_batch_size of each of its ``ranks``)."""
        return self.max_batch_size * self.ranks

    @property
    def total_batched_tokens(self) -> int:
        """Tokens the whole server may run in one iteration (max_batched_tokens of each of its ``ranks``)."""
        return self.max_batched_tokens * self.ranks

    @property
    def tokens_per_decode_step(self) -> int:
        """Tokens one decoding sequence takes of an iteration's budget: 1, or k + 1 with speculative decoding."""
        return 1 if self.speculative is None else self.speculative.draft_tokens + 1

    @property
    def holds_batches(self) -> bool:
        """Whether the minimum batch can hold an iteration back: a minimum of one is met by any ready request, and
        with no wait the oldest ready request has always waited long enough (``kernel.admit.gate_release_s_nb``);
        otherwise the two change nothing, bit for bit."""
        return self.min_batch_size > 1 and self.wait_timeout_ms > 0

    def _check(self, path: str) -> None:
        need = self.max_batch_size * self.tokens_per_decode_step
        if self.max_batched_tokens < need and self.speculative is None:
            raise ScenarioError(f"{path}.max_batched_tokens = {self.max_batched_tokens} is below max_batch_size = "
                                f"{self.max_batch_size}: a full batch of decodes needs one token each; "
                                f"raise it to at least {need}")
        if self.max_batched_tokens < need:
            raise ScenarioError(f"{path}.max_batched_tokens = {self.max_batched_tokens} is below max_batch_size x "
                                f"(speculative.draft_tokens + 1) = {need}: a full batch of speculative decodes "
                                f"verifies {self.tokens_per_decode_step} tokens each; raise it to at least {need} "
                                f"or lower draft_tokens")
        if self.min_batch_size > self.max_batch_size:
            raise ScenarioError(f"{path}.min_batch_size = {self.min_batch_size} is above max_batch_size = "
                                f"{self.max_batch_size}; lower it")
        if self.calibration:
            check_calibration_name(self.calibration, f"{path}.calibration")
        if self.engine_version and not VERSION_PATTERN.fullmatch(self.engine_version):
            raise ScenarioError(f"{path}.engine_version = {excerpt(self.engine_version)} is not a version; give one "
                                f"such as 0.24.0 or 1.3.0rc20, or leave it empty for the newest with tables")
        if self.attention_data_parallel and not self.expert_parallel:
            raise ScenarioError(f"{path}.attention_data_parallel needs expert_parallel = true (data-parallel "
                                f"attention over a model without experts is fleet.replicas servers)")
        if self.expert_parallel and self.tensor_parallel == 1:
            raise ScenarioError(f"{path}.expert_parallel needs tensor_parallel >= 2 (the cards the experts are split "
                                f"over)")
        schedulers.check(self, path)
        if self.prefix_caching and self.kv_allocation == "static":
            raise ScenarioError(f"{path}.prefix_caching needs kv_allocation = 'paged' (shared prefixes are shared "
                                f"blocks)")
        if self.kv_allocation == "static" and self.max_seq_len == 0:
            raise ScenarioError(f"{path}.max_seq_len must be > 0 with kv_allocation = 'static' "
                                f"(it is the reservation per request)")


CALIBRATION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a saved calibration's name (a file name)


def check_calibration_name(name: str, path: str = "server.calibration") -> str:
    """``name`` if it can name a saved calibration (and its file), else ``ScenarioError`` naming ``path``."""
    if not isinstance(name, str) or not CALIBRATION_NAME.fullmatch(name):
        raise ScenarioError(f"{path} = {excerpt(name)} is not a calibration name: use 1-64 letters, digits, '.', "
                            f"'_' or '-', starting with a letter or digit")
    return name
WEIGHT_RANGE = (1e-6, WEIGHT_MAX)  # a class's fair-queuing weight (policy.weights)


@dataclass(frozen=True)
class Policy:
    """Scheduling policy: ordering of requests, choice of preemption victims, and how preemption works.

    Each key says which policies read it; the policy table in ``policies.py`` is the reference.
    """

    name: str = opt("fifo", "scheduling policy (see the Method page)",
                    choices=tuple(POLICY_CODES))
    preemptive: bool = opt(False, "a waiting request may evict a running one it outranks when the batch or "
                                  "memory is full (priority, edf, wfq)")
    aging_per_s: float = opt(0.0, "priority levels a waiting request gains per second of waiting (priority)",
                             "levels/s", ge=0.0, le=WEIGHT_MAX)
    max_wait_ms: Optional[float] = opt(None, "after waiting this long a request is promoted to level 0 "
                                             "(priority; none = never)", "ms", ge=0.001,
                                      le=TIME_MS_MAX)
    weights: Optional[dict] = opt(None, "class name -> share weight, e.g. {interactive = 70, offline = 30} "
                                        "(wfq; none = equal)", "")
    prefill_token_weight: float = opt(1.0, "GPU service of one prefill token counted in decode tokens "
                                           "(wfq, dynamic)", "", ge=0.0, le=WEIGHT_MAX)
    alpha: float = opt(1.0, "weight of waited / SLA target in the cost (dynamic)", "", ge=0.0, le=WEIGHT_MAX)
    beta: float = opt(1.0, "weight of service consumed / expected service in the cost (dynamic)", "", ge=0.0,
                      le=WEIGHT_MAX)
    gamma: float = opt(1.0, "weight of the class's tier_weight in the cost (dynamic)", "", ge=0.0, le=WEIGHT_MAX)
    margin: float = opt(0.1, "a waiting request preempts only if its cost exceeds the victim's by this much "
                             "(dynamic)", "", ge=0.0, le=WEIGHT_MAX)
    default_sla_ms: float = opt(60000.0, "SLA target in the cost for classes that set none (dynamic)", "ms",
                                ge=0.001, le=TIME_MS_MAX)
    preempt_mode: str = opt("recompute", "what a preempted request keeps: keep (KV stays on the GPU), swap (KV "
                                         "to host memory and back) or recompute (KV dropped, prefill redone); "
                                         "the two vLLM policies always recompute",
                            choices=tuple(PREEMPT_MODE_CODES))
    preempt_overhead_ms: float = opt(1.0, "GPU time of one pause and resume (preempt_mode = keep)", "ms",
                                     ge=0.0, le=1000.0)
    predictor_error: float = opt(0.0, "output-length predictor quality: 0 = exact, 1 = an unrelated draw from "
                                      "the class (sjf, srpt, dynamic)", "", ge=0.0, le=1.0)

    def _check(self, path: str) -> None:
        if self.weights is None:
            return
        for name, weight in self.weights.items():
            low, high = WEIGHT_RANGE
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not low <= weight <= high:
                raise ScenarioError(f"{path}.weights.{key_text(name)} = {excerpt(weight)} must be a number from "
                                    f"{low:g} to {high:,.0f}")


@dataclass(frozen=True)
class Limits:
    """Bounds that stop an overloaded run instead of letting it grow without end."""

    max_waiting_requests: int = opt(20000, "stop the run when more requests than this wait at once "
                                           "(the queue is not draining)", "requests", ge=1, cap="waiting_requests")
    max_drain_s: float = opt(3600.0, "stop the run this long after the last arrival", "s", gt=0.0, cap="drain_s")


@dataclass(frozen=True)
class FleetGroup:
    """Replicas of one kind in a mixed fleet, or one pool of a disaggregated one: the [server] on its own GPU, weight
    format and tensor-parallel degree (roofline), or with its own iteration time and KV cache (fixed), and its own
    batch limits; every key left out, the model among them, is the [server] table's."""

    replicas: int = opt(1, "servers of this kind", "servers", ge=1, cap="replicas")
    gpu: str = opt("", "GPU name from data/hardware/gpus.csv or gpu_slices.csv (roofline; empty: server.gpu)",
                   cap="name_chars", table="gpus")
    quant: str = opt("", "weight format from data/hardware/quant.csv (empty: server.quant)", cap="name_chars",
                     table="quant")
    tensor_parallel: Optional[int] = opt(None, "GPUs one server of this kind splits the model over (none: "
                                               "server.tensor_parallel)", "GPUs", choices=TP_DEGREES)
    calibration: str = opt("", "saved step-time calibration of this GPU (roofline; empty: server.calibration on "
                                "the server's GPU, else the shipped calibration of its family)", cap="name_chars")
    step_time_ms: Optional[float] = opt(None, "iteration time of these servers (step_model = fixed; none: "
                                              "server.step_time_ms)", "ms", ge=0.001, le=60_000.0)
    kv_capacity_tokens: Optional[int] = opt(None, "KV-cache capacity of these servers (step_model = fixed; none: "
                                                  "server.kv_capacity_tokens; 0 = unlimited)", "tokens", ge=0,
                                            cap="kv_tokens")
    max_batch_size: Optional[int] = opt(None, "most sequences in one iteration of these servers (none: "
                                              "server.max_batch_size)", "sequences", ge=1, cap="batch_size")
    max_batched_tokens: Optional[int] = opt(None, "token budget of one iteration of these servers (none: "
                                                  "server.max_batched_tokens)", "tokens", ge=1, cap="batched_tokens")
    autoscale: Optional[Autoscale] = opt(None, "a pool's own autoscaler (mode = disaggregated): its servers added "
                                                 "and removed with the pool's load; its replicas are up at the start")

    def _check(self, path: str) -> None:
        if self.calibration:
            check_calibration_name(self.calibration, f"{path}.calibration")
        scale = self.autoscale
        if scale is not None and not scale.min_replicas <= self.replicas <= scale.max_replicas:
            raise ScenarioError(f"{path}.replicas = {self.replicas} (up at the start) must be within "
                                f"{path}.autoscale.min_replicas = {scale.min_replicas} and max_replicas = "
                                f"{scale.max_replicas}")

    @property
    def slots(self) -> int:
        """Servers a run's arrays hold for this group: every one its autoscaler may have, else ``replicas``."""
        return self.replicas if self.autoscale is None else self.autoscale.max_replicas

    def server(self, base: Server) -> Server:
        """``base`` (the [server] table) on this group's hardware and batch limits."""
        pick = lambda own, shared: shared if own is None else own  # noqa: E731
        gpu = self.gpu or base.gpu
        return dataclasses.replace(base, gpu=gpu, quant=self.quant or base.quant,
                                   tensor_parallel=pick(self.tensor_parallel, base.tensor_parallel),
                                   # the server's calibration times its own GPU only
                                   calibration=self.calibration or (base.calibration if gpu == base.gpu else ""),
                                   step_time_ms=pick(self.step_time_ms, base.step_time_ms),
                                   kv_capacity_tokens=pick(self.kv_capacity_tokens, base.kv_capacity_tokens),
                                   max_batch_size=pick(self.max_batch_size, base.max_batch_size),
                                   max_batched_tokens=pick(self.max_batched_tokens, base.max_batched_tokens))


@dataclass(frozen=True)
class Autoscale:
    """An autoscaler of a colocated fleet of one kind of server: every interval it reads a signal over the replicas
    that take requests and asks for ceil(replicas x signal / target) of them (target tracking, as Kubernetes' HPA),
    within the bounds; a new replica takes requests after its provisioning time, one scaled down first serves what
    it holds (drains). Replicas 1 to min_replicas are the baseline, never scaled down nor interrupted."""

    max_replicas: int = opt(help="the most replicas the fleet may have", unit="servers", ge=1, cap="replicas")
    min_replicas: int = opt(1, "the fewest replicas (the baseline, always up)", "servers", ge=1, cap="replicas")
    signal: str = opt("utilisation", "what it reads: utilisation (share of the replicas' batch slots or KV cache in "
                                     "use over the last interval, whichever is fuller), queue (requests waiting for "
                                     "a first iteration, per replica), kv (share of the KV cache in use now), slack "
                                     "(share of its TTFT target the longest-waiting request has used, per replica)",
                      choices=SCALE_SIGNALS)
    target: float = opt(0.8, "the signal's value it keeps the fleet at (a share for utilisation, kv and slack, "
                             "requests for queue)", "", gt=0.0, le=1e6)
    interval_s: float = opt(30.0, "how often it reads the signal and decides", "s", ge=1.0, le=86_400.0)
    provision_s: Optional[float] = opt(None, "from asking for a replica to its first request: machine start and "
                                             "weights loaded (none: computed from the model's weights, "
                                             "docs/method.md)", "s", ge=0.0, le=86_400.0)
    scale_up_delay_s: float = opt(0.0, "the signal must ask for more replicas this long before it adds any", "s",
                                  ge=0.0, le=86_400.0)
    scale_down_delay_s: float = opt(300.0, "the signal must ask for fewer replicas this long before it removes any "
                                           "(the most it asked for over this time is kept)", "s", ge=0.0,
                                    le=86_400.0)
    cooldown_s: float = opt(60.0, "no scaling this long after the last one", "s", ge=0.0, le=86_400.0)

    def _check(self, path: str) -> None:
        if self.min_replicas > self.max_replicas:
            raise ScenarioError(f"{path}.min_replicas = {self.min_replicas} is above max_replicas = "
                                f"{self.max_replicas}; lower it or raise max_replicas")
        if self.signal != "queue" and self.target >= 1.0:
            raise ScenarioError(f"{path}.target = {self.target:g} is a share for signal = {self.signal!r}; give "
                                f"one below 1 (0.8 = 80%: a fleet kept at 100% never asks for more)")


@dataclass(frozen=True)
class Fleet:
    """Data-parallel replicas of the server behind one router, all on one clock."""

    replicas: int = opt(1, "identical servers, each of server.tensor_parallel GPUs (with groups: their sum, which "
                           "replaces any value given)", "servers", ge=1, cap="replicas")
    router: str = opt("round-robin", "where an arrival goes: round-robin (in turn), least-tokens (the replica "
                                     "holding the fewest prompt + predicted output tokens), shortest-queue "
                                     "(the replica holding the fewest requests) or prefix-affinity (with "
                                     "server.prefix_caching: the replica whose cache holds the longest prefix of "
                                     "the prompt, among those within one iteration's token budget of the least "
                                     "loaded); on a mixed fleet (fleet.groups) turns and loads are weighed by "
                                     "each replica's speed",
                      choices=tuple(ROUTER_CODES))
    groups: tuple[FleetGroup, ...] = opt((), "a mixed fleet ([[fleet.groups]] tables): replicas on other GPUs, "
                                             "weight formats or tensor-parallel degrees (or other iteration times "
                                             "under the fixed model) behind the one router, which weighs each "
                                             "replica by its speed on the workload; none: fleet.replicas servers "
                                             "of [server]",
                                         cap="replicas")
    mode: str = opt("colocated", "colocated: every server runs whole requests; disaggregated: a prefill pool "
                                 "computes each prompt and its first token, then hands the request's KV over a "
                                 "link to a decode pool that generates the rest (DistServe, Splitwise, NVIDIA "
                                 "Dynamo)", choices=FLEET_MODES)
    prefill: Optional[FleetGroup] = opt(None, "the prefill pool (mode = disaggregated): its replicas, hardware and "
                                              "batch limits")
    decode: Optional[FleetGroup] = opt(None, "the decode pool (mode = disaggregated): its replicas, hardware and "
                                             "batch limits")
    kv_link_gb_s: float = opt(50.0, "bandwidth of each prefill server's link to the decode pool, per direction "
                                    "(mode = disaggregated; a 400 Gb/s NIC moves 50 GB/s): a request's KV takes its "
                                    "bytes / this, after the transfers before it on the link", "GB/s", gt=0.0,
                              le=1e9)
    autoscale: Optional[Autoscale] = opt(None, "replicas added and removed with the load, within bounds, on a "
                                               "signal; fleet.replicas are up at the start")
    spot_interruptions_per_hour: float = opt(0.0, "with an autoscaler: each replica above its fewest is a "
                                                  "spot one, interrupted this often per hour up (a seeded "
                                                  "exponential draw); its requests are re-queued elsewhere",
                                             "1/h", ge=0.0, le=3600.0)
    spot_notice_s: float = opt(120.0, "warning before a spot interruption (AWS gives 2 minutes): the replica takes "
                                      "no new requests meanwhile", "s", ge=0.0, le=3600.0)

    def _check(self, path: str) -> None:
        pools = (self.prefill, self.decode)
        if self.mode == "disaggregated":
            if None in pools:
                raise ScenarioError(f"{path}.mode = 'disaggregated' needs both pools: give [{path}.prefill] and "
                                    f"[{path}.decode], each with its replicas")
            if self.groups:
                raise ScenarioError(f"{path}.groups cannot be combined with mode = 'disaggregated' (each pool is "
                                    f"one kind of server); remove them")
            object.__setattr__(self, "replicas", self.prefill.replicas + self.decode.replicas)
        elif pools != (None, None):
            raise ScenarioError(f"{path}.{'prefill' if self.prefill else 'decode'} is a pool of a disaggregated "
                                f"fleet: set {path}.mode = 'disaggregated', or remove it")
        if self.groups:  # the groups' sum, whatever was given (a preset's replicas may meet groups set over it)
            object.__setattr__(self, "replicas", sum(g.replicas for g in self.groups))
        self._check_scaling(path)

    def _check_scaling(self, path: str) -> None:
        scale = self.autoscale
        grouped = next((i for i, g in enumerate(self.groups) if g.autoscale is not None), None)
        if grouped is not None:
            raise ScenarioError(f"{path}.groups[{grouped}].autoscale: an autoscaler scales a colocated fleet of one "
                                f"kind of server or a pool of a disaggregated one, not a mixed fleet's group; "
                                f"remove it")
        if scale is None:
            if self.spot_interruptions_per_hour:
                raise ScenarioError(f"{path}.spot_interruptions_per_hour needs [{path}.autoscale]: the spot replicas "
                                    f"are those above its min_replicas; add it, or remove this")
            return
        if self.mode != "colocated" or self.groups:
            raise ScenarioError(f"{path}.autoscale scales a colocated fleet of one kind of server; remove "
                                f"{path}.{'groups' if self.groups else 'mode'} or the autoscaler")
        if not scale.min_replicas <= self.replicas <= scale.max_replicas:
            raise ScenarioError(f"{path}.replicas = {self.replicas} (up at the start) must be within "
                                f"{path}.autoscale.min_replicas = {scale.min_replicas} and max_replicas = "
                                f"{scale.max_replicas}")

    @property
    def slots(self) -> int:
        """Replicas a run's arrays hold: every one an autoscaler may have, else ``replicas``."""
        if self.mode == "disaggregated":
            return self.prefill.slots + self.decode.slots
        return self.replicas if self.autoscale is None else self.autoscale.max_replicas

    def scaled(self) -> tuple[tuple[str, int, Autoscale, int], ...]:
        """(key path, first replica, autoscaler, replicas up at the start) of every autoscaler of the fleet: the
        colocated fleet's, or each pool's that has one (pools in replica order, each from its first slot)."""
        if self.mode != "disaggregated":
            return () if self.autoscale is None else (("fleet.autoscale", 0, self.autoscale, self.replicas),)
        first, found = 0, []
        for where, pool in self.tables():
            if pool.autoscale is not None:
                found.append((f"{where}.autoscale", first, pool.autoscale, pool.replicas))
            first += pool.slots
        return tuple(found)

    def tables(self) -> tuple[tuple[str, FleetGroup], ...]:
        """(key path, table) of every group or pool, in replica order."""
        if self.mode == "disaggregated":
            return (("fleet.prefill", self.prefill), ("fleet.decode", self.decode))
        return tuple((f"fleet.groups[{i}]", g) for i, g in enumerate(self.groups))


FIXED_STEP_KEYS = ("step_time_ms", "kv_capacity_tokens")  # what the fixed step model reads of a server or group
ROOFLINE_STEP_KEYS = ("gpu", "quant", "calibration")  # a group's or pool's own keys on the roofline step model only


def on_roofline(data: dict) -> dict:
    """A copy of scenario ``data`` on the roofline step model: its fleet's groups or pools keep their replicas and
    batch limits but lose the iteration times and KV capacities of the fixed model (``FIXED_STEP_KEYS``), which
    the GPU gives now and which a roofline group may not set."""
    moved = apply_overrides(data, {"server.step_model": "roofline"})
    fleet = moved.get("fleet", {})
    for table in [*fleet.get("groups", []), *(fleet[pool] for pool in ("prefill", "decode") if fleet.get(pool))]:
        for key in FIXED_STEP_KEYS:
            table.pop(key, None)
    return moved


@dataclass(frozen=True)
class Scenario:
    """A whole what-if: workload, server, policy, seed."""

    workload: Workload = opt(help="[workload] table")
    name: str = opt("scenario", "label shown in reports", cap="name_chars")
    seed: int = opt(0, "seed of the single random generator (same seed, same result)", "", ge=0, le=2 ** 63 - 1)
    server: Server = opt(Server(), "[server] table")
    policy: Policy = opt(Policy(), "[policy] table")
    fleet: Fleet = opt(Fleet(), "[fleet] table")
    limits: Limits = opt(Limits(), "[limits] table")
    origin: Origin = field(default=Origin(), metadata={"internal": True})

    def _check(self, path: str) -> None:
        fixed = self.server.step_model == "fixed"
        for where, group in self.fleet.tables():
            own = FIXED_STEP_KEYS if not fixed else ROOFLINE_STEP_KEYS
            given = [k for k in own if getattr(group, k) not in (None, "")]
            if given:
                raise ScenarioError(f"{where}.{given[0]} is not used with server.step_model = "
                                    f"{self.server.step_model!r}; remove it (a roofline group sets gpu, quant, "
                                    f"tensor_parallel; a fixed one step_time_ms, kv_capacity_tokens)")
            group.server(self.server)._check(where)  # its batch limits against each other and the decodes
        for where, _, scale, _ in self.fleet.scaled():
            if scale.signal != "slack":
                continue
            if where == "fleet.decode.autoscale":
                raise ScenarioError(f"{where}.signal = 'slack' reads how long requests wait for their first token, "
                                    f"and a decode pool's have all had theirs; choose another signal")
            if all(c.sla_ttft_ms is None for c in self.workload.classes):
                raise ScenarioError(f"{where}.signal = 'slack' reads how much of its TTFT target a waiting request "
                                    f"has used: give a class sla_ttft_ms, or choose another signal")
        weights = self.policy.weights
        if weights is None:
            return
        names = [c.name for c in self.workload.classes]
        unknown = sorted(set(weights) - set(names))
        if unknown:
            raise ScenarioError(f"policy.weights.{key_text(unknown[0])} is not a class; classes are {', '.join(names)}")
        missing = [n for n in names if n not in weights]
        if missing:
            raise ScenarioError(f"policy.weights lacks class {missing[0]!r}; give a weight for every class")


# --------------------------------------------------------------------------- labels

# What a form calls each key: words, without the unit (the form adds the key's unit in parentheses).
FIELD_LABELS = {
    "TokenDist.dist": "Distribution", "TokenDist.value": "Length", "TokenDist.low": "Shortest",
    "TokenDist.high": "Longest", "TokenDist.mean": "Mean", "TokenDist.cv": "Coefficient of variation",
    "TokenDist.max": "Cap", "RequestClass.shared_prefix_tokens": "Shared prompt prefix",
    "RequestClass.conversation_turns": "Turns per conversation", "RequestClass.turn_gap_s": "Time between turns",
    "Arrival.process": "Arrival process", "Arrival.rate_per_s": "Arrival rate",
    "Arrival.cv": "Burstiness (coefficient of variation)", "Arrival.rate_curve": "Rate over time",
    "Arrival.shape": "Shape of the day", "Arrival.curve_period_s": "Curve repeats every",
    "Arrival.curve_start_s": "Start in the curve at",
    "Trace.format": "Format", "Trace.rate_scale": "Speed-up", "Trace.jitter_ms": "Jitter",
    "RequestClass.share": "Share of arrivals", "RequestClass.priority": "Priority level",
    "RequestClass.tier_weight": "Tier weight", "RequestClass.sla_ttft_ms": "TTFT target",
    "RequestClass.sla_e2e_ms": "End-to-end target", "RequestClass.timeout_ms": "Client time-out",
    "Workload.num_requests": "Requests simulated", "Workload.duration_s": "Duration",
    "Server.step_model": "Step-time model", "Server.step_time_ms": "Iteration time",
    "Server.max_batch_size": "Batch limit", "Server.max_batched_tokens": "Token budget per iteration",
    "Server.min_batch_size": "Minimum batch", "Server.wait_timeout_ms": "Longest wait for a minimum batch",
    "Server.kv_capacity_tokens": "KV cache capacity", "Server.block_size_tokens": "KV block size",
    "Server.kv_allocation": "KV allocation", "Server.max_seq_len": "Longest request",
    "Server.batching": "Batching", "Server.admission": "Admission", "Server.calibration": "Step-time calibration",
    "Server.engine": "Serving engine", "Server.engine_version": "Engine version",
    "Server.scheduler_recv_interval": "Receive interval", "Server.attention_dp_balance": "Balance attention-DP ranks",
    "Server.attention_dp_batching_wait_iters": "Batching wait", "Server.attention_dp_timeout_iters": "Balance time-out",
    "Server.prefill_delayer": "Prefill delayer", "Server.prefill_delayer_target_fill": "Delayer fill target",
    "Server.prefill_delayer_max_ticks": "Delayer's longest hold", "Server.prefill_delayer_stall_ticks": "Delayer stall",
    "Server.prefill_delayer_kv_high": "Delayer KV watermark",
    "Server.request_fixed_ms": "Client's fixed cost per request",
    "Server.kernel_tables": "Measured kernels", "Server.expert_parallel": "Expert parallel",
    "Server.attention_data_parallel": "Data-parallel attention", "Server.expert_imbalance": "Expert imbalance",
    "Server.model_config": "Your model",
    "Server.gpu": "GPU", "Server.model": "Model", "Server.quant": "Weights", "Server.kv_quant": "KV cache format",
    "Server.tensor_parallel": "Tensor parallel", "Server.gpu_memory_utilization": "GPU memory share",
    "Server.activation_reserve_gib": "Activation reserve", "Server.host_link_gb_s": "Host link bandwidth",
    "Server.speculative": "Speculative decoding", "Speculative.draft_tokens": "Draft length",
    "Speculative.acceptance": "Acceptance rate", "Speculative.draft_model": "Draft model",
    "Speculative.draft_cost": "Draft step cost", "Server.prefix_caching": "Prefix caching",
    "Policy.name": "Policy", "Policy.preemptive": "Preemptive", "Policy.aging_per_s": "Aging",
    "Policy.max_wait_ms": "Promote after waiting", "Policy.weights": "Weights",
    "Policy.prefill_token_weight": "Prefill token weight", "Policy.alpha": "alpha (waiting)",
    "Policy.beta": "beta (progress)", "Policy.gamma": "gamma (tier)", "Policy.margin": "Preemption margin",
    "Policy.default_sla_ms": "SLA for classes without one", "Policy.preempt_mode": "Preemption mode",
    "Policy.preempt_overhead_ms": "Pause and resume cost", "Policy.predictor_error": "Length predictor error",
    "Limits.max_waiting_requests": "Queue bound", "Limits.max_drain_s": "Drain limit",
    "Fleet.replicas": "Replicas", "Fleet.router": "Router", "Fleet.groups": "GPU groups",
    "FleetGroup.gpu": "GPU", "FleetGroup.replicas": "Replicas", "FleetGroup.quant": "Weights",
    "FleetGroup.tensor_parallel": "Tensor parallel", "FleetGroup.calibration": "Step-time calibration",
    "FleetGroup.step_time_ms": "Iteration time", "FleetGroup.kv_capacity_tokens": "KV cache capacity",
    "FleetGroup.max_batch_size": "Batch limit", "FleetGroup.max_batched_tokens": "Token budget per iteration",
    "FleetGroup.autoscale": "Autoscaler of this pool",
    "Fleet.mode": "Fleet layout", "Fleet.prefill": "Prefill pool", "Fleet.decode": "Decode pool",
    "Fleet.kv_link_gb_s": "KV link bandwidth", "Fleet.autoscale": "Autoscaler",
    "Fleet.spot_interruptions_per_hour": "Spot interruptions", "Fleet.spot_notice_s": "Spot notice",
    "Autoscale.max_replicas": "Most replicas", "Autoscale.min_replicas": "Fewest replicas",
    "Autoscale.signal": "Scaling signal", "Autoscale.target": "Signal target", "Autoscale.interval_s": "Decides every",
    "Autoscale.provision_s": "Provisioning time", "Autoscale.scale_up_delay_s": "Scale-up delay",
    "Autoscale.scale_down_delay_s": "Scale-down delay", "Autoscale.cooldown_s": "Cooldown",
}


def fleet_pools(scenario: Scenario) -> tuple[tuple[Server, int, str], ...]:
    """(server, replicas, role) of each group of the fleet, in replica order (replica 0 is the first group's first),
    the role one of ``POOL_ROLES``: the prefill then the decode pool of a disaggregated fleet, the groups of a mixed
    one, or one group of ``fleet.replicas`` x ``server``."""
    fleet = scenario.fleet
    if fleet.mode == "disaggregated":
        return tuple((g.server(scenario.server), g.replicas, role)
                     for (_, g), role in zip(fleet.tables(), POOL_ROLES[1:]))
    if not fleet.groups:
        return ((scenario.server, fleet.replicas, POOL_ROLES[0]),)
    return tuple((g.server(scenario.server), g.replicas, POOL_ROLES[0]) for g in fleet.groups)


def fleet_servers(scenario: Scenario) -> tuple[tuple[Server, int], ...]:
    """(server, replicas) of each group or pool of the fleet, in replica order (``fleet_pools``)."""
    return tuple((server, replicas) for server, replicas, _ in fleet_pools(scenario))


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """The resolved field types of config class ``cls``, read once: ``typing.get_type_hints`` evaluates every
    annotation string again on each call, and the forms call it for every widget on every rerun."""
    return typing.get_type_hints(cls)


def field_meta(cls: type, name: str) -> tuple[Any, dict, Any]:
    """(type, metadata, default) of field ``name`` of config class ``cls``."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    tp, _ = unwrap_optional(type_hints(cls)[name])
    return tp, dict(f.metadata), f.default


def field_bounds(meta: dict) -> tuple[float | None, float | None]:
    """(lowest, highest) value the engine accepts for a field (``ge``/``gt``, ``le`` or its default safety limit),
    so a widget holds every value a link or an upload may carry, and no other."""
    high = meta.get("le")
    if "cap" in meta:
        high = getattr(DEFAULT_CAPS, meta["cap"])
    return meta.get("ge", meta.get("gt")), high


def field_label(cls: type, name: str) -> str:
    """The words a form shows for key ``name`` of config class ``cls`` (``FIELD_LABELS``)."""
    return FIELD_LABELS.get(f"{cls.__name__}.{name}") or name.replace("_", " ").capitalize()


# --------------------------------------------------------------------------- generic loader


def _is_config(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string", dict: "a table"}.get(
        tp, "a table")


def not_text(text: str) -> str:
    """Why ``text`` is not Unicode text, for an error line after its key ('' when it is). JSON (a link) and the
    command line (a byte that is not UTF-8) can carry a lone surrogate such as '\\ud800', which UTF-8 cannot
    encode: a page, a file or a report showing it would fail."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not Unicode text (character {exc.start + 1} is a lone surrogate)"
    return ""


def _check_text(value: str, path: str) -> str:
    """``value`` (a scenario's text) when it is Unicode text, else ``ScenarioError`` naming ``path``."""
    problem = not_text(value)
    if problem:
        raise ScenarioError(f"{path} = {excerpt(value)} {problem}; remove it")
    return value


def _check_keys(table: Mapping, path: str) -> dict:
    """``table`` (a table of names, as policy.weights) as a dict when its keys are Unicode text, else
    ``ScenarioError`` naming the first bad key."""
    bad = [key for key in table if not_text(str(key))]
    if bad:
        raise ScenarioError(f"{path}.{key_text(bad[0])} {not_text(bad[0])}; rename or remove it")
    return dict(table)


def _convert(value: Any, tp: Any, path: str, caps: Caps) -> Any:
    tp, optional = unwrap_optional(tp)
    if value is None and optional:
        return None
    if _is_config(tp):
        if not isinstance(value, Mapping):
            raise ScenarioError(f"{path} must be a table ({{key = value, ...}}), got {excerpt(value)}")
        return _build(tp, value, path, caps)
    if typing.get_origin(tp) is tuple:
        item_tp = typing.get_args(tp)[0]
        if not isinstance(value, (list, tuple)):
            what = f"an array of tables ([[{path}]])" if _is_config(item_tp) else "an array ([...])"
            raise ScenarioError(f"{path} must be {what}, got {excerpt(value)}")
        return tuple(_convert(v, item_tp, f"{path}[{i}]", caps) for i, v in enumerate(value))
    if tp is dict:
        if not isinstance(value, Mapping):
            raise ScenarioError(f"{path} must be a table {{name = number, ...}}, got {excerpt(value)}")
        return _check_keys(value, path)
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond the float range
            number = math.inf
        if not math.isfinite(number):
            raise ScenarioError(f"{path} must be a finite number, got {excerpt(value)}")
        return number
    if tp is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if tp is str and isinstance(value, str):
        return _check_text(value, path)
    if tp in (int, bool) and isinstance(value, tp) and not (tp is int and isinstance(value, bool)):
        return value
    raise ScenarioError(f"{path} must be {_type_name(tp)}, got {excerpt(value)}")


def _check_field(value: Any, meta: Mapping[str, Any], default: Any, path: str, caps: Caps,
                 defined: bool = False) -> None:
    """The checks of ``meta`` on ``value``; ``defined``: a name the scenario itself defines (``defined_by``), so no
    table's row."""
    if value is None or isinstance(value, (tuple, bool, dict)) or dataclasses.is_dataclass(value):
        return
    unit = f" {meta['unit']}" if meta.get("unit") else ""
    if "choices" in meta and value not in meta["choices"]:
        allowed = ", ".join(repr(c) for c in meta["choices"])
        raise ScenarioError(f"{path} = {excerpt(value)} is not allowed; choose one of {allowed}")
    if "cap" in meta:
        caps.check(meta["cap"], path, value, unit)
    if "table" in meta and (value or default) and not defined:  # an empty name where the default is empty: "none"
        check_name(meta["table"], value, path)
    if "ge" in meta and value < meta["ge"]:
        raise ScenarioError(f"{path} = {excerpt(value)} must be >= {number_text(meta['ge'])}{unit}")
    if "gt" in meta and value <= meta["gt"]:
        raise ScenarioError(f"{path} = {excerpt(value)} must be > {number_text(meta['gt'])}{unit}")
    if "le" in meta and value > meta["le"]:
        raise ScenarioError(f"{path} = {excerpt(value)} must be <= {number_text(meta['le'])}{unit}")


def _defined_here(data: Mapping[str, Any], meta: Mapping[str, Any], value: Any) -> bool:
    """True when the name ``value`` is defined by the sibling table ``meta["defined_by"]`` of ``data`` (a user's
    model: ``server.model`` naming ``server.model_config``)."""
    sibling = data.get(meta.get("defined_by", ""))
    return isinstance(sibling, Mapping) and sibling.get("name") == value


def _public_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def _build(cls: type, data: Mapping[str, Any], path: str, caps: Caps) -> Any:
    fields = {f.name: f for f in _public_fields(cls)}
    unknown = sorted((k for k in data if k not in fields), key=str)
    if unknown:
        where = f"{path}.{key_text(unknown[0])}" if path else key_text(unknown[0])
        raise ScenarioError(f"{where} is not a known key; allowed here: {', '.join(fields)}")
    hints = type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        key_path = f"{path}.{name}" if path else name
        if name not in data:
            if f.default is _MISSING:
                raise ScenarioError(f"{key_path} is required: {f.metadata['help']}")
            continue
        raw = data[name]
        if isinstance(raw, (list, tuple)) and "cap" in f.metadata:  # count before converting every entry
            caps.check(f.metadata["cap"], key_path, raw)
        value = _convert(raw, hints[name], key_path, caps)
        _check_field(value, f.metadata, f.default, key_path, caps, defined=_defined_here(data, f.metadata, value))
        kwargs[name] = value
    obj = cls(**kwargs)
    if hasattr(obj, "_check"):
        obj._check(path or "scenario")
    return obj


# --------------------------------------------------------------------------- public API


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string (a ``--set`` value that reads back as exactly ``text``): characters outside
    ASCII as they are (JSON's \\uD83E\\uDD99 escapes of an emoji are not TOML and read back as garbage), the
    quotation mark, the backslash and control characters escaped."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _parse_value(text: str) -> Any:
    """A ``--set`` value as TOML (numbers, booleans, quoted strings, tables); bare words are strings."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except RecursionError:
        raise ScenarioError(f"override value {excerpt(text)} is nested too deeply") from None


def apply_overrides(data: dict, overrides: Mapping[str, Any] | list[str]) -> dict:
    """Return a copy of raw scenario ``data`` with dotted ``key=value`` overrides applied.

    Keys are dotted paths (``policy.name``, ``workload.arrival.rate_per_s``); a class is
    addressed by index or name (``workload.classes.0.share``, ``workload.classes.offline.share``).
    String values are parsed as TOML, bare words kept as strings.
    """
    data = copy.deepcopy(data)
    if isinstance(overrides, list):
        pairs = []
        for item in overrides:
            if "=" not in item:
                raise ScenarioError(f"override {item!r} must look like key=value (e.g. policy.name=priority)")
            key, text = item.split("=", 1)
            pairs.append((key.strip(), _parse_value(text.strip())))
    else:
        pairs = list(overrides.items())
    for key, value in pairs:
        parts = key.split(".")
        node: Any = data
        for depth, part in enumerate(parts[:-1]):
            node = _descend(node, part, ".".join(parts[: depth + 1]))
        last = parts[-1]
        if isinstance(node, list):
            node[_list_index(node, last, key)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ScenarioError(f"override {key}: {'.'.join(parts[:-1])} is {excerpt(node)}, not a table; "
                                f"it has no key {last!r}")
    return data


def _list_index(items: list, part: str, path: str) -> int:
    if part.isdigit() and int(part) < len(items):
        return int(part)
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and item.get("name") == part:
            return i
    raise ScenarioError(f"override {path}: no entry {part!r} (use an index below {len(items)} or a class name)")


def _descend(node: Any, part: str, path: str) -> Any:
    if isinstance(node, list):
        return node[_list_index(node, part, path)]
    if not isinstance(node, dict):
        raise ScenarioError(f"override {path}: {excerpt(node)} is not a table")
    return node.setdefault(part, {})


def parse_toml(content: bytes, name: str, caps: Caps = DEFAULT_CAPS) -> dict:
    """The table in scenario TOML ``content`` (named ``name`` in errors); ``ScenarioError`` when it is too
    large, not UTF-8 text, not valid TOML or nested too deeply."""
    caps.check("scenario_bytes", name, content)
    try:
        return tomllib.loads(content.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{name} is not a text file (byte {exc.start} is not UTF-8); a scenario is TOML "
                            f"text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{name} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ScenarioError(f"{name} is nested too deeply to be a scenario") from None


def read_toml(path: str | Path, caps: Caps = DEFAULT_CAPS) -> dict:
    """Parse a scenario TOML file (a regular file of at most ``caps.scenario_bytes``, ``files.read_regular``),
    turning every problem into ``ScenarioError``."""
    content = read_regular(path, "scenario file", caps.scenario_bytes, "scenario_bytes",
                           caps.raise_hint("scenario_bytes"))
    return parse_toml(content, f"scenario file {quoted(path)}", caps)


def to_toml(data: Mapping[str, Any]) -> str:
    """Raw scenario data as TOML text (keys whose value is None are left out: they mean "default")."""

    def strip(obj: Any) -> Any:
        if isinstance(obj, Mapping):
            return {k: strip(v) for k, v in obj.items() if v is not None}
        if isinstance(obj, (list, tuple)):
            return [strip(v) for v in obj]
        return obj

    return tomli_w.dumps(strip(data))


def load_scenario(source: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | list[str] | None = None,
                  origin: Origin = Origin()) -> Scenario:
    """Load and validate a scenario from a TOML path or a dict, with optional dotted overrides.

    ``origin`` says what the scenario may touch (``origin.Origin``: trace files by path or only the app's
    stored traces by name) and within which limits. Relative trace paths are taken from the TOML file's
    folder, or from ``origin.trace_dir`` for a dict. A stored trace's name is checked here, before any file
    is opened.
    """
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        data = read_toml(source, origin.caps)
        if not origin.trace_names_only:
            origin = dataclasses.replace(origin, trace_dir=str(Path(source).resolve().parent))
    if overrides:
        data = apply_overrides(data, overrides)
    scenario = dataclasses.replace(_build(Scenario, data, "", origin.caps), origin=origin)
    if scenario.workload.trace is not None and origin.trace_names_only:
        origin.trace_file(scenario.workload.trace.path)
    return scenario


def scenario_to_dict(scenario: Scenario) -> dict:
    """The scenario as plain data (no ``None`` values), loadable again by ``load_scenario``."""

    def strip(obj: Any) -> Any:
        if dataclasses.is_dataclass(obj):
            return {f.name: strip(getattr(obj, f.name)) for f in _public_fields(type(obj))
                    if getattr(obj, f.name) is not None}
        if isinstance(obj, tuple):
            return [strip(v) for v in obj]
        return obj

    return strip(scenario)


def _limit_text(meta: Mapping[str, Any]) -> str:
    """What a key is checked against, for the reference: the table whose row it names, then a fixed range end or a
    safety limit."""
    parts = [f"a name in {where(meta['table'])}"] if "table" in meta else []
    if "cap" in meta:
        parts.append(f"<= {number_text(getattr(DEFAULT_CAPS, meta['cap']))} (`{meta['cap']}`)")
    elif "le" in meta:
        parts.append(f"<= {number_text(meta['le'])}")
    return "; ".join(parts)


def keys_reference() -> list[dict[str, str]]:
    """Every scenario key with its type, unit, default, limit and help, in file order (for docs)."""
    rows: list[dict[str, str]] = []

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in _public_fields(cls):
            key = f"{prefix}{f.name}"
            tp, _ = unwrap_optional(hints[f.name])
            inner = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else tp
            if _is_config(inner):
                walk(inner, f"{key}[]." if inner is not tp else f"{key}.")
                continue
            if f.default is _MISSING:
                default = "required"
            elif f.default is None:
                default = "none"
            else:
                default = repr(f.default).replace("'", '"') if not isinstance(f.default, bool) \
                    else str(f.default).lower()
            help_text = f.metadata["help"]
            if "choices" in f.metadata:
                help_text += " (" + " \\| ".join(str(c) for c in f.metadata["choices"]) + ")"
            rows.append({"key": key, "unit": f.metadata.get("unit", ""), "default": default,
                         "limit": _limit_text(f.metadata), "help": help_text})

    walk(Scenario, "")
    return rows


def keys_markdown() -> str:
    """The keys reference as a Markdown table, then the safety limits (the manual's keys page is generated from
    them when the site is built: docs/gen_pages.py)."""
    lines = ["| key | unit | default | limit | meaning |", "|---|---|---|---|---|"]
    for row in keys_reference():
        lines.append(f"| `{row['key']}` | {row['unit']} | {row['default']} | {row['limit']} | {row['help']} |")
    limits = "Safety limits (`engine/scenario/caps.py`): a value beyond one is an error naming the field, the value " \
             "and the limit; the command line may raise one with `--limit NAME=VALUE`, links and uploads never can.\n\n"
    return "\n".join(lines) + "\n\n" + limits + caps_markdown()
