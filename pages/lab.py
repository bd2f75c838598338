"""Scheduler Lab: move the load, the policy and the server limits; see latency, SLA and throughput."""

import copy
import logging

import streamlit as st

import engine
from engine.calibration import badge
from engine.config import WEIGHT_RANGE, Fleet, Policy, RequestClass, Server, Workload
from engine.cost import cost_columns
from engine.metrics import flat_metrics
from engine.simulate import load_text, stop_explanation
from engine.policies import POLICIES, params_of
from ui import charts, cost_panel, guard, hardware_choices, runner, scenario_sidebar, state, text
from ui.trace_store import APP_ORIGIN
from ui.widgets import field_bounds, field_input, field_meta

BATCHING_KEYS = ("max_batch_size", "max_batched_tokens", "min_batch_size", "wait_timeout_ms")
FIXED_KEYS = ("step_time_ms", "kv_capacity_tokens")
ROOFLINE_KEYS = ("gpu", "model", "quant", "kv_quant", "tensor_parallel", "gpu_memory_utilization")
MEMORY_KEYS = ("block_size_tokens", "kv_allocation", "max_seq_len")
CLASS_KEYS = ("share", "priority", "tier_weight", "sla_ttft_ms", "sla_e2e_ms", "timeout_ms")
LOWER_IS_BETTER = ("ttft", "e2e", "tpot", "queue", "timed_out")
KPIS = (("TTFT p50", "ttft_p50_ms"), ("TTFT p99", "ttft_p99_ms"), ("E2E p50", "e2e_p50_ms"),
        ("E2E p99", "e2e_p99_ms"), ("SLA met", "sla_attainment"), ("Timed out", "timed_out"),
        ("Output tok/s", "output_tokens_per_s"), ("Queue p99", "queue_p99_ms"))
POLICY_LABELS = {name: spec.label for name, spec in POLICIES.items()}
LOG = logging.getLogger(__name__)


def load_controls(data: dict, v: int) -> None:
    workload = data["workload"]
    arrival = workload.get("arrival")
    if arrival and not workload.get("trace"):
        rate = float(arrival["rate_per_s"])
        anchor = st.session_state.setdefault(f"rate_anchor_{v}", rate)
        arrival["rate_per_s"] = st.slider("Arrival rate (req/s)", min(round(anchor / 20, 3), rate),
                                          max(round(anchor * 3, 3), rate), rate, key=f"rate_{v}",
                                          help="mean arrivals per second over all classes")
    else:
        st.caption("Arrivals replay a trace (see the Workload page).")
    low, high = field_bounds(field_meta(Workload, "num_requests")[1])
    workload["num_requests"] = st.number_input("Requests simulated", int(low), int(high),
                                               int(workload.get("num_requests") or 20000), step=1000,
                                               key=f"requests_{v}", help="the run ends after this many arrivals")
    for i, cls in enumerate(workload["classes"]):
        with st.popover(f"Class {text.plain(cls['name'])}", width="stretch"):
            for key in CLASS_KEYS:
                cls[key] = field_input(RequestClass, key, cls.get(key), key=f"class_{i}_{key}_{v}")
    total = sum(c["share"] or 0.0 for c in workload["classes"])
    if total > 0 and abs(total - 1.0) > 1e-9:
        split = " / ".join(f"{(c['share'] or 0.0) / total:.0%}" for c in workload["classes"])
        st.caption(f"Shares sum to {total:g}; they are rescaled to sum to 1: arrivals split {split}.")


def policy_controls(data: dict, v: int) -> None:
    policy = data.setdefault("policy", {})
    policy["name"] = st.selectbox("Policy", list(POLICIES), index=list(POLICIES).index(policy.get("name", "fifo")),
                                  format_func=POLICY_LABELS.get, key=f"policy_{v}",
                                  help="how waiting and running requests are ordered and who is preempted")
    spec = POLICIES[policy["name"]]
    st.caption(f"Orders by {spec.key}. Use it when {spec.use_when}.")
    for param in params_of(policy["name"]):
        key = f"policy_{param.key}_{v}"
        if param.key == "weights":
            policy["weights"] = weight_inputs(data, policy.get("weights"), key)
        elif param.slider:
            low, high, step = param.slider
            _, meta, default = field_meta(Policy, param.key)
            value = float(policy.get(param.key, default))
            policy[param.key] = st.slider(f"{param.label}" + (f" ({meta['unit']})" if meta["unit"] else ""),
                                          min(low, value), max(high, value), value, step, key=key, help=meta["help"])
        else:
            policy[param.key] = field_input(Policy, param.key, policy.get(param.key), key=key, label=param.label)


def weight_inputs(data: dict, weights: dict | None, key: str) -> dict:
    """One weight per class (fair-queuing shares); equal by default."""
    names = [c["name"] for c in data["workload"]["classes"]]
    return {name: st.number_input(f"Weight of {text.plain(name)}", min_value=WEIGHT_RANGE[0], max_value=WEIGHT_RANGE[1],
                                  value=float((weights or {}).get(name, 1.0)), key=f"{key}_{name}", format="%g",
                                  help="GPU service share of this class when all are busy")
            for name in names}


def server_controls(data: dict, v: int) -> None:
    server = data.setdefault("server", {})
    server["step_model"] = field_input(Server, "step_model", server.get("step_model"), key=f"step_model_{v}",
                                       label="Step-time model")
    model_keys = FIXED_KEYS if server["step_model"] == "fixed" else ROOFLINE_KEYS
    for key in (*model_keys, *BATCHING_KEYS, *MEMORY_KEYS):
        choices = hardware_choices.TABLE_CHOICES.get(key)
        server[key] = field_input(Server, key, server.get(key), key=f"server_{key}_{v}",
                                  label=hardware_choices.LABELS.get(key), options=choices() if choices else None)
    if server["step_model"] == "roofline":
        st.caption(f"Step times: {badge(server['gpu'])}.")


def fleet_controls(data: dict, v: int) -> None:
    fleet = data.setdefault("fleet", {})
    for key in ("replicas", "router"):
        fleet[key] = field_input(Fleet, key, fleet.get(key), key=f"fleet_{key}_{v}")


def edited_scenario() -> dict:
    """The sidebar controls applied to a copy of the current scenario."""
    data = copy.deepcopy(state.current())
    v = state.version()
    with st.sidebar:
        st.divider()
        with st.expander("Load and traffic mix", expanded=True):
            load_controls(data, v)
        with st.expander("Policy", expanded=True):
            policy_controls(data, v)
        with st.expander("Server: batching, memory, step time"):
            server_controls(data, v)
        with st.expander("Fleet: replicas and router"):
            fleet_controls(data, v)
    return data


def run_current(data: dict) -> tuple[dict, runner.Run] | None:
    """Simulate the scenario; on an impossible set-up show why and fall back to the last one that ran.

    Returns the scenario whose results are shown and its run (None before any run succeeded). The
    session keeps only the last good scenario and its summary: its run lives in the shared, bounded cache
    (and is simulated again if the cache has dropped it).
    """
    key = runner.canonical(data)
    try:
        run = runner.simulate(key)
    except Exception as exc:  # noqa: BLE001 - the page shows one line, never a traceback
        last = st.session_state.get("last_good")
        shown = "the last scenario that ran" if last else "the default scenario"
        fallback = last[0] if last else state.default_data()
        if isinstance(exc, engine.ScenarioError):
            text.error(f"{exc}. Showing {shown}.")
        else:
            LOG.exception("simulation failed for %s", key)
            text.error(f"The simulation failed unexpectedly ({type(exc).__name__}); showing {shown}. Please report "
                       "this with the page link.")
        fallback_key = runner.canonical(fallback)
        return None if fallback_key == key else (fallback, runner.simulate(fallback_key))
    last = st.session_state.get("last_good")
    if last and last[0] != data:
        st.session_state["previous_summary"] = last[1]
    st.session_state["last_good"] = (data, run.summary)
    return data, run


def kpi_text(key: str, value: float, signed: bool = False) -> str:
    """A KPI value with its unit; milliseconds switch to seconds from 1,000 ms."""
    sign = "+" if signed else ""
    if key.endswith("_ms"):
        if abs(value) < 1000:
            return f"{value:{sign},.0f} ms"
        return f"{value / 1000:{sign},.2f} s" if abs(value) < 100_000 else f"{value / 1000:{sign},.0f} s"
    if key == "sla_attainment":
        return f"{100 * value:{sign}.1f}%" if not signed else f"{100 * value:+.1f} pt"
    return f"{value:{sign},.0f}"


def kpi_cards(summary: dict, previous: dict | None) -> None:
    """One card per class (and overall), each metric with its change against the previous run."""
    current = flat_metrics(summary).set_index("class")
    before = flat_metrics(previous).set_index("class") if previous else None
    for col, name in zip(st.columns(len(current.index)), current.index):
        card = col.container(border=True)
        card.markdown(f"**{text.plain(name)}** · {current.loc[name, 'completed']:,} of "
                      f"{current.loc[name, 'arrived']:,} completed")
        cells = card.columns(2)
        for i, (label, key) in enumerate(KPIS):
            value = current.loc[name, key]
            old = before.loc[name, key] if before is not None and name in before.index else None
            delta = kpi_text(key, value - old, signed=True) if value is not None and old is not None and \
                value != old else None
            cells[i % 2].metric(label, "-" if value is None else kpi_text(key, value), delta,
                                delta_color="inverse" if key.startswith(LOWER_IS_BETTER) else "normal")


def policy_extras(scenario: dict, summary: dict) -> None:
    """Views specific to the current policy: starvation, fair shares, the dynamic cost map."""
    name = scenario["policy"].get("name", "fifo")
    classes = summary["classes"]
    cols = st.columns(len(classes))
    for col, (cls, block) in zip(cols, classes.items()):
        col.metric(f"Longest wait, {text.plain(cls)}", "-" if block["longest_wait_ms"] is None else
                   kpi_text("wait_ms", block["longest_wait_ms"]), help="longest time any request of the class "
                   "waited before it was first scheduled: starvation shows here")
    if name == "wfq":
        weights = scenario["policy"].get("weights") or {c: 1.0 for c in classes}
        st.plotly_chart(charts.share_bars(classes, weights), width="stretch")
    if name == "dynamic" and st.toggle("Map alpha and gamma at this load", key="alpha_gamma",
                                       help="16 runs of the dynamic policy on the first "
                                            f"{runner.SWEEP_MAX_REQUESTS:,} requests"):
        grid, note = runner.alpha_gamma_map(scenario, [0.0, 1.0, 3.0, 10.0], [0.0, 1.0, 3.0, 10.0])
        if note:
            st.warning(text.plain(note))
        left, right = st.columns(2)
        first, last = list(classes)[0], list(classes)[-1]
        left.plotly_chart(charts.heatmap(grid, first, "ttft_p99_ms"), width="stretch")
        right.plotly_chart(charts.heatmap(grid, last, "output_tokens_per_s"), width="stretch")


@guard.fragment
def comparison_view(frame) -> None:
    metrics = [m for m in charts.METRIC_LABELS if m in frame.columns and frame[m].notna().any()]
    metric = st.selectbox("Metric", metrics, format_func=charts.METRIC_LABELS.get, key="comparison_metric")
    st.plotly_chart(charts.comparison_bars(frame, metric, POLICY_LABELS), width="stretch")


@guard.fragment
def curves_view(frame, current_rate: float) -> None:
    metric = st.selectbox("Metric", ["ttft_p99_ms", "e2e_p99_ms", "sla_attainment", "output_tokens_per_s"],
                          format_func=charts.METRIC_LABELS.get, key="curves_metric")
    st.plotly_chart(charts.load_curves(frame, metric, current_rate, POLICY_LABELS), width="stretch")


@guard.fragment
def cdf_view(requests) -> None:
    column = st.radio("Latency", list(charts.CDF_LABELS), horizontal=True, key="cdf_column",
                      format_func=charts.CDF_LABELS.get)
    st.plotly_chart(charts.latency_cdf(requests, column), width="stretch")


scenario_sidebar.render()
runner.warm_up()
data = edited_scenario()
state.update(data)
st.title("Scheduler Lab")
shown = run_current(state.current())
if shown is None:
    st.stop()
scenario, run = shown
st.caption(text.plain(scenario.get("name", "")))
summary, system = run.summary, run.summary["system"]
if system["unstable"]:
    st.warning(text.plain(stop_explanation(system, APP_ORIGIN.caps) + "."))

st.subheader("Per-class results")
kpi_cards(summary, st.session_state.get("previous_summary"))
cols = st.columns(5)
cols[0].metric("Offered load (estimate)", load_text(system["offered_load"]))
cols[1].metric("Mean batch", f"{system['mean_batch_size']:.1f}")
cols[2].metric("GPU busy", f"{system['gpu_busy_frac']:.0%}")
cols[3].metric("KV peak", "unlimited" if system["kv_peak_frac"] is None else f"{system['kv_peak_frac']:.0%}")
cols[4].metric("Preemptions", f"{system['preemptions']:,}")

if system["preemptions"]:
    st.caption(f"{system['preemptions']:,} preemptions wasted {system['preemption_waste_s']:.1f} s of GPU time "
               f"({system['preemption_waste_s'] / max(system['sim_time_s'], 1e-9):.1%} of the run).")
policy_extras(scenario, summary)

st.subheader("Cost")
rental = cost_panel.cost_view(scenario, summary)

st.subheader("Policy comparison (same arrivals)")
comparison, note = runner.policy_comparison(scenario, list(POLICIES))
if note:
    st.warning(text.plain(note))
if rental is not None:
    comparison = cost_columns(comparison, rental.per_hour[0])
st.caption(f"Every policy with the parameters above, on the first {runner.SWEEP_MAX_REQUESTS:,} requests"
           + (f"; costs at the low end of {rental.offer}, {rental.currency}." if rental is not None else "."))
comparison_view(comparison)
with st.expander("Comparison table"):
    st.dataframe(comparison, width="stretch", hide_index=True)

st.subheader("Curves against load")
arrival = scenario["workload"].get("arrival")
if arrival and not scenario["workload"].get("trace"):
    rates = runner.sweep_rates(arrival["rate_per_s"], system["offered_load"])
    default_curves = list(dict.fromkeys(["fifo", "priority", scenario["policy"].get("name", "fifo")]))
    shown_policies = st.multiselect("Policies", list(POLICIES), default_curves, format_func=POLICY_LABELS.get,
                                    key="curve_policies", help="each policy adds one run per arrival rate")
    sweep, note = runner.load_sweep(scenario, rates, shown_policies or default_curves)
    if note:
        st.warning(text.plain(note))
    st.caption(f"{len(rates)} arrival rates from 20% to 110% of the estimated capacity, "
               f"{min(scenario['workload'].get('num_requests') or 0, runner.SWEEP_MAX_REQUESTS):,} requests each.")
    curves_view(sweep, arrival["rate_per_s"])
else:
    st.info("Curves against load need synthetic arrivals; this scenario replays a trace.")

cdf_tab, timeline_tab = st.tabs(["Latency distribution", "Timeline of this run"])
with cdf_tab:
    cdf_view(run.requests)
with timeline_tab:
    classes = [c["name"] for c in scenario["workload"]["classes"]]
    series = run.timeseries
    if len(system["replicas"]) > 1:
        replica = st.selectbox("Replica", range(len(system["replicas"])), key="timeline_replica",
                               help="each replica runs its own iterations; the router's split is in the table")
        series = series[series["replica"] == replica]
        st.dataframe(system["replicas"], hide_index=True, width="stretch")
    st.plotly_chart(charts.timeline(series, classes, system["kv_capacity_tokens"]), width="stretch")
    if system["timeseries_stride"] > 1:
        st.caption(f"Every {system['timeseries_stride']}th iteration is shown.")

requests_frame = run.requests  # the CSV is written when the button is clicked, not on every rerun
st.download_button("Download per-request results (CSV)", lambda: requests_frame.to_csv(index=False), "requests.csv",
                   mime="text/csv")
