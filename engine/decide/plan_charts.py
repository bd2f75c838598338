"""The planner's evidence as Plotly figures, shared by the Planner page and the report: cost against the first
target for every priced plan (the Pareto view), and each target's value with its 95% interval for the cheapest
plans. Each is written as a plain dict and wrapped once without Plotly's property checks (``figure_spec``)."""

from __future__ import annotations

import html

import plotly.graph_objects as go

from ..scenario.labels import format_label
from ..scenario.metric_table import metric
from .bill import STRATEGY_COLORS, STRATEGY_DASHES
from .figure_spec import axis_name, axis_ref, figure, grid_trace, subplot_layout, title
from .plan_text import shape
from .targets import Target

TARGET_PLANS = 8  # plans on the targets chart: the recommendation and the cheapest alternatives
MEASURED, ESTIMATED = "#636efa", "#bbbbbb"  # bars of plans whose step times are measured, or an estimate only


def _target_entry(plan: dict, target: Target) -> dict:
    return next(t for t in plan["targets"] if t["metric"] == target.key and t["class"] == target.cls)


def _hline(y: float, col: int = 1) -> dict:
    """A grey dashed line across panel ``col`` at ``y`` (what ``add_hline(line_dash="dash", line_color="grey")``
    adds)."""
    return {"type": "line", "x0": 0, "x1": 1, "xref": f"{axis_ref('x', col)} domain", "y0": y, "y1": y,
            "yref": axis_ref("y", col), "line": {"dash": "dash", "color": "grey"}}


def pareto_chart(answer: dict, target: Target) -> go.Figure:
    """Monthly cost (low end) against the first target's value, one point per plan; measured and estimated step
    times apart."""
    plans = [answer["recommendation"], *answer["alternatives"]]
    m = metric(target.key)
    data = []
    for calibrated, name, symbol in ((True, "step times checked", "circle"), (False, "step times an estimate", "x")):
        shown = [p for p in plans if p["calibrated"] == calibrated]
        if not shown:
            continue
        values = [_target_entry(p, target)["value"] for p in shown]
        data.append({"type": "scatter", "x": [p["monthly_cost"]["low"] for p in shown],
                     "y": [m.table_value(v) for v in values], "mode": "markers", "name": name,
                     "marker": {"symbol": symbol, "size": 9}, "text": [f"{shape(p)} {p['gpu']}, {p['offer']}"
                                                                      for p in shown],
                     "hovertemplate": "%{text}<br>%{x:,.0f} per month<br>%{y}<extra></extra>"})
    best = answer["recommendation"]
    costs = [p["monthly_cost"]["low"] for p in plans]
    # Whole money on the axis; plans that all cost the same (one rented node) centred on a span of +-10%, not on
    # Plotly's default of a few units around it.
    xaxis = {"title": title(f"per month, low end ({best['monthly_cost']['currency']})"), "tickformat": ",.0f",
             **({"range": [min(costs) * 0.9, max(costs) * 1.1]} if max(costs) - min(costs) < 0.02 * max(costs) else {})}
    data.append({"type": "scatter", "x": [best["monthly_cost"]["low"]],
                 "y": [m.table_value(_target_entry(best, target)["value"])], "mode": "markers", "name": "recommended",
                 "marker": {"symbol": "star", "size": 16, "color": "gold", "line": {"color": "black", "width": 1}}})
    return figure(data, {"shapes": [_hline(m.table_value(target.limit))], "height": 380,
                         "margin": {"t": 30, "b": 60},  # the x title and its tick labels below the plot
                         "xaxis": xaxis,
                         "yaxis": {"title": title(f"{target.cls} {m.title()}")}})


def plan_labels(plans: list[dict]) -> list[str]:
    """One x label per plan, none shared (a category axis stacks the bars of plans that share one): shape, GPU and
    weights over the offer, numbered where two plans still read alike."""
    labels = [f"{shape(p)} {p['gpu']} {format_label(p['quant'])}<br>{html.escape(p['offer'])}" for p in plans]
    seen: dict[str, int] = {}
    unique = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        unique.append(label if labels.count(label) == 1 else f"{label} ({seen[label]})")
    return unique


def targets_chart(answer: dict, targets: tuple[Target, ...]) -> go.Figure:
    """Each target's mean over the seeds with its 95% interval, for the recommendation and the cheapest
    alternatives, beside its limit (one panel per target, plans across)."""
    plans = [answer["recommendation"], *answer["alternatives"]][:TARGET_PLANS]
    names = plan_labels(plans)
    layout = subplot_layout(1, len(targets), titles=tuple(html.escape(t.describe()) for t in targets))
    layout["shapes"], data = [], []
    for col, target in enumerate(targets, start=1):
        m = metric(target.key)
        entries = [_target_entry(p, target) for p in plans]
        values = [m.table_value(e["value"]) for e in entries]
        low = [m.table_value(e["ci95"][0]) for e in entries]
        high = [m.table_value(e["ci95"][1]) for e in entries]
        up = [h - v if h is not None and v is not None else 0 for h, v in zip(high, values)]
        down = [v - lo if lo is not None and v is not None else 0 for lo, v in zip(low, values)]
        colors = ["gold" if i == 0 else (MEASURED if p["calibrated"] else ESTIMATED) for i, p in enumerate(plans)]
        data.append(grid_trace({"type": "bar", "x": list(names), "y": values, "showlegend": False,
                                "marker": {"color": colors}, "error_y": {"type": "data", "symmetric": False,
                                                                         "array": up, "arrayminus": down}},
                               1, col, len(targets)))
        layout["shapes"].append(_hline(m.table_value(target.limit), col))
        layout[axis_name("y", col)]["title"] = title(m.title())
    for col in range(1, len(targets) + 1):
        layout[axis_name("x", col)].update(automargin=True, tickangle=-90)
    layout.update(height=600, margin={"t": 50, "b": 10})  # the plan names below take about 200 px
    return figure(data, layout)


def over_time_chart(over: dict, currency: str) -> go.Figure:
    """Each way to buy the fleet (``over_time``) hour by hour: replicas billed, cost per hour (low end of the
    offers) and the share of requests meeting their SLA."""
    periods, names = over["periods"], [r["strategy"] for r in over["strategies"]]
    rows = periods["rows"]
    hours = [(r["start_s"] + r["end_s"]) / 2.0 / 3600.0 for r in rows]
    layout = subplot_layout(3, 1, shared_xaxes=True, vertical_spacing=0.06,
                            titles=("Replicas billed", f"Cost per hour ({currency})", "Requests meeting their SLA"))
    data = []
    for k, name in enumerate(names):
        color = STRATEGY_COLORS[name]
        for row, values, hover in ((1, [r["replicas"][k] for r in rows], "%{y:,.1f} replicas"),
                                   (2, [r["cost_per_hour"][k] for r in rows], f"%{{y:,.2f}} {currency} an hour"),
                                   (3, [None if r["sla_attainment"][k] is None else 100 * r["sla_attainment"][k]
                                        for r in rows], "%{y:.1f}% met")):
            data.append(grid_trace({"type": "scatter", "x": list(hours), "y": values, "mode": "lines", "name": name,
                                    "legendgroup": name, "showlegend": row == 1,
                                    "line": {"shape": "hvh", "color": color, "dash": STRATEGY_DASHES[name]},
                                    "hovertemplate": f"{hover}<extra>{html.escape(name)}</extra>"}, row, 1))
    layout["yaxis"].update(title=title("replicas"), rangemode="tozero")
    layout["yaxis2"].update(title=title(f"{currency} an hour"), rangemode="tozero")
    layout["yaxis3"]["title"] = title("% of requests")
    layout["xaxis3"]["title"] = title("hours from the start of the traffic")
    layout.update(height=660, margin={"t": 90, "b": 10},
                  legend={"orientation": "h", "x": 0, "xanchor": "left", "yref": "container", "y": 1, "yanchor": "top"})
    return figure(data, layout)
