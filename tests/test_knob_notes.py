"""Knobs that change nothing say why (engine.teach.knob_notes): only one dynamic weight above 0, a dynamic row that
repeats strict priority's on the same arrivals, with the wait at which a lower tier would overtake, fair-queuing
weights against the shares of a whole run, and a minimum batch that full batches cover; checked against runs of the
simulator."""

import pandas as pd
import pytest

from conftest import SCENARIOS
from engine.scenario.config import Server, apply_overrides, field_label, load_scenario, read_toml
from engine.sim.metrics import flat_metrics
from engine.sim.simulate import run_summary
from engine.sim.policies import P_DEFAULT_SLA_S, _sla_s_nb, policy_inputs
from engine.teach.knob_notes import (HOLD_SHARE_MAX, batch_hold_note, class_sla_s, dynamic_as_priority_note,
                                     scale_only_note, wfq_share_note)

DEFAULT = apply_overrides(read_toml(SCENARIOS / "chat_and_batch_a100_8b.toml"), {"workload.num_requests": 2000})


def comparison(data: dict) -> pd.DataFrame:
    """The policy comparison's rows of strict priority and dynamic cost on ``data``'s arrivals."""
    frames = []
    for name in ("priority", "dynamic"):
        frame = flat_metrics(run_summary(apply_overrides(data, {"policy.name": name})))
        frame.insert(0, "policy", name)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("weights, said", [((0.0, 0.0, 2.0), "tier alone"), ((3.0, 0.0, 0.0), "waited / SLA alone"),
                                           ((0.0, 0.5, 0.0), "progress alone")])
def test_one_weight_above_zero_says_its_size_changes_nothing(weights, said):
    note = scale_only_note(*weights)
    assert note and said in note and "only the ratios" in note


@pytest.mark.parametrize("weights", [(1.0, 1.0, 1.0), (0.0, 1.0, 1.0), (0.0, 0.0, 0.0)])
def test_two_weights_or_none_say_nothing(weights):
    assert scale_only_note(*weights) is None


def test_the_default_scenario_runs_dynamic_as_strict_priority_and_says_at_what_wait_batch_would_overtake():
    """Chat (tier 3, TTFT target 1 s) against batch (tier 1, end-to-end 120 s): at alpha = gamma = 1 a batch request
    overtakes a fresh chat one after 1 x 2 x 120 s / 1 = 240 s, far beyond any wait at this load."""
    rows = comparison(DEFAULT)
    note = dynamic_as_priority_note(load_scenario(DEFAULT), rows)
    assert note is not None, "the two rows are the same figure for figure"
    assert "only after waiting gamma x 2 x its end-to-end target of 120 s / alpha = 240 s" in note
    longest_ms = rows[(rows["policy"] == "dynamic") & (rows["class"] == "batch")]["longest_wait_ms"].iloc[0]
    assert longest_ms < 240_000 and "no batch request waited longer than" in note
    zero_alpha = apply_overrides(DEFAULT, {"policy.alpha": 0.0})
    assert "with alpha 0 waiting adds nothing" in dynamic_as_priority_note(load_scenario(zero_alpha),
                                                                          comparison(zero_alpha))


def test_waiting_that_outweighs_the_tiers_reorders_the_queue_and_the_note_goes():
    """alpha 10, gamma 0.01 at a load where queues form: batch overtakes after 0.01 x 2 x 120 s / 10 = 0.24 s, and
    the dynamic row is no longer strict priority's."""
    busy = apply_overrides(DEFAULT, {"workload.arrival.rate_per_s": 6.0, "policy.alpha": 10.0, "policy.gamma": 0.01})
    assert dynamic_as_priority_note(load_scenario(busy), comparison(busy)) is None


def test_fair_queuing_weights_act_on_waiting_not_on_the_whole_runs_shares_and_the_note_says_so():
    """Weights 9:1 and 1:9 at a load where classes queue: each favoured class waits less, yet every request is
    served in the end, so the run's service shares are the demand's (52% / 48%) either way: said beside the cards."""
    base = apply_overrides(DEFAULT, {"policy.name": "wfq", "workload.arrival.rate_per_s": 6.0})
    runs = {}
    for favoured, weights in (("chat", {"chat": 9.0, "batch": 1.0}), ("batch", {"chat": 1.0, "batch": 9.0})):
        data = apply_overrides(base, {"policy.weights": weights})
        summary = run_summary(data)
        runs[favoured] = summary
        note = wfq_share_note(load_scenario(data), summary)
        assert note and "count the whole run, its drain included" in note
    for cls in ("chat", "batch"):
        assert runs[cls]["classes"][cls]["queue_ms"]["p99"] < runs[next(c for c in runs if c != cls)]["classes"][cls][
            "queue_ms"]["p99"], f"weighting {cls} up shortens its queueing"
        assert runs["chat"]["classes"][cls]["service_share"] == runs["batch"]["classes"][cls]["service_share"]
    even = apply_overrides(base, {"policy.weights": {"chat": 5.5, "batch": 4.5}})  # about the demand's shares
    assert wfq_share_note(load_scenario(even), run_summary(even)) is None, "shares near the weights: nothing to say"


def test_the_sla_a_note_names_is_the_one_the_compiled_policy_scores_a_waiting_request_against():
    no_target = {"name": "bulk", "share": 0.2, "prompt_tokens": {"dist": "constant", "value": 8},
                 "output_tokens": {"dist": "constant", "value": 8}}
    data = apply_overrides(DEFAULT, {"workload.classes": [*DEFAULT["workload"]["classes"], no_target]})
    scenario = load_scenario(data)
    packed, table = policy_inputs(scenario)
    for k, cls in enumerate(scenario.workload.classes):
        assert class_sla_s(cls, scenario.policy)[1] == _sla_s_nb(table, k, True, packed[P_DEFAULT_SLA_S]), cls.name


def test_a_minimum_batch_that_full_batches_cover_says_so_and_one_that_holds_the_servers_back_says_nothing():
    """At the default load a replica nearly always has 4 requests or more: the gate holds it back 0.05 s in all
    (the first request), the figures move by less than 1%, and the note says so. At 0.3 req/s it holds the server
    back for a share of its time above ``HOLD_SHARE_MAX``, the TTFT p50 grows by tens of ms, and no note."""
    gate = {"server.min_batch_size": 4, "server.wait_timeout_ms": 50.0}
    for rate, noted in ((None, True), (0.3, False)):
        data = DEFAULT if rate is None else apply_overrides(DEFAULT, {"workload.arrival.rate_per_s": rate})
        held, plain = run_summary(apply_overrides(data, gate)), run_summary(data)
        note = batch_hold_note(load_scenario(apply_overrides(data, gate)), held)
        share = held["system"]["batch_hold_s"] / (held["system"]["replica_hours"] * 3600.0)
        moved_ms = held["overall"]["ttft_ms"]["p50"] - plain["overall"]["ttft_ms"]["p50"]
        if noted:
            assert share < HOLD_SHARE_MAX and abs(moved_ms) < 0.01 * plain["overall"]["ttft_ms"]["p50"]
            assert note.startswith(f"{field_label(Server, 'min_batch_size')} 4 with a wait of 50 ms held iterations "
                                   f"back for 0.05 s in all") and "change almost nothing" in note, note
        else:
            assert share > HOLD_SHARE_MAX and moved_ms > 10.0 and note is None
    assert batch_hold_note(load_scenario(DEFAULT), run_summary(DEFAULT)) is None, "no minimum batch: nothing to say"
