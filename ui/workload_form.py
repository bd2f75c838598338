"""The workload's classes as a form: each class's name, share and length distributions, a button to remove it
(while another is left) and one to add a class. The Workload page and the Planner's question both draw it on the
shared scenario, so a class added or removed on one page is there on the other."""

import copy

import streamlit as st

from engine.scenario.config import RequestClass, TokenDist
from ui import state, text
from ui.widgets import field_input

DIST_PARAMS = {"constant": ("value", "max"), "uniform": ("low", "high", "max"), "geometric": ("mean", "max"),
               "lognormal": ("mean", "cv", "max")}  # the parameters each family of TokenDist is drawn with
DIST_FALLBACK = {"value": 256, "low": 32, "high": 1024, "mean": 256.0, "cv": 1.0}  # shown when a family is picked


def dist_controls(dist: dict, key: str) -> dict:
    """Family and parameters of one token distribution."""
    family = field_input(TokenDist, "dist", dist.get("dist"), key=f"{key}_dist")
    edited = {"dist": family}
    for name in DIST_PARAMS[family]:
        value = dist.get(name) if dist.get("dist") == family or name == "max" else None
        edited[name] = field_input(TokenDist, name, value if value is not None else DIST_FALLBACK.get(name),
                                   key=f"{key}_{name}_{family}")
    return {k: v for k, v in edited.items() if v is not None}


def without_class(data: dict, index: int) -> dict:
    """``data`` without its ``index``-th class."""
    changed = copy.deepcopy(data)
    del changed["workload"]["classes"][index]
    return changed


def with_new_class(data: dict) -> dict:
    """``data`` with one more class: a copy of the last one under a new name ("class 2", "class 3", ...)."""
    changed = copy.deepcopy(data)
    classes = changed["workload"]["classes"]
    names = {c["name"] for c in classes}
    number = len(classes) + 1
    while f"class {number}" in names:
        number += 1
    classes.append({**copy.deepcopy(classes[-1]), "name": f"class {number}"})
    return changed


def class_rows(data: dict, v: int, key: str) -> None:
    """Edit ``data``'s classes in place: name, share and the two length distributions per class, with remove and
    add buttons (each makes a new scenario at once); ``key`` keeps two pages' widgets apart, ``v`` is the
    scenario's version."""
    classes = data["workload"]["classes"]
    total = sum(c.get("share") or 0.0 for c in classes) or 1.0
    for i, cls in enumerate(classes):
        cols = st.columns([3, 2, 2, 2, 1], vertical_alignment="bottom")
        with cols[0]:
            cls["name"] = field_input(RequestClass, "name", cls.get("name"), key=f"{key}_name_{i}_{v}",
                                      label="Class")
        with cols[1]:
            cls["share"] = field_input(RequestClass, "share", cls.get("share"), key=f"{key}_share_{i}_{v}",
                                       label=f"Share ({(cls.get('share') or 0.0) / total:.0%} of arrivals)")
        for col, side in ((cols[2], "prompt_tokens"), (cols[3], "output_tokens")):
            with col, st.popover(f"{side.replace('_tokens', '').capitalize()} length (tokens)", width="stretch"):
                cls[side] = dist_controls(cls.get(side) or {"dist": "constant", "value": 128},
                                          f"{key}_{i}_{side}_{v}")
        cols[4].button("Remove", key=f"{key}_remove_{i}_{v}", disabled=len(classes) == 1, on_click=state.replace,
                       args=(without_class(data, i),),
                       help=text.plain(f"Remove the class {cls.get('name')} from the workload." if len(classes) > 1
                                       else "The workload needs at least one class."))
    st.button("Add a class", key=f"{key}_add_{v}", on_click=state.replace, args=(with_new_class(data),),
              help="A copy of the last class under a new name, to edit.")
