"""Workshop chapters (``engine.teach.workshop``, ``data/workshop``): every chapter loads, what each says the learner
should see holds on its runs, its exercise is wrong as given and right with its solution, and a broken chapter
file is one line naming the file and the field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.decide.cost import CNY_PER_USD_DEFAULT, HOURS_PER_MONTH
from engine.hardware.tables import load_table
from engine.scenario.errors import ScenarioError
from engine.scenario.metric_table import metric
from engine.teach import workshop

CHAPTERS = {c.id: c for c in workshop.load_chapters()}
TOPICS = ("continuous-batching", "prefill", "head-of-line", "priority", "aging", "wfq", "dynamic", "sjf",
          "min-batch", "kv", "preemption", "tp-vs-dp", "mig", "rental", "speculative", "mixed-fleets",
          "disaggregation", "prefix-caching")


def test_there_are_at_least_ten_chapters_covering_every_topic():
    assert len(CHAPTERS) >= 10
    for topic in TOPICS:
        assert any(topic in cid for cid in CHAPTERS), topic


@pytest.mark.parametrize("cid", sorted(CHAPTERS))
def test_what_you_should_see_holds(cid):
    chapter = CHAPTERS[cid]
    runs = {} if chapter.kind == workshop.RENTAL else workshop.run_options(chapter)
    failed = [check.describe() for check, holds in workshop.checks_hold(chapter, runs) if not holds]
    assert not failed, failed


@pytest.mark.parametrize("cid", sorted(CHAPTERS))
def test_the_exercise_starts_wrong_and_its_solution_is_right(cid):
    chapter = CHAPTERS[cid]
    assert not workshop.check_exercise(chapter, chapter.start_values()).solved
    verdict = workshop.check_exercise(chapter, chapter.solution)
    assert verdict.solved, verdict.goals


def test_the_prediction_answer_is_one_of_the_choices_and_not_always_the_same_place():
    assert all(c.answer in c.choices for c in CHAPTERS.values())
    assert len({c.choices.index(c.answer) for c in CHAPTERS.values()}) >= 2


def test_rental_break_even_by_hand():
    """Annual prepay of the monthly offer's low price over the hourly offer's low price per card: from
    offers.csv directly."""
    chapter = next(c for c in CHAPTERS.values() if c.kind == workshop.RENTAL)
    offers = load_table("offers")
    monthly, hourly = offers.loc[chapter.rental.monthly_offer], offers.loc[chapter.rental.hourly_offer]
    units = chapter.rental.cards / monthly["gpus_per_unit"]
    annual_usd = units * monthly["price_low"] * (1 - monthly["annual_discount"]) / CNY_PER_USD_DEFAULT
    hourly_usd = chapter.rental.cards / hourly["gpus_per_unit"] * hourly["price_low"]
    expected = annual_usd / (hourly_usd * HOURS_PER_MONTH / 24)
    assert workshop.breakeven_hours_per_day(chapter, CNY_PER_USD_DEFAULT) == pytest.approx(expected, rel=1e-12)
    costs = workshop.rental_costs(chapter, expected, CNY_PER_USD_DEFAULT)
    assert costs["by the hour"][0] == pytest.approx(costs["annual prepay"][0], rel=1e-12)
    near = workshop.check_rental(chapter, {"hours_per_day": expected + 0.4})
    far = workshop.check_rental(chapter, {"hours_per_day": expected + 0.6})
    assert near.solved and not far.solved


def test_a_check_compares_two_values_by_its_factor():
    above, below, within = (workshop.Check("ttft_p99_ms", "a", "x", "y", 2.0, relation, "a")
                            for relation in workshop.RELATIONS)
    assert above.holds(4.0, 2.0) and not above.holds(3.9, 2.0)
    assert below.holds(1.0, 2.0) and not below.holds(1.1, 2.0)
    assert within.holds(4.0, 2.0) and within.holds(1.0, 2.0) and not within.holds(4.1, 2.0)
    assert not within.holds(0.9, 2.0)
    assert not above.holds(None, 2.0) and not below.holds(1.0, None)
    assert within.describe() == "a TTFT p99 at x within 2 x of its value at y"


def test_a_numeric_knob_sits_on_a_numeric_axis_a_wide_one_on_a_log_axis():
    chapters = {c.id: c for c in workshop.load_chapters()}
    batch, rental, policies = (chapters[i] for i in ("01-continuous-batching", "14-rental-terms",
                                                      "04-strict-priority"))
    assert [o.x for o in batch.options] == [1, 4, 16, 64, 256] and batch.numeric and batch.log_axis
    assert rental.numeric and not rental.log_axis, "2 to 24 hours: a linear cost must look linear"
    assert not policies.numeric and not policies.log_axis
    assert [o.label for o in chapters["07-dynamic-cost"].options] == ["60,000", "20,000", "5,000", "1,000"]


def test_a_goal_reads_its_metric_direction_and_an_unstable_run_never_meets_it():
    summary = {"classes": {"a": {"ttft_ms": {"p99": 900.0}, "output_tokens_per_s": 100.0}},
               "system": {"unstable": False, "compute_util_frac": 0.5}, "overall": {}}
    assert workshop.Goal("a", "ttft_p99_ms", 1000.0).met(summary) == (True, 900.0)
    assert workshop.Goal("a", "output_tokens_per_s", 120.0).met(summary) == (False, 100.0)
    assert workshop.Goal(workshop.SYSTEM, "compute_util_frac", 0.4).met(summary) == (True, 0.5)
    summary["system"]["unstable"] = True
    assert workshop.Goal("a", "ttft_p99_ms", 1000.0).met(summary)[0] is False


def test_an_exercise_with_a_card_budget_refuses_a_bigger_fleet():
    chapter = next(c for c in CHAPTERS.values() if c.cards == 8)
    verdict = workshop.check_exercise(chapter, {"server.tensor_parallel": 2, "fleet.replicas": 8})
    assert ("fits on 8 cards", False, "16 cards") in verdict.goals and not verdict.solved


def test_an_optional_field_left_empty_takes_its_default():
    chapter = next(c for c in CHAPTERS.values() if any(f.path == "policy.max_wait_ms" for f in c.fields))
    data = chapter.scenario_with({"policy.max_wait_ms": None, "policy.aging_per_s": 0.0})
    assert "max_wait_ms" not in data["policy"]


def broken(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """A copy of the chapters with one text replaced in chapter ``name``."""
    folder = tmp_path / "workshop"
    shutil.copytree(workshop.WORKSHOP_DIR, folder)
    path = folder / f"{name}.toml"
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    return folder


@pytest.mark.parametrize("old, new, message", [
    ('metrics = ["longest_wait_ms", "ttft_p99_ms"]\nclasses', 'metrics = ["longest_waits", "ttft_p99_ms"]\nclasses',
     "chart 'longest_waits' is not a class metric"),
    ('classes = ["interactive", "offline"]', 'classes = ["interactive", "vip"]', "class 'vip' is not a class"),
    ('at = "strict priority"', 'at = "edf"', "knob's settings are FIFO, strict priority"),
    ('answer = "grows several-fold"', 'answer = "explodes"', "prediction.answer = 'explodes' is not one of"),
    ('solution = { "workload.arrival.rate_per_s" = 38.0 }', 'solution = {}', "exercise.solution must set exactly"),
    ('preset = "article_mixed_8xa100"', 'preset = "nowhere"', "preset = 'nowhere' is not a file of data/scenarios"),
    ('goals = ["offline.longest_wait_ms=2000"', 'goals = ["offline.longest_wait_ms<2000"',
     "must look like CLASS.METRIC=VALUE"),
    ('title = "Strict priority and starvation"', 'title = 12', "title = 12 has the wrong type"),
    ('set = { "policy.name" = "priority" }', 'set = { "policy.name" = "lottery" }',
     "give a scenario that does not load"),
    ('[see]', '[see\n', "is not valid TOML"),
    ('set = { "policy.name" = "priority" }', 'unset = []', "knob.options[1] sets nothing: give set"),
    ('[[prediction.claims]]\nmetric = "longest_wait_ms"', '[[prediction.ignored]]\nmetric = "longest_wait_ms"',
     "prediction.claims is missing"),
    ('[[prediction.claims]]\nmetric = "longest_wait_ms"\nclass = "offline"\nat = "strict priority"\nthan = "FIFO"\n'
     'above = 3.0', 'claims = []', "prediction.claims must hold at least one claim: the answer, as a test"),
    ('metric = "longest_wait_ms"\nclass = "offline"\nat = "strict priority"\nthan = "FIFO"\nabove = 3.0\n\n[knob]',
     'metric = "e2e_p99_ms"\nclass = "offline"\nat = "strict priority"\nthan = "FIFO"\nabove = 3.0\n\n[knob]',
     "prediction.claims[0].metric = 'e2e_p99_ms' is not drawn: the chart shows longest_wait_ms, ttft_p99_ms"),
    ('metrics = ["longest_wait_ms", "ttft_p99_ms"]', 'metrics = ["longest_wait_ms"]',
     "see.checks[1].metric = 'ttft_p99_ms' is not drawn: the chart shows longest_wait_ms"),
    ('classes = ["interactive", "offline"]', 'classes = ["interactive"]',
     "prediction.claims[0].class = 'offline' is not drawn for longest_wait_ms: the chart shows interactive"),
    ('than = "FIFO"\nabove = 3.0\n\n[knob]', 'than = "FIFO"\nabove = 3.0\nwithin = 2.0\n\n[knob]',
     "prediction.claims[0] needs exactly one of above = FACTOR, below = FACTOR or within = FACTOR"),
    ('than = "FIFO"\nabove = 3.0\n\n[knob]', 'than = "FIFO"\nabove = 0.5\n\n[knob]',
     "prediction.claims[0].above = 0.5 must be at least 1"),
    ('metrics = ["longest_wait_ms", "ttft_p99_ms"]\nclasses',
     'metric = "longest_wait_ms"\nmetrics = ["ttft_p99_ms"]\nclasses', "chart gives both metric and metrics"),
    ('metrics = ["longest_wait_ms", "ttft_p99_ms"]\nclasses',
     'metrics = ["longest_wait_ms", "longest_wait_ms"]\nclasses', "chart.metrics must name one to 3 different metrics"),
    ('metrics = ["longest_wait_ms", "ttft_p99_ms"]\nclasses', 'metric = "compute_util_frac"\nclasses',
     "chart.classes are not drawn: every metric of the chart is a fleet metric"),
    ('metrics = ["longest_wait_ms", "ttft_p99_ms"]\nclasses', 'metrics = ["longest_wait_ms", "ttft_p99_ms"]\n'
     'log = ["e2e_p99_ms"]\nclasses', "chart.log must name metrics the chart draws"),
])
def test_a_broken_chapter_is_one_line_naming_file_and_field(tmp_path, old, new, message):
    folder = broken(tmp_path, "04-strict-priority", old, new)
    with pytest.raises(ScenarioError) as raised:
        workshop.load_chapters(folder)
    text = str(raised.value)
    assert text.startswith("data/workshop/04-strict-priority.toml") and message in text and "\n" not in text, text


def test_a_rental_check_compares_the_billings_the_chart_draws(tmp_path):
    folder = broken(tmp_path, "14-rental-terms", 'metric = "monthly cost"\nclass = "annual prepay"',
                    'metric = "yearly cost"\nclass = "annual prepay"')
    with pytest.raises(ScenarioError, match=r"see.checks\[0\].metric = 'yearly cost' is not drawn"):
        workshop.load_chapters(folder)


@pytest.mark.parametrize("old, new, key", [
    ('solution = { "server.gpu" = "H100-80G-MIG-2g.20gb"', 'solution = { "server.gpu" = "H100-80G"', "solution"),
    ('"server.gpu=H100-80G-MIG-1g.10gb"', '"server.gpu=H100-80G"', "start"),
])
def test_an_exercise_starts_and_ends_among_its_choices(tmp_path, old, new, key):
    folder = broken(tmp_path, "13-mig-slices", old, new)
    with pytest.raises(ScenarioError, match=rf"exercise.{key} gives server.gpu = '.*', not one of its choices"):
        workshop.load_chapters(folder)


def test_a_teacher_adds_a_chapter_without_code(tmp_path):
    folder = tmp_path / "workshop"
    shutil.copytree(workshop.WORKSHOP_DIR, folder)
    source = (folder / "04-strict-priority.toml").read_text()
    (folder / "99-my-own.toml").write_text(source.replace("Strict priority and starvation", "My own chapter"))
    chapters = workshop.load_chapters(folder)
    assert chapters[-1].id == "99-my-own" and chapters[-1].title == "My own chapter"


def test_a_chapters_effect_reads_the_figures_its_explanation_cites_from_its_runs():
    """The manual's table of chapters is built from these lines: each [see] check's two values, in units."""
    chapter = CHAPTERS["04-strict-priority"]
    runs = workshop.run_options(chapter)
    said = workshop.effect_text(chapter, runs)
    wait = {label: runs[label]["classes"]["offline"]["longest_wait_ms"] for label in ("FIFO", "strict priority")}
    assert said.startswith(f"offline longest wait {metric('longest_wait_ms').unit_text(wait['FIFO'])} at FIFO, "
                           f"{metric('longest_wait_ms').unit_text(wait['strict priority'])} at strict priority; "
                           f"interactive TTFT p99 ")
    rental = CHAPTERS["14-rental-terms"]
    assert " USD at 24" in workshop.effect_text(rental, {})
