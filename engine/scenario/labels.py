"""What a page, a table or the report shows for a scenario key or one of the names a key may take: words, never
the identifier a file or the command line reads.

``metric_table`` does this for metrics and ``config.FIELD_LABELS`` for keys; this module adds the words of every
named choice (a router, an arrival process, a trace format, a batching, admission or preemption mode, a step-time
model, a weight format...), the words of a key given by its dotted path (``server.tensor_parallel``), and
``key_words``, which rewrites a help text or an engine message written for the scenario file (it names keys and
their values) into the words of the form. A policy's words are its ``PolicySpec.label`` in
``engine.sim.policies`` (the policy table owns everything shown of a policy).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Mapping

from .config import Scenario, field_label, unwrap_optional
from .registry import (ADMISSION_CODES, ARRIVAL_PROCESSES, BATCHING_CODES, FLEET_MODES, KERNEL_TABLE_MODES,
                       KV_ALLOCATIONS,
                       LENGTH_DISTRIBUTIONS, POOL_ROLES, PREEMPT_MODE_CODES, ROUTER_CODES, SCALE_SIGNALS,
                       STEP_MODEL_CODES, TRACE_FORMATS)

# The words of each named choice, by what it names; every name of the registry has its words (tests/test_labels.py).
CHOICE_WORDS = {
    "router": {"round-robin": "Round robin", "least-tokens": "Fewest tokens", "shortest-queue": "Shortest queue",
               "prefix-affinity": "Prefix affinity"},
    "arrival": {"poisson": "Poisson", "gamma": "Gamma"},
    "trace_format": {"csv": "CSV", "azure": "Azure", "mooncake": "Mooncake"},
    "batching": {"mixed": "Mixed", "prefill-first": "Prefill first"},
    "admission": {"optimistic": "Optimistic", "reserve-full": "Reserve the whole output",
                  "new-token-ratio": "Reserve a share of the output (SGLang)"},
    "preempt_mode": {"keep": "Keep", "swap": "Swap", "recompute": "Recompute"},
    "step_model": {"fixed": "Fixed iteration time", "roofline": "Roofline"},
    "kv_allocation": {"paged": "Paged", "static": "Static"},
    "fleet_mode": {"colocated": "Colocated", "disaggregated": "Disaggregated"},
    "scale_signal": {"utilisation": "Utilisation (batch slots or KV cache)", "queue": "Queue length",
                     "kv": "KV cache in use", "slack": "TTFT target used by the longest wait"},
    "role": {"colocated": "Whole requests", "prefill": "Prefill", "decode": "Decode"},
    "dist": {"constant": "Constant", "uniform": "Uniform", "geometric": "Geometric", "lognormal": "Lognormal"},
    "decoding": {"plain": "Plain", "speculative": "Speculative"},
    "billing": {"pay as you go": "Pay as you go", "annual prepay": "Annual prepay"},  # cost.BILLING_MODES
    # cost.PRICE_RULES, and "" (the planner's default: firm when a target is a latency)
    "prices": {"": "Firm for latency targets", "firm": "Firm prices only",
               "any": "Any price (estimates and spot too)"},
    # GPU families of data/hardware/gpus.csv (the architecture a calibration is fitted per)
    "gpu_family": {"turing": "Turing", "ampere": "Ampere", "ampere-consumer": "Ampere (consumer)", "ada": "Ada",
                   "hopper": "Hopper", "blackwell": "Blackwell", "cdna3": "CDNA 3",
                   "cdna4": "CDNA 4", "blackwell-workstation": "Blackwell (workstation)"},
    # serving engines of data/hardware/engines.csv (server.engine)
    "engine": {"vllm": "vLLM V1", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM",
               "legacy": "Engines of 2023-24", "atom": "AMD ATOM"},
    # server.engine_version: empty means the newest the measured kernels have
    "engine_version": {"": "Newest measured"},
    "kernel_tables": {"auto": "Measured kernels where they cover it", "off": "Roofline only"},
    # the same engines before a version number ("vLLM 0.24.0")
    "engine_name": {"vllm": "vLLM", "sglang": "SGLang", "tensorrt-llm": "TensorRT-LLM", "legacy": "engine of 2023-24",
                    "atom": "ATOM"},
}
# Which words each scenario key's choices take ("Class.key").
FIELD_CHOICES = {
    "Fleet.router": "router", "Arrival.process": "arrival", "Trace.format": "trace_format",
    "Server.batching": "batching", "Server.admission": "admission", "Policy.preempt_mode": "preempt_mode",
    "Server.step_model": "step_model", "Server.kv_allocation": "kv_allocation", "Fleet.mode": "fleet_mode",
    "TokenDist.dist": "dist", "Server.engine": "engine", "Autoscale.signal": "scale_signal",
    "Server.engine_version": "engine_version", "Server.kernel_tables": "kernel_tables",
}
FORMAT_KEYS = ("quant", "kv_quant")  # keys naming a number format of data/hardware (fp16, int4...): shown upper-case
# The registry's names, by the words that hold them (checked against CHOICE_WORDS by the tests).
REGISTRY = {"router": ROUTER_CODES, "arrival": ARRIVAL_PROCESSES, "trace_format": TRACE_FORMATS,
            "batching": BATCHING_CODES, "admission": ADMISSION_CODES, "preempt_mode": PREEMPT_MODE_CODES,
            "step_model": STEP_MODEL_CODES, "kv_allocation": KV_ALLOCATIONS, "fleet_mode": FLEET_MODES,
            "role": POOL_ROLES, "dist": LENGTH_DISTRIBUTIONS, "scale_signal": SCALE_SIGNALS,
            "kernel_tables": KERNEL_TABLE_MODES}


def words(kind: str, name: object) -> str:
    """The words of choice ``name`` of ``kind`` (a key of ``CHOICE_WORDS``); a name without words (a value the
    scenario's checks will refuse) as given."""
    return CHOICE_WORDS[kind].get(name, str(name))


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless there is one: "1 server", "4 servers"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def format_label(name: object) -> str:
    """A weight or KV-cache format of the hardware tables as it is written: "FP16", "INT4"."""
    return str(name).upper()


def parallel_label(tensor_parallel: int, expert_parallel: bool = False, attention_data_parallel: bool = False) -> str:
    """How one server splits the model over its cards: "TP8", "TP8 + EP8" (experts split whole), "DP8 + EP8"
    (attention data-parallel too)."""
    if not expert_parallel:
        return f"TP{tensor_parallel}"
    return f"{'DP' if attention_data_parallel else 'TP'}{tensor_parallel} + EP{tensor_parallel}"


def choice_label(cls: type, name: str, value: object) -> str:
    """What a form shows for ``value`` of key ``name`` of config class ``cls``: its words, a number format
    upper-case, a whole number without ".0", anything else as given."""
    kind = FIELD_CHOICES.get(f"{cls.__name__}.{name}")
    if kind is not None:
        return words(kind, value)
    if name in FORMAT_KEYS and isinstance(value, str):
        return format_label(value)
    return count_text(value) if isinstance(value, float) else str(value)


def cards_text(count: float) -> str:
    """ "1 card", "8 cards" """
    return f"{count:g} card" + ("" if count == 1 else "s")


def count_text(value: object) -> str:
    """A number meant as a whole one ("4", not "4.0"); "—" when missing, anything else as given."""
    if value is None or value != value:  # None or NaN
        return "—"
    if isinstance(value, float) and value.is_integer():
        return f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _config_fields() -> dict[str, list[tuple[type, str]]]:
    """Every key name of the scenario, with the config classes (and field names) that hold it."""
    found: dict[str, list[tuple[type, str]]] = {}
    todo, seen = [Scenario], set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.metadata.get("internal"):
                continue
            found.setdefault(f.name, []).append((cls, f.name))
            tp, _ = unwrap_optional(hints[f.name])
            inner = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else tp
            if dataclasses.is_dataclass(inner):
                todo.append(inner)
    return found


FIELDS = _config_fields()


def _key_class(path: str) -> tuple[type, str] | None:
    """(config class, key) of a dotted key path ("server.speculative.acceptance", "fleet.groups[0].gpu") or a bare
    key name ("max_batch_size": its first holder); None when it names no key."""
    parts = re.sub(r"\[\d+\]", "", path).split(".")
    if len(parts) == 1:
        holders = FIELDS.get(parts[0])
        return holders[0] if holders else None
    cls: type = Scenario
    for i, part in enumerate(parts):
        hints = typing.get_type_hints(cls)
        if part not in hints or part not in {f.name for f in dataclasses.fields(cls)}:
            return None
        if i == len(parts) - 1:
            return cls, part
        tp, _ = unwrap_optional(hints[part])
        cls = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else tp
        if not dataclasses.is_dataclass(cls):
            return None
    return None


def key_label(path: str) -> str:
    """The words of a key given by its dotted path or name ("server.tensor_parallel": "Tensor parallel"); the path
    as given when it names no key."""
    found = _key_class(path)
    return field_label(*found) if found else path


# A key in a text: a dotted path (server.prefix_caching, fleet.groups[0].gpu) or a name with an underscore
# (wait_timeout_ms), optionally followed by "= value" (a value quoted or not); not a column of a file's header
# (arrival_s,prompt_tokens) nor a TOML table ([[workload.classes]]).
_KEY = re.compile(r"(?<![\w./,\[-])((?:[a-z][a-z0-9_]*(?:\[\d+\])?\.)+[a-z][a-z0-9_]*|[a-z][a-z0-9]*(?:_[a-z0-9]+)+)"
                  r"(?:\s*=\s*(?:'([^'\n]{1,80})'|([\w.*-]+)))?(?![\w/(,\]-])")  # a quoted value may hold spaces


# A list of TOML tables a help text names ("[[fleet.groups]] tables"): the key that holds them.
_TABLES = re.compile(r"\[\[([a-z_.]+)\]\](?: tables?)?")


def key_words(text: str, names: Mapping[str, str] | None = None, listed: Mapping[str, str] | None = None) -> str:
    """``text`` (a help text or a message written for the scenario file) in the form's words: every key it names
    by its label in quotes, a value given to a key ("preempt_mode = keep") by the value's words ('"Preemption mode":
    Keep'), each of ``names`` (a key's own choices) standing as a word by its words, and each of ``listed`` (policy
    names, which are also plain words: priority) by its words where it stands in a list in parentheses ("(priority,
    edf)"). Words that name no key (a file name) stay as written."""
    def replace(match: re.Match) -> str:
        path, value = match.group(1), match.group(2) or match.group(3)
        found = _key_class(path)
        if found is None:
            return match.group(0)
        shown = f"\u201c{field_label(*found)}\u201d"
        return shown if value is None else f"{shown}: {choice_label(*found, _number(value))}"
    text = _TABLES.sub(lambda m: f"\u201c{key_label(m.group(1))}\u201d" if _key_class(m.group(1)) else m.group(0),
                       text)
    text = _KEY.sub(replace, text)
    for name, shown in (names or {}).items():
        text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", shown, text)
    for name, shown in (listed or {}).items():
        text = re.sub(rf"(?:(?<=\()|(?<=, )){re.escape(name)}(?=[,;)])", shown, text)
    return text


def own_choices(cls: type, name: str) -> dict[str, str]:
    """The words of the choices key ``name`` of ``cls`` takes (none for a key without named choices)."""
    kind = FIELD_CHOICES.get(f"{cls.__name__}.{name}")
    return dict(CHOICE_WORDS[kind]) if kind else {}


def _number(value: str) -> object:
    """A value written in a text as the number it is, or the text when it is not one."""
    try:
        return float(value)
    except ValueError:
        return value
