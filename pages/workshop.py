"""Workshop: guided chapters, one trade-off each, for a class or a learner alone.

Each chapter (a file of ``data/workshop``, ``engine.teach.workshop``) asks a question, has the learner predict the
answer, then runs its experiment (one knob over a few settings, on a scenario at a load where the effect is
large), shows the chart that answers it with what should be seen and why, and ends with an exercise checked
live. ``?chapter=ID`` opens a chapter (every chapter has its link); ``&presenter=1`` shows it for a projector:
large type, the question, then one chart on demand. The chapters run their own scenarios: the sidebar's
scenario is left as it is, until "Open in the Lab" replaces it with the chapter's.
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

import engine
from engine.decide.cost import CNY_PER_USD_DEFAULT
from engine.scenario.config import OVERALL
from engine.scenario.metric_table import FRACTION, metric
from engine.scenario.summary import Summary
from engine.sim.simulate import load_text
from engine.teach import workshop
from ui import charts, entry, runner, state, text
from ui.widgets import field_input

CHAPTER_PARAM, PRESENTER_PARAM = "chapter", "presenter"
SYSTEM_COLOR = "#444444"  # the fleet's series (a fleet metric has no class)
RENTAL_COLORS = dict(zip(workshop.RENTAL_MODES, ("#d62728", "#1f77b4", "#2ca02c")))
CHART_HEIGHT_PX, PRESENTER_CHART_HEIGHT_PX = 420, 480  # the presenter's fits under the answer at 1440 x 900
PRESENTER_SEE = "presenter_see"  # the container of what to see beside the chart (its type a little smaller)
PRESENTER_CSS = """<style>
[data-testid="stSidebar"], [data-testid="stSidebarCollapsedControl"],
[data-testid="stHeader"] {display: none !important;}
.block-container {max-width: 1500px; padding-top: 1.5rem;}
.stButton button p {font-size: 1.3rem;}
.stMarkdown p, .stMarkdown li {font-size: 1.7rem; line-height: 1.45;}
[data-testid="stCaptionContainer"] p {font-size: 1.5rem;}
h1 {font-size: 2.6rem !important; padding-top: 0.5rem !important;}
""" + f".st-key-{PRESENTER_SEE} p {{font-size: 1.35rem;}}\n</style>"


def chapter_link(chapter: workshop.Chapter, presenter: bool = False) -> str:
    """The address (relative to this page) that reopens ``chapter``, in presenter view when asked."""
    return f"?{CHAPTER_PARAM}={chapter.id}" + (f"&{PRESENTER_PARAM}=1" if presenter else "")


def pick_chapter(chapters: tuple[workshop.Chapter, ...]) -> workshop.Chapter:
    """The chapter the link names (else the first), changed by the picker or the previous / next buttons; the
    address bar follows, so a copied link reopens it."""
    ids = [c.id for c in chapters]
    if "ws_chapter" not in st.session_state or st.session_state["ws_chapter"] not in ids:
        wanted = st.query_params.get(CHAPTER_PARAM)
        st.session_state["ws_chapter"] = wanted if wanted in ids else ids[0]
    titles = {c.id: f"{i}. {c.title}" for i, c in enumerate(chapters, start=1)}

    def step(by: int) -> None:
        at = ids.index(st.session_state["ws_chapter"])
        st.session_state["ws_chapter"] = ids[min(max(at + by, 0), len(ids) - 1)]

    cols = st.columns([6, 1, 1], vertical_alignment="bottom")
    cols[0].selectbox("Chapter", ids, key="ws_chapter", format_func=titles.get)
    at = ids.index(st.session_state["ws_chapter"])
    cols[1].button("Previous", on_click=step, args=(-1,), disabled=at == 0, width="stretch")
    cols[2].button("Next", on_click=step, args=(1,), disabled=at == len(ids) - 1, width="stretch")
    chosen = st.session_state["ws_chapter"]
    if st.query_params.get(CHAPTER_PARAM) != chosen:
        st.query_params[CHAPTER_PARAM] = chosen
    return chapters[ids.index(chosen)]


def counter(chapters: tuple[workshop.Chapter, ...], chapter: workshop.Chapter) -> str:
    """Where the chapter sits in the workshop: "Chapter 8 of 18"."""
    return f"Chapter {[c.id for c in chapters].index(chapter.id) + 1} of {len(chapters)}"


def run_experiment(chapter: workshop.Chapter) -> dict[str, Summary]:
    """The chapter's scenario at each knob setting: cached for every session, run on all cores with a progress
    bar, within a section's time (a note says when runs were left out)."""
    if chapter.kind == workshop.RENTAL:
        return {}
    bar = st.progress(0.0, text="Running the experiment...")
    results, note = runner.SectionBudget().summaries(
        [chapter.scenario_with(o.values) for o in chapter.options],
        lambda done, total: bar.progress(done / total, text=f"Running the experiment... {done}/{total}"))
    bar.empty()
    if note:
        st.caption(text.plain(note))
    return {o.label: s for o, s in zip(chapter.options, results) if s is not None}


def figures(chapter: workshop.Chapter, runs: dict[str, Summary], large: bool = False) -> list[go.Figure]:
    """The charts that answer the chapter's question, one per metric of the chapter (side by side on a wide screen,
    one under the other on a phone): one line (a numeric knob, on a numeric axis: the settings where their values
    put them, read in the knob's direction) or one set of bars (named settings, in their order) per series;
    settings whose run was unstable are marked on the axis. Each series is in the legend of the first chart that
    draws it."""
    panels = workshop.chart_values(chapter, runs, CNY_PER_USD_DEFAULT)
    classes = [] if chapter.kind == workshop.RENTAL else [c["name"] for c in chapter.scenario["workload"]["classes"]]
    unstable = {label for label, s in runs.items() if s["system"]["unstable"]}
    ticks = [text.chart_text(f"{o.label} (unstable)" if o.label in unstable else o.label) for o in chapter.options]
    drawn, in_legend = [], set()  # a series already in a legend is not listed again
    for key, series in panels.items():
        fig = go.Figure()
        if chapter.kind == workshop.RENTAL:
            y_title, scale = f"Cost per month ({chapter.rental.currency})", 1.0
        else:
            m = metric(key)
            y_title, scale = m.title(), 100.0 if m.kind == FRACTION else 1.0
        for name, values in series.items():
            y = [None if values.get(o.label) is None else values[o.label] * scale for o in chapter.options]
            shown = text.chart_text("fleet" if name == workshop.SYSTEM else name)
            color = RENTAL_COLORS.get(name) or (SYSTEM_COLOR if name in (workshop.SYSTEM, OVERALL) else
                                                charts.class_color(classes.index(name)))
            listed = dict(name=shown, showlegend=shown not in in_legend)
            in_legend.add(shown)
            if chapter.numeric:
                fig.add_trace(go.Scatter(x=[o.x for o in chapter.options], y=y, mode="lines+markers",
                                         line=dict(color=color), **listed))
            else:
                fig.add_trace(go.Bar(x=ticks, y=y, marker_color=color, **listed))
        scale_axis = {"type": "log"} if key in chapter.chart_log else {"rangemode": "tozero"}
        fig.update_yaxes(title_text=y_title, **scale_axis)
        xs = [o.x for o in chapter.options]
        axis = dict(type="log" if chapter.log_axis else "linear", tickvals=xs, ticktext=ticks,
                    autorange="reversed" if xs[0] > xs[-1] else True) if chapter.numeric else dict(type="category")
        fig.update_xaxes(title_text=text.chart_text(chapter.knob_label), **axis)
        fig.update_layout(barmode="group", height=PRESENTER_CHART_HEIGHT_PX if large else CHART_HEIGHT_PX,
                          margin=dict(t=50, b=10), legend_title_text="", showlegend=True,
                          legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))  # above: the width is the plot's
        if large:
            big = dict(size=20 if len(panels) < 3 else 16)  # three charts share the projector's width
            fig.update_layout(margin=dict(t=50, l=90, b=20), legend_font=big)
            fig.update_xaxes(tickfont=big, title_font=big)
            fig.update_yaxes(tickfont=big, title_font=big)
        drawn.append(fig)
    return drawn


def chart(chapter: workshop.Chapter, runs: dict[str, Summary], large: bool = False) -> None:
    """The chapter's charts (``large``: type a projector shows across a room), then which runs were unstable and
    each run's offered load, in the knob's order."""
    drawn = figures(chapter, runs, large)
    for column, fig in zip(st.columns(len(drawn)), drawn):
        column.plotly_chart(fig, width="stretch")
    ordered = [o.label for o in chapter.options if o.label in runs]
    unstable = [label for label in ordered if runs[label]["system"]["unstable"]]
    if unstable:
        st.caption("Unstable (the queue grows for as long as requests arrive; its latencies describe a growing "
                   f"backlog): {', '.join(text.plain(u) for u in unstable)}.")
    if runs:
        loads = ", ".join(f"{text.plain(label)}: {load_text(runs[label]['system']['offered_load'])}"
                          for label in ordered)
        st.caption(f"Offered load (an estimate) of each run: {loads}.")


def what_you_should_see(chapter: workshop.Chapter, runs: dict[str, Summary]) -> None:
    st.markdown(f"**What you should see.** {chapter.see}")
    lines = []
    for check, holds in workshop.checks_hold(chapter, runs, CNY_PER_USD_DEFAULT):
        lines.append(f"- {'✓ holds' if holds else '✗ does not hold'} in these runs: {text.plain(check.describe())}")
    st.markdown("\n".join(lines))


def field_widget(field: workshop.Field, value: object, key: str) -> object:
    """One exercise input: choices that are codes by the words the chapter gives them, a configuration key's own
    widget (label, unit, bounds, choices in words), else a number."""
    if field.choice_labels:
        return st.selectbox(field.label + (f" ({field.unit})" if field.unit else ""), field.choices,
                            index=field.choices.index(value), key=key,
                            help=text.sentence(field.help) if field.help else None,
                            format_func=lambda choice: field.choice_labels.get(choice, str(choice)))
    if field.owner is not None:
        name = field.path.rsplit(".", 1)[1]
        return field_input(field.owner, name, value, key, label=field.label,
                           options=list(field.choices) if field.choices else None)
    return st.number_input(field.label, value=float(value), key=key, format="%g",
                           min_value=None if field.low is None else float(field.low),
                           max_value=None if field.high is None else float(field.high))


def press(flag: str) -> None:
    """A button's click kept in the session until the run that acts on it (a plain button's click would be lost
    to ``entry.through_app``'s rerun)."""
    st.session_state[flag] = True


def exercise(chapter: workshop.Chapter) -> None:
    """The exercise: the learner's values, checked on a run when asked; each goal met or not, with its value."""
    st.subheader("Exercise")
    st.markdown(chapter.task)
    start = chapter.start_values()
    values = {}
    cols = st.columns(max(len(chapter.fields), 2))
    for i, (field, col) in enumerate(zip(chapter.fields, cols)):
        with col:
            values[field.path] = field_widget(field, start[field.path], f"ws_{chapter.id}_field_{i}")
    left, right = st.columns(2)
    left.button("Check my answer", key=f"ws_{chapter.id}_check", type="primary", on_click=press,
                args=(f"ws_{chapter.id}_checked",))
    if chapter.kind != workshop.RENTAL:
        right.button("Open in the Lab with these values", key=f"ws_{chapter.id}_lab", on_click=press,
                     args=(f"ws_{chapter.id}_opened",))
    checked = st.session_state.pop(f"ws_{chapter.id}_checked", False)
    if st.session_state.pop(f"ws_{chapter.id}_opened", False):
        try:
            data = chapter.scenario_with(workshop.given(chapter, values))
        except engine.ScenarioError as exc:
            text.error(exc)
        else:
            if state.replace(data):
                st.switch_page("pages/lab.py")
    if not checked:
        return
    try:
        if chapter.kind == workshop.RENTAL:
            verdict = workshop.check_rental(chapter, values, CNY_PER_USD_DEFAULT)
        else:
            data = chapter.scenario_with(workshop.given(chapter, values))
            state.validate(data)
            with st.spinner("Running your settings..."), runner.SectionBudget() as budget:
                verdict = workshop.judge(chapter, data, budget.summary(data))
    except engine.ScenarioError as exc:
        text.error(exc)
        return
    st.markdown("\n".join(f"- {'✓' if met else '✗'} {text.plain(goal)}: {text.plain(value)}"
                          for goal, met, value in verdict.goals))
    if verdict.solved:
        st.success("Solved: every goal is met.")
    else:
        st.error("Not yet: " + ("this run is unstable (the queue grows); lower the load first." if verdict.unstable
                                else "change the values and check again."))


def presenter_view(chapters: tuple[workshop.Chapter, ...], chapter: workshop.Chapter) -> None:
    """The chapter for a projector: large type, the navigation on top, the question and the choices; once the answer
    is shown, the prediction completed by its answer, then the chart with what to see beside it, all on one screen
    of 1440 x 900 (nothing to scroll while presenting)."""
    st.html(PRESENTER_CSS)
    revealed = f"ws_{chapter.id}_revealed"
    shown = st.session_state.setdefault(revealed, False)
    ids = [c.id for c in chapters]
    at = ids.index(chapter.id)
    cols = st.columns([2.2, 1.4, 1.4, 1.4, 1.6], vertical_alignment="center")
    cols[0].caption(counter(chapters, chapter))
    cols[1].button("Hide the answer" if shown else "Show the answer", key=f"ws_{chapter.id}_reveal",
                   on_click=lambda: st.session_state.update({revealed: not shown}), width="stretch",
                   type="secondary" if shown else "primary")
    cols[2].button("Previous chapter", on_click=open_chapter, args=(ids[max(at - 1, 0)], True), disabled=at == 0,
                   width="stretch")
    cols[3].button("Next chapter", on_click=open_chapter, args=(ids[min(at + 1, len(ids) - 1)], True),
                   disabled=at + 1 == len(ids), width="stretch")
    cols[4].button("Leave presenter view", on_click=open_chapter, args=(chapter.id, False), width="stretch")
    st.title(chapter.title)
    if shown:
        st.markdown(f"{chapter.prompt} **{chapter.answer}**")
        left, right = st.columns([1.2 if len(chapter.chart_metrics) < 3 else 1.7, 1], gap="large")
        with left:
            chart(chapter, run_experiment(chapter), large=True)
        right.container(key=PRESENTER_SEE).markdown(chapter.see)
    else:
        st.markdown(chapter.question)
        st.markdown(f"**Predict:** {chapter.prompt}\n\n" +
                    "\n".join(f"{i}. {choice}" for i, choice in enumerate(chapter.choices, start=1)))


def open_chapter(chapter_id: str, presenter: bool) -> None:
    """Switch to ``chapter_id`` in the same tab (a markdown link would open a new one), in presenter view or
    not; the address bar follows so the projector's link stays shareable."""
    st.query_params[CHAPTER_PARAM] = chapter_id
    if presenter:
        st.query_params[PRESENTER_PARAM] = "1"
    else:
        st.query_params.pop(PRESENTER_PARAM, None)
    st.session_state["ws_chapter"] = chapter_id


def chapter_view(chapters: tuple[workshop.Chapter, ...], chapter: workshop.Chapter) -> None:
    st.caption(counter(chapters, chapter))
    st.markdown(f"### {chapter.title}")
    st.markdown(chapter.question)
    st.markdown(f"[Link to this chapter]({chapter_link(chapter)}) · "
                f"[Presenter view]({chapter_link(chapter, presenter=True)})")
    guess = st.radio(f"**Predict first.** {chapter.prompt}", chapter.choices, index=None,
                     key=f"ws_{chapter.id}_guess")
    if guess is None:
        st.caption("Choose an answer to run the experiment.")
    else:
        if guess == chapter.answer:
            st.success("Right. The experiment below shows it.")
        else:
            st.warning(f"Not quite: the answer is \u201c{chapter.answer}\u201d. The experiment below shows why.")
        runs = run_experiment(chapter)
        chart(chapter, runs)
        what_you_should_see(chapter, runs)
    exercise(chapter)


entry.through_app()
try:
    chapters = workshop.load_chapters()
except engine.ScenarioError as error:
    text.error(error)
    st.stop()
if st.query_params.get(PRESENTER_PARAM) == "1":
    wanted = st.query_params.get(CHAPTER_PARAM)
    presenter_view(chapters, next((c for c in chapters if c.id == wanted), chapters[0]))
    st.stop()
st.title("Workshop")
st.caption(f"{len(chapters)} chapters, one trade-off each: predict, run, read the chart, then solve the exercise. "
           f"Each chapter runs its own scenario; the Lab's is left as it is.")
chapter_view(chapters, pick_chapter(chapters))
