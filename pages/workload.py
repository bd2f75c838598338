"""Workload: define classes and their distributions with live histograms, or inspect and use a trace."""

import copy
import json
from pathlib import Path

import pandas as pd
import streamlit as st

import engine
from engine.scenario.caps import DEFAULT_CAPS, MIB
from engine.scenario.config import Arrival, Trace, field_bounds, field_meta
from engine.scenario.errors import printable
from engine.scenario.metric_table import significant
from engine.scenario.registry import TRACE_FORMATS
from engine.sim.simulate import draw_requests
from engine.sim.trace_stats import per_minute_rate, trace_statistics
from engine.sim.traces import guess_format_from_header, read_trace_bytes
from ui import charts, runner, scenario_sidebar, state, tables, text, trace_store
from ui.widgets import field_input
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


def synthetic_section(data: dict, v: int) -> None:
    workload = data["workload"]
    if workload.get("arrival"):
        arrival = workload["arrival"]
        cols = st.columns(3)
        with cols[0]:
            arrival["process"] = field_input(Arrival, "process", arrival.get("process"), key=f"w_process_{v}")
        with cols[1]:
            arrival["rate_per_s"] = field_input(Arrival, "rate_per_s", arrival.get("rate_per_s"), key=f"w_rate_{v}")
        with cols[2]:
            if arrival["process"] == "gamma":
                arrival["cv"] = field_input(Arrival, "cv", arrival.get("cv") or 1.0, key=f"w_cv_{v}")
            else:
                arrival.pop("cv", None)
    class_rows(data, v, "w")


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
    jitter = st.number_input("Jitter (ms)", low, high, 3000.0 if fmt == "mooncake" else 0.0,
                             help="Spread quantised timestamps (Mooncake: about 3,000 ms buckets).")
    st.button("Use this trace in the Lab", type="primary", key="use_trace", on_click=use_trace,
              args=(data, content, {"format": fmt, "jitter_ms": jitter}, name,
                    f"The Lab now replays {name} ({stats['requests']:,} requests)."))
    notice = st.session_state.pop("trace_notice", None)
    if notice:
        st.success(text.plain(notice))


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
        st.session_state["trace_notice"] = notice


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
    synthetic_section(data, v)
    shown = state.current() if state.edited(data, base) and state.update(data) else base
    scenario_sidebar.summary(sidebar_summary)
    synthetic_charts(shown)
with trace_tab:
    trace_section(shown)
