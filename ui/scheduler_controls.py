"""The serving engine's own scheduler knobs (``engine.scenario.schedulers``), beside the engine in the Lab's server
section: those of the chosen engine shown, every other engine's dropped (a knob of another engine refuses the
scenario)."""

from __future__ import annotations

import streamlit as st

from engine.scenario.config import Server
from engine.scenario.schedulers import MODULES, OWN_KEYS, knobs_of
from ui.widgets import field_input

# A switch that works only with data-parallel attention -> the knobs that tune it (shown only while it is on).
DATA_PARALLEL_SWITCHES = {"attention_dp_balance": ("attention_dp_batching_wait_iters", "attention_dp_timeout_iters"),
                          "prefill_delayer": ("prefill_delayer_target_fill", "prefill_delayer_max_ticks",
                                              "prefill_delayer_stall_ticks", "prefill_delayer_kv_high")}


def shown(server: dict, key: str) -> bool:
    """Whether ``key`` (a knob of ``server``'s engine) changes something in this server as it stands: a switch of
    data-parallel attention only with it, a knob that tunes a switch only while the switch is on."""
    for switch, tuning in DATA_PARALLEL_SWITCHES.items():
        if key == switch or key in tuning:
            if not server.get("attention_data_parallel"):
                return False
            if key in tuning and not server.get(switch, getattr(Server, switch)):
                return False
    return True


def scheduler_controls(server: dict, key_pattern: str) -> None:
    """The knobs of ``server``'s engine that ``shown`` keeps (widget keys ``key_pattern.format(key)``), each switch
    before what it tunes, with the release they were read from; every other engine-own key is removed from
    ``server``."""
    engine_name = server.get("engine", Server.engine)
    drawn = []
    for knob in knobs_of(engine_name):
        if knob.own and shown(server, knob.key):
            server[knob.key] = field_input(Server, knob.key, server.get(knob.key), key=key_pattern.format(knob.key))
            drawn.append(knob.key)
    for key in OWN_KEYS:
        if key not in drawn:
            server.pop(key, None)
    if drawn:
        module = MODULES[engine_name]
        st.caption(f"{module.NAME}'s own scheduler knobs, with its defaults as release {module.RELEASE} reads them "
                   f"(the Method page cites the source).")
