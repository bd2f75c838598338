"""Expert parallelism and data-parallel attention, for a mixture-of-experts model on more than one card (the Lab's
server section and the Hardware page share them)."""

from __future__ import annotations

import streamlit as st

from engine.scenario.config import Server
from ui import hardware_choices
from ui.widgets import field_input


def expert_controls(server: dict, key_pattern: str) -> None:
    """The switches (widget keys ``key_pattern.format(key)``), shown for a mixture of experts on two cards or more
    only; elsewhere they would change nothing or refuse the scenario, so they are dropped."""
    if not hardware_choices.has_experts(server) or int(server.get("tensor_parallel") or 1) < 2:
        for key in hardware_choices.EXPERT_KEYS:
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
