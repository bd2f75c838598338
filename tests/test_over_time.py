"""The planner's recommendation bought three ways over a moving rate's whole traffic (``decide.over_time``): what is
run, what is chosen, and the table by hour, by hand and end to end."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import AZURE_CONV, REPO
from engine.decide.bill import STRATEGIES
from engine.decide.over_time import (AUTOSCALE_TARGETS, _choose, baselines, busy_share, buy_over_time, fleet_share,
                                     periods, starting, whole_span)
from engine.decide.plan_text import hours_frame, over_time_frame, plan_text
from engine.decide.planner import Question, plan
from engine.decide.report import report_html
from engine.decide.targets import Target
from engine.scenario.caps import Caps
from engine.scenario.config import apply_overrides, read_toml
from engine.scenario.origin import Origin

ARTICLE = REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"
TTFT_1S = (Target("interactive", "ttft_p99_ms", 1000.0),)
# 10 req/s rising to 40 and back over 10 minutes: a mean of 25 req/s, 15,000 requests
RISE = [[0, 10.0], [300, 40.0], [600, 10.0]]


def moving(**fleet) -> dict:
    return apply_overrides(read_toml(ARTICLE), {"workload.arrival.rate_curve": RISE,
                                                "workload.arrival.rate_per_s": None,
                                                **{f"fleet.{k}": v for k, v in fleet.items()}})


def test_baselines_run_from_one_replica_to_one_under_the_peak():
    assert baselines(6, 0.68) == [1, 4, 5]  # the mean needs 0.68 x 6 = 4.1 -> 4 replicas
    assert baselines(2, 0.68) == [1] and baselines(1, 0.5) == []  # one replica at the peak: nothing to scale
    assert baselines(3, 0.1) == [1, 2]


def test_the_whole_span_is_the_curve_its_trace_or_a_reason():
    whole, share, start, multiple = whole_span(moving(), Origin())
    assert whole["workload"]["duration_s"] == 600.0 and share == pytest.approx(25.0 / 40.0) and multiple == 1
    assert "num_requests" not in whole["workload"]  # bounded by time: its memory is its requests', not a cap's
    assert start == pytest.approx(10.0 / 40.0)
    assert whole_span(read_toml(ARTICLE), Origin()) == ""  # a constant rate does not move
    note = whole_span(apply_overrides(moving(), {"workload.num_requests": 5000}),
                      Origin(caps=Caps(requests_per_run=10_000)))
    assert "about 15,000 requests, more than one run simulates (10,000" in note  # one replica: no share of it
    whole, _, _, multiple = whole_span(apply_overrides(moving(), {"workload.num_requests": 5000}),
                                       Origin(caps=Caps(requests_per_run=10_000)), peak_replicas=6)
    assert multiple == 2, "15,000 requests over 6 replicas: 3 of them at half the rate hold 7,500"
    assert whole["fleet"]["replicas"] == 3
    assert whole["workload"]["arrival"]["rate_per_s"] == pytest.approx(25.0 / 2)
    trace = apply_overrides(read_toml(ARTICLE), {"workload.trace": {"path": str(AZURE_CONV)},
                                                 "workload.num_requests": 100, "workload.arrival": None})
    whole, share, start, _ = whole_span(trace, Origin())
    assert "num_requests" not in whole["workload"] and share != share and start != start  # a trace: from its run


def test_a_traces_mean_over_its_busiest_window_by_hand():
    """Windows of 15 minutes with 10, 30, 20 and 5 arrivals (the last cut short: not a rate): mean 65 an hour, the
    busiest 30 a quarter (120 an hour)."""
    rows = [{"start_s": 900.0 * k, "end_s": 900.0 * (k + 1), "arrived": n} for k, n in enumerate((10, 30, 20, 5))]
    assert busy_share(rows) == pytest.approx((65 / 120, 40 / 120))


def test_the_autoscaled_fleet_starts_as_the_starting_rate_needs():
    assert starting({"min_replicas": 1, "max_replicas": 6}, 0.25) == 2  # 1.5 replicas' worth: 2
    assert starting({"min_replicas": 3, "max_replicas": 6}, 0.25) == 3 and starting({"max_replicas": 6}, 1.0) == 6


def bill(per_month: float) -> SimpleNamespace:
    return SimpleNamespace(per_month=(per_month, per_month))


def run(attainment: float, ttft_ms: float) -> dict:
    block = {"ttft_ms": {"p99": ttft_ms}, "completed": 100, "sla_attainment": attainment}
    return {"overall": {"sla_attainment": attainment}, "classes": {"interactive": block},
            "system": {"unstable": False}}


def test_the_cheapest_run_meeting_every_target_wins_else_the_most_sla():
    meeting = [(bill(300.0), run(0.99, 800.0)), (bill(200.0), run(0.90, 1500.0)), (bill(250.0), run(0.98, 900.0))]
    index, chosen, _ = _choose(meeting, TTFT_1S)
    assert (index, chosen.per_month[0]) == (2, 250.0)  # 200 is cheaper but misses the target
    missing = [(bill(300.0), run(0.80, 1500.0)), (bill(200.0), run(0.85, 1400.0))]
    assert _choose(missing, TTFT_1S)[0] == 1
    assert _choose([], TTFT_1S) is None


def window(start_s: float, replicas: float, judged: int, missed: int) -> dict:
    return {"start_s": start_s, "end_s": start_s + 900.0, "replicas": replicas,
            "sla_judged": {"a": judged, "b": 0}, "sla_missed": {"a": missed, "b": 0}}


def test_windows_merge_into_hours_by_hand():
    """Eight windows of 15 minutes: two hours. Hour 0: replicas 2, 2, 3, 3 -> 2.5; costs 10, 10, 15, 15 -> 12.5;
    30 misses in 400 judged -> 92.5%. Hour 1 of the second strategy judges nothing: no attainment."""
    first = [window(900.0 * k, 2.0 + (k % 4 >= 2), 100, 15 * (k % 4 >= 2)) for k in range(8)]
    second = [window(900.0 * k, 1.0, 10 if k < 4 else 0, 0) for k in range(8)]
    rows = [{"_windows": first, "_cost_per_hour": (10.0, 10.0, 15.0, 15.0) * 2},
            {"_windows": second, "_cost_per_hour": (5.0,) * 8}]
    table = periods(rows, first)
    assert table["length_s"] == 3600.0 and len(table["rows"]) == 2
    hour = table["rows"][0]
    assert (hour["start_s"], hour["end_s"]) == (0.0, 3600.0)
    assert hour["replicas"] == [2.5, 1.0] and hour["cost_per_hour"] == [12.5, 5.0]
    assert hour["sla_attainment"] == [pytest.approx(1 - 30 / 400), 1.0]
    assert table["rows"][1]["sla_attainment"][1] is None
    assert "_windows" not in rows[0]


@pytest.fixture(scope="module")
def answered() -> tuple[dict, Question, dict]:
    data = moving(autoscale={"max_replicas": 3, "target": 0.6})
    data = apply_overrides(data, {"fleet.replicas": 1})
    question = Question(targets=TTFT_1S, gpus=("H100-80G",), seeds=2, requests=800)
    return data, question, plan(data, question)


def test_a_moving_rate_is_bought_three_ways_over_its_whole_traffic(answered):
    data, question, answer = answered
    best, over = answer["recommendation"], answer["over_time"]
    peak = best["replicas"]
    assert peak >= 2 and over["span_s"] == pytest.approx(600.0, abs=60.0)
    assert 14_000 < over["requests"] < 16_000
    assert [r["strategy"] for r in over["strategies"]] == list(STRATEGIES)
    fixed, scaled, mixed = over["strategies"]
    # the fixed fleet at the peak is the recommendation itself, priced as it, up all the time
    assert fixed["monthly_cost"]["low"] == best["monthly_cost"]["low"] and fixed["autoscale"] is None
    assert fixed["replica_hours"] == pytest.approx(peak * over["span_s"] / 3600.0)
    assert fixed["meets_targets"]
    for row in (scaled, mixed):
        assert row["autoscale"]["max_replicas"] == peak and row["autoscale"]["min_replicas"] < peak
        assert row["replica_hours"] < fixed["replica_hours"]
    # searched: every baseline under the peak x every target, and the scenario's own autoscaler (held to the peak)
    searched = over["searched"]
    assert searched["own"] and searched["targets"] == list(AUTOSCALE_TARGETS)
    assert over["runs"] == 1 + len(searched["baselines"]) * len(AUTOSCALE_TARGETS) + 1
    # by hour: one row for ten minutes; the fixed fleet's replicas are the peak's
    hours = over["periods"]["rows"]
    assert len(hours) == 1 and hours[0]["replicas"][0] == pytest.approx(peak)
    assert all(0.0 <= a <= 1.0 for a in hours[0]["sla_attainment"])


def test_the_three_ways_are_shown_where_the_plan_is_read(answered):
    data, question, answer = answered
    text = plan_text(answer, "plan")
    assert "Over the whole traffic (10 min, " in text and "fixed at the peak" in text
    frame = over_time_frame(answer["over_time"], "USD")
    assert set(frame["strategy"].str.replace(" (misses a target)", "", regex=False)) == set(STRATEGIES)
    assert set(frame.columns) >= {"strategy", "per month (USD)", "SLA met", "replica-hours", "fleet", "offers"}
    assert "fixed: replicas" in hours_frame(answer["over_time"], "USD").columns
    page = report_html(data, question, answer, None, "2026-12-04 10:00 UTC")
    assert "Over the whole traffic: fixed, autoscaled, or reserved + bursts" in page
    assert "on average (40 at the peak)" in page


def test_a_fleet_that_cannot_be_billed_by_use_keeps_its_plan(monkeypatch):
    """Pricing over time failing (no offer bills the GPU by the hour, say) leaves the recommendation, with why."""
    import engine.decide.over_time as over_time
    from engine.scenario.errors import ScenarioError

    def refuse(*_):
        raise ScenarioError("no firm on-demand offer quoted per hour rents H100-80G")
    monkeypatch.setattr(over_time, "strategy_bills", refuse)
    answer = plan(moving(), Question(targets=TTFT_1S, gpus=("H100-80G",), seeds=2, requests=300))
    assert answer["recommendation"] is not None
    assert answer["over_time"] == {"note": "no firm on-demand offer quoted per hour rents H100-80G"}


def test_a_trace_keeping_its_arrival_table_is_titled_by_its_trace():
    from engine.decide.report import title
    from engine.scenario.config import load_scenario

    data = apply_overrides(read_toml(ARTICLE), {"workload.trace": {"path": str(AZURE_CONV)}})
    answer = {"recommendation": None, "traffic": {"trace_requests": 2000, "sized_requests": 2000}}
    assert title(load_scenario(data), Question(targets=TTFT_1S), answer).startswith(
        "Llama-3-70B at the trace azure_conv_2023_first2000.csv")


def test_a_disaggregated_fleet_is_priced_fixed_only():
    data = apply_overrides(moving(), {"fleet.mode": "disaggregated"})
    over = buy_over_time(data, {}, {"replicas": 2}, Question(targets=TTFT_1S))
    assert over == {"note": "autoscaled pools are not billed by use yet: the prefill and decode pools are priced fixed "
                            "at the peak only"}


def test_a_share_of_the_fleet_divides_it_and_leaves_two_replicas_to_scale():
    assert fleet_share(12, 3_456_000, 1_000_000) == 4  # 3 replicas at a quarter of the rate: 864,000 requests
    assert fleet_share(12, 900_000, 1_000_000) == 1
    assert fleet_share(13, 3_456_000, 1_000_000) == 0  # a prime fleet: only one replica would be left
    assert fleet_share(6, 5_000_000, 1_000_000) == 0  # 3 x 2 replicas still hold 1.7M: none keeps two under the cap


def test_the_day_judges_each_request_by_the_question_s_own_limits(monkeypatch):
    """The runs over the whole traffic carry the question's latency limits as each class's per-request limits (the
    interactive class's 1 s becomes the asked 3 s; the offline class, which no target bounds, is judged by none),
    so the SLA met hour by hour is the share within what the plan was asked."""
    import engine.decide.over_time as over_time
    seen = []

    def capture(datas, origin, progress=None):
        seen.extend(datas)
        raise RuntimeError("enough")

    monkeypatch.setattr(over_time, "summaries", capture)
    question = Question(targets=(Target("interactive", "ttft_p99_ms", 3000.0),), gpus=("H100-80G",), seeds=2,
                        requests=300)
    with pytest.raises(RuntimeError, match="enough"):
        buy_over_time(moving(), {}, {"replicas": 2}, question)
    interactive, offline = seen[0]["workload"]["classes"]
    assert interactive["sla_ttft_ms"] == 3000.0 and "sla_e2e_ms" not in interactive
    assert "sla_ttft_ms" not in offline and "sla_e2e_ms" not in offline
    assert interactive["timeout_ms"] == 5000 and offline["timeout_ms"] == 600000  # time-outs are the scenario's
