"""Workload: define classes and their distributions with live histograms, or inspect and use a trace."""

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

import engine
from engine.scenario.caps import DEFAULT_CAPS, MIB
from engine.scenario.config import (Arrival, Trace, Workload, curve_points, field_bounds, field_label,
                                   field_meta)
from engine.scenario.rate_curve import DEFAULT_SHAPE, shape_curve, shape_source
from engine.scenario.table_names import names
from engine.scenario.errors import printable
from engine.scenario.metric_table import significant
from engine.scenario.registry import TRACE_FORMATS
from engine.sim.simulate import draw_requests
from engine.sim.trace_stats import per_minute_rate, trace_statistics
from engine.sim.traces import guess_format_from_header, read_trace_bytes
from ui import charts, runner, scenario_sidebar, state, tables, text, trace_store
from ui.widgets import field_help, field_input
from ui.workload_form import class_rows

SAMPLE_REQUESTS = 20000


@st.cache_data(max_entries=32, show_spinner="Drawing the workload...")
def drawn_workload(scenario_json: str) -> pd.DataFrame:
    """The requests the engine would simulate (at most SAMPLE_REQUESTS), as a frame."""
    data = json.loads(scenario_json)
    data["workload"]["num_requests"] = min(data["workload"].get("num_requests") or SAMPLE_REQUESTS, SAMPLE_REQUESTS)
    data.setdefault("server", {})["prefix_caching"] = False  # this page shows lengths and arrivals, not blocks
    scenario = state.validate(data)
    requests = draw_requests(scenario)
    names = [c.name for c in scenario.workload.classes]
    return pd.DataFrame({"arrival_s": requests.arrival_s, "prompt_tokens": requests.prompt_tokens,
                         "output_tokens": requests.output_tokens,
                         "class": pd.Categorical.from_codes(requests.class_id, names)})


RATE_MODES = ("Constant", "Shape of a day or week", "Points of a curve")
CURVE_KEYS = ("rate_curve", "shape", "curve_period_s", "curve_start_s")
POINT_COLUMNS = ("time (s)", "rate (req/s)")


POINTS_EDITOR = "w_points_editor"  # session key of the points editor's base (``points_editor``)


def flash_crowd(rate: float) -> list[list[float]]:
    """The first curve offered: the rate, three times it from 10:00 to 15:00, then the rate again (to four
    significant figures: 14.1, not 14.100000000000001)."""
    low, high = float(f"{rate:.4g}"), float(f"{3 * rate:.4g}")
    return [[0.0, low], [600.0, low], [600.0, high], [900.0, high], [900.0, low]]


def points_editor(points: list[list[float]], v: int) -> list[list[float]]:
    """The grid of a curve's points and what it holds now (rows with both a time and a rate).

    The grid keeps the rows it was first given as its base while the visitor edits: its edits are kept as changes
    to that base, and a grid given other rows is a new grid that forgets them (the second edit of a row would be
    lost, a half-typed row dropped). It is given new rows only when the scenario's points changed elsewhere (another
    page, a link, a preset) or its edits were forgotten (``shown``), never by its own edits or by an edit the
    scenario refused."""
    memo = st.session_state.get(POINTS_EDITOR)
    shown = memo is not None and f"w_points_{memo['v']}_{memo['generation']}" in st.session_state
    if memo is None or memo["v"] != v or points not in (memo["seen"], memo["out"]) or not shown:
        # a new grid; also when its widget's edits are gone (another page was open: Streamlit forgets the widgets
        # it did not draw), so that it starts from the points as edited rather than from a base without the edits
        memo = {"v": v, "base": points, "generation": memo["generation"] + 1 if memo else 0}
    edited = st.data_editor(pd.DataFrame(memo["base"], columns=list(POINT_COLUMNS)), num_rows="dynamic",
                            key=f"w_points_{v}_{memo['generation']}", width="stretch",
                            column_config={c: st.column_config.NumberColumn(c, min_value=0.0)
                                           for c in POINT_COLUMNS})
    out = [[float(t), float(r)] for t, r in edited.dropna().to_numpy()]
    st.session_state[POINTS_EDITOR] = {**memo, "seen": points, "out": out}
    return out


def rate_controls(arrival: dict, mean_rate: float, v: int) -> None:
    """The arrival rate: constant, a named shape scaled to a mean rate, or the user's points."""
    now = 1 if arrival.get("shape") else 2 if arrival.get("rate_curve") is not None else 0
    mode = st.radio("Rate over time", RATE_MODES, index=now, horizontal=True, key=f"w_rate_mode_{v}",
                    help="A shape or a curve changes the rate during the run; the Lab's rate slider then scales it.")
    if mode == RATE_MODES[0]:
        for key in CURVE_KEYS:
            arrival.pop(key, None)
        arrival["rate_per_s"] = field_input(Arrival, "rate_per_s", mean_rate, key=f"w_rate_{v}")
        return
    if mode == RATE_MODES[1]:
        for key in ("rate_curve", "curve_period_s"):
            arrival.pop(key, None)
        shapes = list(names("traffic_shapes"))
        cols = st.columns(3)
        with cols[0]:
            arrival["shape"] = field_input(Arrival, "shape", arrival.get("shape") or DEFAULT_SHAPE, key=f"w_shape_{v}",
                                           options=shapes)
        with cols[1]:
            arrival["rate_per_s"] = field_input(Arrival, "rate_per_s", mean_rate, key=f"w_rate_{v}",
                                                label="Mean arrival rate")
        with cols[2]:
            period_h = shape_curve(arrival["shape"]).period_s / 3600.0
            start_h = st.number_input(f"{field_label(Arrival, 'curve_start_s')} (h)", 0.0, period_h - 0.5,
                                      min(float(arrival.get("curve_start_s", 0.0)) / 3600.0, period_h - 0.5), 0.5,
                                      key=f"w_start_{v}", help=field_help(Arrival, "curve_start_s"))
            arrival["curve_start_s"] = start_h * 3600.0
        st.caption(text.plain(f"Source: {shape_source(arrival['shape'])}."))
        return
    if arrival.get("shape"):  # from the day or week chosen: its points at its mean rate, repeating as it does
        arrival["rate_curve"], arrival["curve_period_s"] = curve_points({**arrival, "rate_per_s": mean_rate})
    arrival.pop("shape", None)
    arrival.pop("rate_per_s", None)  # the points say the rate
    arrival["rate_curve"] = points_editor(arrival.get("rate_curve") or flash_crowd(mean_rate), v)
    arrival["curve_period_s"] = field_input(Arrival, "curve_period_s", arrival.get("curve_period_s"),
                                            key=f"w_period_{v}", placeholder="no repeat: the last rate holds")


def synthetic_section(data: dict, typed_rate: float, v: int) -> None:
    workload = data["workload"]
    if workload.get("arrival"):
        arrival = workload["arrival"]
        cols = st.columns(3)
        with cols[0]:
            arrival["process"] = field_input(Arrival, "process", arrival.get("process"), key=f"w_process_{v}")
        with cols[1]:
            if arrival["process"] == "gamma":
                arrival["cv"] = field_input(Arrival, "cv", arrival.get("cv") or 1.0, key=f"w_cv_{v}")
            else:
                arrival.pop("cv", None)
        rate_controls(arrival, typed_rate, v)
    class_rows(data, v, "w")


def run_span_s(typed: engine.Scenario) -> float:
    """How long the run's arrivals last: its duration, else the time its requests take at the curve's rate."""
    workload = typed.workload
    if workload.duration_s is not None:
        return workload.duration_s
    arrival = workload.arrival
    curve = arrival.curve()
    start = float(curve.cumulative(arrival.curve_start_s))
    return float(curve.inverse(start + workload.num_requests)) - arrival.curve_start_s


def rate_view(scenario: dict, frame: pd.DataFrame) -> None:
    """The rate a curve or a shape draws at over the run, with the drawn sample's per-minute rate; what the run
    covers of the curve."""
    typed = state.validate(scenario)
    curve = typed.workload.arrival.curve()
    if curve is None or typed.workload.trace is not None:
        return
    span_s = run_span_s(typed)
    start_s = typed.workload.arrival.curve_start_s
    st.plotly_chart(charts.rate_over_time(per_minute_rate(frame["arrival_s"].to_numpy()),
                                          lambda t: curve.rate_at(t + start_s), span_s,
                                          title="Arrival rate over the run"), width="stretch", key="rate_curve")
    peak = float(np.max(curve.rate_at(np.linspace(start_s, start_s + span_s, 2000))))
    shown = min(len(frame), SAMPLE_REQUESTS)
    st.caption(text.plain(
        f"Mean {typed.workload.arrival.rate_per_s:,.3g} req/s over the curve, peak {peak:,.3g} req/s in this run "
        f"({peak / typed.workload.arrival.rate_per_s:.2f}x); the run covers {span_s / 3600:,.2f} h"
        + (f" of the {curve.period_s / 3600:g}-h period" if curve.period_s else "")
        + f". The grey line is the first {shown:,} requests drawn."
        + (f" Set {field_label(Workload, 'duration_s')} in the Lab (workload.duration_s) to {curve.period_s:,.0f} s to "
           f"simulate all of it." if curve.period_s and span_s < curve.period_s else "")))


def synthetic_charts(scenario: dict) -> None:
    try:
        frame = drawn_workload(runner.canonical(scenario))
    except engine.ScenarioError as exc:
        text.error(exc)
        return
    codes = {name: k for k, name in enumerate(frame["class"].cat.categories)}
    for name, group in frame.groupby("class", observed=True):
        left, right = st.columns(2)
        color = charts.class_color(codes[name])
        left.plotly_chart(charts.histogram(group["prompt_tokens"].to_numpy(), f"{name}: prompt length",
                                           "prompt tokens", color=color),
                          width="stretch", key=f"hist_prompt_{name}")
        right.plotly_chart(charts.histogram(group["output_tokens"].to_numpy(), f"{name}: output length",
                                            "output tokens", color=color),
                           width="stretch", key=f"hist_output_{name}")
    rate_view(scenario, frame)
    gaps_ms = frame["arrival_s"].diff().dropna().to_numpy() * 1000.0
    st.plotly_chart(charts.histogram(gaps_ms, "Time between arrivals", "inter-arrival time (ms)"), width="stretch",
                    key="hist_gaps")
    stats_table(trace_statistics(frame["arrival_s"].to_numpy(), frame["prompt_tokens"].to_numpy(),
                                 frame["output_tokens"].to_numpy()))


def stats_table(stats: dict) -> None:
    cols = st.columns(4)
    cols[0].metric("Requests", f"{stats['requests']:,}")
    cols[1].metric("Rate (req/s)", significant(stats["rate_per_s"]))
    cols[2].metric("Inter-arrival cv", f"{stats['iat_cv']:.2f}",
                   help="Coefficient of variation of the gaps between arrivals: 1 for Poisson, larger when burstier.")
    cols[3].metric("Per-minute cv", f"{stats['minute_cv']:.2f}",
                   help="Coefficient of variation of the requests per minute: how much the load moves.")
    if stats.get("bucket_s"):
        st.warning(text.plain(
            f"The timestamps come in {stats['bucket_s']:,.3g}-second buckets: many requests share one, so the "
            f"inter-arrival cv measures the bucketing, not the traffic. Read the per-minute cv, and spread them "
            f"with Jitter of about {stats['bucket_s'] * 1000:,.0f} ms."))
    stats_names = ("mean", "p50", "p90", "p99", "max")
    lengths = pd.DataFrame({name: [round(stats[f"{kind}_{name}"]) for kind in ("prompt", "output")]
                            for name in stats_names}, index=["Prompt length (tokens)", "Output length (tokens)"])
    st.dataframe(lengths, width="stretch", placeholder=tables.MISSING,
                 column_config={name: st.column_config.NumberColumn(format="localized") for name in stats_names})


@st.cache_data(max_entries=4, ttl=DEFAULT_CAPS.upload_store_s, show_spinner="Reading the trace...")
def uploaded_trace_view(file_id: str, fmt: str, display_name: str, _content: bytes) -> tuple[dict, pd.DataFrame]:
    """Statistics and per-minute rate of an uploaded trace, read and checked in memory once per upload
    (``file_id``) and format, not at every rerun of the page."""
    trace = read_trace_bytes(_content, fmt, display_name, DEFAULT_CAPS)
    return trace_statistics(trace.arrival_s, trace.prompt_tokens, trace.output_tokens), \
        per_minute_rate(trace.arrival_s)


def trace_section(data: dict) -> None:
    upload = st.file_uploader("Upload a trace", type=["csv", "jsonl", "json"], key="trace_upload",
                              max_upload_size=DEFAULT_CAPS.upload_mib,
                              help="CSV arrival_s,prompt_tokens,output_tokens[,class]; Azure LLM 2023 CSV; "
                                   "Mooncake JSONL")
    if upload is None:
        return
    content, name = upload.getvalue(), printable(upload.name, 60)
    if len(content) > DEFAULT_CAPS.upload_mib * MIB:
        text.error(f"{name} has {len(content) / MIB:,.1f} MiB, more than the limit of {DEFAULT_CAPS.upload_mib} MiB "
                   f"for an uploaded trace (upload_mib)")
        return
    suffix = Path(upload.name).suffix.lower()
    guessed = "mooncake" if suffix in (".jsonl", ".json") else guess_format_from_header(content[:4096])
    fmt = st.selectbox("Format", TRACE_FORMATS, index=TRACE_FORMATS.index(guessed))
    try:
        stats, per_minute = uploaded_trace_view(upload.file_id, fmt, name, content)
    except engine.ScenarioError as exc:
        text.error(exc)
        return
    stats_table(stats)
    st.plotly_chart(charts.rate_over_time(per_minute), width="stretch")
    low, high = field_bounds(field_meta(Trace, "jitter_ms")[1])
    jitter = st.number_input("Jitter (ms)", low, high, min(high, (stats.get("bucket_s") or 0.0) * 1000.0),
                             help="Spread bucketed timestamps over their bucket (Mooncake: 3,000 ms buckets).")
    st.button("Use this trace in the Lab", type="primary", key="use_trace", on_click=use_trace,
              args=(data, content, {"format": fmt, "jitter_ms": jitter}, name,
                    f"The Lab now replays {name} ({stats['requests']:,} requests)."))
    if st.session_state.get(state.TRACE_NOTICE):  # the trace was just put in use: the Lab replays it, and says so
        st.switch_page("pages/lab.py")


def use_trace(data: dict, content: bytes, trace: dict, display: str, notice: str) -> None:
    """Button callback: store the validated trace and replay it, under its store name, instead of synthetic
    arrivals (all of it)."""
    name = trace_store.store(content, ".jsonl" if trace["format"] == "mooncake" else ".csv")
    st.session_state.setdefault("trace_names", {})[name] = display
    edited = copy.deepcopy(data)
    edited["workload"]["trace"] = {"path": name, **trace}
    edited["workload"].pop("duration_s", None)
    edited["workload"]["num_requests"] = None
    if state.replace(edited):
        st.session_state[state.TRACE_NOTICE] = notice


def back_to_synthetic(data: dict) -> None:
    """Button callback: drop the trace and use the scenario's synthetic arrivals again."""
    edited = copy.deepcopy(data)
    edited["workload"].pop("trace")
    state.replace(edited)


sidebar_summary = scenario_sidebar.render()
st.title("Workload")
base = state.current_or_default()
data = copy.deepcopy(base)
v = state.version()
if data["workload"].get("trace"):
    stored = data["workload"]["trace"]["path"]
    shown_name = st.session_state.get("trace_names", {}).get(stored, f"stored as {stored}")
    st.info(text.plain(f"The scenario replays an uploaded trace ({shown_name}): the synthetic arrivals and "
                       f"lengths below are not used meanwhile."))
    if data["workload"].get("arrival"):
        st.button("Back to synthetic arrivals", on_click=back_to_synthetic, args=(data,))

synthetic_tab, trace_tab = st.tabs(["Classes and distributions", "Trace"])
with synthetic_tab:
    synthetic_section(data, state.validate(base).workload.arrival.rate_per_s if data["workload"].get("arrival")
                      else 0.0, v)
    shown = state.current() if state.edited(data, base) and state.update(data) else base
    scenario_sidebar.summary(sidebar_summary)
    synthetic_charts(shown)
with trace_tab:
    trace_section(shown)
