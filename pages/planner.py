"""Planner: the cheapest rental, fleet and policy that meet the user's targets on the current workload.

The question (targets, GPUs, policies, billing, currency, how sure) is asked here; the scenario's workload,
model and server settings come from the shared scenario. A plan runs only when asked (it simulates hundreds
of fleets), with a progress bar, and its answer stays on the page until the question or the scenario changes.
The engine (``engine.planner``) does the work; this page only asks and shows.
"""

import json
import tempfile
import time
from pathlib import Path

import pandas as pd
import streamlit as st

import engine
from engine.config import OVERALL
from engine.cost import BILLING_MODES, CNY_PER_USD_DEFAULT, CURRENCIES
from engine.hardware import load_table
from engine.metric_table import metric
from engine.planner import DEFAULT_REQUESTS, DEFAULT_SEEDS, T_95, Question, plan
from engine.plan_charts import pareto_chart
from engine.plan_text import alternatives_frame, caveat, sensitivity_text, summary_line
from engine.policies import POLICY_LABELS
from engine.report import DEFAULT_APP_URL, chromium, report_html, write_pdf
from engine.registry import POLICY_CODES
from engine.targets import TARGET_METRICS, Target
from engine import parallel
from ui import cluster, runner, scenario_sidebar, state, tables, text, view
from ui.trace_store import APP_ORIGIN

NO_TARGET = "none"
GPUS_WITH_OFFERS = list(dict.fromkeys(load_table("offers")["gpu"]))
REQUESTS_RANGE = (500, 20000)


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
        view.choice(f"plan_metric_{i}", [NO_TARGET, *TARGET_METRICS], metric0 if i == 0 else NO_TARGET)
        view.number(f"plan_limit_{i}", 0.0, 1e9, limit0 if i == 0 else 0.0)
        cols = st.columns([2, 2, 2])
        cls = cols[0].selectbox("Class", classes, key=f"plan_class_{i}", label_visibility="visible" if i == 0
                                else "collapsed", format_func=text.plain)
        key = cols[1].selectbox("Metric", [NO_TARGET, *TARGET_METRICS], key=f"plan_metric_{i}",
                                label_visibility="visible" if i == 0 else "collapsed",
                                format_func=lambda k: "no target" if k == NO_TARGET else
                                f"{metric(k).title()} {'at most' if metric(k).lower_is_better else 'at least'}")
        unit = "" if key == NO_TARGET else metric(key).unit or "share, 0 to 1"
        limit = cols[2].number_input(f"Limit ({unit})" if unit else "Limit", 0.0, 1e9, key=f"plan_limit_{i}",
                                     format="%g", label_visibility="visible" if i == 0 else "collapsed",
                                     disabled=key == NO_TARGET)
        if key != NO_TARGET:
            targets.append(Target(cls, key, float(limit)))
    return tuple(targets)


def question_inputs(typed: engine.Scenario) -> Question:
    """The question, from the page's controls; ``ScenarioError`` when it cannot be asked."""
    st.markdown("**Targets** (each class's figure on every seed's run; latencies at most, SLA met and "
                "throughputs at least)")
    targets = target_inputs(typed)
    view.choice("plan_gpus", GPUS_WITH_OFFERS, GPUS_WITH_OFFERS)
    view.choice("plan_policies", list(POLICY_CODES), [typed.policy.name])
    view.choice("cost_billing", BILLING_MODES, BILLING_MODES[0])
    view.choice("cost_currency", CURRENCIES, CURRENCIES[0])
    view.number("plan_seeds", 2, max(T_95), DEFAULT_SEEDS, integer=True)
    view.number("plan_requests", *REQUESTS_RANGE, DEFAULT_REQUESTS, integer=True)
    gpus = st.multiselect("GPUs to consider", GPUS_WITH_OFFERS, key="plan_gpus",
                          help="Every GPU with a rental offer; each at every tensor-parallel degree that fits.")
    policies = st.multiselect("Policies to try", list(POLICY_CODES), key="plan_policies",
                              format_func=POLICY_LABELS.get,
                              help="Per GPU and degree the policy needing the fewest replicas is kept; each policy "
                                   "adds a search. The policies' parameters are the scenario's.")
    cols = st.columns(4)
    billing = cols[0].selectbox("Billing", BILLING_MODES, key="cost_billing")
    currency = cols[1].selectbox("Currency", CURRENCIES, key="cost_currency")
    seeds = cols[2].number_input("Seeds per decision", 2, max(T_95), step=1, key="plan_seeds",
                                 help="A fleet meets the targets only if it does on every seed's run.")
    requests = cols[3].number_input("Requests per run", *REQUESTS_RANGE, step=500, key="plan_requests")
    if not gpus:
        raise engine.ScenarioError("choose at least one GPU to consider")
    fx = view.current("cost_fx", CNY_PER_USD_DEFAULT)
    return Question(targets, tuple(gpus), (), tuple(policies), billing, currency, float(fx), int(seeds),
                    int(requests))


def show_answer(answer: dict, question: Question) -> None:
    best = answer["recommendation"]
    if best is None:
        st.warning("No fleet meets every target within the search: see why below, then loosen a target, allow "
                   "more GPUs or policies, or simulate fewer requests per run.")
    else:
        st.success(text.plain("Recommended: " + summary_line(best)))
        warning = caveat(answer, "Hardware & Cost, 'Your own measurements'")
        if warning:
            st.warning(text.plain(warning))
        st.markdown("\n".join(f"- {text.plain(sentence)}" for sentence in answer["diagnosis"]))
        grows = sensitivity_text(answer)
        if grows:
            st.info(text.plain(grows))
        st.plotly_chart(pareto_chart(answer, question.targets[0]), width="stretch")
        st.caption("Each point is a priced plan that meets every target; the dashed line is the first target's "
                   "limit. The cheapest plans sit to the left, those with the most to spare at the bottom (or top, "
                   "for a figure that must be at least its limit).")
    if answer["alternatives"]:
        st.markdown(f"**Alternatives, cheapest first** ({len(answer['alternatives'])})")
        frame = alternatives_frame(answer["alternatives"], POLICY_LABELS.get)
        wide = {t.describe(): st.column_config.Column(width="large") for t in question.targets}  # value + interval
        st.dataframe(frame, hide_index=True, width="stretch", placeholder=tables.MISSING, column_config=wide)
        st.caption("Targets: mean over the seeds (95% interval). Policy: the one needing the fewest replicas on that "
                   "GPU and degree (+N: other policies tried that need as many). Headroom: the highest arrival rate at "
                   "which the same fleet still meets every target (the recommendation and the first 12 alternatives).")
    if answer["not_possible"]:
        with st.expander(f"Not possible ({len(answer['not_possible'])})"):
            st.dataframe(pd.DataFrame([{"GPU": n["gpu"], "tensor parallel": n.get("tensor_parallel"),
                                        "policies": ", ".join(n.get("policies", [])), "why": n["note"]}
                                       for n in answer["not_possible"]]), hide_index=True, width="stretch",
                         placeholder=tables.MISSING)
    run = answer["run"]
    st.caption(f"{run['evaluations']:,} runs in {run['wall_s']:.1f} s on {run.get('where', run['workers'])}.")
    report_buttons(answer, question)


def report_buttons(answer: dict, question: Question) -> None:
    """The plan as JSON, and as the report to hand over: HTML (interactive charts, opens offline) and PDF (printed
    by Chromium when the server has it); each file is made when its button is pressed."""
    data = state.current_or_default()
    app_url = st.context.url.rsplit("/planner", 1)[0] if st.context.url else DEFAULT_APP_URL
    created = time.strftime("%Y-%m-%d %H:%M %Z")

    def page() -> str:
        return report_html(data, question, answer, app_url, created, APP_ORIGIN)

    def pdf() -> bytes:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "plan.pdf"
            write_pdf(page(), path)
            return path.read_bytes()
    cols = st.columns(3)
    cols[0].download_button("Download the report (HTML)", page, "plan.html", mime="text/html", type="primary",
                            help="One file with the answer, its evidence and assumptions; opens offline.")
    if chromium() is not None:
        cols[1].download_button("Download the report (PDF)", pdf, "plan.pdf", mime="application/pdf",
                                help="The same report, printed; takes a few seconds.")
    else:
        cols[1].caption("PDF: this server has no Chromium to print it; open the HTML report and print it.")
    cols[2].download_button("Download the plan (JSON)", json.dumps(answer, indent=2), "plan.json",
                            mime="application/json")


sidebar_summary = scenario_sidebar.render()
runner.warm_up()
st.title("Planner")
st.caption("Which rental is cheapest that meets your targets on this workload? Every GPU with an offer, every "
           "tensor-parallel degree that fits, each policy you choose, and the fewest replicas that meet every "
           "target on every seed.")
scenario_sidebar.summary(sidebar_summary)
data = state.current_or_default()
typed = state.validate(data)
try:
    question = question_inputs(typed)
except engine.ScenarioError as exc:
    text.error(f"{exc}.")
    st.stop()
asked = (runner.canonical(data), repr(question))
# The click is kept in the session (a button's own value lasts one run, and the first run of a page may rerun).
where = cluster.choice("plan_on_dask")
st.button("Plan", type="primary", help="Simulates every configuration; takes from seconds to a minute.",
          on_click=lambda: st.session_state.__setitem__("plan_asked", True))
if st.session_state.pop("plan_asked", False):
    bar = st.progress(0.0, text="Sizing every configuration...")
    try:
        with where:
            answer = plan(data, question, APP_ORIGIN, lambda done, total: bar.progress(
                done / total, text=f"Sizing every configuration... {done}/{total}"))
            answer["run"]["where"] = parallel.where()
    except engine.ScenarioError as exc:
        text.error(f"The plan stopped: {exc}.")
        st.stop()
    finally:
        bar.empty()
    st.session_state["plan"] = (asked, answer)
shown = st.session_state.get("plan")
if shown and shown[0] == asked:
    show_answer(shown[1], question)
elif shown:
    st.info("The question or the scenario changed since the last plan: press Plan to answer it.")
