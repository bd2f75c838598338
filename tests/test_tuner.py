"""The tuner (engine.decide.tuner): never a point that breaks a constraint when a feasible one was found, never worse
than the scenario as it is, the same answer twice, weights that move the way queueing says they must."""

import functools
import math
import tomllib

import pytest

from conftest import REPO
from engine.decide.targets import Target
from engine.decide.tune_text import FLAT_TEXT, tune_text
from engine.decide.tuner import (BATCHING_KNOBS, Knob, Objective, TuneQuestion, halton, knobs, mean_block,
                                 parse_constraint, parse_objective, tune)
from engine.scenario.config import apply_overrides, load_scenario, read_toml
from engine.scenario.errors import ScenarioError

ARTICLE = REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"
INTERACTIVE_P99 = Objective("interactive", "ttft_p99_ms")


def busy_article(requests: int = 1500) -> dict:
    """The article preset where requests queue for the batch (64 sequences at offered load about 0.96), so that
    policies and their parameters differ."""
    return apply_overrides(read_toml(ARTICLE), {"server.max_batch_size": 64, "workload.arrival.rate_per_s": 50.0,
                                                "workload.num_requests": requests})


@functools.lru_cache(maxsize=None)
def answer_for(question: TuneQuestion) -> dict:
    return tune(busy_article(), question)


def test_knobs_map_the_unit_interval_onto_their_range_and_back():
    for knob in (*knobs("dynamic", ["a", "b"], True), *knobs("priority", [], False), *knobs("wfq", ["a", "b"], False)):
        assert knob.value(0.0) == knob.low and knob.value(1.0) == knob.high
        for u in (0.1, 0.37, 0.5, 0.9):
            value = knob.value(u)
            assert knob.low <= value <= knob.high
            assert knob.value(knob.unit(value)) == value, (knob.name, u)
    square = Knob("alpha", "policy", 0.0, 10.0, "square")
    assert square.value(0.5) == 2.5, "finer near the low end"
    assert Knob("x", "policy", 1.0, 100.0, "log").value(0.5) == 10.0
    assert BATCHING_KNOBS[0].value(0.3) == round(BATCHING_KNOBS[0].value(0.3)), "whole requests"
    assert [k.name for k in knobs("wfq", ["chat", "mid", "batch"], False)] == ["weight:chat", "weight:mid"]


def test_halton_points_are_the_radical_inverses():
    assert halton(1, 2) == [0.5, 1 / 3] and halton(2, 2) == [0.25, 2 / 3] and halton(3, 1) == [0.75]


def test_constraints_read_in_the_metrics_own_direction():
    assert parse_constraint("offline.output_tokens_per_s>=900") == [Target("offline", "output_tokens_per_s", 900.0)]
    assert parse_constraint("interactive.ttft_p99_ms <= 1000") == [Target("interactive", "ttft_p99_ms", 1000.0)]
    with pytest.raises(ScenarioError, match=r"bounded the other way; write interactive.ttft_p99_ms<=1000"):
        parse_constraint("interactive.ttft_p99_ms>=1000")
    with pytest.raises(ScenarioError, match="is not CLASS.METRIC<=VALUE"):
        parse_constraint("interactive.ttft_p99_ms=1000")
    question = TuneQuestion(INTERACTIVE_P99, tuple(parse_constraint("*.longest_wait_ms<=60000")))
    assert [t.cls for t in question.targets_for(["interactive", "offline"])] == ["interactive", "offline"]
    with pytest.raises(ScenarioError, match="target class 'vip' is not a class"):
        TuneQuestion(INTERACTIVE_P99, tuple(parse_constraint("vip.longest_wait_ms<=1"))).targets_for(["a"])
    with pytest.raises(ScenarioError, match="has no parameters to tune"):
        TuneQuestion(INTERACTIVE_P99, policies=("fifo",))
    with pytest.raises(ScenarioError, match="candidates = 3 must be from 10"):
        TuneQuestion(INTERACTIVE_P99, candidates=3)
    assert parse_objective("offline.output_tokens_per_s", minimize=False) == \
        Objective("offline", "output_tokens_per_s", False)


def test_mean_block_averages_over_seeds_and_keeps_counts_whole():
    blocks = [{"completed": 10, "ttft_ms": {"p99": 100.0}, "sla": None}, {"completed": 11, "ttft_ms": {"p99": 200.0},
                                                                            "sla": 0.5}]
    assert mean_block(blocks) == {"completed": 10, "ttft_ms": {"p99": 150.0}, "sla": None}


LIMIT_MS = 1000.0
CONSTRAINED = TuneQuestion(INTERACTIVE_P99, (Target("offline", "longest_wait_ms", LIMIT_MS),), candidates=40,
                           seeds=1, requests=1500)


def test_the_best_point_meets_every_constraint_and_beats_every_other_feasible_one():
    answer = answer_for(CONSTRAINED)
    feasible = [c for c in answer["candidates"] if c["feasible"]]
    assert feasible and len(feasible) < len(answer["candidates"]), "the constraint must bind for this to test it"
    best = answer["best"]
    assert best["feasible"] and best["metrics"]["offline"]["longest_wait_ms"] <= LIMIT_MS
    assert best["objective"] == min(c["objective"] for c in feasible)
    infeasible_better = [c for c in answer["candidates"] if not c["feasible"] and c["objective"] is not None
                         and c["objective"] < best["objective"]]
    assert infeasible_better, "a better point that breaks the constraint exists, and it was not chosen"
    assert answer["evaluations"] == len(answer["candidates"]) <= CONSTRAINED.candidates


def test_the_best_point_is_never_worse_than_the_scenario_as_it_is_and_the_answer_repeats():
    answer = answer_for(CONSTRAINED)
    if answer["baseline"]["feasible"]:
        assert answer["best"]["objective"] <= answer["baseline"]["objective"]
    again = tune(busy_article(), CONSTRAINED)
    for key in ("best", "baseline", "candidates", "surface", "toml"):
        assert again[key] == answer[key], key


def test_fair_queuing_weights_move_the_way_queueing_says():
    """Minimising a class's latency raises its weight; minimising the other class's lowers it."""
    own = answer_for(TuneQuestion(INTERACTIVE_P99, policies=("wfq",), candidates=20, seeds=1, requests=1500))
    other = answer_for(TuneQuestion(Objective("offline", "ttft_p99_ms"), policies=("wfq",), candidates=20, seeds=1,
                                    requests=1500))
    weight_own = own["best"]["values"]["weight:interactive"]
    weight_other = other["best"]["values"]["weight:interactive"]
    assert weight_own > 1.0 >= weight_other
    assert own["best"]["policy"]["weights"] == {"interactive": weight_own, "offline": 1.0}


def test_an_impossible_constraint_returns_the_closest_point_flagged():
    question = TuneQuestion(INTERACTIVE_P99, (Target("offline", "output_tokens_per_s", 1e9),), candidates=12,
                            seeds=1, requests=400)
    answer = tune(busy_article(400), question)
    assert not answer["best"]["feasible"] and not any(c["feasible"] for c in answer["candidates"])
    assert "No candidate met every constraint; the closest:" in tune_text(answer, "x")


def test_the_response_surface_holds_the_chosen_point():
    shape = answer_for(CONSTRAINED)["surface"]
    assert shape is not None and 1 <= len(shape["axes"]) <= 2
    size = math.prod(len(axis["values"]) for axis in shape["axes"])
    assert all(len(panel["values"]) == size for panel in shape["panels"]) and len(shape["feasible"]) == size
    assert [p["metric"] for p in shape["panels"]] == ["ttft_p99_ms", "longest_wait_ms"]
    for axis, chosen in zip(shape["axes"], shape["best"]):
        assert chosen in axis["values"]


def test_the_policy_block_loads_into_the_scenario():
    answer = answer_for(CONSTRAINED)
    block = tomllib.loads(answer["toml"])["policy"]
    assert block == answer["best"]["policy"]
    tuned = load_scenario({**busy_article(), "policy": block})
    assert tuned.policy.name == answer["best"]["policy"]["name"]


def test_a_load_where_nothing_queues_is_called_flat():
    calm = apply_overrides(busy_article(400), {"workload.arrival.rate_per_s": 5.0})
    answer = tune(calm, TuneQuestion(INTERACTIVE_P99, candidates=12, seeds=1, requests=400))
    assert answer["flat"] and FLAT_TEXT in tune_text(answer, "calm")
    assert not answer_for(CONSTRAINED)["flat"]


def test_a_scenario_already_on_a_tunable_policy_tunes_without_losing_its_baseline():
    """The scenario as it is sets no knob values; it competes as the baseline, never as a point to refine."""
    teaching = read_toml(REPO / "data" / "scenarios" / "priority_teaching.toml")
    answer = tune(teaching, TuneQuestion(Objective("urgent", "ttft_p99_ms"), policies=("priority",), candidates=12,
                                         seeds=1, requests=300))
    assert answer["baseline"]["policy"]["name"] == "priority" and answer["best"]["feasible"]
    assert answer["best"]["objective"] <= answer["baseline"]["objective"]
