"""The tuner: the policy parameters that minimise (or maximise) one class metric subject to constraints.

Knobs: each tunable policy's parameters (``dynamic``: alpha, beta, gamma, the margin and the SLA of classes
without one; ``wfq``: each class's weight against the last class's; ``priority``: aging and the longest wait),
and on request the batching pair (minimum batch, wait time-out). Every candidate runs on the same requests
(seeds ``seed``, ``seed + 1``, ...: common random numbers), so two candidates differ by their parameters only,
not by the luck of their draws.

Search, within a budget of candidates: the scenario as it is (the baseline); a coarse space-filling design per
policy (a Halton sequence over the unit cube of its knobs, deterministic); then a pattern search from the best
point of the two best policies (each knob one step up and down, in unit-cube coordinates, halving the step when
nothing improves); then the response surface of the best policy over its two knobs that mattered most in the
coarse design, the others held at the best point.

A candidate is feasible when every constraint holds on every seed's run (an unstable run meets nothing).
Ranking: feasible first, by the objective's mean over the seeds; then the others by how far they miss the
constraints. So the tuner never returns a point that breaks a constraint when it evaluated one that does not.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..scenario.config import (OVERALL, Policy, Server, apply_overrides, field_label, field_meta, load_scenario,
                               scenario_to_dict, to_toml)
from ..scenario.errors import ScenarioError, excerpt
from ..scenario.metric_table import metric
from ..scenario.origin import Origin
from ..scenario.summary import Summary
from ..sim import stopping
from ..sim.parallel import summaries, workers
from .targets import Target, parse_target

DEFAULT_CANDIDATES = 300
DEFAULT_SEEDS = 2
DEFAULT_REQUESTS = 3000
CANDIDATE_RANGE = (10, 5000)
COARSE_SHARE = 0.5  # of the budget: the space-filling design, split between the policies
REFINE_SHARE = 0.35  # the pattern search; what is left maps the response surface
REFINED_POLICIES = 2
FIRST_STEP = 0.25  # of a knob's span, in unit-cube coordinates
LAST_STEP = 1 / 64
SURFACE_SIDE = (3, 8)  # points per axis of the response surface
FLAT_SHARE = 0.02  # a feasible objective that moves less than this share over the search is called flat
UNSTABLE_VIOLATION = 1e9  # an unstable run (or an unmeasured constraint) misses by more than any measured miss
WEIGHT_KNOB = "weight:"  # a wfq knob: "weight:CLASS", the class's weight against the last class's (1)


@dataclass(frozen=True)
class Knob:
    """One searched parameter: ``key`` in its table (``policy`` or ``server``), its range and how the unit
    interval maps onto it ("linear", "square": finer near ``low``, "log": equal ratios)."""

    name: str
    table: str
    low: float
    high: float
    scale: str = "linear"
    integer: bool = False

    def value(self, u: float) -> float:
        u = min(max(u, 0.0), 1.0)
        if self.scale == "log":
            raw = math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        elif self.scale == "square":
            raw = self.low + u * u * (self.high - self.low)
        else:
            raw = self.low + u * (self.high - self.low)
        return float(round(raw)) if self.integer else float(f"{raw:.3g}")  # three significant digits

    def unit(self, value: float) -> float:
        """Where ``value`` lies on the unit interval (the inverse of ``value``, clipped to the range)."""
        value = min(max(value, self.low), self.high)
        if self.scale == "log":
            return (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        u = (value - self.low) / (self.high - self.low)
        return math.sqrt(u) if self.scale == "square" else u

    def _words(self) -> tuple[str, str]:
        if self.name.startswith(WEIGHT_KNOB):
            return f"Weight of {self.name[len(WEIGHT_KNOB):]} (last class = 1)", ""
        cls = Policy if self.table == "policy" else Server
        return field_label(cls, self.name), field_meta(cls, self.name)[1]["unit"]

    def label(self) -> str:
        """The knob for an axis: "SLA for classes without one (ms)"."""
        words, unit = self._words()
        return words + (f" ({unit})" if unit else "")

    def text(self, value: float) -> str:
        """The knob at ``value`` in a sentence: "SLA for classes without one 54,400 ms", "alpha (waiting) 9.38"."""
        words, unit = self._words()
        return f"{words} {value:,g}" + (f" {unit}" if unit else "")


POLICY_KNOBS = {
    "dynamic": (Knob("alpha", "policy", 0.0, 10.0, "square"), Knob("beta", "policy", 0.0, 10.0, "square"),
                Knob("gamma", "policy", 0.0, 10.0, "square"), Knob("margin", "policy", 0.0, 2.0, "square"),
                Knob("default_sla_ms", "policy", 1000.0, 120000.0, "log")),
    "priority": (Knob("aging_per_s", "policy", 0.0, 5.0, "square"),
                 Knob("max_wait_ms", "policy", 500.0, 120000.0, "log")),
    "wfq": (),  # one weight knob per class but the last (``knobs``)
}
TUNABLE = tuple(POLICY_KNOBS)
BATCHING_KNOBS = (Knob("min_batch_size", "server", 1.0, 64.0, "log", integer=True),
                  Knob("wait_timeout_ms", "server", 0.0, 500.0, "square"))


def knobs(policy: str, classes: list[str], batching: bool) -> tuple[Knob, ...]:
    """The knobs searched for ``policy`` on a workload of ``classes``."""
    own = POLICY_KNOBS.get(policy, ())
    if policy == "wfq":
        own = tuple(Knob(WEIGHT_KNOB + c, "policy", 0.02, 50.0, "log") for c in classes[:-1])
    return own + (BATCHING_KNOBS if batching else ())


def parse_constraint(text: str) -> list[Target]:
    """``CLASS.METRIC<=VALUE`` or ``CLASS.METRIC>=VALUE`` (the metric's own direction; ``*`` for every class,
    expanded by ``Question``) as targets."""
    for op in ("<=", ">="):
        if op in text:
            left, _, right = text.partition(op)
            target = parse_target(f"{left}={right}")
            if target.at_most != (op == "<="):
                need = "<=" if target.at_most else ">="
                raise ScenarioError(f"constraint {excerpt(text)}: {target.key} is bounded the other way; write "
                                    f"{left.strip()}{need}{right.strip()}")
            return [target]
    raise ScenarioError(f"constraint {excerpt(text)} is not CLASS.METRIC<=VALUE or CLASS.METRIC>=VALUE, "
                        f"e.g. offline.output_tokens_per_s>=900")


@dataclass(frozen=True)
class Objective:
    """Class ``cls`` metric ``key``, minimised or maximised."""

    cls: str
    key: str
    minimize: bool = True

    def describe(self) -> str:
        return f"{'minimise' if self.minimize else 'maximise'} {self.cls} {metric(self.key).label}"


def parse_objective(text: str, minimize: bool) -> Objective:
    """``CLASS.METRIC`` as an objective (the metric as a target would take it)."""
    target = parse_target(f"{text}=0")
    return Objective(target.cls, target.key, minimize)


@dataclass(frozen=True)
class TuneQuestion:
    """What to optimise, under which constraints, over which policies, and how hard to look."""

    objective: Objective
    constraints: tuple[Target, ...] = ()
    policies: tuple[str, ...] = TUNABLE
    batching: bool = False
    candidates: int = DEFAULT_CANDIDATES
    seeds: int = DEFAULT_SEEDS
    requests: int = DEFAULT_REQUESTS

    def __post_init__(self) -> None:
        for name in self.policies:
            if name not in TUNABLE:
                raise ScenarioError(f"policy {excerpt(name)} has no parameters to tune; tunable: {', '.join(TUNABLE)}")
        if not self.policies:
            raise ScenarioError(f"give at least one policy to tune: {', '.join(TUNABLE)}")
        low, high = CANDIDATE_RANGE
        if not low <= self.candidates <= high:
            raise ScenarioError(f"candidates = {self.candidates} must be from {low} to {high:,}")
        if not 1 <= self.seeds <= 10:
            raise ScenarioError(f"seeds = {self.seeds} must be from 1 to 10")
        if not 100 <= self.requests <= 100_000:
            raise ScenarioError(f"requests per run = {self.requests} must be from 100 to 100,000")

    def targets_for(self, classes: list[str]) -> tuple[Target, ...]:
        """The constraints with ``*`` expanded to every class, each checked against ``classes``."""
        out = []
        for target in self.constraints:
            for cls in (classes if target.cls == "*" else [target.cls]):
                expanded = Target(cls, target.key, target.limit)
                expanded.check_class(classes)
                out.append(expanded)
        Target(self.objective.cls, self.objective.key, 0.0).check_class(classes)
        return tuple(out)


@dataclass
class Candidate:
    """One evaluated point: the policy, its knob values, and the runs on every seed."""

    policy: str
    values: dict[str, float]
    summaries: list[Summary]
    objective: float  # mean over the seeds; inf (or -inf when maximising) when not measured
    violation: float  # 0 when feasible: the constraints' summed shortfall, as shares of their limits
    order: int

    @property
    def feasible(self) -> bool:
        return self.violation == 0.0


def halton(index: int, dims: int) -> list[float]:
    """Point ``index`` (from 1) of the Halton sequence in ``dims`` dimensions (bases: the first primes)."""
    primes = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    point = []
    for d in range(dims):
        base, f, r, i = primes[d % len(primes)], 1.0, 0.0, index
        while i > 0:
            f /= base
            r += f * (i % base)
            i //= base
        point.append(r)
    return point


def overrides(policy: str, values: dict[str, float], classes: list[str]) -> dict:
    """The scenario keys a candidate sets."""
    out: dict = {"policy.name": policy}
    weights = {}
    for name, value in values.items():
        if name.startswith(WEIGHT_KNOB):
            weights[name[len(WEIGHT_KNOB):]] = value
        elif name in Server.__dataclass_fields__:
            out[f"server.{name}"] = int(value) if name == "min_batch_size" else value
        else:
            out[f"policy.{name}"] = value
    if weights:
        out["policy.weights"] = {c: weights.get(c, 1.0) for c in classes}
    return out


@dataclass
class Tuning:
    """The runs made for one tuning question, each candidate once."""

    data: dict
    question: TuneQuestion
    origin: Origin
    classes: list[str]
    constraints: tuple[Target, ...]
    seen: dict = field(default_factory=dict)
    progress: Optional[Callable[[int, int], None]] = None

    def run_data(self, policy: str, values: dict[str, float], seed_offset: int) -> dict:
        data = apply_overrides(self.data, {"workload.num_requests": self.question.requests,
                                           "seed": int(self.data.get("seed", 0)) + seed_offset})
        data = apply_overrides(data, overrides(policy, values, self.classes))
        if values.get("min_batch_size", 1) > data.get("server", {}).get("max_batch_size", math.inf):
            data["server"]["min_batch_size"] = data["server"]["max_batch_size"]
        return data

    def evaluate(self, points: list[tuple[str, dict[str, float]]]) -> list[Candidate]:
        """Run the points not seen yet (every seed, all on the pool) and return every point's candidate."""
        new = []
        for policy, values in points:
            key = (policy, tuple(sorted(values.items())))
            if key not in self.seen and key not in [k for k, _ in new]:
                new.append((key, (policy, values)))
        runs = [(policy, values, k) for _, (policy, values) in new for k in range(self.question.seeds)]
        heartbeat = None if self.progress is None else \
            lambda finished, total: self.progress(len(self.seen), self.question.candidates)  # while the batch runs
        done = summaries([self.run_data(*item) for item in runs], self.origin, heartbeat)
        for i, (key, (policy, values)) in enumerate(new):
            own = done[i * self.question.seeds:(i + 1) * self.question.seeds]
            self.seen[key] = self.score(policy, values, own)
        if self.progress is not None:
            self.progress(len(self.seen), self.question.candidates)
        return [self.seen[(p, tuple(sorted(v.items())))] for p, v in points]

    def score(self, policy: str, values: dict[str, float], summaries: list[Summary]) -> Candidate:
        objective = self.question.objective
        target = Target(objective.cls, objective.key, 0.0)
        measured = [target.value(s) for s in summaries]
        unstable = any(s["system"]["unstable"] for s in summaries)
        worst = math.inf if objective.minimize else -math.inf
        value = worst if unstable or any(v is None for v in measured) else statistics.fmean(measured)
        violation = UNSTABLE_VIOLATION if unstable else 0.0
        for constraint in self.constraints:
            for s in summaries:
                met, got = constraint.met(s)
                if not met:  # missed by its share of the limit (a tiny share when exactly unmeasurable)
                    violation += min(max(-constraint.slack(got), 1e-12), UNSTABLE_VIOLATION)
        return Candidate(policy, dict(values), summaries, value, violation, len(self.seen))

    def rank_key(self, c: Candidate) -> tuple:
        sign = 1.0 if self.question.objective.minimize else -1.0
        return (not c.feasible, c.violation, sign * c.objective, c.order)

    def best(self, policy: str | None = None) -> Candidate | None:
        """The best candidate (of ``policy``: among the points that set its knobs, so not the scenario as it is,
        whose values are the scenario's own)."""
        pool = [c for c in self.seen.values() if policy is None or (c.policy == policy and c.values)]
        return min(pool, key=self.rank_key) if pool else None

    def left(self) -> int:
        return self.question.candidates - len(self.seen)


def coarse(tuning: Tuning, policy_knobs: dict[str, tuple[Knob, ...]], baseline: dict[str, dict]) -> None:
    """The space-filling design: per policy, its values in the scenario, then Halton points."""
    share = max(1, int(tuning.question.candidates * COARSE_SHARE) // len(policy_knobs))
    points = []
    for policy, ks in policy_knobs.items():
        own = [(policy, baseline[policy])]
        own += [(policy, {k.name: k.value(u) for k, u in zip(ks, halton(i, len(ks)))}) for i in range(1, share)]
        points += own[:share] if ks else own[:1]
    tuning.evaluate(points[:max(1, tuning.left())])


def refine(tuning: Tuning, policy: str, ks: tuple[Knob, ...], budget: int) -> None:
    """Pattern search from the policy's best point: each knob one step either way, the best move taken; the
    step halves when no move improves, down to ``LAST_STEP``."""
    step, spent = FIRST_STEP, 0
    while ks and step >= LAST_STEP and spent < budget and tuning.left() > 0:
        here = tuning.best(policy)
        moves = []
        for k in ks:
            for sign in (-1, 1):
                u = k.unit(here.values[k.name]) + sign * step
                if 0.0 <= u <= 1.0:
                    moved = {**here.values, k.name: k.value(u)}
                    if moved != here.values:
                        moves.append((policy, moved))
        before = len(tuning.seen)
        moves = moves[:max(0, min(budget - spent, tuning.left()))]
        tuning.evaluate(moves)
        spent += len(tuning.seen) - before
        if tuning.best(policy) is here:
            step /= 2


def importance(tuning: Tuning, policy: str, ks: tuple[Knob, ...]) -> list[Knob]:
    """The knobs ordered by how much the objective moved with them in the coarse design: the spread of the
    objective's mean over the quarters of each knob's range (a main effect; unmeasured points left out)."""
    points = [c for c in tuning.seen.values() if c.policy == policy and c.values and math.isfinite(c.objective)]

    def spread(k: Knob) -> float:
        quarters = [[c.objective for c in points if min(int(k.unit(c.values[k.name]) * 4), 3) == q] for q in range(4)]
        means = [statistics.fmean(q) for q in quarters if q]
        return max(means) - min(means) if len(means) > 1 else 0.0
    return sorted(ks, key=spread, reverse=True)


def surface(tuning: Tuning, policy: str, ks: tuple[Knob, ...]) -> dict | None:
    """The objective and each constraint's metric over a grid of the two knobs that mattered most (one knob:
    a line), the others at the best point; the grid's runs count in the budget."""
    left = tuning.left()
    if not ks or left < SURFACE_SIDE[0]:
        return None
    axes = importance(tuning, policy, ks)[:2]
    side = min(SURFACE_SIDE[1], math.isqrt(left) - 1)  # the best point's value may add a row and a column
    if len(axes) == 1 or side < SURFACE_SIDE[0]:
        axes, side = axes[:1], min(2 * SURFACE_SIDE[1], left - 1)
    best = tuning.best(policy)
    grids = [sorted({k.value(i / (side - 1)) for i in range(side)} | {best.values[k.name]}) for k in axes]
    points = [(policy, {**best.values, axes[0].name: x}) for x in grids[0]] if len(axes) == 1 else \
        [(policy, {**best.values, axes[0].name: x, axes[1].name: y}) for y in grids[1] for x in grids[0]]
    candidates = tuning.evaluate(points)
    shown = [Target(tuning.question.objective.cls, tuning.question.objective.key, 0.0), *tuning.constraints]
    panels = [{"class": t.cls, "metric": t.key,
               "values": [_mean([t.value(s) for s in c.summaries]) for c in candidates]} for t in shown]
    return {"policy": policy, "axes": [{"name": k.name, "label": k.label(), "values": g} for k, g in zip(axes, grids)],
            "panels": panels, "feasible": [c.feasible for c in candidates],
            "best": [best.values[k.name] for k in axes]}


def _mean(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else statistics.fmean(values)


def mean_block(blocks: list) -> object:
    """The element-wise mean of equally shaped metric blocks over the seeds (None where any seed has none;
    counts rounded to whole numbers)."""
    first = blocks[0]
    if isinstance(first, dict):
        return {k: mean_block([b[k] for b in blocks]) for k in first}
    if isinstance(first, bool) or not isinstance(first, (int, float)):
        return first
    if any(b is None for b in blocks):
        return None
    mean = statistics.fmean(blocks)
    return round(mean) if isinstance(first, int) else mean


def candidate_block(tuning: Tuning, c: Candidate) -> dict:
    """One candidate as the JSON contract shows it: the whole ``[policy]`` table, the batching keys it set,
    each class's metrics (means over the seeds), the objective and whether every constraint held."""
    data = tuning.run_data(c.policy, c.values, 0)
    server = {k.name: data["server"][k.name] for k in BATCHING_KNOBS if k.name in c.values}
    metrics = mean_block([{**s["classes"], OVERALL: s["overall"]} for s in c.summaries])
    named = {k.name: k for p in tuning.question.policies for k in knobs(p, tuning.classes, tuning.question.batching)}
    return {"policy": data["policy"], "server": server, "values": c.values, "metrics": metrics,
            "settings": [named[name].text(value) for name, value in c.values.items()],
            "objective": c.objective if math.isfinite(c.objective) else None, "feasible": c.feasible,
            "unstable": any(s["system"]["unstable"] for s in c.summaries)}


def tuned_scenario(data: dict, best: dict) -> dict:
    """Scenario ``data`` with a tuning's best point: its whole ``[policy]`` table and the batching keys it set."""
    return {**data, "policy": best["policy"], "server": {**data.get("server", {}), **best["server"]}}


def policy_toml(best: dict) -> str:
    """The ``[policy]`` block to paste into a scenario, and the batching keys as lines for ``[server]``."""
    text = to_toml({"policy": best["policy"]})
    if best["server"]:
        text += "\n# and in [server]:\n" + "".join(f"# {k} = {v}\n" for k, v in best["server"].items())
    return text


def search(tuning: Tuning, policy_knobs: dict[str, tuple[Knob, ...]],
           baseline_values: dict[str, dict]) -> dict | None:
    """The search after the baseline: the coarse design, the pattern search of the best policies, then the best
    policy's response surface (returned; None when there is none)."""
    coarse(tuning, policy_knobs, baseline_values)
    ranked = sorted((p for p in policy_knobs if policy_knobs[p]), key=lambda p: tuning.rank_key(tuning.best(p)))
    refined = ranked[:REFINED_POLICIES]
    candidates = tuning.question.candidates
    kept_for_surface = candidates - int(candidates * COARSE_SHARE) - int(candidates * REFINE_SHARE)
    for i, policy in enumerate(refined):
        refine(tuning, policy, policy_knobs[policy], (tuning.left() - kept_for_surface) // (len(refined) - i))
    best = tuning.best()
    return surface(tuning, best.policy, policy_knobs.get(best.policy, ())) if best.policy in refined else None


def tune(data: dict, question: TuneQuestion, origin: Origin = Origin(),
         progress: Callable[[int, int], None] | None = None) -> dict:
    """Answer ``question`` on scenario ``data``: ``{"best", "baseline", "surface", "evaluations", ...}``, within
    the limit ``tune_s`` of wall-clock time: when it runs out, the best candidate found so far is the answer and
    ``cut`` says why the search stopped short (None when it did not)."""
    with stopping.job("the tuning", origin.caps.tune_s, "tune_s", background=True):
        return _tune(data, question, origin, progress)


def _tune(data: dict, question: TuneQuestion, origin: Origin, progress: Callable[[int, int], None] | None) -> dict:
    """``tune``'s answer, inside its job."""
    started = time.perf_counter()
    scenario = load_scenario(data, origin=origin)
    classes = [c.name for c in scenario.workload.classes]
    constraints = question.targets_for(classes)
    data = scenario_to_dict(scenario)
    tuning = Tuning(data, question, origin, classes, constraints, progress=progress)
    own = data.get("policy", {})
    policy_knobs = {p: knobs(p, classes, question.batching) for p in question.policies}
    baseline_values = {}
    for policy, ks in policy_knobs.items():
        values = {}
        for k in ks:
            if k.name.startswith(WEIGHT_KNOB):
                weights = own.get("weights") or {}
                value = weights.get(k.name[len(WEIGHT_KNOB):], 1.0) / weights.get(classes[-1], 1.0)
            else:
                value = (data["server"] if k.table == "server" else own).get(
                    k.name, field_meta(Server if k.table == "server" else Policy, k.name)[2])
            values[k.name] = k.value(k.unit(k.high if value is None else value))  # none: never, the far end
        baseline_values[policy] = values
    baseline = tuning.evaluate([(scenario.policy.name, {})])[0]
    shape, cut = None, None
    try:
        shape = search(tuning, policy_knobs, baseline_values)
    except stopping.Stopped as exc:
        cut = stopping.cut_short(exc)
    best = tuning.best()
    answer = {
        "objective": {"class": question.objective.cls, "metric": question.objective.key,
                      "minimize": question.objective.minimize, "text": question.objective.describe()},
        "constraints": [{"class": t.cls, "metric": t.key, "limit": t.limit, "text": t.describe()}
                        for t in constraints],
        "best": candidate_block(tuning, best),
        "baseline": candidate_block(tuning, baseline),
        "surface": shape,
        "candidates": [{"policy": c.policy, "values": c.values, "feasible": c.feasible,
                        "objective": c.objective if math.isfinite(c.objective) else None}
                       for c in sorted(tuning.seen.values(), key=lambda c: c.order)],
        "evaluations": len(tuning.seen), "runs": len(tuning.seen) * question.seeds,
        "seeds": question.seeds, "requests": question.requests,
        "wall_s": time.perf_counter() - started, "workers": workers(), "cut": cut,
    }
    answer["toml"] = policy_toml(answer["best"])
    answer["flat"] = flat(tuning)
    return answer


def flat(tuning: Tuning) -> bool:
    """True when the objective moved less than ``FLAT_SHARE`` over every feasible candidate: at this load the
    parameters make no difference worth tuning (typically the load is too low for requests to queue)."""
    values = [c.objective for c in tuning.seen.values() if c.feasible and math.isfinite(c.objective)]
    if len(values) < 2:
        return False
    low, high = min(values), max(values)
    return high - low <= FLAT_SHARE * max(abs(low), abs(high), 1e-12)
