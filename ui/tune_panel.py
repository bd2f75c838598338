"""The Lab's tuning panel: the policy parameters that minimise (or maximise) one class metric under
constraints, on the Lab's scenario (``engine.decide.tuner``), with its response surface and the ``[policy]`` block.

A tuning runs only when asked (hundreds of runs), with a progress bar; its answer stays on the page until the
question or the scenario changes, and "Use the best settings" makes them the Lab's scenario.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

import engine
from engine.decide.targets import TARGET_METRICS, Target
from engine.decide.tune_text import FLAT_TEXT, baseline_header, cut_text, rows, runs_text, verdict
from engine.decide.tuner import (CANDIDATE_RANGE, DEFAULT_CANDIDATES, DEFAULT_REQUESTS, DEFAULT_SEEDS, TUNABLE,
                                 Objective, TuneQuestion, tune, tuned_scenario)
from engine.scenario.config import OVERALL
from engine.scenario.metric_table import metric
from engine.sim import parallel
from engine.sim.policies import POLICY_LABELS
from ui import charts, cluster, jobs, runner, state, tables, text, turns, view
from ui.trace_store import APP_ORIGIN

NO_CONSTRAINT = "none"
EVERY_CLASS = "*"
SEEDS_RANGE = (1, 5)


def _class_label(name: str) -> str:
    return "every class" if name == EVERY_CLASS else text.plain(name)


def objective_inputs(classes: list[str]) -> Objective:
    view.choice("tune_class", [*classes, OVERALL], classes[0])
    view.choice("tune_metric", list(TARGET_METRICS), "ttft_p99_ms")
    cols = st.columns([2, 3, 2])
    cls = cols[0].selectbox("Objective: class", [*classes, OVERALL], key="tune_class", format_func=text.plain)
    key = cols[1].selectbox("Metric", list(TARGET_METRICS), key="tune_metric", format_func=lambda k: metric(k).title())
    goal = "minimise" if metric(key).lower_is_better else "maximise"
    cols[2].markdown(f"&nbsp;\n\n**{goal}**", help="Latencies, waits and time-outs are minimised; SLA attainment "
                                                     "and throughputs maximised.")
    return Objective(cls, key, metric(key).lower_is_better)


def constraint_inputs(classes: list[str]) -> tuple[Target, ...]:
    """Up to ``view.TUNE_CONSTRAINT_ROWS`` constraints: class (or every class), metric (or none), limit."""
    options = [EVERY_CLASS, *classes, OVERALL]
    constraints = []
    for i in range(view.TUNE_CONSTRAINT_ROWS):
        view.choice(f"tune_c_class_{i}", options, EVERY_CLASS)
        view.choice(f"tune_c_metric_{i}", [NO_CONSTRAINT, *TARGET_METRICS],
                    "longest_wait_ms" if i == 0 else NO_CONSTRAINT)
        view.number(f"tune_c_limit_{i}", 0.0, 1e9, 60000.0 if i == 0 else 0.0)
        first = "visible" if i == 0 else "collapsed"
        cols = st.columns([2, 3, 2])
        cls = cols[0].selectbox("Constraint: class", options, key=f"tune_c_class_{i}", label_visibility=first,
                                format_func=_class_label)
        key = cols[1].selectbox("Metric", [NO_CONSTRAINT, *TARGET_METRICS], key=f"tune_c_metric_{i}",
                                label_visibility=first, format_func=lambda k: "no constraint" if k == NO_CONSTRAINT
                                else f"{metric(k).title()} {'at most' if metric(k).lower_is_better else 'at least'}")
        unit = "" if key == NO_CONSTRAINT else metric(key).unit or "share, 0 to 1"
        limit = cols[2].number_input(f"Limit ({unit})" if unit else "Limit", 0.0, 1e9, key=f"tune_c_limit_{i}",
                                     format="%g", label_visibility=first, disabled=key == NO_CONSTRAINT)
        if key != NO_CONSTRAINT:
            constraints.append(Target(cls, key, float(limit)))
    return tuple(constraints)


def question_inputs(typed: engine.Scenario) -> TuneQuestion:
    """The question from the panel's controls; ``ScenarioError`` when it cannot be asked."""
    classes = [c.name for c in typed.workload.classes]
    objective = objective_inputs(classes)
    constraints = constraint_inputs(classes)
    view.choice("tune_policies", list(TUNABLE), list(TUNABLE))
    view.flag("tune_batching")
    view.number("tune_candidates", *CANDIDATE_RANGE, DEFAULT_CANDIDATES, integer=True)
    view.number("tune_seeds", *SEEDS_RANGE, DEFAULT_SEEDS, integer=True)
    cols = st.columns([3, 2, 2])
    policies = cols[0].multiselect("Policies to tune", list(TUNABLE), key="tune_policies",
                                   format_func=POLICY_LABELS.get,
                                   help="Each policy's own parameters; the scenario as it is is always compared.")
    candidates = cols[1].number_input("Candidates", *CANDIDATE_RANGE, step=50, key="tune_candidates",
                                      help="Points evaluated in all: about 12 s for 300 on 2 cores.")
    seeds = cols[2].number_input("Seeds per candidate", *SEEDS_RANGE, step=1, key="tune_seeds",
                                 help="Every candidate runs on the same requests; a constraint must hold on each seed.")
    batching = st.checkbox("Also tune the minimum batch and its longest wait", key="tune_batching")
    requests = max(100, min(typed.workload.num_requests or DEFAULT_REQUESTS, DEFAULT_REQUESTS))
    return TuneQuestion(objective, constraints, tuple(policies), batching, int(candidates), int(seeds), requests)


def apply_best(data: dict, best: dict) -> None:
    """Make the best point the Lab's scenario (a button's callback, before the next run draws the sidebar)."""
    state.replace(tuned_scenario(data, best))


def show(answer: dict, data: dict) -> None:
    best = answer["best"]
    if cut := cut_text(answer):
        st.warning(text.plain(cut))
    (st.success if best["feasible"] else st.warning)(text.plain(verdict(answer)))
    if answer["flat"]:
        st.info(FLAT_TEXT)
    frame = pd.DataFrame(rows(answer), columns=["", baseline_header(answer), "best"])
    st.dataframe(frame, hide_index=True, width="stretch", placeholder=tables.MISSING)
    shape = answer["surface"]
    if shape is not None:
        st.markdown(f"**Response surface** of {POLICY_LABELS[shape['policy']]} over the "
                    f"{'two knobs that' if len(shape['axes']) == 2 else 'knob that'} moved the objective most, the "
                    f"others at the best point")
        cols = st.columns(min(len(shape["panels"]), 2))
        for i, panel in enumerate(shape["panels"]):
            cols[i % len(cols)].plotly_chart(charts.tune_surface(shape, panel), width="stretch")
    st.markdown("**Paste into the scenario**")
    st.code(answer["toml"], language="toml")
    st.button("Use the best settings in the Lab", on_click=apply_best, args=(data, best),
              help="Sets the policy (and the batching keys, if tuned) in the sidebar.")
    st.caption(f"{answer['evaluations']} candidates x {runs_text(answer)}, the "
               f"same requests for every candidate, in {answer['wall_s']:.1f} s on "
               f"{answer.get('where', answer['workers'])}. "
               "Metrics are means over the seeds.")


def render(data: dict, typed: engine.Scenario) -> None:
    """The panel: the question, the Tune button, and the last answer while it still fits the question."""
    try:
        question = question_inputs(typed)
    except engine.ScenarioError as exc:
        text.error(f"{exc}.")
        return
    asked = (runner.canonical(data), repr(question))
    where = cluster.choice("tune_on_dask")
    st.button("Tune", type="primary", help="Runs the candidates; about 12 s for 300 on 2 cores.",
              on_click=lambda: st.session_state.__setitem__("tune_asked", True))
    if st.session_state.pop("tune_asked", False):
        bar = st.progress(0.0, text="Tuning...")
        try:
            # The tuning gives up this page's turn while it runs, and stops with the visitor's session.
            with where, jobs.page_job("the tuning"), turns.stepping_aside():
                answer = tune(data, question, APP_ORIGIN, lambda done, total: bar.progress(
                    min(done / total, 1.0), text=f"Tuning... {done}/{total} candidates"))
                answer["where"] = parallel.where()
        except engine.ScenarioError as exc:
            text.error(f"The tuning stopped: {exc}.")
            return
        finally:
            bar.empty()
        st.session_state["tune"] = (asked, answer)
    shown = st.session_state.get("tune")
    if shown and shown[0] == asked:
        show(shown[1], data)
    elif shown:
        st.info("The question or the scenario changed since the last tuning: press Tune to answer it.")
