"""Figures built as plain dicts without Plotly's checks (``engine.decide.figure_spec``) send the browser the same JSON
as Plotly's validating API builds from the same spec, so the fast path cannot drift from what Plotly would draw: a
misspelt property would raise here (validation rejects unknown names), a value Plotly coerces (a pandas column, a
numpy number) would change the JSON. The comparison is of the parsed JSON: Plotly puts the template first in the
layout, the fast path last, and key order changes nothing the browser draws. Every chart keeps its axis titles."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from engine.decide import plan_charts
from engine.decide.bill import STRATEGIES
from engine.decide.figure_spec import figure, subplot_layout
from engine.decide.targets import Target
from engine.scenario.config import OVERALL
from engine.sim.policies import POLICY_LABELS
from engine.sim.simulate import batch_column, waiting_column
from ui import charts

CLASSES = ["chat", "batch <b>jobs</b>"]  # a name with markup: it passes through chart_text
POLICIES = ["fifo", "priority"]


def shipped(fig: go.Figure) -> dict:
    """What Streamlit sends the browser for ``fig`` (``st.plotly_chart``: ``to_json`` without validation)."""
    return json.loads(pio.to_json(fig, validate=False))


@pytest.fixture
def specs(monkeypatch) -> list[dict]:
    """Every spec the builders hand ``figure_spec.figure``, in order, as they handed it (pandas columns and all)."""
    seen = []

    def recording(data: list[dict], layout: dict) -> go.Figure:
        seen.append({"data": copy.deepcopy(data), "layout": copy.deepcopy(layout)})
        return figure(data, layout)

    for module in (charts, plan_charts):
        monkeypatch.setattr(module, "figure", recording)
    return seen


def assert_same_as_validated(figures: list[go.Figure], specs: list[dict]) -> None:
    """Each figure's JSON equals that of the figure Plotly's validating API builds from its builder's spec (what
    ``st.plotly_chart`` would build from that dict: ``Figure(**spec)``, every property checked and coerced)."""
    assert len(figures) == len(specs)
    for fig, spec in zip(figures, specs):
        assert shipped(fig) == shipped(go.Figure(**spec))


def axis_titles(fig: go.Figure) -> dict[str, str]:
    """The titled axes of ``fig``: layout key -> title text."""
    layout = shipped(fig)["layout"]
    return {k: v["title"]["text"] for k, v in layout.items()
            if k.startswith(("xaxis", "yaxis")) and v.get("title", {}).get("text")}


def assert_titled(fig: go.Figure, x: bool = True) -> None:
    """A titled y axis, and a titled x axis unless ``x`` is False (the planner's targets chart: its x ticks are
    the plans' names)."""
    titled = axis_titles(fig)
    assert any(k.startswith("yaxis") for k in titled), titled
    assert not x or any(k.startswith("xaxis") for k in titled), titled


def panels(fig: go.Figure) -> set[str]:
    """The y axes ``fig``'s traces are drawn on: one per panel of a grid (the equality with Plotly's own figure
    cannot see a trace put in the wrong panel: both figures come from the same spec)."""
    return {t.get("yaxis", "y") for t in shipped(fig)["data"]}


def metric_frame(key: str, per_class: dict[str, list[float]]) -> pd.DataFrame:
    """One row per (rate, policy, class) with ``key``'s values, the overall rows included."""
    rows = [{"policy": policy, "class": cls, "rate_per_s": rate, key: values[i] * (1 + p)}
            for p, policy in enumerate(POLICIES) for cls, values in per_class.items()
            for i, rate in enumerate((1.0, 2.0, 4.0))]
    return pd.DataFrame(rows)


LATENCIES = {"chat": [120.0, 900.0, 40_000.0], "batch <b>jobs</b>": [300.0, 2_000.0, 90_000.0],
             OVERALL: [200.0, 1_500.0, 60_000.0]}  # a span over 30x: a log axis
SHARES = {"chat": [0.99, 0.9, 0.4], "batch <b>jobs</b>": [0.95, 0.7, 0.2], OVERALL: [0.97, 0.8, 0.3]}


@pytest.mark.parametrize("key, values", [("ttft_p99_ms", LATENCIES), ("sla_attainment", SHARES)])
def test_comparison_bars_and_load_curves_match_the_validated_figures(key, values, specs):
    frame = metric_frame(key, values)
    bars = charts.comparison_bars(frame[frame["rate_per_s"] == 1.0], key, POLICY_LABELS)
    curves = charts.load_curves(frame, key, 2.0, POLICY_LABELS)
    assert_same_as_validated([bars, curves], specs)
    for fig in (bars, curves):
        assert_titled(fig)
    colors = {t["name"]: t["marker"]["color"] for t in shipped(bars)["data"]}
    colors.update({t["name"]: t["line"]["color"] for t in shipped(curves)["data"]})
    assert colors == {POLICY_LABELS[p]: charts.POLICY_COLORS[p] for p in POLICIES}  # one colour per policy
    assert {t["xaxis"] for t in shipped(curves)["data"]} == {"x", "x2"}  # a panel per class
    log = shipped(curves)["layout"]["yaxis"].get("type") == "log"
    assert log == (key == "ttft_p99_ms")


def test_latency_cdf_timeline_windows_and_bills_match_the_validated_figures(specs):
    rng = np.random.default_rng(0)
    requests = pd.DataFrame({"class": pd.Categorical(rng.choice(CLASSES, 3000), categories=CLASSES),
                             "ttft_ms": rng.lognormal(5, 2, 3000)})
    time_s = np.arange(4000) * 0.02
    series = pd.DataFrame({"time_s": time_s, "preemptions": (np.arange(4000) % 700 == 0).astype(int),
                           "kv_used_tokens": rng.integers(0, 5000, 4000),
                           **{waiting_column(c): rng.integers(0, 9, 4000) for c in CLASSES},
                           **{batch_column(c): rng.integers(0, 5, 4000) for c in CLASSES}})
    windows = [{"start_s": 60.0 * i, "end_s": 60.0 * (i + 1), "offered_load": 0.5 + 0.2 * i, "arrived": 100 + i,
                "mean_waiting": 1.5 * i, "replicas": 1.0 + i / 2,
                "sla_attainment": {"chat": None if i == 2 else 0.9, "batch <b>jobs</b>": None}} for i in range(5)]
    bills = [SimpleNamespace(strategy=s, cost_per_hour=tuple(2.0 + k + i for i in range(5)))  # decide.bill's
             for k, s in enumerate(STRATEGIES)]
    figures = [charts.latency_cdf(requests, "ttft_ms"), charts.timeline(series, CLASSES, 8192, [10.0, 70.0]),
               charts.timeline(series, CLASSES, None), charts.window_chart(windows, CLASSES, scaled=True),
               charts.window_chart(windows, CLASSES), charts.cost_over_time(windows, bills, "USD")]
    assert_same_as_validated(figures, specs)
    for fig in figures:
        assert_titled(fig)
    assert set(axis_titles(figures[1])) == {"yaxis", "yaxis2", "yaxis3", "xaxis3"}
    assert [panels(fig) for fig in figures[1:]] == [{"y", "y2", "y3"}, {"y", "y2", "y3"}, {"y", "y2", "y3"},
                                                    {"y", "y2"}, {"y"}]


def test_share_bars_and_heatmap_match_the_validated_figures(specs):
    shares = charts.share_bars({"chat": {"service_share": 0.7}, "batch <b>jobs</b>": {"service_share": None}},
                               {"chat": 1.0, "batch <b>jobs</b>": 3.0})
    grid = pd.DataFrame([{"class": "chat", "alpha": a, "gamma": g, "ttft_p99_ms": 100.0 * (1 + a + g)}
                         for a in (0.0, 1.0) for g in (0.0, 3.0)])
    figures = [shares, charts.heatmap(grid, "chat", "ttft_p99_ms")]
    assert_same_as_validated(figures, specs)
    for fig in figures:
        assert_titled(fig)


def plan_entry(k: int, calibrated: bool) -> dict:
    """A plan as the planner writes it (the keys the charts read)."""
    return {"replicas": k + 1, "tensor_parallel": 2, "gpu": "A100-80G", "quant": "fp16", "offer": f"cloud & co {k}",
            "calibrated": calibrated, "monthly_cost": {"low": 1000.0 * (k + 1), "currency": "USD"},
            "targets": [{"metric": "ttft_p99_ms", "class": "chat", "value": 800.0 / (k + 1),
                         "ci95": [700.0 / (k + 1), 900.0 / (k + 1)]},
                        {"metric": "sla_attainment", "class": "chat", "value": 0.9, "ci95": [None, None]}]}


def test_planner_charts_match_the_validated_figures(specs):
    answer = {"recommendation": plan_entry(0, True), "alternatives": [plan_entry(k, k % 2 == 0) for k in (1, 2, 3)]}
    targets = (Target("chat", "ttft_p99_ms", 1000.0), Target("chat", "sla_attainment", 0.8))
    rows = [{"start_s": 3600.0 * h, "end_s": 3600.0 * (h + 1), "replicas": [2, 1 + h, 1],
             "cost_per_hour": [4.0, 2.0 + h, 3.0], "sla_attainment": [0.99, None if h == 1 else 0.9, 0.95]}
            for h in range(3)]
    over = {"periods": {"rows": rows}, "strategies": [{"strategy": s} for s in STRATEGIES]}
    figures = [plan_charts.pareto_chart(answer, targets[0]), plan_charts.targets_chart(answer, targets),
               plan_charts.over_time_chart(over, "USD")]
    assert_same_as_validated(figures, specs)
    assert [panels(fig) for fig in figures[1:]] == [{"y", "y2"}, {"y", "y2", "y3"}]
    for fig, x_titled in zip(figures, (True, False, True)):  # the targets chart's x ticks are the plans' names
        assert_titled(fig, x_titled)


def test_a_subplot_layout_is_a_fresh_copy_of_plotlys():
    """A builder writes into its copy: the next figure of the same grid starts clean."""
    first = subplot_layout(2, 1, shared_xaxes=True, titles=("a", "b"))
    first["yaxis"]["title"] = {"text": "written"}
    assert "title" not in subplot_layout(2, 1, shared_xaxes=True, titles=("a", "b"))["yaxis"]


def test_plans_at_one_price_are_drawn_on_a_readable_cost_axis():
    """Plans that all cost the same (one rented node) sit mid-axis with whole-money ticks, not on a span of a few
    units that Plotly would label 10.949k, 10.95k, 10.951k."""
    same = [{**plan_entry(k, True), "monthly_cost": {"low": 10950.0, "currency": "USD"}} for k in range(3)]
    target = Target("chat", "ttft_p99_ms", 1000.0)
    axis = plan_charts.pareto_chart({"recommendation": same[0], "alternatives": same[1:]}, target).layout.xaxis
    assert tuple(axis.range) == pytest.approx((9855.0, 12045.0)) and axis.tickformat == ",.0f"
    spread = plan_charts.pareto_chart({"recommendation": plan_entry(0, True),
                                       "alternatives": [plan_entry(k, True) for k in (1, 2)]}, target).layout.xaxis
    assert spread.range is None, "costs that differ keep Plotly's own range"
