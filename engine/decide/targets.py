"""What a fleet must achieve, per class: the targets of the sizing search and the planner.

A target bounds one class metric of ``engine.scenario.metric_table`` (or the ``overall`` block): latencies, the
longest wait and the time-outs at most, SLA attainment and throughput at least (the metric's own
``lower_is_better`` says which). Written ``CLASS.METRIC=VALUE`` on the command line, e.g.
``interactive.ttft_p99_ms=1000`` or ``batch.output_tokens_per_s=900``; a class name may hold dots (the metric
is what follows the last one). A run meets a target only when it is stable: an overloaded run's latencies
say nothing about the steady state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from ..scenario.config import OVERALL
from ..scenario.errors import ScenarioError, excerpt
from ..scenario.metric_table import CLASS_METRICS, COUNT, metric
from ..scenario.summary import Summary

# Every class metric a target may bound: not the counts (they grow with the run's length).
TARGET_METRICS: tuple[str, ...] = tuple(m.key for m in CLASS_METRICS if m.kind != COUNT)


def meets(value: float | None, limit: float, at_most: bool, summary: Summary) -> bool:
    """Whether ``value`` is at most (``at_most``) or at least ``limit`` on the run ``summary`` describes: a
    missing value or an unstable run never meets a limit."""
    if value is None or summary["system"]["unstable"]:
        return False
    return value <= limit if at_most else value >= limit


@dataclass(frozen=True)
class Target:
    """Class ``cls`` (or ``overall``) must keep metric ``key`` at most ``limit`` (a metric where lower is
    better) or at least ``limit`` (otherwise), in the metric's stored unit (ms, a fraction, tokens/s)."""

    cls: str
    key: str
    limit: float

    def __post_init__(self) -> None:
        if self.key not in TARGET_METRICS:
            raise ScenarioError(f"target metric {excerpt(self.key)} is not one of {', '.join(TARGET_METRICS)}")
        if not math.isfinite(self.limit) or self.limit < 0:
            raise ScenarioError(f"target {self.cls}.{self.key} = {self.limit} must be a finite number >= 0")

    @property
    def at_most(self) -> bool:
        """True when the metric must stay at or under the limit (latencies), False for at or over it."""
        return metric(self.key).lower_is_better

    def check_class(self, classes: Iterable[str]) -> None:
        """``ScenarioError`` unless the target's class is one of ``classes`` (or ``overall``)."""
        classes = list(classes)
        if self.cls != OVERALL and self.cls not in classes:
            raise ScenarioError(f"target class {excerpt(self.cls)} is not a class; classes are "
                                f"{', '.join(classes)} (or {OVERALL})")

    def value(self, summary: Summary) -> float | None:
        """The metric on one run's summary (None when not measured: no request of the class completed)."""
        self.check_class(summary["classes"])
        block = summary["overall"] if self.cls == OVERALL else summary["classes"][self.cls]
        return metric(self.key).value(block)

    def met(self, summary: Summary) -> tuple[bool, float | None]:
        """(met, value) on one run's summary: a missing value or an unstable run never meets a target."""
        value = self.value(summary)
        return meets(value, self.limit, self.at_most, summary), value

    def slack(self, value: float | None) -> float:
        """How far ``value`` is inside the target, as a share of the limit (0.2: 20% to spare; negative:
        missed by that share); -inf when there is no value."""
        if value is None:
            return -math.inf
        scale = self.limit if self.limit > 0 else 1.0
        return (self.limit - value) / scale if self.at_most else (value - self.limit) / scale

    def describe(self) -> str:
        """The target in words: "interactive TTFT p99 <= 1.00 s", "batch Output >= 900 tokens/s"."""
        m = metric(self.key)
        return f"{self.cls} {m.label} {'<=' if self.at_most else '>='} {m.unit_text(self.limit)}"


def parse_target(text: str) -> Target:
    """``CLASS.METRIC=VALUE`` as a ``Target``; ``ScenarioError`` naming what is wrong and the expected form."""
    form = "write CLASS.METRIC=VALUE, e.g. interactive.ttft_p99_ms=1000"
    left, equals, right = text.partition("=")
    cls, dot, key = left.strip().rpartition(".")
    if not equals or not dot or not cls:
        raise ScenarioError(f"target {excerpt(text)} is not CLASS.METRIC=VALUE: {form}")
    try:
        limit = float(right)
    except ValueError:
        raise ScenarioError(f"target {excerpt(text)}: {excerpt(right)} is not a number: {form}") from None
    return Target(cls, key.strip(), limit)


def all_met(targets: tuple[Target, ...], summary: Summary) -> bool:
    """True when the run meets every target."""
    return all(t.met(summary)[0] for t in targets)


# A latency target's metric (its first word) -> the per-request limit a class sets for it (``RequestClass``)
REQUEST_LIMITS = {"ttft": "sla_ttft_ms", "e2e": "sla_e2e_ms"}


def limits_of_targets(classes: list[dict], targets: Iterable[Target]) -> list[dict]:
    """Each class of a scenario (its ``workload.classes`` tables) with its per-request limits set from the targets
    that bound its time to first token or end-to-end latency (its own targets and the overall ones, the tightest
    where several do), and no limit where none does: an SLA met judged this way is the share of requests within the
    limits the question set, not within limits the scenario carried and the question never showed."""
    judged = []
    for table in classes:
        limits = {key: value for key, value in table.items() if key not in REQUEST_LIMITS.values()}
        for target in targets:
            field = REQUEST_LIMITS.get(target.key.split("_")[0])
            if field and target.at_most and target.cls in (OVERALL, table.get("name")):
                limits[field] = min(limits.get(field, math.inf), target.limit)
        judged.append(limits)
    return judged
