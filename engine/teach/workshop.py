"""Workshop chapters: one trade-off each, as data a teacher edits without code.

A chapter is one TOML file in ``data/workshop`` (its file name, without ``.toml``, is its id and its link).
It holds the text and the experiment together::

    title, question          what the chapter asks
    preset, overrides        the scenario: a file of data/scenarios, changed by dotted overrides, at a load where
                             the effect is large (on the roofline step model: ``ROOM_OVERRIDES``)
    [prediction]             prompt, choices, answer (one of the choices): what the learner commits to first;
                             claims: the answer as checks (as in [see]) on what the chart draws, so that a test
                             runs the experiment and holds the answer to it: each claim's metric is one of the
                             chart's and its classes are drawn, its direction and factor say what the answer says
                             ("more than doubles": above = 2; "about the same": within = 1.1)
    [knob]                   label, path and values (one field; numbers sit on a numeric axis, a logarithmic one
                             when they span ``LOG_AXIS_SPAN`` times or more), or options = [{label,
                             set = {path = value}, unset = [path]}] (``unset``: the field goes back to its default,
                             e.g. none), drawn as named settings in their order
    [chart]                  metric (a key of engine.scenario.metric_table), or metrics = [up to three keys], one
                             panel each side by side (every figure the answer and [see] cite is drawn), and the
                             classes to draw; a fleet metric of the summary's system block draws the fleet;
                             log = [keys] draws those metrics on a log axis
    [see]                    text ("what you should see", with the reason) and checks that must hold on the
                             chart's runs: {metric, class, at, than, above = F, below = F or within = F}: the value
                             at knob option ``at`` is at least F times (above), at most 1/F times (below), or
                             between 1/F and F times (within) the value at ``than`` (of class ``than_class``,
                             by default the same)
    [exercise]               task, fields (paths the learner sets, optional label/min/max, and choices: a list,
                             or a table of value = "label" where the values are codes), goals
                             (``CLASS.METRIC=VALUE``, or ``system.METRIC=VALUE``; the metric's direction says
                             at most or at least), solution (values that meet every goal), start (optional: the
                             values the learner starts from, by default the scenario's), cards (optional: the
                             fleet must fit on at most this many whole cards, MIG slices counted by how many a card
                             holds); the start must miss at least one goal, so the exercise asks for a change

A chapter of ``kind = "rental"`` has no simulation: its knob is the hours of use a day and its chart what a month
of renting ``cards`` cards costs under each billing (``[rental]``: cards, hourly_offer, monthly_offer); its
exercise asks for the hours a day from which the annual prepay costs less than renting by the hour.

``load_chapters`` checks every file and says what is wrong in one line (file and field). Runs go through
``parallel.summaries`` (local cores, or the operator's cluster).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..decide.cost import BILLING_MODES, CNY_PER_USD_DEFAULT, HOURS_PER_MONTH, deployment_cost
from ..decide.targets import TARGET_METRICS, meets
from ..hardware.tables import is_slice, load_table
from ..scenario.config import (OVERALL, Arrival, Autoscale, Fleet, Policy, Scenario, Server, Speculative,
                               apply_overrides,
                               field_bounds, field_label, field_meta, fleet_servers, load_scenario, read_toml)
from ..scenario.errors import ScenarioError, excerpt
from ..scenario.metric_table import METRICS, SYSTEM_METRICS, metric, money_range
from ..scenario.origin import Origin
from ..scenario.summary import Summary
from ..scenario.table_names import DATA_ROOT
from ..sim.parallel import summaries
from ..sim.simulate import PRESET_DIR

WORKSHOP_DIR = DATA_ROOT / "workshop"
SYSTEM = "system"  # the goal and chart "class" of a fleet metric
MAX_PANELS = 3  # metrics one chapter's chart draws, one panel each
SYSTEM_KEYS = tuple(m.key for m in SYSTEM_METRICS)
RENTAL = "rental"
DAYS_PER_MONTH = HOURS_PER_MONTH / 24.0
RENTAL_MODES = ("by the hour", "monthly", "annual prepay")  # the rental chapter's lines
BREAKEVEN_TOLERANCE_H = 0.5  # hours a day: how close the rental exercise's answer must be
LOG_AXIS_SPAN = 20.0  # a numeric knob whose largest value is this many times its smallest sits on a log axis
RELATIONS = ("above", "below", "within")  # how a check compares its two values
# Where the learner's fields live (``section.field``), for their labels, units and bounds.
FIELD_CLASSES = {"server": Server, "server.speculative": Speculative, "policy": Policy, "fleet": Fleet,
                 "fleet.autoscale": Autoscale, "workload.arrival": Arrival}

# Every chapter times iterations with the roofline (not measured operator tables): each effect a chapter cites then
# follows from terms the Method page explains, and its numbers do not move when the kernel data is updated.
ROOM_OVERRIDES = ("server.kernel_tables=off",)


@dataclass(frozen=True)
class Option:
    """One setting of the chapter's knob: its label on the chart, the fields it sets, and its place on a numeric
    axis (``x``; None for a named setting)."""

    label: str
    values: Mapping[str, Any]
    x: float | None = None


@dataclass(frozen=True)
class Check:
    """A claim on the chart's runs (of "what you should see", or of the prediction's answer): ``metric`` of ``cls``
    at option ``at`` is at least ``factor`` times (``above``), at most 1/``factor`` times (``below``) or between
    1/``factor`` and ``factor`` times (``within``) the value of ``than_cls`` (by default the same class) at option
    ``than``."""

    metric: str
    cls: str
    at: str
    than: str
    factor: float
    relation: str
    than_cls: str

    def holds(self, mine: float | None, other: float | None) -> bool:
        """True when the claim holds between its two values; a missing value never holds."""
        if mine is None or other is None:
            return False
        if self.relation == "above":
            return mine >= self.factor * other
        if self.relation == "below":
            return mine * self.factor <= other
        return other <= self.factor * mine and mine <= self.factor * other

    def describe(self) -> str:
        """The claim in words: "offline Longest wait at strict priority >= 3 x its value at FIFO"."""
        label = self.metric if self.metric not in METRICS else metric(self.metric).label
        who = "" if self.cls == SYSTEM else f"{self.cls} "
        relation = {"above": f">= {self.factor:g} x", "below": f"<= 1/{self.factor:g} x",
                    "within": f"within {self.factor:g} x of"}[self.relation]
        other = "its value" if self.than_cls == self.cls else \
            ("the fleet's" if self.than_cls == SYSTEM else f"{self.than_cls}'s")
        return f"{who}{label} at {self.at} {relation} {other} at {self.than}"


@dataclass(frozen=True)
class Goal:
    """An exercise goal: ``metric`` of ``cls`` (a class, ``overall`` or ``system``) at most or at least ``limit``,
    as the metric's direction says; an unstable run never meets it."""

    cls: str
    metric: str
    limit: float

    @property
    def at_most(self) -> bool:
        return metric(self.metric).lower_is_better

    def value(self, summary: Summary) -> float | None:
        block = summary["system"] if self.cls == SYSTEM else \
            summary["overall"] if self.cls == OVERALL else summary["classes"][self.cls]
        return metric(self.metric).value(block)

    def met(self, summary: Summary) -> tuple[bool, float | None]:
        value = self.value(summary)
        return meets(value, self.limit, self.at_most, summary), value

    def describe(self) -> str:
        m = metric(self.metric)
        who = "" if self.cls == SYSTEM else f"{self.cls} "
        return f"{who}{m.label} {'at most' if self.at_most else 'at least'} {m.unit_text(self.limit)}"


@dataclass(frozen=True)
class Field:
    """A value the learner sets in the exercise: a dotted scenario path with its label and bounds."""

    path: str
    label: str
    unit: str
    low: float | None
    high: float | None
    choices: tuple | None
    choice_labels: Mapping[Any, str]  # the words shown for a choice that is a code (empty: shown as written)
    help: str
    owner: type | None  # the configuration class the path is a key of (None: a path of the chapter's own)


@dataclass(frozen=True)
class Rental:
    """The rental chapter's offers: ``cards`` cards by the hour through one offer, by the month through another."""

    cards: int
    hourly_offer: str
    monthly_offer: str
    currency: str


@dataclass(frozen=True)
class Chapter:
    """One chapter, as its file says (``load_chapter``)."""

    id: str
    title: str
    question: str
    kind: str
    scenario: dict | None          # the preset with the overrides applied (plain data); None for a rental chapter
    prompt: str
    choices: tuple[str, ...]
    answer: str
    claims: tuple[Check, ...]      # the answer, as checks on what the chart draws
    knob_label: str
    options: tuple[Option, ...]
    chart_metrics: tuple[str, ...]  # one panel each
    chart_classes: tuple[str, ...]
    see: str
    checks: tuple[Check, ...]
    task: str
    fields: tuple[Field, ...]
    goals: tuple[Goal, ...]
    solution: Mapping[str, Any]
    start: Mapping[str, Any]
    cards: int | None              # the exercise's fleet must fit on this many whole cards
    rental: Rental | None
    chart_log: tuple[str, ...] = ()  # metrics drawn on a log axis (values spanning orders of magnitude)

    def option(self, label: str) -> Option:
        return next(o for o in self.options if o.label == label)

    @property
    def numeric(self) -> bool:
        """Whether the knob's settings are numbers, drawn on a numeric axis."""
        return all(o.x is not None for o in self.options)

    @property
    def log_axis(self) -> bool:
        """Whether the numeric knob's values span ``LOG_AXIS_SPAN`` times or more (all above zero): a log axis
        spaces 1, 4, 16, 64, 256 evenly where a linear one would crowd the first four."""
        xs = [o.x for o in self.options]
        return self.numeric and min(xs) > 0 and max(xs) >= LOG_AXIS_SPAN * min(xs)

    def series(self, key: str) -> tuple[str, ...]:
        """The series the chart draws for metric ``key``: the fleet for a fleet metric (and the rental chapter's
        billings), else the chapter's classes."""
        if self.kind == RENTAL:
            return RENTAL_MODES
        return (SYSTEM,) if key in SYSTEM_KEYS else self.chart_classes

    def scenario_with(self, values: Mapping[str, Any]) -> dict:
        """The chapter's scenario with ``values`` set (``scenario_with``)."""
        return scenario_with(self.scenario, values)

    def start_values(self) -> dict[str, Any]:
        """What the learner starts from: the exercise's ``start`` values, else the fields' values in the chapter's
        scenario."""
        if self.start:
            return dict(self.start)
        typed = load_scenario(self.scenario)
        return {f.path: _typed_value(typed, f.path) for f in self.fields}


def scenario_with(scenario: dict, values: Mapping[str, Any]) -> dict:
    """``scenario`` (plain data) with ``values`` (path -> value) set; None removes the key, so the field takes its
    default (an optional field's "none")."""
    data = apply_overrides(scenario, {path: value for path, value in values.items() if value is not None})
    for path in (path for path, value in values.items() if value is None):
        *parents, last = path.split(".")
        node = apply_overrides(data, {})  # a copy to walk
        table = node
        for part in parents:
            table = table.get(part, {}) if isinstance(table, dict) else {}
        if isinstance(table, dict):
            table.pop(last, None)
        data = node
    return data


def _typed_value(typed: Any, path: str) -> Any:
    """The value at dotted ``path`` of the typed scenario (a list entry by its index: ``fleet.groups.0.gpu``)."""
    node = typed
    for part in path.split("."):
        if isinstance(node, tuple):
            node = node[int(part)]
        else:
            node = node.get(part) if isinstance(node, Mapping) else getattr(node, part)
    return node


class _Reader:
    """Reads one chapter file's table, each error one line naming the file and the field."""

    def __init__(self, name: str, table: Mapping[str, Any]) -> None:
        self.name, self.table = name, table

    def fail(self, field: str, why: str) -> ScenarioError:
        return ScenarioError(f"data/workshop/{self.name}.toml: {field} {why}")

    def get(self, table: Mapping[str, Any], key: str, kind: type | tuple, where: str, default: Any = ...) -> Any:
        if key not in table:
            if default is ...:
                raise self.fail(f"{where}{key}", "is missing")
            return default
        value = table[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind in (int, float, (int, float)):
            raise self.fail(f"{where}{key}", f"= {excerpt(value)} has the wrong type")
        return value

    def section(self, key: str, required: bool = True) -> Mapping[str, Any]:
        return self.get(self.table, key, dict, "", None if not required else ...) or {}


def _field(reader: _Reader, spec: Mapping[str, Any], where: str) -> Field:
    """An exercise field: a configuration key takes its label, unit, bounds and choices from the configuration's
    metadata (``min``, ``max``, ``label`` in the file override them); any other path must give a label."""
    path = reader.get(spec, "path", str, where)
    section, _, name = path.rpartition(".")
    owner = FIELD_CLASSES.get(section)
    meta: dict = {}
    if owner is not None and name in {f.name for f in dataclasses.fields(owner)}:
        _, meta, _ = field_meta(owner, name)
    else:
        owner = None
        if "label" not in spec:
            raise reader.fail(f"{where}label", f"is missing: {path} is not a configuration key; give it a label")
    low, high = field_bounds(meta)
    low = reader.get(spec, "min", (int, float), where, low)
    high = reader.get(spec, "max", (int, float), where, high)
    label = reader.get(spec, "label", str, where, None) or field_label(owner, name)
    choices = reader.get(spec, "choices", (list, dict), where, None) or meta.get("choices")
    labels = dict(choices) if isinstance(choices, dict) else {}
    return Field(path, label, meta.get("unit", ""), low, high, tuple(choices) if choices else None, labels,
                 meta.get("help", ""), owner)


def _options(reader: _Reader, knob: Mapping[str, Any]) -> tuple[Option, ...]:
    if "options" in knob:
        options = []
        for i, spec in enumerate(reader.get(knob, "options", list, "knob.")):
            where = f"knob.options[{i}]."
            if not isinstance(spec, dict):
                raise reader.fail(where[:-1], "must be a table {label, set, unset}")
            values = dict(reader.get(spec, "set", dict, where, {}))
            for path in reader.get(spec, "unset", list, where, []):  # back to the field's default (none)
                values[path] = None
            if not values:
                raise reader.fail(where[:-1], "sets nothing: give set = {path = value} or unset = [path]")
            options.append(Option(reader.get(spec, "label", str, where), values))
    else:
        path = reader.get(knob, "path", str, "knob.")
        options = [Option(_label(value), {path: value}, float(value) if _is_number(value) else None)
                   for value in reader.get(knob, "values", list, "knob.")]
    if len(options) < 2 or len({o.label for o in options}) != len(options):
        raise reader.fail("knob", "needs at least two settings with different labels")
    return tuple(options)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _label(value: Any) -> str:
    """A knob value as the chart and the checks name it: numbers with thousands separators ("16,384", "0.5")."""
    return f"{value:,g}" if _is_number(value) else str(value)


def _class_of(reader: _Reader, cls: str, key: str, classes: list[str], where: str) -> None:
    """The metric ``key`` must be one that ``cls`` has: a class metric of a class or ``overall``, or a fleet
    metric of ``system``."""
    if cls == SYSTEM:
        if key not in SYSTEM_KEYS:
            raise reader.fail(where, f"{key!r} is not a fleet metric; use one of {', '.join(SYSTEM_KEYS)}")
        return
    if key not in TARGET_METRICS:
        raise reader.fail(where, f"{key!r} is not a class metric; use one of {', '.join(TARGET_METRICS)}")
    if cls != OVERALL and cls not in classes:
        raise reader.fail(where, f"class {cls!r} is not a class of the scenario ({', '.join(classes)}, {OVERALL})")


def _goal(reader: _Reader, text: str, classes: list[str], where: str) -> Goal:
    left, equals, right = text.partition("=")
    cls, dot, key = left.strip().rpartition(".")
    try:
        limit = float(right)
    except ValueError:
        limit = math.nan
    if not equals or not dot or not math.isfinite(limit):
        raise reader.fail(where, f"= {excerpt(text)} must look like CLASS.METRIC=VALUE (or system.METRIC=VALUE)")
    _class_of(reader, cls, key.strip(), classes, where)
    return Goal(cls, key.strip(), limit)


def _checks(reader: _Reader, specs: list, where: str, kind: str, classes: list[str],
            labels: set[str]) -> list[Check]:
    """The checks of ``[see]`` or the claims of ``[prediction]`` (``where``: their key, for the error line): each
    compares two of the knob's settings by one relation, on a metric the classes have."""
    checks = []
    for i, spec in enumerate(specs):
        here = f"{where}[{i}]."
        if not isinstance(spec, dict):
            raise reader.fail(here[:-1], "must be a table")
        given = [relation for relation in RELATIONS if relation in spec]
        if len(given) != 1:
            raise reader.fail(here[:-1], "needs exactly one of above = FACTOR, below = FACTOR or within = FACTOR")
        factor = reader.get(spec, given[0], (int, float), here)
        if factor < 1:
            raise reader.fail(f"{here}{given[0]}", f"= {factor:g} must be at least 1 (a factor between two values)")
        cls = reader.get(spec, "class", str, here, SYSTEM)
        check = Check(reader.get(spec, "metric", str, here), cls, reader.get(spec, "at", str, here),
                      reader.get(spec, "than", str, here), float(factor), given[0],
                      reader.get(spec, "than_class", str, here, cls))
        if {check.at, check.than} - labels:
            raise reader.fail(here[:-1], f"compares {check.at!r} and {check.than!r}; the knob's settings are "
                                         f"{', '.join(sorted(labels))}")
        for series in (check.cls, check.than_cls):
            if kind == RENTAL:
                if series not in RENTAL_MODES:
                    raise reader.fail(f"{here}class", f"must be one of {', '.join(RENTAL_MODES)}")
            else:
                _class_of(reader, series, check.metric, classes, here[:-1])
        checks.append(check)
    return checks


def _drawn(reader: _Reader, chapter: Chapter) -> None:
    """Every claim of the answer and every figure "what you should see" cites is about what the chart draws: one of
    its metrics, for classes it shows (a rental chapter's checks: the billings it draws)."""
    for where, checks in (("prediction.claims", chapter.claims), ("see.checks", chapter.checks)):
        for i, check in enumerate(checks):
            if check.metric not in chapter.chart_metrics:
                raise reader.fail(f"{where}[{i}].metric", f"= {check.metric!r} is not drawn: the chart shows "
                                                          f"{', '.join(chapter.chart_metrics)}")
            missing = {check.cls, check.than_cls} - set(chapter.series(check.metric))
            if missing:
                raise reader.fail(f"{where}[{i}].class", f"= {sorted(missing)[0]!r} is not drawn for "
                                                         f"{check.metric}: the chart shows "
                                                         f"{', '.join(chapter.series(check.metric))}")


def load_chapter(path: Path) -> Chapter:
    """The chapter in ``path``; ``ScenarioError`` naming the file and field when anything in it is wrong."""
    name = path.stem
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ScenarioError(f"data/workshop/{name}.toml is not valid TOML: {error}") from None
    r = _Reader(name, table)
    kind = r.get(table, "kind", str, "", "simulation")
    if kind not in ("simulation", RENTAL):
        raise r.fail("kind", f"= {excerpt(kind)} must be simulation or {RENTAL}")
    prediction, knob, chart, see, exercise = (r.section(k) for k in ("prediction", "knob", "chart", "see",
                                                                      "exercise"))
    choices = tuple(r.get(prediction, "choices", list, "prediction."))
    answer = r.get(prediction, "answer", str, "prediction.")
    if answer not in choices:
        raise r.fail("prediction.answer", f"= {excerpt(answer)} is not one of the choices")
    options = _options(r, knob)
    labels = {o.label for o in options}
    scenario, rental, classes = None, None, []
    if kind == RENTAL:
        spec = r.section(RENTAL)
        rental = Rental(r.get(spec, "cards", int, "rental."), r.get(spec, "hourly_offer", str, "rental."),
                        r.get(spec, "monthly_offer", str, "rental."), r.get(spec, "currency", str, "rental.", "USD"))
        try:
            for offer in (rental.hourly_offer, rental.monthly_offer):
                deployment_cost(offer, rental.cards, BILLING_MODES[0], rental.currency, CNY_PER_USD_DEFAULT)
        except ScenarioError as error:
            raise r.fail("rental", f"is wrong: {error}") from None
    else:
        preset = PRESET_DIR / f"{r.get(table, 'preset', str, '')}.toml"
        if not preset.is_file():
            raise r.fail("preset", f"= {excerpt(preset.stem)} is not a file of data/scenarios")
        try:
            scenario = apply_overrides(read_toml(preset), [*ROOM_OVERRIDES,
                                                           *r.get(table, "overrides", list, "", [])])
            typed = load_scenario(scenario)
            for option in options:
                load_scenario(scenario_with(scenario, option.values))
        except ScenarioError as error:
            raise r.fail("overrides or knob", f"give a scenario that does not load: {error}") from None
        classes = [c.name for c in typed.workload.classes]
    if "metric" in chart and "metrics" in chart:
        raise r.fail("chart", "gives both metric and metrics; give one")
    chart_metrics = tuple(r.get(chart, "metrics", list, "chart.")) if "metrics" in chart else \
        (r.get(chart, "metric", str, "chart."),)
    if not 1 <= len(chart_metrics) <= MAX_PANELS or len(set(chart_metrics)) != len(chart_metrics):
        raise r.fail("chart.metrics", f"must name one to {MAX_PANELS} different metrics (one panel each)")
    chart_classes = tuple(r.get(chart, "classes", list, "chart.", []))
    chart_log = tuple(r.get(chart, "log", list, "chart.", []))
    if not set(chart_log) <= set(chart_metrics):
        raise r.fail("chart.log", f"must name metrics the chart draws ({', '.join(chart_metrics)})")
    if kind != RENTAL:
        for key in chart_metrics:
            for cls in chart_classes if key not in SYSTEM_KEYS else (SYSTEM,):
                _class_of(r, cls, key, classes, "chart")
        if chart_classes and all(key in SYSTEM_KEYS for key in chart_metrics):
            raise r.fail("chart.classes", "are not drawn: every metric of the chart is a fleet metric")
    checks = _checks(r, r.get(see, "checks", list, "see."), "see.checks", kind, classes, labels)
    if not checks:
        raise r.fail("see.checks", "must hold at least one check: what the learner should see, as a test")
    claims = _checks(r, r.get(prediction, "claims", list, "prediction."), "prediction.claims", kind, classes, labels)
    if not claims:
        raise r.fail("prediction.claims", "must hold at least one claim: the answer, as a test")
    fields = tuple(_field(r, spec if isinstance(spec, dict) else {"path": spec}, f"exercise.fields[{i}].")
                   for i, spec in enumerate(r.get(exercise, "fields", list, "exercise.")))
    goals = tuple(_goal(r, text, classes, f"exercise.goals[{i}]")
                  for i, text in enumerate(r.get(exercise, "goals", list, "exercise.", [])))
    solution = r.get(exercise, "solution", dict, "exercise.")
    start = r.get(exercise, "start", dict, "exercise.", {})
    for key, values in (("solution", solution), ("start", start)):
        if (values or key == "solution") and set(values) != {f.path for f in fields}:
            raise r.fail(f"exercise.{key}", f"must set exactly the fields {', '.join(f.path for f in fields)}")
    if kind == RENTAL and not start:
        raise r.fail("exercise.start", "is missing: a rental exercise has no scenario to start from")
    if kind != RENTAL and not goals:
        raise r.fail("exercise.goals", "must hold at least one goal")
    chapter = Chapter(name, r.get(table, "title", str, ""), r.get(table, "question", str, ""), kind, scenario,
                      r.get(prediction, "prompt", str, "prediction."), choices, answer, tuple(claims),
                      r.get(knob, "label", str, "knob."), options, chart_metrics, chart_classes,
                      r.get(see, "text", str, "see."), tuple(checks), r.get(exercise, "task", str, "exercise."),
                      fields, goals, solution, start, r.get(exercise, "cards", int, "exercise.", None), rental,
                      chart_log)
    _drawn(r, chapter)
    _among_choices(r, chapter)
    return chapter


def _among_choices(reader: _Reader, chapter: Chapter) -> None:
    """The exercise's solution and start give a field with choices one of its choices (the learner's input
    offers only those)."""
    for key, values in (("solution", chapter.solution), ("start", chapter.start_values())):
        for f in chapter.fields:
            if f.choices and values[f.path] not in f.choices:
                raise reader.fail(f"exercise.{key}", f"gives {f.path} = {excerpt(values[f.path])}, not one of its "
                                                     f"choices ({', '.join(map(str, f.choices))})")


def chapter_paths(folder: Path = WORKSHOP_DIR) -> list[Path]:
    return sorted(folder.glob("*.toml"))


@functools.lru_cache(maxsize=4)
def _load_all(folder: Path, stamp: tuple) -> tuple[Chapter, ...]:
    return tuple(load_chapter(path) for path in chapter_paths(folder))


def load_chapters(folder: Path = WORKSHOP_DIR) -> tuple[Chapter, ...]:
    """Every chapter in ``folder``, in file-name order (read again when a file changes)."""
    stamp = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in chapter_paths(folder))
    return _load_all(folder, stamp)


# --------------------------------------------------------------------------- running a chapter


def rental_costs(chapter: Chapter, hours_per_day: float, cny_per_usd: float) -> dict[str, tuple[float, float]]:
    """A month of the rental chapter's cards at ``hours_per_day`` of use: (low, high) in its currency per
    billing, by the hour paying only the hours used, monthly and annual prepay paying the whole month."""
    rental = chapter.rental
    hourly = deployment_cost(rental.hourly_offer, rental.cards, BILLING_MODES[0], rental.currency, cny_per_usd)
    monthly = deployment_cost(rental.monthly_offer, rental.cards, BILLING_MODES[0], rental.currency, cny_per_usd)
    annual = deployment_cost(rental.monthly_offer, rental.cards, BILLING_MODES[1], rental.currency, cny_per_usd)
    used_h = hours_per_day * DAYS_PER_MONTH
    return dict(zip(RENTAL_MODES, (tuple(p * used_h for p in hourly.per_hour), monthly.per_month, annual.per_month)))


def breakeven_hours_per_day(chapter: Chapter, cny_per_usd: float) -> float:
    """Hours of use a day from which the annual prepay costs less than renting by the hour (low ends of both)."""
    rental = chapter.rental
    hourly = deployment_cost(rental.hourly_offer, rental.cards, BILLING_MODES[0], rental.currency, cny_per_usd)
    annual = deployment_cost(rental.monthly_offer, rental.cards, BILLING_MODES[1], rental.currency, cny_per_usd)
    return annual.per_month[0] / (hourly.per_hour[0] * DAYS_PER_MONTH)


def run_options(chapter: Chapter, origin: Origin = Origin(),
                progress: Callable[[int, int], None] | None = None) -> dict[str, Summary]:
    """The summary of the chapter's scenario at each knob setting (label -> summary)."""
    datas = [chapter.scenario_with(option.values) for option in chapter.options]
    return dict(zip((o.label for o in chapter.options), summaries(datas, origin, progress)))


def chart_values(chapter: Chapter, runs: Mapping[str, Summary], cny_per_usd: float = CNY_PER_USD_DEFAULT
                 ) -> dict[str, dict[str, dict[str, float | None]]]:
    """The chart's values, one panel per metric: metric -> series (a class, ``system`` or a billing) -> knob
    label -> value. A rental chapter's values are the low end of each billing's monthly cost (``runs`` unused)."""
    if chapter.kind == RENTAL:
        costs = {o.label: rental_costs(chapter, o.x, cny_per_usd) for o in chapter.options}
        return {chapter.chart_metrics[0]: {mode: {label: costs[label][mode][0] for label in costs}
                                           for mode in RENTAL_MODES}}
    return {key: {cls: {label: Goal(cls, key, 0.0).value(summary) for label, summary in runs.items()}
                  for cls in chapter.series(key)}
            for key in chapter.chart_metrics}


def check_values(chapter: Chapter, check: Check, runs: Mapping[str, Summary], cny_per_usd: float = CNY_PER_USD_DEFAULT
                 ) -> tuple[float | None, float | None]:
    """The two values ``check`` compares: its class at its option, the other class at the other option."""
    if chapter.kind == RENTAL:
        values = chart_values(chapter, runs, cny_per_usd)[check.metric]
        return values[check.cls][check.at], values[check.than_cls][check.than]
    return tuple(Goal(cls, check.metric, 0.0).value(runs[label]) if label in runs else None
                 for cls, label in ((check.cls, check.at), (check.than_cls, check.than)))


def effect_text(chapter: Chapter, runs: Mapping[str, Summary], cny_per_usd: float = CNY_PER_USD_DEFAULT) -> str:
    """What the chapter shows, from its runs: each figure "what you should see" cites, at the setting it is compared
    with and at the one it is about ("offline Longest wait 1.88 s at FIFO, 6.33 s at strict priority"); the
    manual's table of chapters is these lines, so it never goes stale."""
    def who(cls: str) -> str:
        return "" if cls == SYSTEM else f"{cls} "

    parts = []
    for check in chapter.checks:
        at, than = check_values(chapter, check, runs, cny_per_usd)
        if chapter.kind == RENTAL:
            label = ""
            def shown(v): return "—" if v is None else money_range((v, v), chapter.rental.currency)
        else:
            m = metric(check.metric)
            label = (m.label if m.label[:2].isupper() else m.label[0].lower() + m.label[1:]) + " "  # TTFT, output
            shown = m.unit_text
        again = "" if check.cls == check.than_cls else f"{who(check.cls)}{label}"
        parts.append(f"{who(check.than_cls)}{label}{shown(than)} at {check.than}, {again}{shown(at)} at {check.at}")
    return "; ".join(parts)


def checks_hold(chapter: Chapter, runs: Mapping[str, Summary],
                cny_per_usd: float = CNY_PER_USD_DEFAULT) -> list[tuple[Check, bool]]:
    """Each check of "what you should see" and whether it holds on ``runs``."""
    return [(check, check.holds(*check_values(chapter, check, runs, cny_per_usd))) for check in chapter.checks]


@dataclass(frozen=True)
class Verdict:
    """The exercise checked on the learner's values: each goal met or not, with the value it reached."""

    goals: tuple[tuple[str, bool, str], ...]   # (goal in words, met, the value reached in words)
    unstable: bool

    @property
    def solved(self) -> bool:
        return all(met for _, met, _ in self.goals)


def whole_cards(typed: Scenario) -> int:
    """Whole cards a fleet occupies: tensor parallel x replicas, or for slices as many cards as hold them, summed
    over a mixed fleet's groups."""
    cards = 0
    for server, replicas in fleet_servers(typed):
        if is_slice(server.gpu):
            cards += math.ceil(replicas / int(load_table("gpu_slices").loc[server.gpu, "max_per_card"]))
        else:
            cards += server.tensor_parallel * replicas
    return cards


def check_rental(chapter: Chapter, values: Mapping[str, Any], cny_per_usd: float = CNY_PER_USD_DEFAULT) -> Verdict:
    """The rental exercise: the hours a day given against the break-even, within ``BREAKEVEN_TOLERANCE_H``."""
    hours = given(chapter, values)[chapter.fields[0].path]
    breakeven = breakeven_hours_per_day(chapter, cny_per_usd)
    met = abs(float(hours) - breakeven) <= BREAKEVEN_TOLERANCE_H
    side = "" if met else f", {'above' if hours > breakeven else 'below'} it"
    return Verdict(((f"within {BREAKEVEN_TOLERANCE_H:g} h of the break-even", met, f"{float(hours):g} h a day{side}"),),
                   False)


def given(chapter: Chapter, values: Mapping[str, Any]) -> Mapping[str, Any]:
    """``values`` when it gives every exercise field (None only for an optional configuration key), else
    ``ScenarioError`` naming the first one missing."""
    for f in chapter.fields:
        if f.path not in values or values[f.path] is None and f.owner is None:
            raise ScenarioError(f"{f.label}: give a value")
    return values


def judge(chapter: Chapter, data: dict, summary: Summary) -> Verdict:
    """The exercise's goals on ``summary``, the run of ``data`` (``scenario_with`` the learner's values), and the
    fleet's size against the exercise's cards."""
    results = []
    if chapter.cards is not None:
        used = whole_cards(load_scenario(data))
        results.append((f"fits on {chapter.cards} card{'s' if chapter.cards != 1 else ''}", used <= chapter.cards,
                        f"{used} card{'s' if used != 1 else ''}"))
    for goal in chapter.goals:
        met, value = goal.met(summary)
        results.append((goal.describe(), met, metric(goal.metric).unit_text(value)))
    return Verdict(tuple(results), bool(summary["system"]["unstable"]))


def check_exercise(chapter: Chapter, values: Mapping[str, Any], origin: Origin = Origin(),
                   cny_per_usd: float = CNY_PER_USD_DEFAULT) -> Verdict:
    """Run the chapter's scenario with the learner's ``values`` and judge every goal (``judge``); a rental
    chapter: ``check_rental``."""
    if chapter.kind == RENTAL:
        return check_rental(chapter, values, cny_per_usd)
    data = chapter.scenario_with(given(chapter, values))
    return judge(chapter, data, summaries([data], origin)[0])
