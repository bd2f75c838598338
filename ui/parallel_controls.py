"""Expert parallelism and data-parallel attention, for a mixture-of-experts model on more than one card (the Lab's
server section and the Hardware page share them)."""

from __future__ import annotations

import streamlit as st

from engine.hardware.tables import load_table
from engine.scenario.config import Server
from ui.widgets import field_input

EXPERT_KEYS = ("expert_parallel", "attention_data_parallel", "expert_imbalance")


def has_experts(server: dict) -> bool:
    """True when the model the (possibly unchecked) ``server`` table names is a mixture of experts: its own
    ``model_config`` when ``model`` names it (``Server.own_model``), else a row of models.csv."""
    own = server.get("model_config") or {}
    if own.get("name") == server.get("model"):
        return bool(own.get("experts"))
    models = load_table("models")
    return server.get("model") in models.index and int(models.loc[server["model"], "experts"]) > 0


def expert_controls(server: dict, key_pattern: str) -> None:
    """The switches (widget keys ``key_pattern.format(key)``), shown for a mixture of experts on two cards or more
    only; elsewhere they would change nothing or refuse the scenario, so they are dropped."""
    if not has_experts(server) or int(server.get("tensor_parallel") or 1) < 2:
        for key in EXPERT_KEYS:
            server.pop(key, None)
        return
    server["expert_parallel"] = field_input(Server, "expert_parallel", server.get("expert_parallel"),
                                            key=key_pattern.format("expert_parallel"))
    if not server["expert_parallel"]:
        server.pop("attention_data_parallel", None)
        return
    for key in ("attention_data_parallel", "expert_imbalance"):
        server[key] = field_input(Server, key, server.get(key), key=key_pattern.format(key))
    st.caption("Expert parallelism's all-to-all and imbalance are estimates, not yet fitted on a measured run (see "
               "the Method page for how far they are from the first published ones).")
