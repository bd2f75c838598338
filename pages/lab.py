"""Scheduler Lab: move the load, the policy and the server limits; see latency, SLA and throughput."""

import copy
import logging
import math

import pandas as pd
import streamlit as st

import engine
from engine.calibrate.confidence import step_badge
from engine.hardware.kernel_tables import client_fixed_ms
from engine.decide.cost import cost_columns
from engine.decide.diagnosis import diagnose, window_words
from engine.decide.targets import Target
from engine.scenario.config import (FIXED_STEP_KEYS, OVERALL, WEIGHT_RANGE, Arrival, Autoscale, Fleet, FleetGroup,
                                    Policy, RequestClass, Server, Speculative, Workload, expected_tokens_per_decode,
                                    field_bounds, field_label, field_meta)
from engine.scenario import labels
from engine.scenario.csv_out import csv_text
from engine.scenario.metric_table import COSTS, DURATION, STEADY_STATE, SYSTEM_METRICS, metric
from engine.scenario.summary import Summary, SystemMetrics
from engine.teach.knob_notes import (DYNAMIC_WEIGHTS, batch_hold_note, dynamic_as_priority_note, scale_only_note,
                                     wfq_share_note)
from engine.sim.autoscale import describe as describe_scaling
from engine.sim.metrics import flat_metrics
from engine.sim.policies import POLICIES, POLICY_LABELS, params_of
from engine.sim.simulate import estimated_offered_load, load_text, stop_explanation
from engine.sim.sweep import FLAT_POLICIES, TEACHING_LOAD, policies_differ, rate_for_load, sweep_rates
from engine.sim.workload import WHOLE_TRACE_MAX_REQUESTS, trace_requests, unclassed_requests
from ui import (charts, cost_panel, guard, hardware_choices, parallel_controls, runner, scenario_sidebar,
                scheduler_controls, state, tables, text, tune_panel, view)
from ui.state import PLAN_TARGETS
from ui.trace_store import APP_ORIGIN
from ui.widgets import field_help, field_input

BATCHING_KEYS = ("batching", "admission", "max_batch_size", "max_batched_tokens", "min_batch_size", "wait_timeout_ms")
ROOFLINE_KEYS = ("gpu", "model", "quant", "kv_quant", "tensor_parallel", "engine", "engine_version",
                 "request_fixed_ms", "gpu_memory_utilization")
# What leaving a key empty means, shown in its empty input
PLACEHOLDERS = {"request_fixed_ms": "measured"}  # the engine's own figure (its help says so)
MEMORY_KEYS = ("block_size_tokens", "kv_allocation", "max_seq_len", "prefix_caching")
CLASS_KEYS = ("share", "priority", "tier_weight", "sla_ttft_ms", "sla_e2e_ms", "timeout_ms", "shared_prefix_tokens",
              "conversation_turns", "turn_gap_s")
CONVERSATION_KEYS = ("conversation_turns", "turn_gap_s")  # synthetic arrivals only (a trace brings its own)
KPI_KEYS = ("ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "tpot_mean_ms", "tpot_p99_ms",
            "queue_p99_ms", "sla_attainment", "timed_out", "output_tokens_per_s")
COMPARISON_KEYS = ("ttft_p99_ms", "ttft_p50_ms", "e2e_p99_ms", "e2e_p50_ms", "queue_p99_ms", "tpot_mean_ms",
                   "sla_attainment", "timed_out", "output_tokens_per_s", "output_tokens_per_s_run", "longest_wait_ms",
                   *(m.key for m in COSTS))
CURVE_KEYS = ("ttft_p99_ms", "e2e_p99_ms", "sla_attainment", "output_tokens_per_s")
TABLE_COLUMNS = ("policy", "class", "ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "tpot_mean_ms",
                 "queue_p99_ms", "sla_attainment", "completed", "timed_out", "output_tokens_per_s",
                 "output_tokens_per_s_run", "longest_wait_ms",
                 *(m.key for m in COSTS), "gpu_busy_frac", "preemptions", "unstable")
CURVE_DEFAULTS = ("fifo", "priority")
LOAD_STEP = 0.02  # a raise of the offered load smaller than this is not worth offering
GROUP_INPUTS = {"fixed": ("replicas", *FIXED_STEP_KEYS),  # a group's inputs, per step model
                "roofline": ("replicas", "gpu", "quant", "tensor_parallel")}
MAX_LAB_GROUPS = 4
POOL_LIMIT_KEYS = ("max_batch_size", "max_batched_tokens")  # a pool's own batch limits (empty: the server's)
INHERITED_KEYS = ("gpu", "quant", "tensor_parallel")  # a group's or pool's inputs start from the server's
MIXED_SECOND_GPU = "H100-80G"  # the second group a mixed fleet starts with (roofline)
DEFAULT_DRAFT_COST = 0.15  # the Lab's first draft step cost: Llama-3.2-1B's weights over Llama-3-8B's
LOG = logging.getLogger(__name__)


def rate_step(anchor: float, rate: float) -> float:
    """The slider step for arrival rates near ``anchor``: a hundredth of its order of magnitude, refined until
    ``rate`` lies on the step's grid, so the slider holds a preset's or a link's rate exactly."""
    step = 10.0 ** (math.floor(math.log10(anchor)) - 2)
    low = field_bounds(field_meta(Arrival, "rate_per_s")[1])[0]
    while step / 10 >= low and abs(rate / step - round(rate / step)) > 1e-9 * max(1.0, rate / step):
        step /= 10
    return step


def rate_slider(rate: float, v: int, moving: bool = False) -> float:
    """Arrival rate from a twentieth to three times the scenario's rate when it was loaded, on a grid that
    holds the loaded rate exactly; ``moving``: the rate follows a curve, the slider sets its mean."""
    anchor = st.session_state.setdefault(f"rate_anchor_{v}", rate)
    step = rate_step(anchor, rate)
    high = max(math.ceil(anchor * 3 / step), round(rate / step)) * step
    label = "Mean arrival rate (req/s)" if moving else "Arrival rate (req/s)"
    return st.slider(label, step, high, rate, step, key=f"rate_{v}", format="%g",
                     help="Mean arrivals per second over all classes" + (
                         "; the rate curve (Workload page) is scaled to it." if moving else "."))

def load_controls(data: dict, typed: engine.Scenario, v: int) -> None:
    workload = data["workload"]
    low, high = field_bounds(field_meta(Workload, "num_requests")[1])
    if typed.workload.trace is None:
        curve = typed.workload.arrival.curve()
        workload["arrival"]["rate_per_s"] = rate_slider(typed.workload.arrival.rate_per_s, v, curve is not None)
        workload["num_requests"] = st.number_input("Requests simulated", int(low), int(high),
                                                   typed.workload.num_requests, step=1000, key=f"requests_{v}",
                                                   help="The run stops generating arrivals after this many.")
        if curve is not None:  # a day or a week is simulated by its time, not by a count
            workload["duration_s"] = field_input(Workload, "duration_s", typed.workload.duration_s,
                                                 key=f"duration_{v}", placeholder="no limit: Requests simulated")
    else:
        rows = trace_requests(typed)
        st.caption(f"Arrivals replay the uploaded trace ({rows:,} requests; see the Workload page).")
        whole = st.toggle("Replay the whole trace", typed.workload.num_requests is None, key=f"whole_trace_{v}",
                          help="Off: replay only the first rows of the trace file.")
        workload["num_requests"] = None if whole else st.number_input(
            "Requests replayed (first rows of the trace)", int(low), max(rows, 1),
            min(typed.workload.num_requests or rows, rows), step=1000, key=f"requests_{v}")
    keys = CLASS_KEYS if typed.workload.trace is None else [k for k in CLASS_KEYS if k not in CONVERSATION_KEYS]
    for i, cls in enumerate(workload["classes"]):
        with st.popover(f"Class {text.plain(cls['name'])}", width="stretch"):
            for key in keys:
                cls[key] = field_input(RequestClass, key, cls.get(key), key=f"class_{i}_{key}_{v}")
            no_effect(class_note(cls, bool(data.get("server", {}).get("prefix_caching")), "turn_gap_s" in keys))
    total = sum(c["share"] or 0.0 for c in workload["classes"])
    if total > 0 and abs(total - 1.0) > 1e-9:
        split = " / ".join(f"{(c['share'] or 0.0) / total:.0%}" for c in workload["classes"])
        st.caption(f"Shares sum to {total:g}; they are rescaled to sum to 1: arrivals split {split}.")


def class_note(cls: dict, prefix_caching: bool, turns_shown: bool) -> str | None:
    """Why a class's time between turns (when shown) or shared prefix changes nothing: one turn per conversation has
    no second turn; without prefix caching a shared prefix is computed for every prompt like the rest of it."""
    if turns_shown and (cls.get("conversation_turns") or 1) == 1:
        return (f"{field_label(RequestClass, 'turn_gap_s')}: with one turn per conversation there is no next "
                f"turn to wait for.")
    if (cls.get("shared_prefix_tokens") or 0) > 0 and not prefix_caching:
        return (f"{field_label(RequestClass, 'shared_prefix_tokens')}: without prefix caching (Server) every "
                f"prompt computes its prefix again.")
    return None


def policy_controls(data: dict, typed: engine.Scenario, v: int) -> None:
    policy = data.setdefault("policy", {})
    policy["name"] = st.selectbox("Policy", list(POLICIES), index=list(POLICIES).index(typed.policy.name),
                                  format_func=POLICY_LABELS.get, key=f"policy_{v}",
                                  help="How waiting and running requests are ordered, and who is preempted.")
    spec = POLICIES[policy["name"]]
    st.caption(f"Orders by {spec.key}. {spec.use_when}")
    for param in params_of(policy["name"]):
        key = f"policy_{param.key}_{v}"
        if param.key == "weights":
            policy["weights"] = weight_inputs(data, policy.get("weights"), key)
        elif param.slider:
            low, high, step = param.slider
            _, meta, default = field_meta(Policy, param.key)
            value = float(policy.get(param.key, default))
            label = field_label(Policy, param.key) + (f" ({meta['unit']})" if meta["unit"] else "")
            policy[param.key] = st.slider(label, min(low, value), max(high, value), value, step, key=key,
                                          help=field_help(Policy, param.key))
        else:
            policy[param.key] = field_input(Policy, param.key, policy.get(param.key), key=key)
        if param.key == "gamma":  # the last of the cost's weights
            no_effect(scale_only_note(*(float(policy.get(k, field_meta(Policy, k)[2])) for k in DYNAMIC_WEIGHTS)))
        mode = policy.get("preempt_mode") or field_meta(Policy, "preempt_mode")[2]
        if param.key == "preempt_overhead_ms" and mode != "keep":
            no_effect(f"{field_label(Policy, 'preempt_overhead_ms')} is paid when a kept request resumes; with "
                      f"{field_label(Policy, 'preempt_mode').lower()} {labels.words('preempt_mode', mode)} nothing "
                      f"is kept on the GPU.")


def weight_inputs(data: dict, weights: dict | None, key: str) -> dict:
    """One weight per class (fair-queuing shares); equal by default."""
    names = [c["name"] for c in data["workload"]["classes"]]
    return {name: st.number_input(f"Weight of {text.plain(name)}", min_value=WEIGHT_RANGE[0], max_value=WEIGHT_RANGE[1],
                                  value=float((weights or {}).get(name, 1.0)), key=f"{key}_{name}", format="%g",
                                  help="The class's share of GPU service while every class has work waiting.")
            for name in names}


def server_controls(data: dict, v: int):
    """The server's controls; returns the place beside the minimum batch and its wait for what the run says of them
    (``batch_hold_note``)."""
    server = data.setdefault("server", {})
    server["step_model"] = field_input(Server, "step_model", server.get("step_model"), key=f"step_model_{v}")
    model_keys = FIXED_STEP_KEYS if server["step_model"] == "fixed" else ROOFLINE_KEYS
    for keys in ((*model_keys, *BATCHING_KEYS), MEMORY_KEYS):
        for key in keys:
            server[key] = field_input(Server, key, server.get(key), key=f"server_{key}_{v}",
                                      options=hardware_choices.options(key, server), placeholder=PLACEHOLDERS.get(key))
            if key == "tensor_parallel":  # how the cards split a mixture of experts, beside how many there are
                parallel_controls.expert_controls(server, f"server_{{}}_{v}")
            if key == "engine":  # the engine's own scheduler knobs, beside it
                scheduler_controls.scheduler_controls(server, f"server_{{}}_{v}")
        if keys is not MEMORY_KEYS:
            no_effect(batch_wait_note(server))
            held = st.empty()
    speculative_controls(server, v)
    notice = state.drop_foreign_calibration(data)
    if notice:
        st.info(labels.key_words(notice))
    if server["step_model"] == "roofline":
        try:
            checked = state.validate(data).server
            st.caption(f"Step times: {step_badge(checked)}.")
            fixed_ms = client_fixed_ms(checked)
            if fixed_ms:
                label = field_label(Server, "request_fixed_ms")
                whose = (f"as measured for {labels.words('engine', checked.engine)}; \u201c{label}\u201d replaces it"
                         if checked.request_fixed_ms is None else f"as \u201c{label}\u201d sets it")
                st.caption(f"Each request's time to first token and end-to-end latency include {fixed_ms:g} ms the "
                           f"client sees beyond the iterations (HTTP, tokenizing, the first chunk), {whose}.")
        except engine.ScenarioError:
            pass  # the run below says what is wrong with the scenario
    return held


def no_effect(note: str | None) -> None:
    """Beside a control that changes nothing in the current combination: why."""
    if note:
        st.caption(f":orange[No effect:] {note}")


def batch_wait_note(server: dict) -> str | None:
    """Why the minimum batch or its wait changes nothing: a replica holds an iteration back while fewer than the
    minimum batch are ready only until the oldest ready request has waited the longest wait (engine/sim/kernel,
    step 2), so with no wait it never holds back, and a minimum of one is met by any ready request."""
    low, wait_ms = server.get("min_batch_size") or 1, server.get("wait_timeout_ms") or 0.0
    words = (field_label(Server, "min_batch_size"), field_label(Server, "wait_timeout_ms"))
    if low > 1 and wait_ms == 0:
        return (f"{words[0]} {low} with a {words[1].lower()} of 0 ms: an iteration is held back for a minimum "
                f"batch only until the oldest ready request has waited that long, and it always has, so every "
                f"iteration starts at once. Set a wait above 0 to batch.")
    if low == 1 and wait_ms > 0:
        return (f"{words[1]} {wait_ms:g} ms with a {words[0].lower()} of 1: any ready request makes a batch, so "
                f"nothing waits. Raise the minimum batch to hold iterations back.")
    return None


def speculative_controls(server: dict, v: int) -> None:
    """Speculative decoding on or off; when on, the draft length, its acceptance rate and the draft model (roofline)
    or the draft step's cost."""
    spec = server.get("speculative")
    if not st.toggle(field_label(Server, "speculative"), value=spec is not None, key=f"speculative_{v}",
                     help=field_help(Server, "speculative") + " Helps while the GPU is mostly reading weights (low "
                     "load), costs throughput when it is compute bound (high load)."):
        server.pop("speculative", None)
        return
    spec = dict(spec or {"draft_tokens": 4, "acceptance": 0.7})
    spec["draft_tokens"] = field_input(Speculative, "draft_tokens", spec.get("draft_tokens"), key=f"spec_k_{v}")
    default = field_meta(Speculative, "acceptance")[2]
    spec["acceptance"] = st.slider(field_label(Speculative, "acceptance"), 0.0, 1.0,
                                   float(spec.get("acceptance", default)), 0.05, key=f"spec_a_{v}",
                                   help=field_help(Speculative, "acceptance"))
    by_cost = "none (give the draft step's cost)"
    models = [by_cost] + (hardware_choices.TABLE_CHOICES["model"]() if server["step_model"] == "roofline" else [])
    draft = field_input(Speculative, "draft_model", spec.get("draft_model") or by_cost, key=f"spec_model_{v}",
                        options=models)
    if draft == by_cost:
        spec.pop("draft_model", None)
        spec["draft_cost"] = field_input(Speculative, "draft_cost", spec.get("draft_cost", DEFAULT_DRAFT_COST),
                                         key=f"spec_cost_{v}")
    else:
        spec.pop("draft_cost", None)
        spec["draft_model"] = draft
    server["speculative"] = spec
    tokens = expected_tokens_per_decode(spec["draft_tokens"], spec["acceptance"])
    st.caption(f"Each decode iteration verifies {spec['draft_tokens'] + 1} tokens per request and emits "
               f"{tokens:.2f} on average.")


def first_groups(server: dict, replicas: int) -> list[dict]:
    """The two groups a mixed fleet starts from: the server as it is, and one replica on the next faster GPU
    (roofline) or at half the iteration time (fixed)."""
    if server["step_model"] == "fixed":
        return [{"replicas": replicas}, {"replicas": 1, "step_time_ms": server["step_time_ms"] / 2}]
    return [{"replicas": replicas, "gpu": server["gpu"], "quant": server["quant"],
             "tensor_parallel": server["tensor_parallel"]},
            {"replicas": 1, "gpu": MIXED_SECOND_GPU, "quant": server["quant"],
             "tensor_parallel": server["tensor_parallel"]}]


def group_controls(fleet: dict, server: dict, v: int) -> None:
    """Mixed fleet on or off; when on, how many groups and each group's replicas and hardware (the keys of
    ``FleetGroup`` the step model reads)."""
    groups = fleet.get("groups") or []
    if not st.toggle(field_label(Fleet, "groups"), value=bool(groups), key=f"fleet_mixed_{v}",
                     help=field_help(Fleet, "groups")):
        replicas = groups[0]["replicas"] if groups else fleet.get("replicas")  # the first group is [server]'s
        fleet.pop("groups", None)
        fleet["replicas"] = field_input(Fleet, "replicas", replicas, key=f"fleet_replicas_{v}")
        return
    groups = [dict(g) for g in groups] or first_groups(server, fleet.pop("replicas", None) or 1)
    fleet.pop("replicas", None)  # the groups' sum
    count = st.number_input("Groups", 2, MAX_LAB_GROUPS, max(2, min(len(groups), MAX_LAB_GROUPS)), step=1,
                            key=f"fleet_groups_{v}", help="Kinds of replica in the fleet, each on its own hardware.")
    while len(groups) < count:
        groups.append(dict(groups[-1], replicas=1))
    chosen = []
    for i, group in enumerate(groups[:count]):
        st.markdown(f"**Group {i + 1}**")
        chosen.append(table_inputs(group, server, GROUP_INPUTS[server["step_model"]], f"group_{i}", v))
    fleet["groups"] = chosen


def table_inputs(table: dict, server: dict, keys: tuple[str, ...], prefix: str, v: int) -> dict:
    """The inputs of one group or pool (``FleetGroup`` keys); its hardware starts as the server's."""
    entry = {}
    for key in keys:
        choices = hardware_choices.TABLE_CHOICES.get(key)
        own = table.get(key)  # 0 is a value (an unlimited KV cache); only a missing or empty key is the server's
        value = server.get(key) if own in (None, "") and key in INHERITED_KEYS else own
        entry[key] = field_input(FleetGroup, key, value, key=f"{prefix}_{key}_{v}",
                                 options=choices() if choices else None, placeholder="as the server")
    return {k: value for k, value in entry.items() if value is not None}  # empty: the server's


def pool_controls(fleet: dict, server: dict, v: int) -> None:
    """The two pools of a disaggregated fleet (each's replicas, hardware and batch limits) and the KV link."""
    replicas = fleet.pop("replicas", None) or 2
    keys = GROUP_INPUTS[server["step_model"]] + POOL_LIMIT_KEYS
    for name, share in (("prefill", replicas // 2), ("decode", replicas - replicas // 2)):
        st.markdown(f"**{field_label(Fleet, name)}**")
        pool = fleet.get(name) or {"replicas": max(share, 1)}
        fleet[name] = table_inputs(pool, server, keys, f"pool_{name}", v)
        if pool.get("autoscale"):  # its autoscaler as the scenario has it (a link, a preset), until changed here
            fleet[name]["autoscale"] = pool["autoscale"]
        scale_inputs(fleet[name], FleetGroup, f"pool_{name}_autoscale", v)
    fleet["kv_link_gb_s"] = field_input(Fleet, "kv_link_gb_s", fleet.get("kv_link_gb_s"), key=f"fleet_link_{v}")


AUTOSCALE_INPUTS = ("min_replicas", "max_replicas", "signal", "target", "interval_s", "provision_s",
                    "scale_up_delay_s", "scale_down_delay_s", "cooldown_s")


def scale_inputs(table: dict, cls: type, prefix: str, v: int) -> bool:
    """The autoscaler of ``table`` (the fleet's, or a pool's: ``cls`` its config class) on or off; when on, its
    bounds, signal, target and timings. True when on."""
    scale = table.get("autoscale")
    if not st.toggle(field_label(cls, "autoscale"), value=scale is not None, key=f"{prefix}_{v}",
                     help=field_help(cls, "autoscale")):
        table.pop("autoscale", None)
        return False
    start = table.get("replicas") or 1
    scale = dict(scale or {"min_replicas": 1, "max_replicas": max(4, 2 * start)})
    for key in AUTOSCALE_INPUTS:
        scale[key] = field_input(Autoscale, key, scale.get(key), key=f"{prefix}_{key}_{v}",
                                 placeholder="computed" if key == "provision_s" else None)
    table["autoscale"] = {k: value for k, value in scale.items() if value is not None}
    return True


def autoscale_controls(fleet: dict, v: int) -> None:
    """The autoscaler on or off (a colocated fleet of one kind of server); when on, its bounds, signal, target,
    timings, and spot replicas above its minimum."""
    if not scale_inputs(fleet, Fleet, "autoscale", v):
        fleet.pop("spot_interruptions_per_hour", None)
        return
    fleet["spot_interruptions_per_hour"] = field_input(Fleet, "spot_interruptions_per_hour",
                                                       fleet.get("spot_interruptions_per_hour"), key=f"spot_{v}")
    if fleet["spot_interruptions_per_hour"]:
        fleet["spot_notice_s"] = field_input(Fleet, "spot_notice_s", fleet.get("spot_notice_s"),
                                             key=f"spot_notice_{v}")
    st.caption("Fleet replicas above are those up at the start.")


def fleet_controls(data: dict, v: int) -> None:
    fleet = data.setdefault("fleet", {})
    fleet["mode"] = field_input(Fleet, "mode", fleet.get("mode"), key=f"fleet_mode_{v}")
    if fleet["mode"] == "disaggregated":
        fleet.pop("groups", None)
        pool_controls(fleet, data["server"], v)
    else:
        pools = [fleet.pop(key) for key in ("prefill", "decode") if key in fleet]
        fleet.pop("kv_link_gb_s", None)
        if pools:  # back from a disaggregated fleet: as many servers as its pools held
            fleet["replicas"] = sum(pool.get("replicas", 1) for pool in pools)
        group_controls(fleet, data["server"], v)
    if fleet["mode"] == "disaggregated" or fleet.get("groups"):
        fleet.pop("autoscale", None)  # it scales a colocated fleet of one kind of server
        fleet.pop("spot_interruptions_per_hour", None)
    else:
        autoscale_controls(fleet, v)
    fleet["router"] = field_input(Fleet, "router", fleet.get("router"), key=f"fleet_router_{v}")
    if fleet["mode"] != "disaggregated" and not fleet.get("groups") and (fleet.get("replicas") or 1) == 1 and \
            not fleet.get("autoscale"):
        no_effect("one replica: the router sends every request to it.")


def edited_scenario(base: dict):
    """The sidebar controls applied to a copy of ``base``; and the place beside the minimum batch for the run's
    note (``server_controls``)."""
    data = copy.deepcopy(base)
    typed = state.validate(data)
    v = state.version()
    with st.sidebar:
        st.divider()
        with st.expander("Load and traffic mix", expanded=True):
            load_controls(data, typed, v)
        with st.expander("Policy", expanded=True):
            policy_controls(data, typed, v)
        with st.expander("Server: batching, memory, step time"):
            held = server_controls(data, v)
        with st.expander("Fleet: replicas, autoscaler, GPU groups, prefill and decode pools, router"):
            fleet_controls(data, v)
    return data, held


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
            text.error(f"{labels.key_words(str(exc))}. Showing {shown}.")
            state.offer_fix(data, exc)
        else:
            LOG.exception("simulation failed for %s", key)
            text.error(f"The simulation failed unexpectedly ({type(exc).__name__}); showing {shown}. Please report "
                       "this with the page link.")
        fallback_key = runner.canonical(fallback)
        return None if fallback_key == key else (fallback, runner.simulate(fallback_key))
    last = st.session_state.get("last_good")
    if last and last[0] != data:  # an edit: the cards show its change; a new preset, upload or link: no change
        st.session_state["previous_summary"] = last[1] if st.session_state.get("last_version") == state.version() \
            else None
    st.session_state["last_good"] = (data, run.summary)
    st.session_state["last_version"] = state.version()
    return data, run


def kpi_cards(summary: Summary, previous: Summary | None, typed: engine.Scenario) -> None:
    """One card per class (and overall), each metric with its change against the previous run."""
    current = flat_metrics(summary).set_index("class")
    before = flat_metrics(previous).set_index("class") if previous else None
    targets = {c.name: c.sla_ttft_ms is not None or c.sla_e2e_ms is not None for c in typed.workload.classes}
    targets[OVERALL] = any(targets.values())
    unstable = summary["system"]["unstable"]  # its latencies measure the backlog when it stopped, not the fleet
    for col, name in zip(st.columns(len(current.index)), current.index):
        card = col.container(border=True)
        card.markdown(f"**{text.plain(name)}** · {current.loc[name, 'completed']:,} of "
                      f"{current.loc[name, 'arrived']:,} completed")
        cells = card.columns(2)
        for i, key in enumerate(KPI_KEYS):
            m = metric(key)
            value = current.loc[name, key]
            old = before.loc[name, key] if before is not None and name in before.index else None
            shown = "no target" if key == "sla_attainment" and not targets.get(name, True) else \
                tables.UNSTABLE if unstable and m.kind == DURATION else m.text(value)
            change = None if unstable and m.kind == DURATION else m.change_text(value, old)
            cells[i % 2].metric(m.card_label(), shown, change,
                                delta_color="inverse" if m.lower_is_better else "normal", help=text.sentence(m.help))


def planner_targets(summary: Summary, scenario: dict) -> None:
    """The Planner's targets judged on this run, when the Lab was opened on a plan's fleet (``PLAN_TARGETS``): each
    target's value and whether this run meets it. The cards' "SLA met" stays the classes' own SLA."""
    opened = st.session_state.get(PLAN_TARGETS)
    if not opened:
        return
    box = st.container(border=True)
    changed = opened["scenario"] != scenario
    box.markdown("**The Planner's targets on this run**" + (" (the fleet or workload changed since it was opened)"
                                                          if changed else ""))
    lines = []
    for entry in opened["targets"]:
        target = Target(entry["cls"], entry["key"], entry["limit"])
        met, value = target.met(summary)
        shown = "—" if value is None else metric(target.key).text(value)
        lines.append(f"- {text.plain(target.describe())}: {shown}, {'met' if met else '**missed**'}")
    box.markdown("\n".join(lines))
    box.caption(f"One run of {summary['run']['requests']:,} requests; the plan judged {opened['seeds']} seeds of "
                f"{opened['requests']:,} requests each, after their warm-up. The cards' SLA met is each class's own "
                f"SLA (the scenario's), not these.")


BUSY_OVER_LOAD = 0.3  # GPU busy this far above the offered load is explained beside the cards


def busy_note(system: SystemMetrics, step_model: str) -> str:
    """Why the GPU is busy far more of the time than the offered load says it is loaded: an iteration runs while any
    request is decoding, however few; how full they were is the compute and bandwidth use while busy."""
    def shown(key: str) -> str:  # as its card shows it
        m = metric(key)
        return m.text(m.value(system))

    shares = (system.get("bandwidth_util_frac"), system.get("compute_util_frac"))
    full = "" if step_model == "fixed" or None in shares else (
        f" (bandwidth {shown('bandwidth_util_frac')} and compute {shown('compute_util_frac')} of the peaks while busy)")
    return (f"GPU busy {shown('gpu_busy_frac')} at an offered load of {load_text(system['offered_load'])}: with "
            f"continuous batching an iteration runs whenever any request is decoding, so the GPU is busy most of the "
            f"time even at a light load; the iterations are small, {system['mean_batch_size']:.1f} sequences on "
            f"average{full}. The offered load says how much of the fleet's most the arrivals ask for.")


def class_split_text(typed: engine.Scenario) -> str:
    """How a replayed trace's requests that name no class get one (said when the scenario has several classes)."""
    classes = typed.workload.classes
    unnamed = unclassed_requests(typed) if len(classes) > 1 else 0
    if not unnamed:
        return ""
    total = sum(c.share for c in classes)
    shares = ", ".join(f"{text.plain(c.name)} {c.share / total:.0%}" for c in classes)
    return (f" The trace names no class for {unnamed:,} of them: each is given one at random in the classes' shares "
            f"({shares}), keeping its lengths from the trace; the classes' own length distributions are not used.")


def system_cards(system: SystemMetrics, step_model: str) -> None:
    """The fleet's load and how it spent its time, each defined where it is read (``step_model``: the server's, for
    what compute and bandwidth can say)."""
    values = {"offered_load": load_text(system["offered_load"]),
              "mean_batch_size": f"{system['mean_batch_size']:.1f}"}
    shown = [m for m in SYSTEM_METRICS if m.key != "prefix_hit_frac" or system.get("prefix_hit_frac") is not None]
    cols = [col for _ in range(len(shown) // 4 + 1) for col in st.columns(4)]
    for col, m in zip(cols, shown):
        value = values.get(m.key) or m.text(m.value(system))
        col.metric(m.label + (" (estimate)" if m.key == "offered_load" else ""), value, help=text.sentence(m.help))
    cols[len(shown)].metric("KV cache peak", "unlimited" if system["kv_peak_frac"] is None else
                                     f"{system['kv_peak_frac']:.0%}",
                                     help="Most of the KV cache in use at once, of its capacity.")
    st.caption(f"Offered load: arriving work per second over the most the fleet can serve (an estimate; above 1 "
               f"the queue grows). GPU busy: share of the steady state ({STEADY_STATE}, shaded on the timeline) "
               f"during which an iteration was running, however full it was; compute and bandwidth while busy say "
               f"how full (of the datasheet peaks"
               f"{'; not known under the fixed step model, which times no hardware' if step_model == 'fixed' else ''}"
               f"). Throughputs are of the "
               f"steady state too (the whole run's are in the policy comparison). Arrows on the cards: the change "
               f"against the previous run of this scenario.")
    busy, load = system["gpu_busy_frac"], system["offered_load"]
    if busy is not None and busy - load >= BUSY_OVER_LOAD:
        st.caption(busy_note(system, step_model))
    if system["kv_peak_frac"] is not None and system["kv_peak_frac"] >= 0.99 and system["offered_load"] < 1.0:
        advice = (" Lower the load, add memory (replicas, tensor parallelism, a larger GPU) or shorten the requests."
                  if system["preemption_waste_frac"] >= 0.01 else "")
        st.caption(f"The KV cache filled up at times: requests also waited for memory, which the offered load "
                   f"(compute only) does not count.{advice}")
    if system["preemptions"]:
        n = system["preemptions"]
        st.caption(f"{n:,} preemption{'s' if n != 1 else ''} wasted {system['preemption_waste_s']:.1f} s of GPU time "
                   f"({system['preemption_waste_frac']:.1%} of the GPU time of the run).")


def partial_run_note(comparison, typed: engine.Scenario, summary: Summary) -> str | None:
    """Why the comparison's row of the current policy differs from the cards, when it is a shorter run whose
    queues were still changing, or the busiest stretch of a moving rate (the comparison runs ``runner.compared``:
    the first or busiest ``SWEEP_MAX_REQUESTS`` requests, or ``WHOLE_TRACE_MAX_REQUESTS`` of a trace)."""
    full = typed.workload.num_requests or summary["run"]["requests"]
    cap = runner.SWEEP_MAX_REQUESTS if typed.workload.trace is None else WHOLE_TRACE_MAX_REQUESTS
    row = comparison[(comparison["policy"] == typed.policy.name) & (comparison["class"] == OVERALL)]
    m = metric("ttft_p99_ms")
    card, short = m.value(summary["overall"]), None if row.empty else row["ttft_p99_ms"].iloc[0]
    if full <= cap or card is None or short is None or abs(card - short) <= 0.25 * card:
        return None
    row_text = (f"its {POLICY_LABELS[typed.policy.name]} row differs from the cards (overall TTFT p99 "
                f"{m.text(short)} against {m.text(card)})")
    if typed.workload.trace is None and runner.busiest_start_s(typed) is not None:
        return (f"The comparison runs {synthetic_requests(typed, summary)} of the {full:,} above, and {row_text}: "
                f"the cards are the whole curve's, its calmer stretches included.")
    advice = (f" Set Requests simulated to {cap:,} to compare like with like." if typed.workload.trace is None else
              " The cards are the whole trace's: its later stretches load the fleet differently.")
    return (f"The comparison runs the first {cap:,} of the {full:,} requests above, and {row_text}: the queues "
            f"were still changing after {cap:,} requests.{advice}")


def policy_extras(typed: engine.Scenario, scenario: dict, summary: Summary) -> None:
    """Views specific to the current policy: starvation, fair shares, the dynamic cost map."""
    classes = summary["classes"]
    longest = metric("longest_wait_ms")
    cols = st.columns(len(classes))
    for col, (cls, block) in zip(cols, classes.items()):
        col.metric(f"{longest.label}, {text.plain(cls)}", longest.text(block["longest_wait_ms"]),
                   help=text.sentence(longest.help))
    if typed.policy.name == "wfq":
        weights = typed.policy.weights or {c: 1.0 for c in classes}
        st.plotly_chart(charts.share_bars(classes, weights), width="stretch")
    view.flag("alpha_gamma")
    if typed.policy.name == "dynamic" and st.toggle("Map alpha and gamma at this load", key="alpha_gamma",
                                                    help="16 runs of the dynamic policy on "
                                                         f"{synthetic_requests(typed, summary)}."):
        grid, note = runner.alpha_gamma_map(scenario, [0.0, 1.0, 3.0, 10.0], [0.0, 1.0, 3.0, 10.0])
        if note:
            st.warning(text.plain(note))
        left, right = st.columns(2)
        first, last = list(classes)[0], list(classes)[-1]
        left.plotly_chart(charts.heatmap(grid, first, "ttft_p99_ms"), width="stretch")
        right.plotly_chart(charts.heatmap(grid, last, "output_tokens_per_s"), width="stretch")


def low_load_note(data: dict, typed: engine.Scenario, comparison, system: SystemMetrics) -> None:
    """When every policy gives about the same latencies, say that the load is too low to tell them apart and
    offer the rate at which queues form (synthetic arrivals only); near that load already, say what else keeps
    requests from waiting for each other."""
    load = system["offered_load"]
    if typed.workload.trace is not None or load <= 0 or system["unstable"] or policies_differ(comparison):
        return
    if runner.busiest_start_s(typed) is not None:  # the load above is the whole curve's, the comparison its peak's
        st.info("The policies hardly differ even on the curve's busiest stretch (every class's TTFT p99 within "
                f"{FLAT_POLICIES:.0%} across the policies): little waits there for a policy to reorder. Raise the "
                "mean rate, or make the batches smaller, to see them differ.")
        return
    if load >= TEACHING_LOAD - LOAD_STEP:
        st.info(f"The policies hardly differ even at an offered load of {load_text(load)}: iterations hold "
                f"{system['mean_batch_size']:.0f} sequences on average of at most {typed.server.max_batch_size}, so "
                f"a waiting request is admitted at once. A smaller server.max_batch_size (or max_batched_tokens) "
                f"makes requests queue, and the policy decide who goes first.")
        return
    raised = rate_for_load(typed.workload.arrival.rate_per_s, load)
    st.info(f"The policies hardly differ here: at an offered load of {load_text(load)} requests rarely wait for "
            f"each other, so there is little to reorder (every class's TTFT p99 within "
            f"{FLAT_POLICIES:.0%} across the policies). Raise the load to see them differ.")
    st.button(f"Raise the arrival rate to {raised:g} req/s (offered load {TEACHING_LOAD:g})",
              on_click=state.replace_rate, args=(data, raised))


def synthetic_requests(typed: engine.Scenario, summary: Summary) -> str:
    """Which of the run's synthetic requests a comparison runs (``runner.compared``), in words: "the first 5,000
    requests", or for a moving rate "the busiest 5,000 requests (from 19:59 of the curve)"."""
    shown = min(summary["run"]["requests"], runner.SWEEP_MAX_REQUESTS)
    start_s = runner.busiest_start_s(typed) if typed.workload.trace is None else None
    if start_s is None:
        return f"the first {shown:,} requests"
    hours, minutes = divmod(round(start_s / 60), 60)
    return f"the busiest {shown:,} requests (from {hours:02d}:{minutes:02d} of the curve)"


def compared_requests(typed: engine.Scenario, summary: Summary) -> str:
    """Which requests the comparison and the curves run (``runner.compared``), in words."""
    if typed.workload.trace is None:
        return f"on {synthetic_requests(typed, summary)}"
    whole, shown = trace_requests(typed), min(summary["run"]["requests"], WHOLE_TRACE_MAX_REQUESTS)
    if shown >= whole:
        return f"on the whole trace ({whole:,} requests)"
    return f"on the first {shown:,} of the trace's {whole:,} requests"


def curve_policies(typed: engine.Scenario) -> list[str]:
    """The policies on the load curves: the current one, then those chosen for the curves (the defaults before the
    choice is drawn)."""
    return list(dict.fromkeys([typed.policy.name, *st.session_state.get("curve_policies", CURVE_DEFAULTS)]))


def runs_ahead(data: dict) -> list[dict]:
    """The runs of the policy comparison and, for synthetic arrivals at a constant rate on a fleet without an
    autoscaler, of the load curves (their rates from the estimated offered load, the run's own there), to start
    before the page's own run (``runner.run_ahead``); none for a scenario that does not validate (its run says
    why)."""
    try:
        typed = state.validate(data)
        arrival = typed.workload.arrival
        constant = typed.workload.trace is None and arrival.curve() is None and not typed.fleet.scaled()
        kept = runner.kept_run(data)
        # the estimate draws the requests (a KV cache too small for one says so): the run's own when it is cached
        load = None if not constant else kept.summary["system"]["offered_load"] if kept else \
            estimated_offered_load(typed)
    except engine.ScenarioError:
        return []
    datas = runner.variant_datas(*runner.comparison_runs(data, list(POLICIES)))
    if load is not None:
        datas += runner.variant_datas(*runner.sweep_runs(data, sweep_rates(arrival.rate_per_s, load),
                                                         curve_policies(typed)))
    return datas


@guard.fragment
def comparison_view(frame, currency: str) -> None:
    keys = [k for k in COMPARISON_KEYS if k in frame.columns and frame[k].notna().any()]
    view.choice("comparison_metric", keys, keys[0])
    key = st.selectbox("Metric", keys, format_func=lambda k: metric(k).title(currency), key="comparison_metric")
    st.plotly_chart(charts.comparison_bars(frame, key, POLICY_LABELS, currency), width="stretch")


@guard.fragment
def curves_view(frame, current_rate: float, moving: bool) -> None:
    """The curves against load; ``moving``: the rate is a curve's mean (its busiest stretch is run)."""
    view.choice("curves_metric", CURVE_KEYS, CURVE_KEYS[0])
    key = st.selectbox("Metric", CURVE_KEYS, format_func=lambda k: metric(k).title(), key="curves_metric")
    title = "mean arrival rate of the curve (req/s)" if moving else "arrival rate (req/s)"
    st.plotly_chart(charts.load_curves(frame, key, current_rate, POLICY_LABELS, title), width="stretch")


@guard.fragment
def cdf_view(requests) -> None:
    view.choice("cdf_column", list(charts.CDF_LABELS), "ttft_ms")
    column = st.radio("Latency", list(charts.CDF_LABELS), horizontal=True, key="cdf_column",
                      format_func=charts.CDF_LABELS.get)
    st.plotly_chart(charts.latency_cdf(requests, column), width="stretch")


sidebar_summary = scenario_sidebar.render()
runner.warm_up()
st.title("Scheduler Lab")
trace_notice = st.session_state.pop(state.TRACE_NOTICE, None)
if trace_notice:
    st.success(text.plain(trace_notice))
base = state.current_or_default()
data, batch_place = edited_scenario(base)
current = state.current() if state.edited(data, base) and state.update(data) else base
scenario_sidebar.summary(sidebar_summary)
if state.first_visit():
    first = state.validate(current).workload.classes[0].name
    st.info(text.plain(f"Start here: the sidebar holds the scenario. Raise the arrival rate until the TTFT p99 of "
                       f"{first} climbs, then change the policy and compare the cards, the policy comparison and the "
                       f"curves below."))
runner.run_ahead(runs_ahead(current))  # on the other cores while this page's own run computes
refining = st.empty()  # while a run not yet cached computes: the cards of its first requests
quick = runner.preview(current)
if quick is not None:
    with refining.container():
        st.subheader("Per-class results")
        st.caption(f"Refining: the cards of the first {quick['run']['requests']:,} requests only, shown while the "
                   f"full run computes; its cards replace them when it is done.")
        kpi_cards(quick, None, state.validate(current))
shown = run_current(current)
refining.empty()
if shown is None:
    st.stop()
scenario, run = shown
typed = state.validate(scenario)
st.caption(text.plain(f"{typed.name} · now: {state.describe(typed)}"))
summary, system = run.summary, run.summary["system"]
if system["unstable"]:
    st.warning(text.plain(labels.key_words(stop_explanation(system, APP_ORIGIN.caps)) + "."))
if typed.workload.trace is not None:
    st.caption(f"Replays {summary['run']['requests']:,} of the trace's {trace_requests(typed):,} requests."
               + class_split_text(typed))

st.subheader("Per-class results")
planner_targets(summary, current)
kpi_cards(summary, st.session_state.get("previous_summary"), typed)
shares = wfq_share_note(typed, summary)
if shares:
    st.caption(text.plain(shares))
system_cards(system, typed.server.step_model)
with batch_place.container():  # beside the minimum batch and its wait, in the sidebar
    no_effect(batch_hold_note(typed, summary))
scaling = describe_scaling(system)
if scaling:
    st.caption(text.plain(scaling[0].upper() + scaling[1:] + "."))
st.markdown("**What limits this run**\n" + "\n".join(f"- {text.plain(f.text)}" for f in diagnose(typed, summary)))

policy_extras(typed, scenario, summary)

st.subheader("Cost")
if typed.fleet.autoscale is None:
    rental = cost_panel.cost_view(typed, summary)
    if typed.fleet.scaled():  # a pool's autoscaler
        hours = system["sim_time_s"] / 3600.0
        st.caption(f"Priced with each pool's servers at the start, all month. With an autoscaled pool the fleet's "
                   f"servers come and go: {system['replica_hours']:,.2f} replica-hours over the run's {hours:,.2f} h, "
                   f"both pools (a mean of {system['replica_hours'] / max(hours, 1e-9):.2f} servers up); the bill "
                   f"by use, reserved or with bursts, is priced for a colocated fleet's autoscaler only.")
else:  # replicas come and go: the bill over the run, three ways to buy it; no one hourly price for the comparison
    rental = None
    cost_panel.bill_view(scenario, typed, summary)

st.subheader("Policy comparison (same arrivals)")
comparison, note = runner.policy_comparison(scenario, list(POLICIES))
if note:
    st.warning(text.plain(note))
currency = rental.currency if rental is not None else ""
if rental is not None:
    comparison = cost_columns(comparison, rental.per_hour[0])
st.caption(f"Every policy with the parameters above, {compared_requests(typed, summary)}"
           + (f"; costs at the low end of {rental.offer}, in {rental.currency}, for the whole fleet."
              if rental is not None else "."))
comparison_view(comparison, currency)
same_as_priority = dynamic_as_priority_note(typed, comparison)
if same_as_priority:
    st.caption(text.plain(same_as_priority))
low_load_note(scenario, typed, comparison, system)
partial = partial_run_note(comparison, typed, summary)
if partial:
    st.info(partial)
with st.expander("Comparison table"):
    tables.show(comparison, list(TABLE_COLUMNS), currency)
    st.caption("—: not measured (no completed request, no SLA target in the class, or no price).")

# Tracked (key + rerun): it stays open while it tunes, and its controls run only while it is open.
tuning = st.expander("Tune the policy: the parameters that minimise one figure under constraints", key="tune_open",
                     on_change="rerun")
with tuning:
    if tuning.open:
        tune_panel.render(scenario, typed)

st.subheader("Curves against load")
trace_rate = None
if typed.workload.trace is not None:
    arrival_s = run.requests["arrival_s"]
    trace_rate = (len(arrival_s) - 1) / (arrival_s.max() - arrival_s.min()) / typed.workload.trace.rate_scale
rate = typed.workload.arrival.rate_per_s if trace_rate is None else trace_rate * typed.workload.trace.rate_scale
rates = sweep_rates(rate, system["offered_load"])
view.choice("curve_policies", list(POLICIES), list(CURVE_DEFAULTS))
st.multiselect("Other policies on the curves", list(POLICIES), format_func=POLICY_LABELS.get,
               key="curve_policies",
               help="Each policy adds one run per arrival rate; the current policy is always drawn.")
sweep, note = runner.load_sweep(scenario, rates, curve_policies(typed), trace_rate)
if note:
    st.warning(text.plain(note))
if trace_rate is None:
    each = f"{synthetic_requests(typed, summary)} each"
else:
    each = f"the trace replayed faster or slower (its speed-up), {compared_requests(typed, summary)} each"
st.caption(f"{len(rates)} arrival rates from 20% to 110% of the estimated capacity, {each}; the current "
           f"policy ({POLICY_LABELS[typed.policy.name]}) and rate (dashed line) are always on them.")
curves_view(sweep, rate, trace_rate is None and runner.busiest_start_s(typed) is not None)

cdf_tab, timeline_tab = st.tabs(["Latency distribution", "Timeline of this run"])
with cdf_tab:
    cdf_view(run.requests)
with timeline_tab:
    classes = [c.name for c in typed.workload.classes]
    series = run.timeseries
    capacity = system["kv_capacity_tokens"]
    if len(system["replicas"]) > 1:
        view.choice("timeline_replica", list(range(len(system["replicas"]))), 0)
        replica = st.selectbox("Replica", range(len(system["replicas"])), key="timeline_replica",
                               help="Each replica runs its own iterations; the router's split is in the table.")
        series = series[series["replica"] == replica]
        capacity = system["replicas"][replica]["kv_capacity_tokens"]  # a mixed fleet's replicas differ
        replicas = pd.DataFrame(system["replicas"]).rename(columns={"busy_frac": "gpu_busy_frac_run"})
        replicas["speed"] = replicas["speed"].round(2)
        # a mixed fleet's table names each replica's hardware and speed in place of its output tokens (room)
        counts = ["hardware", "speed", "routed", "completed"] if typed.fleet.groups else \
            ["role", "hardware", "routed", "completed"] if typed.fleet.mode == "disaggregated" else \
            ["routed", "completed", "output_tokens"]
        tables.show(replicas, ["replica", *counts, "gpu_busy_frac_run", "mean_batch_size"])
        if "kv_transfer_ms" in run.requests:
            moved = run.requests["kv_transfer_ms"].dropna()
            if len(moved):
                st.caption(f"KV transfer from the prefill to the decode pool (waiting for the link included), "
                           f"{len(moved):,} requests: mean {moved.mean():,.1f} ms, p99 {moved.quantile(0.99):,.1f} "
                           f"ms. A request's time per output token includes it.")
    st.plotly_chart(charts.timeline(series, classes, capacity, system["window_s"]),
                    width="stretch")
    if system["timeseries_stride"] > 1:
        st.caption(f"Every {system['timeseries_stride']}th iteration is shown.")
    if summary.get("windows"):
        st.plotly_chart(charts.window_chart(summary["windows"], classes, bool(typed.fleet.scaled())),
                        width="stretch", key="windows_chart")
        length = summary["windows"][0]["end_s"] - summary["windows"][0]["start_s"]
        st.caption(text.plain(
            f"The whole fleet per {window_words(length)} window: the load its arrivals offered (red: more than the "
            f"fleet can serve while it lasts) and the SLA attainment of the requests that arrived in it."))

requests_frame = run.requests  # the CSV is written when the button is clicked, not on every rerun
st.download_button("Download per-request results (CSV)", lambda: csv_text(requests_frame), "requests.csv",
                   mime="text/csv", on_click="ignore")
