"""Scheduler Lab page: pick a preset, adjust load and policy, see per-class latency and SLA figures."""

import json
from pathlib import Path

import pandas as pd
import streamlit as st

import engine
from engine.config import read_toml
from engine.policies import POLICIES

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "data" / "scenarios"
DEFAULT_PRESET = "example.toml"


@st.cache_data(show_spinner="Simulating...", max_entries=64)
def run_scenario(scenario_json: str, base_dir: str) -> dict:
    """Simulate a scenario given as JSON (the cache key is the whole scenario)."""
    return engine.simulate(engine.load_scenario(json.loads(scenario_json), base_dir=base_dir)).summary


def class_table(summary: dict) -> pd.DataFrame:
    rows = []
    for name, m in [*summary["classes"].items(), ("overall", summary["overall"])]:
        rows.append({"class": name, "arrived": m["arrived"], "completed": m["completed"],
                     "timed out": m["timed_out"], "TTFT p50 (ms)": m["ttft_ms"]["p50"],
                     "TTFT p99 (ms)": m["ttft_ms"]["p99"], "E2E p50 (ms)": m["e2e_ms"]["p50"],
                     "E2E p99 (ms)": m["e2e_ms"]["p99"], "SLA met": m["sla_attainment"],
                     "output tok/s": m["output_tokens_per_s"]})
    return pd.DataFrame(rows).set_index("class")


st.title("Scheduler Lab")
presets = sorted(p.name for p in SCENARIO_DIR.glob("*.toml"))
preset = st.sidebar.selectbox("Preset scenario", presets, index=presets.index(DEFAULT_PRESET))
data = read_toml(SCENARIO_DIR / preset)
st.caption(data.get("name", preset))

arrival = data["workload"].get("arrival")
if arrival:
    arrival["rate_per_s"] = st.sidebar.slider("Arrival rate (req/s)", 0.1, 4.0 * arrival["rate_per_s"],
                                              float(arrival["rate_per_s"]), help="mean requests per second, all classes")
policy = data.setdefault("policy", {})
names = list(POLICIES)
policy["name"] = st.sidebar.selectbox("Policy", names, index=names.index(policy.get("name", "fifo")),
                                      format_func=lambda n: POLICIES[n].label)
policy["preemptive"] = st.sidebar.toggle("Preemptive", bool(policy.get("preemptive", False)),
                                         help="a more urgent request may evict a running one")
data["workload"]["num_requests"] = st.sidebar.number_input(
    "Requests to simulate", 1000, 200_000, int(data["workload"].get("num_requests", 20000)), step=1000)

try:
    summary = run_scenario(json.dumps(data, sort_keys=True), str(SCENARIO_DIR))
except engine.ScenarioError as exc:
    st.error(str(exc))
    st.stop()

system = summary["system"]
cols = st.columns(4)
cols[0].metric("Offered load (estimate)", f"{system['offered_load']:.2f}")
cols[1].metric("Mean batch", f"{system['mean_batch_size']:.1f}")
cols[2].metric("Preemptions", f"{system['preemptions']:,}")
cols[3].metric("Simulated time", f"{system['sim_time_s']:,.0f} s")
if system["unstable"]:
    st.warning("Unstable: the offered load reaches the server's capacity or the run hit a limit; "
               "latencies describe a growing backlog.")
st.dataframe(class_table(summary), width="stretch")
