"""The serving engine's own scheduler knobs (``engine.scenario.schedulers``), beside the engine in the Lab's server
section: those of the chosen engine shown, every other engine's dropped (a knob of another engine refuses the
scenario)."""

from __future__ import annotations

import streamlit as st

from engine.scenario.config import Server
from engine.scenario.schedulers import MODULES, OWN_KEYS, knobs_of
from ui.widgets import field_input

BALANCE_WAITS = ("attention_dp_batching_wait_iters", "attention_dp_timeout_iters")


def shown_keys(server: dict) -> list[str]:
    """The knobs of ``server``'s engine that change something in this server: the attention-DP balance only with
    data-parallel attention, its waits only when it is on."""
    engine_name = server.get("engine", Server.engine)
    keys = [knob.key for knob in knobs_of(engine_name) if knob.own]
    if not server.get("attention_data_parallel"):
        keys = [k for k in keys if not k.startswith("attention_dp_")]
    elif not server.get("attention_dp_balance"):
        keys = [k for k in keys if k not in BALANCE_WAITS]
    return keys


def scheduler_controls(server: dict, key_pattern: str) -> None:
    """The knobs of ``shown_keys`` (widget keys ``key_pattern.format(key)``), with the release they were read from;
    every other engine-own key is removed from ``server``."""
    keys = shown_keys(server)
    for key in OWN_KEYS:
        if key not in keys:
            server.pop(key, None)
    for key in keys:
        server[key] = field_input(Server, key, server.get(key), key=key_pattern.format(key))
    if keys:
        module = MODULES[server.get("engine", Server.engine)]
        st.caption(f"{module.NAME}'s own scheduler knobs, with its defaults as release {module.RELEASE} reads them "
                   f"(the Method page cites the source).")
