"""View choices in the link: what a page shows (offer, currency, target, chart metric...), beside the scenario.

The scenario says what is simulated (``?s=``, ``ui.state``); the view says how it is looked at (``?v=``:
JSON, compressed like the scenario). Every control that changes what a page shows is keyed by a name of
``VIEW_KEYS``; its value is remembered across pages in the session (Streamlit forgets the state of widgets
a page does not draw) and written to the address bar, so a copied link reopens the same view. A value read
from a link is only a wish: each control checks it against its own options (``choice``, ``number``) before
it is drawn, and a value that does not fit is dropped for the control's default. A link that cannot be read is one
error line; it stays in the address bar until the visitor changes a control.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import streamlit as st

import engine
from engine.scenario.link import VIEW_KEY
from ui import state, text

QUERY_KEY = VIEW_KEY
PLAN_TARGET_ROWS = 3  # target rows of the Planner page
NO_TARGET = "none"  # a Planner target row's metric when the row asks nothing
TUNE_CONSTRAINT_ROWS = 2  # constraint rows of the Lab's tuning panel
VIEW_KEYS = (
    # Lab
    "comparison_metric", "curves_metric", "cdf_column", "curve_policies", "alpha_gamma", "timeline_replica",
    # the Lab's tuning panel
    "tune_class", "tune_metric", "tune_policies", "tune_batching", "tune_candidates", "tune_seeds",
    *(f"tune_c_{name}_{i}" for i in range(TUNE_CONSTRAINT_ROWS) for name in ("class", "metric", "limit")),
    # cost of the fleet (Lab and Hardware & Cost)
    "cost_offer", "cost_billing", "cost_currency", "cost_fx",
    # Hardware & Cost
    "hw_context_tokens", "hw_offer_gpus", "hw_offer_firm",
    "hw_target_class", "hw_target_metric", "hw_target_ms",
    # Planner
    *(f"plan_{name}_{i}" for i in range(PLAN_TARGET_ROWS) for name in ("class", "metric", "limit")),
    "plan_gpus", "plan_policies", "plan_quants", "plan_routers", "plan_budget", "plan_tune", "plan_seeds",
    "plan_requests", "plan_decodings", "plan_prices", "plan_answer", "plan_offers",
    "plan_users", "plan_requests_per_user", "plan_peak_factor",
    "plan_price_list_named",  # the visitor's own price list by name, offers and digest (a link cannot carry it)
)
_MEMORY = "view"
_KEPT_LINK = "kept_view_link"  # the visitor's invalid ?v=, kept in the address bar until a control changes
_MAX_TEXT_CHARS = 200
_MAX_LIST = 64


def _plain_value(value: Any) -> bool:
    """A value a view control can hold: a short string, a boolean, a finite number, or a short list of strings."""
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    if isinstance(value, str):
        return len(value) <= _MAX_TEXT_CHARS
    if isinstance(value, list):
        return len(value) <= _MAX_LIST and all(isinstance(v, str) and len(v) <= _MAX_TEXT_CHARS for v in value)
    return False


def restore() -> None:
    """Put the remembered view (at a session's start: the link's) into the controls' state, before any is drawn."""
    if _MEMORY not in st.session_state:
        st.session_state[_MEMORY] = {}
        link = st.query_params.get(QUERY_KEY)
        if link:
            try:
                wished = state.decode(link, "the link's view (?v=...)")
            except engine.ScenarioError as exc:
                text.error(exc)
                st.session_state[_KEPT_LINK] = link
                wished = {}
            st.session_state[_MEMORY] = plain_view(wished)
    for key, value in st.session_state[_MEMORY].items():
        if key not in st.session_state:
            st.session_state[key] = value


def remember() -> None:
    """Keep the controls' current values for other pages and write them into the address bar (the visitor's own
    link while it is kept: until a remembered value changes; a control drawn for the first time changes none)."""
    memory = st.session_state.setdefault(_MEMORY, {})
    now = {k: st.session_state[k] for k in VIEW_KEYS if k in st.session_state and _plain_value(st.session_state[k])}
    if any(k in memory and memory[k] != value for k, value in now.items()):
        st.session_state.pop(_KEPT_LINK, None)
    memory.update(now)
    link = st.session_state.get(_KEPT_LINK) or (state.encode(memory) if memory else None)
    if link and st.query_params.get(QUERY_KEY) != link:
        st.query_params[QUERY_KEY] = link


def plain_view(values: dict) -> dict:
    """The entries of ``values`` a view may hold: known controls (``VIEW_KEYS``) with plain values."""
    return {k: v for k, v in values.items() if k in VIEW_KEYS and _plain_value(v)}


def hand_over(values: dict) -> None:
    """Set view controls of another page (``values``: key -> value, each a ``VIEW_KEYS`` entry) before switching to
    it: in the session and in the remembered view, so that page draws them with these values."""
    memory = st.session_state.setdefault(_MEMORY, {})
    for key, value in values.items():
        assert key in VIEW_KEYS, key
        st.session_state[key] = value
        memory[key] = value


def choice(key: str, options: Sequence, default: Any) -> None:
    """Before a select box (or radio, multiselect with a list) keyed ``key`` is drawn: its value is one of
    ``options`` (each of them, for a list), else ``default``."""
    st.session_state[key] = _choice_or(st.session_state.get(key, default), options, default)


def current_choice(key: str, options: Sequence, default: Any) -> Any:
    """The value of choice ``key`` (``current``) when it is one of ``options``, else ``default``; writes nothing (a
    page that reads a control another page draws)."""
    return _choice_or(current(key, default), options, default)


def _choice_or(value: Any, options: Sequence, default: Any) -> Any:
    fits = all(v in options for v in value) if isinstance(value, list) else value in options
    return value if fits else default


def number(key: str, low: float, high: float, default: float, integer: bool = False) -> None:
    """Before a number input keyed ``key`` is drawn: its value lies in [low, high], else ``default``."""
    st.session_state[key] = _number_or(st.session_state.get(key, default), low, high, default, integer)


def current_number(key: str, low: float, high: float, default: float) -> float:
    """The value of number ``key`` (``current``) when it lies in [low, high], else ``default``; writes nothing (a
    page that reads a control another page draws, or a link's)."""
    return _number_or(current(key, default), low, high, default)


def _number_or(value: Any, low: float, high: float, default: float, integer: bool = False) -> float:
    fits = isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high
    if fits and integer:
        fits = float(value).is_integer()
    return (int(value) if integer else float(value)) if fits else default


def flag(key: str, default: bool = False) -> None:
    """Before a toggle keyed ``key`` is drawn: its value is a boolean, else ``default``."""
    value = st.session_state.get(key, default)
    st.session_state[key] = value if isinstance(value, bool) else default


def current(key: str, default: Any) -> Any:
    """The value of control ``key`` (drawn on this page or remembered from another), else ``default``."""
    return st.session_state.get(key, st.session_state.get(_MEMORY, {}).get(key, default))
