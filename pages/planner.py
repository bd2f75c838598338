"""Planner: the cheapest rental, fleet and policy that meet the user's targets on the current workload.

The question is asked here: the workload (model, arrival rate, classes and their lengths, edited on the shared
scenario, as the Lab and the Workload page do), the targets, GPUs, policies, prices, billing, currency and how
sure. A plan runs only when asked (it simulates hundreds of fleets), with a progress bar, and its answer stays
on the page until the question or the scenario changes. The engine (``engine.decide.planner``) does the work;
this page only asks and shows.
"""

import copy
import io
import time
import zipfile

import streamlit as st

import engine
from engine.decide.cost import BILLING_MODES, CURRENCIES, DEFAULT_CURRENCY, PRICE_RULES
from engine.decide.plan_charts import over_time_chart, pareto_chart
from engine.decide.plan_text import (alternatives_frame, caveat, cut_text, energy_text, hours_frame, mix_text,
                                     no_plan_text, not_possible_frame, over_time_frame, over_time_heading, pace_words,
                                     sensitivity_text, shape, summary_line, traffic_text, tuned_text)
from engine.decide.planner import (DECODINGS, DEFAULT_REQUESTS, DEFAULT_SEEDS, T_95, TUNE_RANGE, Question, answer_key,
                                   fleet_scenario, plan)
from engine.decide.price_list import MAX_BYTES as PRICE_LIST_MAX_BYTES, price_list_label, read_price_list
from engine.decide.recipe import recipe_files
from engine.decide.pdf_printer import VisitorPrints, chromium
from engine.decide.report import report_html
from engine.decide.targets import TARGET_METRICS, Target
from engine.decide.traffic import describe as describe_traffic, describe_mean, peak_rate_per_s
from engine.hardware.tables import default_formats, load_table
from engine.scenario.rate_curve import DEFAULT_SHAPE
from engine.scenario.table_names import names
from engine.scenario.config import OVERALL, Arrival, raw_curve
from engine.scenario.caps import MIB
from engine.scenario.errors import ScenarioError, printable
from engine.scenario.json_out import strict_json
from engine.scenario.link import public_address
from engine.scenario.labels import format_label, key_words, words
from engine.scenario.metric_table import metric
from engine.scenario.registry import POLICY_CODES, ROUTER_CODES
from engine.sim import parallel
from engine.sim.policies import POLICY_LABELS
from engine.sim.steady import STEADY_FLIGHTS
from ui import cluster, cost_panel, jobs, plan_store, runner, scenario_sidebar, state, tables, text, turns, view
from ui.trace_store import APP_ORIGIN
from ui.widgets import field_input
from ui.workload_form import class_rows

OFFER_TABLE = load_table("offers")
GPUS_WITH_OFFERS = list(dict.fromkeys(OFFER_TABLE["gpu"]))
OFFERS = list(OFFER_TABLE.index)
REQUESTS_RANGE = (500, 20000)
QUANTS = list(load_table("quant").index)
PRICE_CHOICES = ("", *PRICE_RULES)  # "": the planner's default (firm when a target is a latency)


def default_target(typed: engine.Scenario) -> tuple[str, str, float]:
    """The first class's TTFT p99 at its SLA target (1 s without one)."""
    first = typed.workload.classes[0]
    return first.name, "ttft_p99_ms", float(first.sla_ttft_ms or 1000.0)


def target_inputs(typed: engine.Scenario) -> tuple[Target, ...]:
    """Up to ``view.PLAN_TARGET_ROWS`` targets, one row each: class, metric (or none), limit in the metric's unit."""
    classes = [c.name for c in typed.workload.classes] + [OVERALL]
    cls0, metric0, limit0 = default_target(typed)
    targets = []
    for i in range(view.PLAN_TARGET_ROWS):
        view.choice(f"plan_class_{i}", classes, cls0)
        view.choice(f"plan_metric_{i}", [view.NO_TARGET, *TARGET_METRICS], metric0 if i == 0 else view.NO_TARGET)
        view.number(f"plan_limit_{i}", 0.0, 1e9, limit0 if i == 0 else 0.0)
        # Every row keeps its labels: on a phone the three columns stack, and a row without them is unnamed.
        cols = st.columns([2, 2, 2])
        cls = cols[0].selectbox(f"Target {i + 1}: class", classes, key=f"plan_class_{i}", format_func=text.plain)
        key = cols[1].selectbox(f"Target {i + 1}: metric", [view.NO_TARGET, *TARGET_METRICS], key=f"plan_metric_{i}",
                                format_func=lambda k: "no target" if k == view.NO_TARGET else
                                f"{metric(k).title()} {'at most' if metric(k).lower_is_better else 'at least'}")
        unit = "" if key == view.NO_TARGET else metric(key).unit or "share, 0 to 1"
        limit = cols[2].number_input(f"Target {i + 1}: limit" + (f" ({unit})" if unit else ""), 0.0, 1e9,
                                     key=f"plan_limit_{i}", format="%g", disabled=key == view.NO_TARGET)
        if key != view.NO_TARGET:
            targets.append(Target(cls, key, float(limit)))
    return tuple(targets)


def workload_inputs(data: dict, typed: engine.Scenario) -> None:
    """The customer's workload, edited in place on a copy of the shared scenario (the Lab and the Workload page show
    the same): the model, the arrival rate and the classes with their lengths."""
    v = state.version()
    server = data.setdefault("server", {})
    if typed.server.step_model == "roofline":
        models = list(dict.fromkeys([*load_table("models").index, typed.server.model]))
        server["model"] = st.selectbox(
            "Model", models, index=models.index(typed.server.model), key=f"plan_model_{v}",
            help="Every model of the table (your own from a config.json: Hardware & Cost). The plan tries every "
                 "tensor-parallel degree at which it fits.")
    if typed.workload.arrival is not None:
        rate_inputs(data["workload"]["arrival"], typed.workload.arrival, v)
    else:
        st.caption("Arrivals replay the scenario's trace (the Workload page); its peak sets the load.")
    st.markdown("**Classes of requests** (each with its share of the arrivals and its prompt and output lengths)")
    class_rows(data, v, "plan")


PLAN_RATE_MODES = ("One rate (the busiest hour's)", "A day's shape")
CURVE_MODE = "The scenario's rate curve (its points on the Workload page)"


def rate_inputs(arrival: dict, typed: Arrival, v: int) -> None:
    """The traffic the plan is sized for: one rate, or a day's shape scaled to a mean rate (sized at its peak, billed
    over the day three ways), or the scenario's own curve, kept as it is (its points are edited on the Workload
    page). What the shape means is said beside it: its peak and its lowest rate."""
    modes = PLAN_RATE_MODES + ((CURVE_MODE,) if typed.rate_curve is not None else ())
    now = 2 if typed.rate_curve is not None else 1 if typed.shape else 0
    cols = st.columns([2, 2, 2])
    mode = cols[0].selectbox("Traffic over the day", modes, index=now, key=f"plan_rate_mode_{v}",
                             help="A day's shape sizes the fleet at its busiest point and prices it over the "
                                  "whole day three ways: fixed at the peak, autoscaled, reserved baseline + bursts.")
    if mode == PLAN_RATE_MODES[0]:
        for key in ("rate_curve", "shape", "curve_period_s", "curve_start_s"):
            arrival.pop(key, None)
        curve = typed.curve()
        rate = curve.rates_per_s.max() if curve is not None else typed.rate_per_s
        with cols[1]:
            arrival["rate_per_s"] = rate_input(rate, f"plan_rate_{v}", "Arrival rate at the peak")
        return
    if mode == PLAN_RATE_MODES[1]:
        arrival.pop("rate_curve", None)
        arrival.pop("curve_period_s", None)
        with cols[1]:
            arrival["shape"] = field_input(Arrival, "shape", typed.shape or DEFAULT_SHAPE, key=f"plan_shape_{v}",
                                           options=list(names("traffic_shapes")))
    with cols[2]:
        arrival["rate_per_s"] = rate_input(typed.rate_per_s, f"plan_mean_rate_{v}", "Mean arrival rate")
    try:
        curve = raw_curve(arrival)
    except ScenarioError:  # points that do not make a curve: the scenario's check names them below
        curve = None
    if curve is not None:
        st.caption(text.plain(f"{curve.rates_per_s.max():,.3g} req/s at the peak (the fleet is sized for it), "
                              f"{curve.rates_per_s.min():,.3g} req/s at the lowest; the answer prices the day three "
                              f"ways."))


def rate_input(rate: float, key: str, label: str) -> float:
    """A rate shown to three significant figures (10.8, not 10.791666666666666); the exact rate kept while the
    shown one is not edited."""
    shown = float(f"{rate:.3g}")
    entered = field_input(Arrival, "rate_per_s", shown, key=key, label=label)
    return rate if entered == shown else entered


def traffic_inputs(data: dict, typed: engine.Scenario) -> None:
    """Users x requests per user per day, turned into the scenario's arrival rate: x a peak factor into the peak rate
    for one rate; the mean rate under a day's shape (the shape gives the peak)."""
    arrival = typed.workload.arrival
    if arrival is None:
        return
    curve = arrival.curve()
    now = f"{arrival.rate_per_s:,.3g} req/s" + (" on average" if curve is not None else "")
    with st.expander(f"Traffic in business terms (now {now})"):
        view.number("plan_users", 1.0, 1e9, 10000.0)
        view.number("plan_requests_per_user", 0.001, 1e6, 20.0)
        view.number("plan_peak_factor", 1.0, 100.0, 3.0)
        cols = st.columns(3)
        users = cols[0].number_input("Users", 1.0, 1e9, step=1000.0, key="plan_users", format="%g")
        per_user = cols[1].number_input("Requests per user per day", 0.001, 1e6, key="plan_requests_per_user",
                                        format="%g")
        if curve is not None:  # the shape's peak over its mean is the peak factor
            rate = peak_rate_per_s(users, per_user, 1.0)
            cols[2].caption(f"Peak factor: the shape's, {curve.rates_per_s.max() / curve.mean_per_s():.2g}.")
            st.caption(describe_mean(users, per_user) + ".")
            label, said = f"Use {rate:,.3g} req/s as the mean rate", "Sets the scenario's mean arrival rate"
        else:
            peak = cols[2].number_input("Peak factor", 1.0, 100.0, key="plan_peak_factor", format="%g",
                                        help="The busiest hour's rate over the day's mean; the fleet is sized for it.")
            rate = peak_rate_per_s(users, per_user, peak)
            st.caption(describe_traffic(users, per_user, peak) + ".")
            label, said = f"Use {rate:,.3g} req/s as the arrival rate", "Sets the scenario's arrival rate"
        st.button(label, on_click=state.replace_rate, args=(data, float(f"{rate:.4g}")),
                  help=f"{said} (shared with the other pages).")


def question_inputs(typed: engine.Scenario) -> Question:
    """The question, from the page's controls; ``ScenarioError`` when it cannot be asked."""
    st.markdown("**Targets** (each class's figure on every seed's run and its 95% interval over the seeds; latencies "
                "at most, SLA met and throughputs at least)")
    targets = target_inputs(typed)
    view.choice("plan_gpus", GPUS_WITH_OFFERS, GPUS_WITH_OFFERS)
    view.choice("plan_policies", list(POLICY_CODES), [typed.policy.name])
    view.choice("cost_billing", BILLING_MODES, BILLING_MODES[0])
    view.choice("cost_currency", CURRENCIES, DEFAULT_CURRENCY)
    view.number("plan_seeds", 2, max(T_95), DEFAULT_SEEDS, integer=True)
    view.number("plan_requests", *REQUESTS_RANGE, DEFAULT_REQUESTS, integer=True)
    gpus = st.multiselect("GPUs to consider", GPUS_WITH_OFFERS, key="plan_gpus",
                          help="Every GPU with a rental offer; each at every tensor-parallel degree that fits.")
    view.choice("plan_offers", OFFERS, [])
    offers = st.multiselect("Only these offers (empty: every offer of those GPUs)", OFFERS, key="plan_offers",
                            format_func=lambda o: f"{o} ({OFFER_TABLE.loc[o, 'vendor']}, {OFFER_TABLE.loc[o, 'gpu']})",
                            help="The providers the customer accepts: the plan rents through these offers only.")
    view.choice("plan_quants", QUANTS, [q for q in default_formats(typed.server.model, typed.server.quant)
                                        if q in QUANTS])
    view.choice("plan_routers", list(ROUTER_CODES), [typed.fleet.router])
    view.number("plan_budget", 0.0, 1e9, 0.0)
    view.choice("plan_decodings", list(DECODINGS), [DECODINGS[1] if typed.server.speculative else DECODINGS[0]])
    cols = st.columns([3, 2, 2, 2])
    policies = cols[0].multiselect("Policies to try", list(POLICY_CODES), key="plan_policies",
                                   format_func=POLICY_LABELS.get,
                                   help="Per GPU and degree the policy needing the fewest replicas is kept; each "
                                        "policy adds a search. The policies' parameters are the scenario's.")
    quants = cols[1].multiselect("Weight formats accepted", QUANTS, key="plan_quants", format_func=format_label,
                                 help="Each format is sized at every tensor-parallel degree it fits; fewer bits need "
                                      "fewer cards, and the quality of the answers is yours to judge.")
    routers = cols[2].multiselect("Routers to try", list(ROUTER_CODES), key="plan_routers",
                                  format_func=lambda name: words("router", name),
                                  help="Where each arrival goes among the replicas; each router adds a search.")
    decodings = cols[3].multiselect(
        "Decoding to try", DECODINGS, key="plan_decodings", disabled=typed.server.speculative is None,
        format_func=lambda name: words("decoding", name),
        help="Plain: one token per decode iteration. Speculative: the scenario's speculative decoding (its draft "
             "and acceptance rate; turn it on in the Lab to compare). Each decoding adds a search.")
    budget_column, prices_column = st.columns(4)[:2]
    budget = budget_column.number_input("Budget per month (0 = none)", 0.0, 1e9, step=1000.0, key="plan_budget",
                                        format="%g", help="In the currency below, at the low end of each offer: "
                                                          "nothing dearer is recommended.")
    view.number("plan_tune", 0, TUNE_RANGE[1], 0, integer=True)
    view.choice("plan_prices", PRICE_CHOICES, PRICE_CHOICES[0])
    prices = prices_column.selectbox(
        "Prices", PRICE_CHOICES, key="plan_prices", format_func=lambda rule: words("prices", rule),
        help="Firm: one number read from the provider, for capacity it does not take back (on-demand or reserved). "
             "Any: estimates, price ranges and spot capacity too, each flagged. By default firm prices when a "
             "target is a latency.")
    cols = st.columns(5)
    billing = cost_panel.billing_picker(cols[0])
    currency = cols[1].selectbox("Currency", CURRENCIES, key="cost_currency")
    seeds = cols[2].number_input("Seeds per decision", 2, max(T_95), step=1, key="plan_seeds",
                                 help="A fleet meets a target only if it does on every seed's run and the 95% "
                                      "interval over the seeds lies inside the limit.")
    requests = cols[3].number_input("Requests per run", *REQUESTS_RANGE, step=500, key="plan_requests",
                                    help=f"At least this many: each run is lengthened until the fleet's queue "
                                         f"settles and it lasts {STEADY_FLIGHTS} mean times in the system (Little's "
                                         f"law), and targets are judged after its warm-up.")
    tune_first = cols[4].number_input("Tune first (candidates)", 0, TUNE_RANGE[1], step=50, key="plan_tune",
                                      help="0: the scenario's policy parameters. Otherwise each of strict priority, "
                                           "weighted fair queuing and dynamic cost is tuned on the scenario's own "
                                           "fleet first (the first target the objective, the others constraints) "
                                           "with this many candidates.")
    if not gpus:
        raise engine.ScenarioError("choose at least one GPU to consider")
    price_list = price_list_input()
    fx = cost_panel.exchange_rate()
    gpus = () if price_list else tuple(gpus)  # a price list: every GPU it rents
    return Question(targets, gpus, () if price_list else tuple(offers), tuple(policies), tuple(quants),
                    tuple(routers), billing, currency, float(fx), int(seeds), int(requests),
                    budget=float(budget) or None, tune=int(tune_first),
                    decodings=tuple(decodings), prices=prices, price_list=price_list,
                    price_list_named=view.current(PRICE_LIST_KEY, "") if price_list else "")


PRICE_LIST_KEY = "plan_price_list_named"  # the view key naming the visitor's price list (ui.view)


def price_list_input() -> tuple:
    """The visitor's own price list (a CSV of offers.csv's columns), planned against in place of the built-in offers
    while it is uploaded; its one-line error when it cannot be read."""
    upload = st.file_uploader("Your own price list (CSV, optional)", type=["csv"], key="plan_price_list",
                              max_upload_size=PRICE_LIST_MAX_BYTES // MIB or 1,
                              help="The columns of data/hardware/offers.csv (see the manual, Plan: the cheapest "
                                   "rental): the plan then rents through these offers only.")
    named = view.current(PRICE_LIST_KEY, "")
    if upload is None:
        if named:  # the link's plan was priced with a price list the link cannot carry
            st.warning(text.plain(f"This link's plan was priced with your own price list ({named}), which a link "
                                  f"cannot carry: upload it again to plan with it. Until then Plan prices with the "
                                  f"built-in offers."))
            st.button("Plan with the built-in offers instead", key="plan_price_list_drop",
                      on_click=forget_price_list)
        return ()
    content = upload.getvalue()
    rows = read_price_list(content, f"price list {printable(upload.name)}")
    st.session_state[PRICE_LIST_KEY] = price_list_label(upload.name, content, rows)
    st.caption(f"Planning against your {len(rows):,} offers ({printable(upload.name)}) instead of the built-in ones, "
               "on every GPU they rent; the link names the file (it cannot carry it).")
    return rows


def forget_price_list() -> None:
    """Plan with the built-in offers: the link stops naming a price list (a button's callback)."""
    st.session_state[PRICE_LIST_KEY] = ""  # remembered as such: the link names none


def show_answer(answer: dict, question: Question) -> None:
    best = answer["recommendation"]
    if answer["run"].get("cut"):
        st.warning(text.plain(cut_text(answer)))
    if best is None:
        st.warning(text.plain(no_plan_text(answer) + (": raise the budget or loosen a target." if answer["alternatives"]
                                                       else ": see why below, then loosen a target, allow more GPUs, "
                                                            "policies or weight formats.")))
    else:
        st.success(text.plain("Recommended: " + summary_line(best)))
        energy = energy_text(best)
        if energy:
            st.caption(text.plain(energy + "."))
        if st.button("Open this fleet in the Lab", key="plan_open_best",
                     help="The Lab runs your workload on the recommended fleet, policy and router, to explore it."):
            open_in_lab(best, question)
        warning = caveat(answer, "Hardware & Cost, 'Your own measurements'")
        if warning:
            st.warning(text.plain(warning))
        st.markdown("\n".join(f"- {text.plain(sentence)}" for sentence in answer["diagnosis"]))
        grows = sensitivity_text(answer)
        if grows:
            st.info(text.plain(grows))
        tuned = tuned_text(answer)
        if tuned:
            st.info(text.plain(tuned))
        mixed = mix_text(answer)
        if mixed:
            (st.success if answer["mix"] else st.caption)(text.plain(mixed))
        show_over_time(answer)
        st.plotly_chart(pareto_chart(answer, question.targets[0]), width="stretch")
        st.caption("Each point is a priced plan that meets every target; the dashed line is the first target's "
                   "limit. The cheapest plans sit to the left, those with the most to spare at the bottom (or top, "
                   "for a figure that must be at least its limit).")
    if answer["alternatives"]:
        st.markdown(f"**Alternatives, cheapest first** ({len(answer['alternatives'])})")
        frame = alternatives_frame(answer["alternatives"])
        wide = {t.describe(): st.column_config.Column(width="large") for t in question.targets}  # value + interval
        st.dataframe(frame, hide_index=True, width="stretch", placeholder=tables.MISSING, column_config=wide)
        cols = st.columns([4, 2], vertical_alignment="bottom")
        alternatives = answer["alternatives"]
        picked = cols[0].selectbox(
            "An alternative to explore", range(len(alternatives)), key="plan_open_pick",
            format_func=lambda i: f"{i + 1}. {shape(alternatives[i])} {alternatives[i]['gpu']} through "
                                  f"{alternatives[i]['offer']}")
        if cols[1].button("Open it in the Lab", key="plan_open_alternative"):
            open_in_lab(alternatives[picked], question)
        st.caption("Targets: mean over the seeds (95% interval). Policy: the one needing the fewest replicas on that "
                   "GPU and degree (+N: other policies tried that need as many). Headroom: the highest arrival rate at "
                   "which the same fleet still meets every target (the recommendation and the first 12 alternatives).")
    if answer["not_possible"]:
        with st.expander(f"Not possible ({len(answer['not_possible'])})"):
            st.dataframe(not_possible_frame(answer["not_possible"]), hide_index=True, width="stretch",
                         placeholder=tables.MISSING)
    run = answer["run"]
    st.caption(f"{run['evaluations']:,} runs in {run['wall_s']:.1f} s on {run.get('where', run['workers'])}.")
    report_buttons(answer, question)


def show_over_time(answer: dict) -> None:
    """A moving rate's recommendation bought three ways over the whole traffic: the table, then hour by hour."""
    over = answer.get("over_time")
    if not over:
        return
    st.markdown("**Over the whole traffic: fixed, autoscaled, or reserved + bursts**")
    if answer.get("traffic"):
        st.caption(text.plain(traffic_text(answer["traffic"], answer.get("over_time"))))
    if "note" in over:
        st.caption(text.plain(f"Not priced over time: {over['note']}."))
        return
    currency = answer["recommendation"]["monthly_cost"]["currency"]
    st.caption(text.plain(over_time_heading(over)))
    st.dataframe(over_time_frame(over, currency), hide_index=True, width="stretch", placeholder=tables.MISSING)
    st.plotly_chart(over_time_chart(over, currency), width="stretch")
    with st.expander("Hour by hour"):
        st.dataframe(hours_frame(over, currency), hide_index=True, width="stretch", placeholder=tables.MISSING)


def open_in_lab(chosen: dict, question: Question) -> None:
    """Make the scenario on ``chosen``'s fleet the shared one and go to the Lab, priced through its offer."""
    try:
        data = fleet_scenario(state.current_or_default(), question, chosen, APP_ORIGIN)
    except engine.ScenarioError as exc:
        text.error(f"This fleet cannot be opened: {key_words(str(exc))}.")
        return
    if state.replace(data):
        st.session_state["cost_offer"] = chosen["offer"]  # the Lab's cost through the plan's own offer
        st.session_state[cost_panel.PLAN_PRICE_LIST] = (question.price_list, question.price_list_named)
        st.session_state[state.PLAN_TARGETS] = {  # the Lab judges the plan's targets, not only the classes' SLA
            "targets": [{"cls": t.cls, "key": t.key, "limit": t.limit} for t in question.targets],
            "scenario": state.current(), "seeds": question.seeds,
            "requests": chosen.get("steady", {}).get("requests", question.requests)}  # the plan's runs, lengthened
        st.switch_page("pages/lab.py")


def report_buttons(answer: dict, question: Question) -> None:
    """The plan as JSON, and as the report to hand over: HTML (interactive charts, opens offline) and PDF (printed
    by Chromium when the server has it); each file is made when its button is pressed."""
    data = state.current_or_default()
    app_url = public_address(st.context.url.rsplit("/planner", 1)[0] if st.context.url else None)
    created = time.strftime("%Y-%m-%d %H:%M %Z")

    def page() -> str:
        return report_html(data, question, answer, app_url, created, APP_ORIGIN)

    # One print at a time per visitor: a second click while the first prints waits for it (and gets its file when
    # the report is the same) rather than a refusal, which would reach the visitor only as Streamlit's generic
    # download failure (engine.decide.pdf_printer.VisitorPrints).
    if "report_pdf_prints" not in st.session_state:
        st.session_state["report_pdf_prints"] = VisitorPrints()
    prints = st.session_state["report_pdf_prints"]

    def pdf() -> bytes:
        return prints.pdf(page())

    def recipe() -> bytes:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, content in recipe_files(answer["recommendation"], state.validate(data)).items():
                archive.writestr(f"recipe/{name}", content)
        return buffer.getvalue()
    cols = st.columns(4)
    cols[0].download_button("Download the report (HTML)", page, "plan.html", mime="text/html", type="primary",
                            on_click="ignore",  # a download changes nothing on the page: no rerun
                            help="One file with the answer, its evidence and assumptions; opens offline.")
    if chromium() is not None:
        cols[1].download_button("Download the report (PDF)", pdf, "plan.pdf", mime="application/pdf",
                                on_click="ignore", help="The same report, printed; takes a few seconds.")
    else:
        cols[1].caption("PDF: this server has no Chromium to print it; open the HTML report and print it.")
    cols[2].download_button("Download the plan (JSON)", strict_json(answer), "plan.json",
                            mime="application/json", on_click="ignore")
    if answer["recommendation"] is not None:
        cols[3].download_button("Download the recipe (ZIP)", recipe, "recipe.zip", mime="application/zip",
                                on_click="ignore", help="Launch commands for vLLM, SGLang and TensorRT-LLM and a "
                                                        "Kubernetes manifest of the recommended fleet.")

sidebar_summary = scenario_sidebar.render()
runner.warm_up()
st.title("Planner")
st.caption("Which rental is cheapest that meets your targets on this workload? Every GPU with an offer, every "
           "tensor-parallel degree that fits, each policy you choose, and the fewest replicas that meet every "
           "target on every seed, with its 95% interval inside the limit.")
scenario_sidebar.summary(sidebar_summary)
base = state.current_or_default()
data = copy.deepcopy(base)
with st.container(border=True):
    st.markdown("#### Your workload")
    workload_inputs(data, state.validate(base))
    data = state.current() if state.edited(data, base) and state.update(data) else base
    typed = state.validate(data)
    traffic_inputs(data, typed)
try:
    question = question_inputs(typed)
except engine.ScenarioError as exc:
    text.error(f"{key_words(str(exc))}.")
    st.stop()
asked = answer_key(data, question)
kept = plan_store.get(asked)
reopened = view.current("plan_answer", "") == asked  # a link names this question's answer
if kept is not None and reopened:
    st.session_state["plan"] = (asked, kept)
# The click is kept in the session (a button's own value lasts one run, and the first run of a page may rerun).
where = cluster.choice("plan_on_dask")
st.button("Plan", type="primary", help=f"Simulates every configuration at steady state: from seconds to minutes (a "
                                      f"model whose answers live long needs long runs); the bar says how long is "
                                      f"left at the pace so far, and the plan stops at {APP_ORIGIN.caps.plan_s:,.0f} "
                                      f"s.", on_click=lambda: st.session_state.__setitem__("plan_asked", True))
recompute = reopened and kept is None and (st.session_state.get("plan") or ("",))[0] != asked
if st.session_state.pop("plan_asked", False) or recompute:
    bar = st.progress(0.0, text="Recomputing the answer this link names (the server no longer kept it)..."
                      if recompute else "Sizing every configuration...")
    try:
        # The plan gives up this page's turn while it runs (its runs queue in the background pool), and stops with
        # the visitor's session.
        with where, jobs.page_job("the plan"), turns.stepping_aside():
            started = time.monotonic()
            answer = plan(data, question, APP_ORIGIN, lambda done, total, stage: bar.progress(
                done / total, text=f"{stage}... {done}/{total}"
                                   f"{pace_words(done, total, time.monotonic() - started, APP_ORIGIN.caps.plan_s)}"))
            answer["run"]["where"] = parallel.where()
    except engine.ScenarioError as exc:
        text.error(f"The plan stopped: {key_words(str(exc))}.")
        st.stop()
    finally:
        bar.empty()
    plan_store.put(asked, answer)
    st.session_state["plan"] = (asked, answer)
    st.session_state["plan_answer"] = asked  # the link now names this answer
shown = st.session_state.get("plan")
if shown and shown[0] == asked:
    show_answer(shown[1], question)
elif shown:
    st.info("The question or the scenario changed since the last plan: press Plan to answer it.")
