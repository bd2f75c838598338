"""The sidebar every page shares: pick a preset, upload or download the scenario."""

from __future__ import annotations

import streamlit as st

import engine
from engine.scenario.caps import DEFAULT_CAPS, MIB
from engine.scenario.config import parse_toml, to_toml
from engine.scenario.errors import printable
from ui import entry, state, text, view


def scenario_from_upload(name: str, content: bytes) -> dict:
    """The scenario data in an uploaded TOML file; ``ScenarioError`` when it is too large or not TOML."""
    return parse_toml(content, printable(name, 60), DEFAULT_CAPS)


def plan_question(uploaded: dict) -> dict | None:
    """The Planner page's controls an uploaded plan file carries (a report's ``plan.toml``: ``[scenario]`` and
    ``[planner]``), those a view may hold (``view.plain_view``); None for a scenario file."""
    if set(uploaded) != {"scenario", "planner"} or not isinstance(uploaded["planner"], dict) \
            or not isinstance(uploaded["scenario"], dict):
        return None
    return view.plain_view(uploaded["planner"])


PICK = "choose a preset..."


def _pick_preset() -> None:
    name = st.session_state.get("preset_pick")
    if name and name != PICK:
        state.replace(state.preset_data(name))
    st.session_state["preset_pick"] = PICK


def summary(slot) -> None:
    """Write the scenario's name and what it now runs into ``slot`` (``render``'s placeholder): pages call it
    again after applying an edit, so the sidebar never lags one edit behind."""
    data = state.current()
    try:
        now = state.describe(state.validate(data))
        slot.caption(text.plain(f"{data.get('name', 'unnamed scenario')} · now: {now}"))
    except engine.ScenarioError:  # shown on the page; the name alone here
        slot.caption(text.plain(data.get("name", "unnamed scenario")))


def render():
    """Draw the shared scenario sidebar (every page calls this first); returns the placeholder of the scenario's
    summary for ``summary``. The preset picker is drawn before anything that shows the scenario's own text, so a
    visitor can always load another scenario."""
    entry.through_app()
    data = state.current()
    view.restore()
    error = state.pop_load_error()
    if error:
        text.error(error)
    with st.sidebar:
        st.subheader("Scenario")
        slot = st.empty()
        st.selectbox("Load a preset", [PICK, *state.presets()], key="preset_pick", on_change=_pick_preset,
                     format_func=lambda f: f if f == PICK else state.preset_title(f),
                     help="Replace the current scenario with one from data/scenarios/.")
        summary(slot)
        upload = st.file_uploader("Upload a scenario (TOML)", type=["toml"], key=f"upload_{state.version()}",
                                  max_upload_size=max(1, DEFAULT_CAPS.scenario_bytes // MIB))
        if upload is not None:
            try:
                uploaded = scenario_from_upload(upload.name, upload.getvalue())
            except engine.ScenarioError as exc:
                text.error(exc)
            else:
                question = plan_question(uploaded)
                if state.replace(uploaded.get("scenario") if question is not None else uploaded):
                    if question is not None:  # a report's plan file: its question, asked on the Planner page
                        view.hand_over(question)
                        st.switch_page("pages/planner.py")
                    st.rerun()
        st.download_button("Download this scenario (TOML)", to_toml(data), file_name="scenario.toml",
                           mime="application/toml", width="stretch", on_click="ignore")
        st.caption("The address bar holds the whole scenario: copy it to share this view.")
    return slot
