"""Hardware & Cost: does the model fit, how long an iteration takes, which rental, at what price.

Editing the GPU, model, formats, tensor parallelism or replicas here edits the shared scenario (and
switches it to the roofline step model), so the Lab shows the same fleet. Opening the page changes nothing:
a scenario on the fixed step model stays on it until one of these choices is edited. A fit of your benchmark
results is saved under a new name only: a saved calibration may be named by anyone's scenario.
"""

import copy
import dataclasses
import zlib

import pandas as pd
import plotly.graph_objects as go

import streamlit as st

import engine
from engine.calibrate import user_calibration
from engine.calibrate.bench_results import BenchResult, read_result
from engine.calibrate.calibration import METRICS
from engine.calibrate.confidence import step_badge
from engine.decide.cost import HOURS_PER_MONTH, convert, cost_columns, firm_offer, fleet_cards
from engine.decide.sizing import fleet_shapes
from engine.hardware import calibration_store
from engine.hardware.hf_config import CONFIG_MAX_BYTES, model_name, parse_config, user_model_overrides
from engine.hardware.roofline import (GIB, STATIC_SHARE, TOTAL_SHARE, RooflineProfile, card_memory, has_experts,
                                      kv_capacity_tokens, model_text, peak_profile, roofline_profile,
                                      sampler_bytes_per_logit)
from engine.hardware.steptime import decode_step_s_nb, prefill_s
from engine.hardware.tables import engine_row, gpu_row, is_slice, load_table
from engine.scenario.caps import DEFAULT_CAPS
from engine.scenario.config import OVERALL, Fleet, Server, apply_overrides, on_roofline
from engine.scenario.errors import printable
from engine.scenario.labels import cards_text, key_words, words
from engine.scenario.metric_table import LATENCY_KEYS, metric, money_range, round_money
from engine.sim.policies import POLICY_LABELS
from engine.sim.simulate import server_step
from engine.sim.sweep import sweep_rates
from ui import (charts, cost_panel, hardware_choices, parallel_controls, runner, scenario_sidebar, state, tables,
                text, view)
from ui.trace_store import APP_ORIGIN
from ui.widgets import field_input

CONTEXTS_TOKENS = (512, 2048, 8192)
MEMORY_COLORS = {"weights": "#636EFA", "activation peak": "#FFA15A", "outside PyTorch": "#AB63FA",
                 "KV cache": "#00CC96", "held back": "#BBBBBB", "hidden from CUDA": "#888888"}  # "over by": a line


def fleet_inputs(data: dict, v: int) -> None:
    server, fleet = data.setdefault("server", {}), data.setdefault("fleet", {})
    choices = hardware_choices.TABLE_CHOICES
    cols = st.columns(len(choices) + 2)
    for col, key in zip(cols, choices):
        with col:
            server[key] = field_input(Server, key, server.get(key), key=f"hw_{key}_{v}",
                                      options=hardware_choices.options(key, server))
    with cols[len(choices)]:
        server["tensor_parallel"] = field_input(Server, "tensor_parallel", server.get("tensor_parallel"),
                                                key=f"hw_tensor_parallel_{v}",
                                                options=hardware_choices.options("tensor_parallel", server))
    with cols[len(choices) + 1]:
        fleet["replicas"] = field_input(Fleet, "replicas", fleet.get("replicas"), key=f"hw_replicas_{v}")
    with st.container(horizontal=True):
        with st.container(width=220):  # the engine's release, below the engine
            server["engine_version"] = field_input(Server, "engine_version", server.get("engine_version"),
                                                   key=f"hw_engine_version_{v}",
                                                   options=hardware_choices.options("engine_version", server))
        parallel_controls.expert_controls(server, f"hw_{{}}_{v}")


def own_model_section(data: dict) -> None:
    """Read the user's own model from a Hugging Face config.json (uploaded or pasted); "Use this model" serves it
    (``server.model_config``, as ``--model-config FILE`` does)."""
    with st.expander("Your own model: a Hugging Face config.json"):
        cols = st.columns(2)
        upload = cols[0].file_uploader("Upload config.json", type=["json"], key="hw_model_config",
                                       max_upload_size=1, help="The config.json of the model's Hugging Face "
                                                               "repository (a few KiB).")
        pasted = cols[1].text_area("or paste it", key="hw_model_config_text", height=120, max_chars=CONFIG_MAX_BYTES)
        raw = upload.getvalue() if upload is not None else pasted.encode() if pasted.strip() else b""
        if not raw:
            st.caption("Layers, widths, heads, experts and windowed attention are read from the file; the model is "
                       "then one of the choices above, and the link to this scenario carries it.")
            return
        fallback = printable(upload.name.removesuffix(".json"), 60) if upload is not None else ""
        try:
            config = parse_config(raw)
            name = st.text_input("Model name", value=model_name(config, fallback), max_chars=60,
                                 key=f"hw_model_config_name_{zlib.crc32(raw)}",
                                 help="What the plan, the report and the recipes call it (a config.json rarely names "
                                      "its model).")
            overrides = user_model_overrides(config, fallback, "your config.json", name=printable(name, 60))
            if data.get("server", {}).get("expert_parallel"):
                split_off = [*overrides, "server.expert_parallel=false", "server.attention_data_parallel=false"]
                if not has_experts(state.validate(apply_overrides(on_roofline(data), split_off)).server):
                    overrides = split_off
                    st.caption("This model has no experts: using it turns expert parallelism off.")
            typed = state.validate(apply_overrides(on_roofline(data), overrides))
            st.write(f"**{typed.server.model}**: {model_text(peak_profile(typed.server, 1))}.")
        except engine.ScenarioError as exc:
            text.error(exc)
            return
        st.button("Use this model", key="hw_model_config_use", on_click=use_own_model, args=(data, overrides))


def use_own_model(data: dict, overrides: list[str]) -> None:
    """Serve the model read from the user's config.json (a button's callback); the model picker shows it."""
    served = apply_overrides(on_roofline(data), overrides)
    if state.update(served):
        st.session_state[f"hw_model_{state.version()}"] = served["server"]["model"]


def memory_section(server: Server, profile: RooflineProfile) -> int | None:
    """The memory bar of one card and the concurrency it allows; the KV capacity (None if it does not fit)."""
    memory = card_memory(server, profile, server.tensor_parallel)
    parts = memory.parts_gib()
    # The parts stacked end at the card's total when the model fits; past it (by "over by") when it does not.
    fig = go.Figure([go.Bar(y=["one card"], x=[gib], name=name, orientation="h", marker_color=MEMORY_COLORS[name],
                            hovertemplate=f"{name}: %{{x:.1f}} GiB<extra></extra>")
                     for name, gib in parts.items() if gib > 0 and name in MEMORY_COLORS])
    total_gib = memory.total / GIB
    fig.add_vline(x=total_gib, line_dash="dash", line_color="#EF553B" if parts["over by"] > 0 else "#444444",
                  annotation_text=f"the card: {total_gib:.1f} GiB" + (
                      f", {parts['over by']:.1f} GiB too small" if parts["over by"] > 0 else ""),
                  annotation_position="top")
    fig.update_layout(barmode="stack", height=190, margin=dict(t=30, b=10), xaxis_title="memory (GiB)",
                      legend=dict(orientation="h", y=-0.6, traceorder="normal"))
    st.plotly_chart(fig, width="stretch")
    with st.expander("Where each part of the bar comes from"):
        st.table(memory_sources(server, parts, total_gib).set_index("Part")
                 .style.format({"GiB": "{:.2f}"}))  # a static table: long text wraps
    try:
        capacity = kv_capacity_tokens(server, profile)
    except engine.ScenarioError as exc:
        text.error(key_words(str(exc)))
        return None
    view.number("hw_context_tokens", 16, 1_000_000, 2048, integer=True)
    context = st.number_input("Tokens per request (prompt + output)", 16, 1_000_000, step=256, key="hw_context_tokens",
                              help="A request holds this much KV cache at its longest.")
    cols = st.columns(3)
    blocks = capacity // server.block_size_tokens * server.block_size_tokens
    cols[0].metric("KV cache per server", f"{blocks:,} tokens",
                   help=f"Whole KV blocks of {server.block_size_tokens} tokens (server.block_size_tokens).")
    cols[1].metric("Requests that fit at once", f"{blocks // context:,}",
                   help="KV capacity / tokens per request, per server (replica)")
    cols[2].metric("Batch limit", f"{server.max_batch_size:,}",
                   help="Most sequences in one iteration (server.max_batch_size).")
    return capacity


def model_named(model_id: str) -> str | None:
    """The tables' model a benchmark's model id names, or None."""
    try:
        return user_calibration.model_for(model_id) if model_id else None
    except engine.ScenarioError:
        return None


def workload_fits(data: dict) -> bool:
    """Whether every request the sections below simulate fits the KV cache alone (their first run, cached and
    reused by them); if not, say which and what to change."""
    try:
        runner.summary(runner.canonical(runner.capped(data)))
    except engine.ScenarioError as exc:
        text.error(f"{key_words(str(exc))}. The cost against load and the other shapes need a fleet that can serve "
                   f"every request; the cheapest rental below searches the shapes that can.")
        return False
    return True


def memory_sources(server: Server, parts: dict[str, float], total_gib: float) -> pd.DataFrame:
    """One row per part of the memory bar: its size, how it is computed and the measurement behind it; then
    the card's total."""
    conventions = load_table("serving_memory")["source"]
    rules = engine_row(server.engine)["rules_source"]
    budget = engine_row(server.engine)["memory_budget"]
    total_share = budget == TOTAL_SHARE
    tp = server.tensor_parallel
    how = {
        "weights": (f"all weights of {server.model} in {server.quant} (embedding and LM head in 16 bits) / {tp} "
                    f"card(s)", f"{'your config.json' if server.own_model else 'data/hardware/models.csv'} and "
                                f"quant.csv"),
        "activation peak": ("given by activation_reserve_gib" if server.activation_reserve_gib is not None else
                            f"{server.max_batched_tokens:,} batched tokens x (4 x hidden + 2 x intermediate / {tp}) "
                            f"x 2 B + {server.max_batch_size:,} sequences x vocabulary x "
                            f"{sampler_bytes_per_logit(server.engine):g} B (the sampler)",
                            conventions["sampler_bytes_per_logit"] if total_share else rules),
        "outside PyTorch": ("CUDA context, cuBLAS workspace" + (" and NCCL buffers" if tp > 1 else ""),
                            conventions["non_torch_gib_one_card" if tp == 1 else "non_torch_gib_tensor_parallel"]),
        "KV cache": ("what is left of the server's share", "vLLM's rule: utilisation x total - weights - "
                     "activation peak - memory outside PyTorch") if total_share else
                    ("the server's share holds the weights and the KV cache only", f"{server.engine}: utilisation x "
                     "(total - memory outside PyTorch) - weights") if budget == STATIC_SHARE else
                    ("a share of the memory left free", f"{server.engine}: utilisation x (total - weights - "
                     "activation peak - memory outside PyTorch)"),
        "held back": (f"(1 - gpu_memory_utilization {server.gpu_memory_utilization:g}) x the memory CUDA sees; "
                      "CUDA graphs are captured here", "vLLM gpu_worker.determine_available_memory") if total_share else
                     (f"what the activation peak leaves of (1 - gpu_memory_utilization "
                      f"{server.gpu_memory_utilization:g}) x the memory CUDA sees; CUDA graphs are captured here",
                      rules) if budget == STATIC_SHARE else
                     (f"(1 - gpu_memory_utilization {server.gpu_memory_utilization:g}) x the memory left free",
                      rules),
        "hidden from CUDA": ("the card's total (nvidia-smi) that CUDA does not report", conventions["cuda_hidden_gib"]),
        "over by": ("how far the model overflows the card", "the parts above less the card total below"),
    }
    rows = [{"Part": name, "GiB": round(gib, 2), "How it is computed": how[name][0], "Source": how[name][1]}
            for name, gib in parts.items() if gib > 0]
    rows.append({"Part": "card total", "GiB": round(total_gib, 2),
                 "How it is computed": f"{server.gpu} as nvidia-smi reports it",
                 "Source": gpu_row(server.gpu)["memory_source"]})
    return pd.DataFrame(rows)


def step_section(server: Server, capacity: int) -> None:
    """Iteration time against batch size (only batches whose KV fits) and against prompt length, as the simulator
    times them (measured operator tables where they cover the server, else the roofline)."""
    step = server_step(server)
    left, right = st.columns(2)
    batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if b <= max(server.max_batch_size, 1)]
    fig = go.Figure([go.Scatter(x=fitting, y=[decode_step_s_nb(step, b, c) * 1e3 for b in fitting],
                                mode="lines+markers", name=f"{c:,} tokens of context")
                     for c in CONTEXTS_TOKENS if (fitting := [b for b in batches if b * c <= capacity])])
    fig.update_layout(height=320, margin=dict(t=30, b=10, l=70), title="Decode iteration vs batch size",
                      xaxis=dict(title="sequences in the batch", type="log", dtick=1),
                      yaxis_title="iteration time (ms)")
    left.plotly_chart(fig, width="stretch")
    prompts = [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    fig = go.Figure(go.Scatter(x=prompts, y=[prefill_s(step, p) * 1e3 for p in prompts], mode="lines+markers",
                               name="prefill"))
    fig.update_layout(height=320, margin=dict(t=30, b=10), title="Prefill of one prompt (one iteration)",
                      xaxis=dict(title="prompt tokens", type="log", dtick=1),
                      yaxis=dict(title="prefill time (ms)", type="log", dtick=1))
    right.plotly_chart(fig, width="stretch")
    st.caption("Flat lines are memory-bound (weights read once per iteration, shared by the batch); rising lines "
               "are compute-bound; a line ends where its batch no longer fits the KV cache. Step times: "
               + step_badge(server) + ".")


def offers_section() -> None:
    """Every rental offer per card-hour, in the currency and at the exchange rate of "Cost of this fleet"."""
    offers = load_table("offers").reset_index()
    currency, fx = cost_panel.chosen_currency(), cost_panel.exchange_rate()
    cols = st.columns([3, 1])
    view.choice("hw_offer_gpus", sorted(offers["gpu"].unique()), [])
    view.flag("hw_offer_firm")
    gpus = cols[0].multiselect("GPUs", sorted(offers["gpu"].unique()), key="hw_offer_gpus",
                               help="Show the offers of these GPUs only; empty shows every offer.")
    firm_only = cols[1].toggle("Firm prices only", key="hw_offer_firm",
                               help="Hide estimates, price ranges and spot capacity (the provider may take it back).")
    shown = offers[offers["gpu"].isin(gpus)] if gpus else offers
    if firm_only:
        shown = shown[[firm_offer(o) for o in shown["offer"]]]
    hours = shown["period"].map({"hour": 1.0, "month": HOURS_PER_MONTH})
    for end in ("low", "high"):
        shown = shown.assign(**{f"per_card_hour_{end}": [
            round_money(convert(p / h / g, c, currency, fx)) for p, h, g, c in
            zip(shown[f"price_{end}"], hours, shown["gpus_per_unit"], shown["currency"])]})
    columns = ("gpu", "per_card_hour_low", "per_card_hour_high", "vendor", "offer", "terms", "estimate",
               "max_cards_per_machine", "gpus_per_unit", "annual_discount", "notes", "source", "as_of")
    shown = shown.sort_values("per_card_hour_low")[list(columns)].assign(
        annual_discount=lambda f: (100 * f["annual_discount"]).round(0))
    st.dataframe(shown, hide_index=True, width="stretch", placeholder=tables.MISSING, column_config={
        "gpu": st.column_config.Column("GPU"),
        "per_card_hour_low": st.column_config.NumberColumn(f"Per card-hour, low ({currency})", format="localized"),
        "per_card_hour_high": st.column_config.NumberColumn(f"Per card-hour, high ({currency})", format="localized"),
        "vendor": st.column_config.Column("Vendor"), "offer": st.column_config.Column("Offer"),
        "terms": st.column_config.Column("Terms", help="On-demand, reserved (a term), spot (interruptible), or "
                                         "unstated by the source."),
        "estimate": st.column_config.CheckboxColumn("Estimated price"),
        "max_cards_per_machine": st.column_config.NumberColumn("Cards per machine, at most",
                                                               help="The largest tensor-parallel group it hosts."),
        "gpus_per_unit": st.column_config.NumberColumn("Cards per rented unit", format="localized"),
        "annual_discount": st.column_config.NumberColumn("Annual prepay discount (%)", format="localized"),
        "notes": st.column_config.Column("Notes"), "source": st.column_config.Column("Source"),
        "as_of": st.column_config.Column("As of")})
    st.caption(f"Prices per card (or slice) and hour as each offer quotes them, in {currency} (the currency and "
               f"exchange rate of the fleet's cost above); a month is {HOURS_PER_MONTH:g} hours. Click a column header "
               "to sort.")


def cost_vs_load(data: dict, typed: engine.Scenario, rental) -> None:
    if typed.workload.trace is not None:
        st.info("Cost against load needs synthetic arrivals; this scenario replays a trace.")
        return
    rate = typed.workload.arrival.rate_per_s
    summary = runner.summary(runner.canonical(runner.capped(data)))
    rates = sweep_rates(rate, summary["system"]["offered_load"])
    policy = typed.policy.name
    sweep, note = runner.load_sweep(data, rates, [policy])
    if note:
        st.warning(text.plain(note))
    overall = cost_columns(sweep[sweep["class"] == OVERALL], rental.per_hour[0])
    fig = go.Figure(go.Scatter(x=overall["rate_per_s"], y=overall["cost_per_million_output_tokens"],
                               mode="lines+markers", name=POLICY_LABELS[policy],
                               line=dict(color=charts.POLICY_COLORS[policy])))
    fig.add_vline(x=rate, line_dash="dot", annotation_text="current rate")
    fig.update_layout(height=320, margin=dict(t=30, b=10), xaxis_title="arrival rate (req/s)",
                      yaxis_title=metric("cost_per_million_output_tokens").title(rental.currency))
    st.plotly_chart(fig, width="stretch")
    st.caption(f"Policy: {POLICY_LABELS[policy]}; low end of {rental.offer}. Past saturation the cost stops falling "
               f"while latency explodes (see the Lab's curves).")


def shapes_section(data: dict, server: Server, cards: int, rental) -> None:
    """The same cards as 1 x TP-N, ..., N x TP-1 on this workload: the tensor- versus data-parallel trade."""
    if is_slice(server.gpu):
        st.caption("Slices have no link between them: only replicas of one slice.")
        return
    bar = st.progress(0.0, text="Simulating each shape...")
    with runner.SectionBudget() as budget:
        frame = fleet_shapes(runner.capped(data), cards, rental, APP_ORIGIN, run=budget.summary,
                             progress=lambda i, n: bar.progress(i / n, text=f"Simulating each shape... {i}/{n}"))
    bar.empty()
    tables.show(frame, ["shape", "cost_per_million_output_tokens", "ttft_p50_ms", "ttft_p99_ms", "tpot_mean_ms",
                        "e2e_p99_ms", "sla_attainment", "output_tokens_per_s", "completed", "timed_out",
                        "gpu_busy_frac", "offered_load", "note"], rental.currency if rental else "")
    st.caption(f"{cards_text(cards)} of {server.gpu}, current workload, policy and router, first "
               f"{runner.SWEEP_MAX_REQUESTS:,} requests. More tensor parallelism: faster iterations (lower TPOT) "
               "but fewer servers to queue on; more replicas: more batches in parallel, each slower.")


def cheapest_section(data: dict) -> None:
    """The cheapest rental that meets a latency target on this workload: the question, answered by the Planner (one
    search, one answer: its answer is the one the Planner page shows for the same target)."""
    classes = [c["name"] for c in data["workload"]["classes"]]
    cols = st.columns([2, 2, 2])
    view.choice("hw_target_class", [*classes, OVERALL], classes[0])
    view.choice("hw_target_metric", LATENCY_KEYS, "ttft_p99_ms")
    view.number("hw_target_ms", 1.0, 1e7, 1000.0)
    cls = cols[0].selectbox("Class", [*classes, OVERALL], key="hw_target_class")
    metric_key = cols[1].selectbox("Latency", LATENCY_KEYS, format_func=lambda k: metric(k).label,
                                   key="hw_target_metric")
    limit_ms = cols[2].number_input("At most (ms)", 1.0, 1e7, step=100.0, key="hw_target_ms", format="%g")
    if st.button("Answer it in the Planner", type="primary",
                 help="The Planner sizes every GPU with a firm price at every tensor-parallel degree that fits, on "
                      "several seeds, and recommends the cheapest fleet whose step times are measured."):
        view.hand_over({"plan_class_0": cls, "plan_metric_0": metric_key, "plan_limit_0": float(limit_ms),
                        "plan_metric_1": view.NO_TARGET, "plan_metric_2": view.NO_TARGET})
        st.session_state["plan_asked"] = True
        st.switch_page("pages/planner.py")


@st.cache_data(max_entries=16, show_spinner=False)
def parsed_result(file: str, content: bytes) -> BenchResult:
    """An uploaded result file read once (a bad one raises ``ScenarioError`` again at each rerun)."""
    return read_result(content, file)


@st.cache_data(max_entries=8, show_spinner="Replaying your benchmarks and fitting...")
def fitted_on(contents: tuple[tuple[str, bytes], ...], server: Server, name: str) -> user_calibration.Calibrated:
    """The fit of ``server``'s GPU on the uploaded result files (name, bytes)."""
    return user_calibration.calibrate([parsed_result(file, content) for file, content in contents], server, name)


def calibration_picker(data: dict, server: Server) -> None:
    """Which step-time calibration the scenario uses: the shipped one of its GPU family or one you saved for it."""
    choices = ["", *(n for n in calibration_store.names() if calibration_store.holds_for(n, server.gpu))]
    current = server.calibration if server.calibration in choices else ""
    key = f"hw_calibration_{state.version()}"
    if st.session_state.get(key) not in choices:
        st.session_state[key] = current
    shipped = f"shipped ({words('gpu_family', gpu_row(server.gpu)['family'])} family)"
    picked = st.selectbox("Step-time calibration", choices, key=key, format_func=lambda c: c or shipped,
                          help="Step-time factors the simulator uses for this GPU: the shipped fit to published "
                               "measurements, or one fitted on your own benchmark results below.")
    if picked != current:
        data["server"]["calibration"] = picked
        if state.update(data):
            st.rerun()


def save_fit(fit: calibration_store.UserCalibration, data: dict) -> None:
    """Keep the fit under the new name typed, and make the scenario use it (a button's callback). A saved
    calibration is never replaced here: other scenarios may name it (replacing it is the operator's act)."""
    name = st.session_state.get("hw_calibration_name", "")
    try:
        calibration_store.save_new(dataclasses.replace(fit, name=name))
    except engine.ScenarioError as exc:
        st.session_state["hw_calibration_error"] = str(exc)
        return
    data["server"]["calibration"] = name
    if state.update(data):
        st.session_state[f"hw_calibration_{state.version()}"] = name


FIT_COLUMNS = {"file": "File", "metric": "Measured figure", "measured": "Measured", "shipped": "Shipped",
               "shipped_error_pct": "Shipped error (%)", "fitted": "Fitted", "fitted_error_pct": "Fitted error (%)",
               "held_out_error_pct": "Run left out, error (%)"}


def read_uploads(uploads) -> tuple[list, list]:
    """The benchmark results among the uploaded files and their (name, bytes); a bad file is named and left out,
    the others are still fitted."""
    contents, results = [], []
    for upload in uploads:
        file, content = printable(upload.name, 60), upload.getvalue()
        try:
            results.append(parsed_result(file, content))
        except engine.ScenarioError as exc:
            text.error(exc)
        else:
            contents.append((file, content))
    return results, contents


def show_fit(calibrated: user_calibration.Calibrated, results: list, server: Server) -> list[str]:
    """The replayed runs, every figure measured, predicted and fitted, and how well the fit holds; returns the
    problems that make the fit unfit to save (also shown as warnings)."""
    problems = []
    for result in results:
        st.caption(f"{result.name} ({result.tool}): {result.load_text()}.")
        named = model_named(result.model_id)
        if named and named != server.model:
            problems.append(f"{result.name} was measured with {printable(result.model_id, 80)} ({named} in the "
                            f"tables) but is replayed with {server.model}: set Model above to {named}")
    st.caption(f"Replayed on {calibrated.calibration.setup}.")
    table = calibrated.table.assign(metric=lambda f: f["metric"].map(METRICS))
    if len(results) == 1:
        table = table.drop(columns=["file", "held_out_error_pct"])
    # A static table: its long headers and file names wrap instead of being cut.
    st.table(table.rename(columns=FIT_COLUMNS).style.hide(axis="index").format(
        {FIT_COLUMNS[c]: "{:,.1f}" for c in ("measured", "shipped", "fitted")} |
        {FIT_COLUMNS[c]: "{:+.1f}" for c in ("shipped_error_pct", "fitted_error_pct", "held_out_error_pct")},
        na_rep=tables.MISSING, subset=[FIT_COLUMNS[c] for c in FIT_COLUMNS if c in table.columns and c not in
                                       ("file", "metric")]))
    st.caption("Shipped: predicted with the shipped calibration. Fitted: with the factors fitted on these figures "
               "(in-sample: the fit has seen each). Run left out: predicted by a fit of the other runs only.")
    fit, eff = calibrated.calibration, calibrated.calibration.efficiency
    st.caption(f"Fitted in {calibrated.fit_s:.1f} s on {fit.figures} figures from {len(fit.files)} run(s): "
               f"{fit.quality()}. Compute {eff.compute:.2f} and bandwidth {eff.bandwidth:.2f} of peak, "
               f"{eff.overhead_ms:.2f} ms per iteration. The figures of one run share its load: fit runs at several "
               f"rates or concurrencies to see how the fit holds on loads it has not seen.")
    if calibrated.warning():
        problems.append(calibrated.warning())
    for problem in problems:
        st.warning(problem)
    return problems


def measurements_section(data: dict, server: Server) -> None:
    """Upload benchmark results, compare them with the simulator, fit this GPU on them and save the fit."""
    calibration_picker(data, server)
    uploads = st.file_uploader("Your benchmark results (JSON)", type=["json"], accept_multiple_files=True,
                               key="bench_upload", max_upload_size=DEFAULT_CAPS.result_file_mib,
                               help="vllm bench serve / benchmark_serving.py --save-result files, or GenAI-Perf / "
                                    "AIPerf profile exports, run on this GPU, model and server.")
    if not uploads:
        st.caption("Upload result files of a benchmark you ran on this set-up to see how far the simulator is from "
                   "your measurements and to fit its factors on them (python -m engine calibrate does the same).")
        return
    results, contents = read_uploads(uploads)
    if not results:
        return
    try:
        calibrated = fitted_on(tuple(contents), server, "yours")
    except engine.ScenarioError as exc:
        text.error(exc)
        return
    problems = show_fit(calibrated, results, server)
    fit = calibrated.calibration
    cols = st.columns([3, 1], vertical_alignment="bottom")  # the button level with the name it saves under
    name = cols[0].text_input("Save the fit as", key="hw_calibration_name", max_chars=64,
                              help="A new name: letters, digits, '.', '_' or '-'. The scenario then uses it "
                                   "(server.calibration); a saved calibration and the shipped one are never "
                                   "changed here.")
    cols[1].button("Save and use", key="hw_calibration_save", disabled=not name or bool(problems),
                   on_click=save_fit, args=(fit, data),
                   help="Disabled while the replayed set-up looks unlike the one measured (see the warnings).")
    if "hw_calibration_error" in st.session_state:
        text.error(st.session_state.pop("hw_calibration_error"))


sidebar_summary = scenario_sidebar.render()
runner.warm_up()
current = state.current_or_default()
data = copy.deepcopy(current)
st.title("Hardware & Cost")
fleet_inputs(data, state.version())
own_model_section(data)
notice = state.drop_foreign_calibration(data)
if notice:
    st.info(notice)
if state.edited(data, current):
    corrected = copy.deepcopy(current)
    state.drop_foreign_calibration(corrected)
    if state.edited(data, corrected):  # a choice made here makes the scenario run on this hardware
        data = on_roofline(data)
    if not state.update(data):
        st.stop()
    scenario_sidebar.summary(sidebar_summary)
on_hardware = data["server"].get("step_model") == "roofline"
if on_hardware:
    st.caption("Changes here edit the shared scenario: the Lab shows the same fleet.")
else:
    st.info("The scenario uses a fixed iteration time, not a GPU: this page shows the GPU below as it would run. "
            "Changing any choice above switches the scenario to it (the roofline step model).")
    data = on_roofline(data)  # this page's view only; the scenario is unchanged
typed = state.validate(data)
server = typed.server
st.caption(f"{server.gpu}: {step_badge(server)}. "
           f"Source: {gpu_row(server.gpu)['source']}")

st.subheader("Does it fit? Memory of one card")
profile = roofline_profile(server)
capacity = memory_section(server, profile)
if capacity is not None:
    st.subheader("Iteration time")
    step_section(server, capacity)
    st.subheader("Your own measurements")
    measurements_section(data, server)
    st.subheader("Cost of this fleet")
fits = capacity is not None and workload_fits(data)  # the first simulation of the page: after the figures above
cards = fleet_cards(server.gpu, server.tensor_parallel, typed.fleet.replicas)
several = bool(typed.fleet.groups) or typed.fleet.mode == "disaggregated"  # this page shows [server]'s GPU only
if several and capacity is not None:
    st.info("This fleet has groups or pools of its own hardware: this page describes the [server] table's GPU; "
            "the Lab prices each group through its cheapest offer.")
rental = cost_panel.pick_offer(server.gpu, cards, server.tensor_parallel) if capacity is not None and not several \
    else None
if rental is not None:
    st.metric(f"Fleet per month ({rental.currency})", money_range(rental.per_month))
    if fits:
        cost_vs_load(data, typed, rental)
st.subheader("Rental offers")
offers_section()
if fits and not several:
    st.subheader("Same cards, other shapes")
    shapes_section(data, server, cards, rental)
st.subheader("Cheapest rental that meets a target")
cheapest_section(data)
