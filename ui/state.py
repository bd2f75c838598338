"""The current scenario of a browser session, kept in session state and mirrored in the URL.

The whole scenario travels in one query parameter (``?s=``: JSON, zlib-compressed, base64url), so a
copied link reopens the same view. Widgets are keyed by a *version* that changes whenever the
scenario is replaced wholesale (preset, upload, link), so they re-read their values from it.
"""

from __future__ import annotations

import functools
import json

import streamlit as st

import engine
from engine.hardware.calibration_store import holds_for
from engine.scenario.config import Server, fleet_pools, read_toml
from engine.scenario.labels import format_label, key_words, parallel_label
from engine.scenario.link import SCENARIO_KEY, UNREAD_KEY, decode, encode, unread_link_line
from engine.scenario.naming import renamed
from engine.sim.policies import POLICY_LABELS
from engine.sim.simulate import PRESET_DIR, hardware_label, stated_load
from ui import entry, text, trace_store
from ui.trace_store import APP_ORIGIN

DEFAULT_PRESET = "chat_and_batch_a100_8b.toml"  # a real GPU, so the first screen shows cost too
QUERY_KEY = SCENARIO_KEY
TYPED_SCENARIOS = 256  # typed scenarios kept (``validate``): a few KiB each
PLAN_TARGETS = "plan_targets"  # the Planner's targets (and the fleet scenario) the Lab judges after "Open this fleet"
TRACE_NOTICE = "trace_notice"  # session key: what the Lab says once the Workload page put a trace in use
KEPT_LINK = "kept_link"  # the visitor's invalid ?s=, kept in the address bar until the visitor changes something


def presets() -> list[str]:
    return sorted(p.name for p in PRESET_DIR.glob("*.toml"))


def preset_data(name: str) -> dict:
    return read_toml(PRESET_DIR / name)


@functools.lru_cache(maxsize=None)
def preset_title(name: str) -> str:
    """What the preset picker shows: the preset's own name (its file name when it has none) and the offered load
    its header states."""
    load = stated_load(PRESET_DIR / name)
    return str(preset_data(name).get("name") or name) + (f" (offered load {load:.2f})" if load is not None else "")


def default_data() -> dict:
    """The scenario the app opens on."""
    return preset_data(DEFAULT_PRESET)


def validate(data: dict) -> engine.Scenario:
    """The typed scenario, or ``ScenarioError`` naming the bad field. A scenario in the app may only replay
    traces of the app's store, within the default limits (``trace_store.APP_ORIGIN``).

    A page validates its scenario several times per rerun; the typed scenario is kept per scenario text
    (``_typed``), and only what can change without the scenario changing, that its stored trace is still there, is
    checked every time. Data that is not plain JSON, and an invalid scenario (its error in its own spelling), are
    validated directly."""
    try:
        key = json.dumps(data, sort_keys=True)
    except (TypeError, ValueError):
        return engine.load_scenario(data, origin=APP_ORIGIN)
    try:
        scenario = _typed(key)
    except engine.ScenarioError:
        return engine.load_scenario(data, origin=APP_ORIGIN)
    if scenario.workload.trace is not None:  # an upload expires: its file is looked for on every call
        APP_ORIGIN.trace_file(scenario.workload.trace.path)
    return scenario


@functools.lru_cache(maxsize=TYPED_SCENARIOS)
def _typed(scenario_json: str) -> engine.Scenario:
    """The typed scenario of ``scenario_json`` (plain JSON, parsed by ``json``: no code runs), shared read-only by
    every session: a frozen dataclass that depends on nothing but its text and the app's fixed limits."""
    return engine.load_scenario(json.loads(scenario_json), origin=APP_ORIGIN)


def _mirror() -> None:
    """Write the scenario into the address bar, or the visitor's own link while it is kept (``KEPT_LINK``): an
    invalid shared link stays in the address until the visitor changes something, never replaced by the default."""
    st.query_params[QUERY_KEY] = st.session_state.get(KEPT_LINK) or encode(st.session_state["scenario"])


def _store(data: dict, new_version: bool) -> None:
    st.session_state["scenario"] = data
    if new_version:
        st.session_state["scenario_version"] = st.session_state.get("scenario_version", 0) + 1
    _mirror()


def _change(data: dict, new_version: bool) -> None:
    """The visitor's change (a preset, an upload, an edit): ``data`` becomes the scenario and its link, renamed
    where it kept a preset's name but no longer runs what that name says (``naming.renamed``)."""
    if "scenario" in st.session_state:
        data = renamed(st.session_state["scenario"], data)
    st.session_state.pop(KEPT_LINK, None)
    _store(data, new_version)


def current() -> dict:
    """The session's scenario (from the link on first load, else the default preset, the link's error kept for
    ``pop_load_error``; also when Streamlit read none of the link, as it does with one too long or of too many
    parameters: ``entry.watch_unread_link`` reopens the page on a note of it)."""
    if "scenario" not in st.session_state:
        try:
            trace_store.prune()  # a new session: drop uploads past their age (one listing of a small folder)
        except engine.ScenarioError as exc:
            st.session_state["load_error"] = str(exc)
        data = default_data()
        text = st.query_params.get(QUERY_KEY)
        if text:
            try:
                linked = decode(text)
                validate(linked)
                data = linked
            except engine.ScenarioError as exc:
                st.session_state["load_error"] = str(exc)
                st.session_state[KEPT_LINK] = text
        elif UNREAD_KEY in st.query_params:  # the page's own note of a link Streamlit did not read ('': a forged one)
            st.session_state["load_error"] = unread_link_line(st.query_params.get(UNREAD_KEY))
            del st.query_params[UNREAD_KEY]
        elif not st.query_params:  # Streamlit drops a link too long or of too many parameters whole, silently
            entry.watch_unread_link()
        _store(data, new_version=True)
    else:
        _mirror()
    return st.session_state["scenario"]


def version() -> int:
    return st.session_state.get("scenario_version", 0)


def replace(data: dict) -> bool:
    """Make ``data`` the scenario and reset the widgets; False (and an error shown) if it is invalid."""
    try:
        validate(data)
    except engine.ScenarioError as exc:
        text.error(exc)
        return False
    _change(data, new_version=True)
    return True


def replace_rate(data: dict, rate_per_s: float) -> bool:
    """Make ``data`` with arrival rate ``rate_per_s`` the scenario (a button's callback: the widgets re-read it)."""
    return replace(engine.apply_overrides(data, {"workload.arrival.rate_per_s": rate_per_s}))


def update(data: dict) -> bool:
    """Make an edit made through a page's widgets the scenario (pages call it when ``edited`` says the widgets
    changed it); False (and an error shown) if it is invalid."""
    try:
        validate(data)
    except engine.ScenarioError as exc:
        text.error(f"{key_words(str(exc))}. The last valid scenario stays in use.")
        offer_fix(data, exc)
        return False
    _change(data, new_version=False)
    st.session_state["edited"] = True
    return True


def offer_fix(data: dict, exc: engine.ScenarioError) -> None:
    """The one change that resolves ``exc`` on ``data`` as a button, when the error names one ("Use 2 GPUs per
    server")."""
    if exc.fix:
        st.button(exc.fix_label, type="primary", on_click=replace, args=(engine.apply_overrides(data, exc.fix),),
                  help="Applies this change and makes the result the scenario.")


def current_or_default() -> dict:
    """The session's scenario when it is still valid, else (its error shown) the default scenario: a scenario
    can stop being valid after it was opened, when the uploaded trace it replays expires."""
    data = current()
    try:
        validate(data)
    except engine.ScenarioError as exc:
        text.error(f"{exc}. Showing the default scenario.")
        return default_data()
    return data


def edited(data: dict, base: dict) -> bool:
    """True when a page's widgets changed ``base`` into ``data`` (not merely spelled out defaults it left out)."""
    try:
        return validate(data) != validate(base)
    except engine.ScenarioError:
        return True


def drop_foreign_calibration(data: dict) -> str | None:
    """Remove ``server.calibration`` from ``data`` when that saved calibration does not time its GPU (fitted on
    another GPU family, or no longer saved): the shipped calibration times it then. Every page that lets the
    GPU change calls this before it times anything. Returns the notice to show, or None."""
    server = data.get("server", {})
    name = server.get("calibration")
    gpu = server.get("gpu", Server.gpu)
    if not name or holds_for(name, gpu):
        return None
    del server["calibration"]
    return (f"The calibration '{name}' does not time {gpu} (it was fitted on another GPU family, or is no longer "
            f"saved): the shipped step times are used (measured kernels where they cover it, else the shipped "
            f"calibration).")


def describe(scenario: engine.Scenario) -> str:
    """What the scenario runs now, in words (its name may predate an edit): fleet, model, speculative decoding and
    policy."""
    server, replicas = scenario.server, scenario.fleet.replicas
    if server.step_model == "fixed":
        fleet = f"fixed {server.step_time_ms:g} ms iterations, batches of up to {server.max_batch_size:,}"
    else:
        cards = f"{server.tensor_parallel} x {server.gpu}" if server.tensor_parallel > 1 else server.gpu
        fleet = f"{server.model} ({format_label(server.quant)}) on {cards}"
        if server.expert_parallel:
            fleet += " as " + parallel_label(server.tensor_parallel, True, server.attention_data_parallel)
    split = scenario.fleet.mode == "disaggregated"
    if split or scenario.fleet.groups:  # each pool's or group's replicas and hardware
        fixed = server.step_model == "fixed"
        kinds = (" and " if split else ", ").join(
            f"{n} x " + (f"{s.step_time_ms:g} ms iterations" if fixed else hardware_label(s))
            + (f" for {role}" if split else "") for s, n, role in fleet_pools(scenario))
        model = "" if fixed else f" serving {server.model}"
        fleet = f"a {'disaggregated' if split else 'mixed'} fleet of {kinds}{model}"
        replicas = 1
    servers = f"{replicas} servers of " if replicas > 1 else ""
    spec = server.speculative
    if spec is not None:
        draft = f" by {spec.draft_model}" if spec.draft_model else ""
        fleet += f", speculative decoding ({spec.draft_tokens} tokens drafted{draft})"
    return f"{servers}{fleet}; policy: {POLICY_LABELS[scenario.policy.name]}"


def first_visit() -> bool:
    """True while the session still shows the scenario it opened on, untouched (no edit, preset or upload)."""
    return version() == 1 and "edited" not in st.session_state


def pop_load_error() -> str | None:
    return st.session_state.pop("load_error", None)
