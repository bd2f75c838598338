"""Plotly figures of the Lab and Workload pages (pure functions of DataFrames).

Class names come from the scenario, so every name a figure shows passes through ``chart_text`` (Plotly
renders a subset of HTML, links included, in labels). The Lab's figures are written as plain dicts and wrapped once
without Plotly's property checks (``engine.decide.figure_spec``: they took half of a cached Lab page's time); the
figures of pages that are drawn rarely still use Plotly's validating API."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from engine.decide.bill import STRATEGY_COLORS, STRATEGY_DASHES
from engine.decide.figure_spec import array, axis_name, axis_ref, figure, grid_trace, subplot_layout, title
from engine.scenario.config import OVERALL
from engine.scenario.metric_table import DURATION, metric
from engine.sim.policies import POLICIES
from engine.sim.simulate import batch_column, waiting_column
from ui.text import chart_text

CDF_LABELS = {"ttft_ms": "TTFT", "e2e_ms": "end-to-end latency", "tpot_ms": "TPOT", "queue_ms": "queue delay"}
COLORS = px.colors.qualitative.Plotly
# One colour per policy on every chart of every page (by the registry's order, not by what a chart shows).
POLICY_COLORS = {name: COLORS[i % len(COLORS)] for i, name in enumerate(POLICIES)}
# Classes take their colours, in the scenario's class order, from a palette that no policy uses.
CLASS_COLORS = px.colors.qualitative.Dark2


def class_color(index: int) -> str:
    """Colour of the scenario's ``index``-th class on every chart."""
    return CLASS_COLORS[index % len(CLASS_COLORS)]


# Legends go above the plot, in rows as wide as the figure: at the side they take a phone's whole width, over the
# bars; at the foot Plotly makes room for the legend or for the x axis, not both.
LEGEND_ABOVE = dict(orientation="h", x=0, xanchor="left", yref="container", y=1, yanchor="top", font=dict(size=11))


def legend_above() -> dict:
    """A fresh copy of ``LEGEND_ABOVE`` (a figure built without validation holds the dict it is given)."""
    return dict(LEGEND_ABOVE, font=dict(LEGEND_ABOVE["font"]))


def axis_title(key: str, currency: str = "") -> str:
    return metric(key).title(currency)


def comparison_bars(frame: pd.DataFrame, key: str, labels: dict[str, str], currency: str = "") -> go.Figure:
    """Grouped bars: one group per class, one bar per policy (fleet costs: the overall rows only)."""
    overall = frame["class"] == OVERALL
    shown = frame[overall if key.startswith("cost_") else ~overall]
    m = metric(key)
    data = [{"type": "bar", "x": [chart_text(c) for c in group["class"]], "y": [m.table_value(v) for v in group[key]],
             "name": labels.get(policy, policy), **_marker_color(POLICY_COLORS.get(policy))}
            for policy, group in shown.groupby("policy", sort=False)]
    layout = {"barmode": "group", "height": 520, "margin": {"t": 30, "b": 60}, "yaxis": {"title": title(
        m.title(currency))}, "xaxis": {"title": title("Class")}, "legend": legend_above()}
    if m.kind == DURATION:  # a starved class may wait orders of magnitude longer than the others
        log_axis_spec(layout, shown[key])
    return figure(data, layout)


def _marker_color(color: str | None) -> dict:
    """A trace's ``marker.color`` when there is one (Plotly leaves an unset colour out of the figure)."""
    return {} if color is None else {"marker": {"color": color}}


def load_curves(frame: pd.DataFrame, key: str, current_rate: float, labels: dict[str, str],
                rate_title: str = "arrival rate (req/s)") -> go.Figure:
    """Metric against arrival rate (req/s; ``rate_title`` names it), one panel per class, one line per policy; the
    current rate dashed.

    Latencies use a log axis: past saturation they grow by orders of magnitude.
    """
    shown = frame[frame["class"] != OVERALL]
    classes = list(dict.fromkeys(shown["class"]))
    # The arrival-rate title under the first panel only (a title per panel met its neighbour's on a phone) and
    # each panel's class in its top left corner (above the panels it met the legend), where the curves start low.
    layout = subplot_layout(1, len(classes), shared_yaxes=True)
    layout["xaxis"]["title"], layout["yaxis"]["title"] = title(rate_title), title(axis_title(key))
    layout["annotations"] = [
        {"text": chart_text(name), "xref": f"{axis_ref('x', col)} domain", "yref": f"{axis_ref('y', col)} domain",
         "x": 0.02, "y": 0.98, "xanchor": "left", "yanchor": "top", "showarrow": False, "font": {"weight": "bold"}}
        for col, name in enumerate(classes, start=1)]
    layout["shapes"] = [{"type": "line", "x0": current_rate, "x1": current_rate, "xref": axis_ref("x", col),
                         "y0": 0, "y1": 1, "yref": f"{axis_ref('y', col)} domain",
                         "line": {"dash": "dash", "color": "grey"}} for col in range(1, len(classes) + 1)]
    data = [grid_trace({"type": "scatter", "x": array(group["rate_per_s"]),
                        "y": [metric(key).table_value(v) for v in group[key]], "mode": "lines+markers",
                        "name": labels.get(policy, policy), "legendgroup": policy, "showlegend": col == 1,
                        "line": _color(POLICY_COLORS.get(policy))}, 1, col, len(classes))
            for col, name in enumerate(classes, start=1)
            for policy, group in shown[shown["class"] == name].groupby("policy", sort=False)]
    if metric(key).kind == DURATION:
        log_axis_spec(layout, shown[key])
    layout.update(height=560, margin={"t": 30, "b": 60}, legend=legend_above())
    return figure(data, layout)


def _color(color: str | None) -> dict:
    """A line's colour when there is one (Plotly leaves an unset colour out of the figure)."""
    return {} if color is None else {"color": color}


LOG_FROM_RATIO = 30.0  # values this many times apart get a log axis; closer ones a linear one


def log_axis(fig: go.Figure, values, axis: str = "y") -> None:
    """A log axis when ``values`` span more than ``LOG_FROM_RATIO`` (latencies past saturation grow by orders
    of magnitude), labelled once per power of ten (a span over 10x holds at least one); else a linear axis."""
    if not _spans_decades(values):
        return
    (fig.update_yaxes if axis == "y" else fig.update_xaxes)(type="log", dtick=1)


def log_axis_spec(layout: dict, values, axis: str = "y") -> None:
    """``log_axis`` on a figure's layout dict: every ``axis`` axis of ``layout`` (at least the first) turns
    logarithmic when ``values`` span more than ``LOG_FROM_RATIO``."""
    if not _spans_decades(values):
        return
    first = axis_name(axis, 1)
    for name in [first] + [k for k in layout if k.startswith(first) and k != first]:
        layout.setdefault(name, {}).update(type="log", dtick=1)


def _spans_decades(values) -> bool:
    """True when the positive numbers of ``values`` span more than ``LOG_FROM_RATIO``."""
    shown = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce").dropna(), dtype=float)
    shown = shown[shown > 0]
    return len(shown) > 0 and shown.max() / shown.min() >= LOG_FROM_RATIO


def latency_cdf(requests: pd.DataFrame, column: str) -> go.Figure:
    """Empirical CDF of a latency column per class (completed requests)."""
    codes = {name: k for k, name in enumerate(requests["class"].cat.categories)}
    data = []
    for name, group in requests.groupby("class", observed=True):
        values = np.sort(group[column].dropna().to_numpy())
        if len(values) == 0:
            continue
        step = max(1, len(values) // 1000)  # at most ~1,000 points per line
        data.append({"type": "scatter", "x": values[::step], "y": np.arange(1, len(values) + 1)[::step] / len(values),
                     "mode": "lines", "name": chart_text(name), "line": {"color": class_color(codes[name])}})
    layout = {"height": 320, "margin": {"t": 30, "b": 10}, "xaxis": {"title": title(
        f"{CDF_LABELS.get(column, column)} (ms)")}, "yaxis": {"title": title("fraction of requests")}}
    log_axis_spec(layout, requests[column].dropna(), "x")
    return figure(data, layout)


TIMELINE_MAX_POINTS = 1500


def timeline(series: pd.DataFrame, classes: list[str], kv_capacity_tokens: int | None,
             window_s: list[float] | None = None) -> go.Figure:
    """Waiting requests per class, batch composition (stacked), KV use and preemptions over time; the
    steady-state window (``window_s``), over which rates and utilisation are measured, shaded.

    Lines show at most ``TIMELINE_MAX_POINTS`` evenly spaced iterations (zoom reveals no more: the
    browser would choke on hundreds of thousands of points); preemption markers come from every row.
    """
    preempted = series[series["preemptions"] > 0]
    series = series.iloc[:: max(1, len(series) // TIMELINE_MAX_POINTS)]
    layout = subplot_layout(3, 1, shared_xaxes=True, vertical_spacing=0.06,
                            titles=("waiting requests", "batch composition", "KV cache"))
    time_s, data = array(series["time_s"]), []
    for k, name in enumerate(classes):
        color, label = class_color(k), chart_text(name)
        data.append(grid_trace({"type": "scatter", "x": time_s, "y": array(series[waiting_column(name)]),
                                "name": f"{label} waiting", "line": {"color": color}, "legendgroup": label}, 1, 1))
        data.append(grid_trace({"type": "scatter", "x": time_s, "y": array(series[batch_column(name)]),
                                "name": f"{label} running", "stackgroup": "batch", "line": {"color": color},
                                "legendgroup": label}, 2, 1))
    scale = 100.0 / kv_capacity_tokens if kv_capacity_tokens else 1.0
    data.append(grid_trace({"type": "scatter", "x": time_s, "y": array(series["kv_used_tokens"] * scale),
                            "name": "KV used", "line": {"color": "black"}}, 3, 1))
    if len(preempted):
        data.append(grid_trace({"type": "scatter", "x": array(preempted["time_s"]), "mode": "markers",
                                "y": array(preempted["kv_used_tokens"] * scale), "name": "preemption",
                                "marker": {"symbol": "x", "color": "red", "size": 7}}, 3, 1))
    kv_title = "KV used (% of capacity)" if kv_capacity_tokens else "KV used (tokens)"
    for row, text in enumerate(("requests", "sequences", kv_title), start=1):
        layout[axis_name("y", row)]["title"] = title(text)
    layout["xaxis3"]["title"] = title("simulated time (s)")
    if window_s:
        steady_window(layout, window_s, rows=3)
    layout.update(height=640, margin={"t": 60, "b": 10})
    return figure(data, layout)


def steady_window(layout: dict, window_s: list[float], rows: int) -> None:
    """The steady-state window shaded in every panel of a one-column grid (as ``add_vrect(row="all")``), named
    above the first panel's title."""
    layout["shapes"] = [{"type": "rect", "x0": window_s[0], "x1": window_s[1], "xref": axis_ref("x", row),
                         "y0": 0, "y1": 1, "yref": f"{axis_ref('y', row)} domain", "fillcolor": "#2ca02c",
                         "opacity": 0.07, "line": {"width": 0}} for row in range(1, rows + 1)]
    layout["annotations"].append({"x": (window_s[0] + window_s[1]) / 2, "y": 1.0, "yref": "paper",
                                  "yanchor": "bottom", "showarrow": False, "yshift": 22,  # above the first title
                                  "text": "steady state: rates and utilisation are measured here",
                                  "font": {"color": "#2ca02c"}})


def share_bars(classes: dict, weights: dict) -> go.Figure:
    """Fair queuing: each class's achieved share of GPU service against its configured weight share."""
    names = list(classes)
    total = sum(weights[n] for n in names)
    shown = [chart_text(n) for n in names]
    data = [{"type": "bar", "x": shown, "y": [weights[n] / total for n in names], "name": "configured (weight share)",
             "marker": {"color": "#BBBBBB"}},
            {"type": "bar", "x": list(shown), "y": [classes[n]["service_share"] or 0.0 for n in names],
             "name": "achieved", "marker": {"color": "#2A3F5F"}}]
    return figure(data, {"barmode": "group", "height": 280, "margin": {"t": 30, "b": 10},
                         "yaxis": {"tickformat": ".0%", "title": title("share of GPU service")},
                         "xaxis": {"title": title("class")},
                         "title": title("GPU service share per class: a class that asks for less than its weight's "
                                        "share leaves the rest to the others")})


def heatmap(grid: pd.DataFrame, cls: str, key: str) -> go.Figure:
    """Metric ``key`` of class ``cls`` over the (alpha, gamma) grid of the dynamic policy."""
    m = metric(key)
    table = grid[grid["class"] == cls].pivot(index="gamma", columns="alpha", values=key)
    data = [{"type": "heatmap", "z": [[m.table_value(v) for v in row] for row in table.to_numpy()],
             "x": [str(a) for a in table.columns], "y": [str(g) for g in table.index],
             "colorbar": {"title": title(m.title())}, "texttemplate": "%{z:,}"}]
    return figure(data, {"height": 300, "margin": {"t": 40, "b": 10}, "title": title(f"{chart_text(cls)}: {m.title()}"),
                         "xaxis": {"title": title("alpha (waiting)"), "type": "category"},
                         "yaxis": {"title": title("gamma (tier)"), "type": "category"}})


def histogram(values: np.ndarray, title: str, x_title: str, log_x: bool = False, color: str | None = None
              ) -> go.Figure:
    """Histogram of ``values`` (requests per bin); a constant is one labelled bar, not a block of 60 bins."""
    if len(values) and values.min() == values.max():
        fig = go.Figure(go.Bar(x=[f"{values[0]:,.0f}"], y=[len(values)], text=[f"all {len(values):,}"],
                               textposition="auto", width=[0.3], marker_color=color))
        fig.update_xaxes(type="category")
    else:
        fig = go.Figure(go.Histogram(x=values, nbinsx=60, marker_color=color))
        if log_x:
            fig.update_xaxes(type="log")
    fig.update_layout(height=260, margin=dict(t=30, b=10), title=chart_text(title), bargap=0.02, showlegend=False,
                      xaxis_title=x_title, yaxis_title="requests")
    return fig


def time_axis(span_s: float) -> tuple[float, str]:
    """Seconds per unit and the unit's name for a time axis over ``span_s``: hours past 3 hours, else minutes."""
    return (3600.0, "hours") if span_s > 3 * 3600 else (60.0, "minutes")


def rate_over_time(counts: pd.DataFrame, rate_at=None, span_s: float | None = None,
                   title: str = "Arrival rate per minute", x_title: str = "minute of the trace") -> go.Figure:
    """Requests per second in each minute of ``counts`` (``trace_stats.per_minute_rate``); with ``rate_at`` (the
    rate at times from the start of the run) the rate the arrivals are drawn at over ``span_s`` seconds, the axis
    in minutes or hours."""
    scale = 60.0
    if rate_at is not None:
        scale, unit = time_axis(span_s)
        x_title = f"{unit} from the start of the run"
    fig = go.Figure(go.Scatter(x=counts["minute"] * 60.0 / scale, y=counts["requests_per_s"], mode="lines",
                               name="drawn (per minute)", line=dict(color="#9AA5B1")))
    if rate_at is not None:
        times = np.linspace(0.0, span_s, 600)
        fig.add_trace(go.Scatter(x=times / scale, y=rate_at(times), mode="lines", name="rate curve",
                                 line=dict(color="#2A3F5F", width=2.5)))
    fig.update_layout(height=280, margin=dict(t=30, b=10), title=title, xaxis_title=x_title,
                      yaxis_title="arrival rate (req/s)", showlegend=rate_at is not None,
                      legend=dict(orientation="h", x=1, xanchor="right", y=1.02, yanchor="bottom"))
    return fig


def window_chart(windows: list[dict], classes: list[str], scaled: bool = False) -> go.Figure:
    """Per window of the run: the load its arrivals offered (bars, a line at 1 = the fleet's capacity) and each
    class's SLA attainment (lines in the class colours; gaps where a window judged none); with an autoscaler
    (``scaled``), the replicas billed in each window below them."""
    frame = pd.DataFrame(windows)
    scale, unit = time_axis(float(frame["end_s"].iloc[-1]))
    middle = (frame["start_s"] + frame["end_s"]) / 2.0 / scale
    width = float(frame["end_s"].iloc[0] - frame["start_s"].iloc[0]) / scale
    capacity = "the replicas taking requests" if scaled else "the fleet's capacity"
    titles = (f"offered load per window (an estimate; 1 = {capacity})", "SLA attainment of the window's arrivals") \
        + (("replicas billed (up, provisioning or draining; mean over the window)",) if scaled else ())
    rows, x = len(titles), array(middle)
    layout = subplot_layout(rows, 1, shared_xaxes=True, vertical_spacing=0.08, titles=titles)
    loads = frame["offered_load"]
    data = [grid_trace({"type": "bar", "x": x, "y": array(loads), "width": width * 0.95, "name": "offered load",
                        "showlegend": False, "marker": {"color": np.where(loads >= 1.0, "#D62728", "#9AA5B1").tolist()},
                        "customdata": frame[["arrived", "mean_waiting"]].to_numpy(),
                        "hovertemplate": "load %{y:.2f}<br>%{customdata[0]:,} arrived<br>%{customdata[1]:,.1f} "
                                         "waiting on average<extra></extra>"}, 1, 1)]
    layout["shapes"] = [{"type": "line", "x0": 0, "x1": 1, "xref": "x domain", "y0": 1.0, "y1": 1.0, "yref": "y",
                         "line": {"dash": "dash", "color": "#D62728"}}]  # add_hline(y=1.0) in the first panel
    for k, name in enumerate(classes):
        values = [row["sla_attainment"][name] for row in windows]
        if all(v is None for v in values):
            continue
        data.append(grid_trace({"type": "scatter", "x": x, "y": [None if v is None else 100.0 * v for v in values],
                                "mode": "lines", "name": chart_text(name), "line": {"color": class_color(k)},
                                "connectgaps": False}, 2, 1))
    if scaled:
        data.append(grid_trace({"type": "scatter", "x": x, "y": array(frame["replicas"]), "mode": "lines",
                                "line": {"shape": "hvh", "color": "#2A3F5F"}, "name": "replicas", "showlegend": False,
                                "hovertemplate": "%{y:.2f} replicas<extra></extra>"}, 3, 1))
        layout["yaxis3"].update(title=title("replicas"), rangemode="tozero")
    layout["yaxis"].update(title=title("load"), rangemode="tozero")
    layout["yaxis2"].update(title=title("SLA met (%)"), range=[0, 105])
    layout[axis_name("x", rows)]["title"] = title(f"{unit} from the start of the run")
    layout.update(height=460 + 180 * (rows - 2), margin={"t": 60, "b": 10}, legend=legend_above(), bargap=0)
    return figure(data, layout)


def cost_over_time(windows: list[dict], bills: list, currency: str) -> go.Figure:
    """What each way to buy the fleet (``decide.bill.StrategyBill``) costs per hour in each window of the run (the
    low end of its offers' prices)."""
    frame = pd.DataFrame(windows)
    scale, unit = time_axis(float(frame["end_s"].iloc[-1]))
    middle = array((frame["start_s"] + frame["end_s"]) / 2.0 / scale)
    data = [{"type": "scatter", "x": middle, "y": array(bill.cost_per_hour), "mode": "lines", "name": bill.strategy,
             "line": {"shape": "hvh", "color": STRATEGY_COLORS[bill.strategy], "dash": STRATEGY_DASHES[bill.strategy]},
             "hovertemplate": f"%{{y:,.2f}} {currency} an hour<extra>{bill.strategy}</extra>"} for bill in bills]
    return figure(data, {"height": 320, "margin": {"t": 40, "b": 10}, "legend": legend_above(),
                         "xaxis": {"title": title(f"{unit} from the start of the run")},
                         "yaxis": {"title": title(f"cost per hour ({currency})"), "rangemode": "tozero"}})


def tune_surface(surface: dict, panel: dict) -> go.Figure:
    """One metric of the tuner's response surface: a heatmap over its two knobs (a line over one), the chosen
    point starred, cells or points that break a constraint crossed out."""
    m = metric(panel["metric"])
    axes, values = surface["axes"], [m.table_value(v) for v in panel["values"]]
    title = f"{chart_text(panel['class'])}: {m.title()}"
    if len(axes) == 1:
        xs = axes[0]["values"]
        fig = go.Figure(go.Scatter(x=xs, y=values, mode="lines+markers", name=m.label, showlegend=False,
                                   marker=dict(symbol=["circle" if ok else "x" for ok in surface["feasible"]])))
        chosen = values[xs.index(surface["best"][0])]
        fig.add_trace(go.Scatter(x=[surface["best"][0]], y=[chosen], mode="markers", name="chosen",
                                 marker=dict(symbol="star", size=16, color="gold", line=dict(color="black", width=1))))
        fig.update_layout(xaxis_title=axes[0]["label"], yaxis_title=m.title())
    else:
        xs, ys = [f"{v:,g}" for v in axes[0]["values"]], [f"{v:,g}" for v in axes[1]["values"]]
        z = [values[row * len(xs):(row + 1) * len(xs)] for row in range(len(ys))]
        fig = go.Figure(go.Heatmap(z=z, x=xs, y=ys, colorbar=dict(title=m.title()), texttemplate="%{z:,}",
                                   reversescale=not m.lower_is_better))
        broken = [(xs[i % len(xs)], ys[i // len(xs)]) for i, ok in enumerate(surface["feasible"]) if not ok]
        if broken:
            fig.add_trace(go.Scatter(x=[b[0] for b in broken], y=[b[1] for b in broken], mode="markers",
                                     name="breaks a constraint", marker=dict(symbol="x-thin", size=14,
                                                                               line=dict(width=2, color="white"))))
        fig.add_trace(go.Scatter(x=[f"{surface['best'][0]:,g}"], y=[f"{surface['best'][1]:,g}"], mode="markers",
                                 name="chosen", marker=dict(symbol="star", size=18, color="gold",
                                                            line=dict(color="black", width=1))))
        fig.update_layout(xaxis_title=axes[0]["label"], yaxis_title=axes[1]["label"], xaxis_type="category",
                          yaxis_type="category")
    fig.update_layout(height=360, margin=dict(t=40, b=10), title=title,
                      legend=dict(orientation="h", yanchor="bottom", y=-0.35))
    return fig
