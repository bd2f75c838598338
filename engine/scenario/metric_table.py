"""Every metric a user reads, defined once: name, label, unit, direction, where it sits in a run's summary,
and how it is written.

KPI cards, comparison and sweep tables, chart axes, the command line's tables and the sizing targets all
read this table, so a metric has one label and one number format everywhere. ``key`` is the flat column
name of a metric in result frames (``ttft_p99_ms``); ``path`` is where its value sits in a class block of
the summary (``("ttft_ms", "p99")``); fleet-level metrics (``SYSTEM``) sit in the summary's ``system`` block;
costs (``COSTS``) are added to frames by ``engine.decide.cost``, priced in the currency the user chose.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

# Kinds decide the number format: a duration in ms below 1 s, in s (three significant digits) above; a
# fraction as a percentage (a change of one in percentage points); a count as an integer; a rate with three
# significant digits; money in whole units from 100 up, else three significant digits.
DURATION, FRACTION, COUNT, RATE, MONEY = "duration", "fraction", "count", "rate", "money"
# The steady-state window (``simulate.steady_window_s``), over which rates and utilisation are reported by default:
# from the end of the warm-up (this share of the arrival span, while the queues fill from empty) to the last arrival
# (after it the run only drains); and why a whole-run rate cannot tell policies apart.
WARMUP_SHARE = 0.1
STEADY_STATE = f"after the first {WARMUP_SHARE:.0%} of the arrival span, until the last arrival"
WHOLE_RUN = "every token is produced in the end, so it hardly differs between policies"


@dataclass(frozen=True)
class Metric:
    """One metric: ``label`` is words without the unit; ``unit`` is the unit of the stored value."""

    key: str
    label: str
    unit: str
    kind: str
    lower_is_better: bool
    help: str
    path: tuple[str, ...] = ()

    def value(self, block: Mapping[str, Any]) -> Any:
        """The metric in one summary block (a class, ``overall`` or ``system``); None when it is not measured."""
        value: Any = block
        for part in self.path or (self.key,):
            value = value.get(part) if isinstance(value, Mapping) else None
        return value

    def title(self, currency: str = "") -> str:
        """Label with its unit, for axes and column headers: "TTFT p99 (ms)", "SLA met (%)"."""
        unit = currency if self.kind == MONEY else ("%" if self.kind == FRACTION else self.unit)
        return f"{self.label} ({unit})" if unit else self.label

    def text(self, value: Any, signed: bool = False, currency: str = "") -> str:
        """The value as a reader sees it ("3.57 s", "49.2 s", "98.5%"; a rate without its unit: "1,150"); "—"
        when missing. ``signed`` writes a change ("+120 ms", "-1.5 pt")."""
        if _missing(value):
            return "—"
        sign = "+" if signed else ""
        if self.kind == DURATION:
            if abs(value) < 100:
                return f"{significant(value, 3, sign)} ms"
            if abs(value) < 1000:
                return f"{value:{sign},.0f} ms"
            return f"{significant(value / 1000, 3, sign)} s"
        if self.kind == FRACTION:
            return f"{100 * value:+.1f} pt" if signed else f"{100 * value:.1f}%"
        if self.kind == COUNT:  # the label names what is counted
            return f"{value:{sign},.0f}"
        if self.kind == MONEY:
            return f"{money_text(value, sign)} {currency}".rstrip()
        return significant(value, 3, sign)  # a rate's unit is in its card's label (``card_label``)

    def unit_text(self, value: Any) -> str:
        """``text`` with a rate's unit too, for a sentence or a plain table: "1,150 tokens/s", "340 ms"."""
        shown = self.text(value)
        return f"{shown} {self.unit}" if self.kind == RATE and not _missing(value) else shown

    def change_text(self, value: Any, old: Any) -> str | None:
        """A card's change against an earlier value ("+120 ms", "-1.5 pt"); None when the card's own number did
        not change (equal, or rounding to the same text) or either value is missing."""
        if self.text(value) == self.text(old) or _missing(value) or _missing(old):
            return None
        delta = self.text(value - old, signed=True)
        return delta if re.search(r"[1-9]", delta) else None  # "+0 ms" says nothing

    def card_label(self) -> str:
        """The label of a card showing this metric: a rate's unit goes here, so the number fits its card."""
        return self.title() if self.kind == RATE else self.label

    def table_value(self, value: Any) -> Any:
        """The value as a table cell holds it (still a number, so columns sort): whole ms from 100 ms (three
        significant digits below), percentages with one decimal, three significant digits for rates and money;
        None stays None."""
        if _missing(value):
            return None
        if self.kind == DURATION:
            return float(round(value)) if abs(value) >= 100 else round_significant(value, 3)
        if self.kind == FRACTION:
            return round(100.0 * value, 1)
        if self.kind == COUNT:
            return value
        if self.kind == MONEY:
            return round_money(value)
        return round_significant(value, 3)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def money_text(value: float, sign: str = "") -> str:
    """An amount of money: whole units from 100 up ("57,635"), else three significant digits ("6.68", "0.0412"),
    so a price is never rounded to zero and never loses its integer part."""
    if abs(value) >= 100:
        return f"{value:{sign},.0f}"
    return significant(value, 3, sign)


def money_range(values, currency: str = "") -> str:
    """A (low, high) amount as "low" when they are equal, else "low–high", with its currency; "—" when unknown."""
    low, high = values
    if low is None or high is None:
        return "—"
    same = abs(high - low) <= 1e-9 * max(1.0, abs(high))
    text = money_text(low) if same else f"{money_text(low)}–{money_text(high)}"
    return f"{text} {currency}".rstrip()


def round_money(value: float) -> float:
    """An amount as ``money_text`` writes it: whole units from 100 up, else three significant digits."""
    return float(round(value)) if abs(value) >= 100 else round_significant(value, 3)


def round_significant(value: float, digits: int = 3) -> float:
    """``value`` rounded to ``digits`` significant digits, whole numbers to their integer digits (as
    ``significant`` writes them); 0 and non-finite values unchanged."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, max(0, digits - 1 - math.floor(math.log10(abs(value)))))


def significant(value: float, digits: int = 3, sign: str = "") -> str:
    """``value`` with ``digits`` significant digits and thousands separators, never in exponent form:
    1234.4 -> "1,234" (whole numbers keep their integer digits), 6.6812 -> "6.68", 0.000412 -> "0.000412"."""
    if value == 0 or not math.isfinite(value):
        return f"{value:{sign}g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:{sign},.{decimals}f}"


LATENCIES = (("ttft", "TTFT", "time to first token: from arrival to the first output token"),
             ("e2e", "End-to-end", "from arrival to the last output token"),
             ("tpot", "TPOT", "time per output token after the first: (end-to-end - TTFT) / (output tokens - 1)"),
             ("queue", "Queue delay", "from arrival to the first iteration that serves the request"))
STATS = (("p50", "p50", "median"), ("p90", "p90", "90th percentile"), ("p99", "p99", "99th percentile"),
         ("mean", "mean", "mean"))


def _latencies() -> list[Metric]:
    return [Metric(f"{name}_{stat}_ms", f"{label} {stat_label}", "ms", DURATION, True,
                   f"{stat_help} {doc}, completed requests", (f"{name}_ms", stat))
            for name, label, doc in LATENCIES for stat, stat_label, stat_help in STATS]


CLASS_METRICS: tuple[Metric, ...] = (
    Metric("arrived", "Arrived", "requests", COUNT, False, "requests that arrived during the run"),
    Metric("completed", "Completed", "requests", COUNT, False, "requests that received their last output token"),
    Metric("timed_out", "Timed out", "requests", COUNT, True,
           "requests whose client gave up before the first token (the class's timeout_ms)"),
    Metric("unfinished", "Unfinished", "requests", COUNT, True, "requests still waiting or running when the run ended"),
    *_latencies(),
    Metric("sla_attainment", "SLA met", "", FRACTION, False,
           "completed requests within every SLA target of their class, of completed and timed-out ones; a class "
           "without a target has none"),
    Metric("output_tokens_per_s", "Output", "tokens/s", RATE, False,
           f"output tokens generated per second of the steady state ({STEADY_STATE}), where a policy that holds a "
           f"class back shows it"),
    Metric("prompt_tokens_per_s", "Prompt", "tokens/s", RATE, False,
           f"prompt tokens of requests whose first token came in the steady state ({STEADY_STATE}), per second"),
    Metric("sla_met_per_s", "SLA-met", "req/s", RATE, False,
           f"requests that finished within their SLA targets in the steady state ({STEADY_STATE}), per second"),
    Metric("output_tokens_per_s_run", "Output, whole run", "tokens/s", RATE, False,
           f"output tokens per simulated second of the whole run, drain included: {WHOLE_RUN}"),
    Metric("prompt_tokens_per_s_run", "Prompt, whole run", "tokens/s", RATE, False,
           f"prompt tokens of requests that received a first token, per simulated second of the whole run: "
           f"{WHOLE_RUN}"),
    Metric("sla_met_per_s_run", "SLA-met, whole run", "req/s", RATE, False,
           f"completed requests within their SLA targets, per simulated second of the whole run: {WHOLE_RUN}"),
    Metric("longest_wait_ms", "Longest wait", "ms", DURATION, True,
           "longest time any request of the class waited before it was first scheduled: starvation shows here"),
    Metric("service_share", "GPU service share", "", FRACTION, False,
           "share of the GPU's work (decode tokens + weighted prefill tokens) this class received"),
    Metric("service_tokens", "GPU service", "tokens", RATE, False,
           "decode tokens + weighted prefill tokens served to the class"),
)

SYSTEM_METRICS: tuple[Metric, ...] = (
    Metric("offered_load", "Offered load", "", RATE, True,
           "the work that arrives per second divided by the most the fleet can serve per second, estimated from "
           "the mean request and the step-time model: below 1 the queue stays bounded on average, above 1 it grows"),
    Metric("gpu_busy_frac", "GPU busy", "", FRACTION, False,
           f"share of the steady state ({STEADY_STATE}) during which an iteration was running (averaged over "
           f"replicas); it says nothing about how full each iteration was, so a GPU can be busy 100% of the time at "
           f"an offered load of 0.75: the two utilisations below say that"),
    Metric("compute_util_frac", "Compute while busy", "", FRACTION, False,
           "model FLOP utilisation while busy: the FLOPs of each iteration over what the GPUs' datasheet peak could "
           "do in its time, averaged over the busy time of the steady state; fuller batches raise it (roofline "
           "step model only)"),
    Metric("bandwidth_util_frac", "Bandwidth while busy", "", FRACTION, False,
           "memory bandwidth utilisation while busy: the bytes each iteration reads (weights and KV cache) over "
           "what the datasheet bandwidth could move in its time, averaged over the busy time of the steady state "
           "(roofline step model only)"),
    Metric("mean_batch_size", "Mean batch", "sequences", RATE, False, "sequences per iteration, averaged over "
           "iterations"),
    Metric("preemptions", "Preemptions", "", COUNT, True, "running requests evicted to make room for others"),
    Metric("prefix_hit_frac", "Prefix cache hits", "", FRACTION, False,
           "share of the prompt tokens to compute that the prefix cache already held, so their prefill was skipped "
           "(vLLM's prefix cache hit rate; server.prefix_caching)"),
    Metric("gpu_busy_frac_run", "GPU busy, whole run", "", FRACTION, False,
           "share of the whole run, warm-up and drain included, during which an iteration was running"),
)

COSTS: tuple[Metric, ...] = (
    Metric("cost_per_million_output_tokens", "Cost per 1M output tokens", "", MONEY, True,
           "the fleet's rent per second divided by the output tokens it generated per second in the steady state, "
           "times one million"),
    Metric("cost_per_million_total_tokens", "Cost per 1M prompt + output tokens", "", MONEY, True,
           "the fleet's rent per second divided by prompt and output tokens per second in the steady state, times "
           "one million"),
    Metric("cost_per_thousand_sla_met_requests", "Cost per 1,000 SLA-met requests", "", MONEY, True,
           "the fleet's rent per second divided by the requests served within their SLA per second in the steady "
           "state, times 1,000"),
)

METRICS: dict[str, Metric] = {m.key: m for m in (*CLASS_METRICS, *SYSTEM_METRICS, *COSTS)}
LATENCY_KEYS: tuple[str, ...] = tuple(m.key for m in CLASS_METRICS if m.kind == DURATION and m.path)


def metric(key: str) -> Metric:
    """The metric named ``key`` (a flat column name)."""
    return METRICS[key]
